package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"text/tabwriter"

	"github.com/rivet-go/rivet/client"
)

// statsAsked bounds the nodes a command of every node (stats --all, hot
// --all, log-level --all, actors --status retrying) asks at once.
const statsAsked = 8

// askEach asks every node with ask, statsAsked at a time, and returns
// their answers and errors by node: one node that does not answer must
// not take the others' time, and those that answer are what an operator
// of a cluster in trouble wants, printed before the command fails.
func askEach[T any](nodes []string, ask func(node string) (T, error)) ([]T, []error) {
	out := make([]T, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	sem := make(chan struct{}, statsAsked)
	for i := range nodes {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = ask(nodes[i])
		})
	}
	wg.Wait()
	return out, errs
}

// askRegistered asks every registered node with ask (askEach), for the
// lists gathered from every node (actors --status retrying, sleeping,
// waiting). Each call has its own --timeout: the command's context has
// none (actors pages for as long as it takes), and a node that accepts
// but never answers must not hold it; so has the list of nodes.
func askRegistered[T any](ctx context.Context, a *app, c *client.Client, ask func(ctx context.Context, node string) (T, error)) (nodes []string, answers []T, errs []error, err error) {
	mctx, cancel := context.WithTimeout(ctx, a.timeout)
	nodes, err = a.registeredNodes(mctx, c)
	timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(mctx.Err(), context.DeadlineExceeded)
	cancel()
	switch {
	case err != nil && timedOut && ctx.Err() == nil:
		// The command's own deadline is a hundred years: this one was
		// --timeout's.
		return nil, nil, nil, a.deadlineError(err, a.timeout, "; for the list of nodes")
	case err != nil:
		return nil, nil, nil, err
	}
	answers, errs = askEach(nodes, func(node string) (T, error) {
		nctx, cancel := context.WithTimeout(ctx, a.timeout)
		defer cancel()
		return ask(nctx, node)
	})
	return nodes, answers, errs, nil
}

// nodeStats is one node's row of stats --all: its counters, or why it did
// not answer.
type nodeStats struct {
	NodeID string        `json:"node_id"`
	Stats  *client.Stats `json:"stats,omitempty"`
	Error  string        `json:"error,omitempty"`
}

// registeredNodes returns the IDs of the registered nodes, for the
// commands that ask each (--all), and says why the list may be out of
// date if the node answering says so. A node known to gossip only, with
// no registration, is no node to ask (one gossip calls dead may still be
// registered, and own partitions: it is listed).
func (a *app) registeredNodes(ctx context.Context, c *client.Client) ([]string, error) {
	ml, err := c.MemberList(ctx)
	if err != nil {
		return nil, err
	}
	if ml.Note != "" {
		a.note("%s", ml.Note)
	}
	var nodes []string
	for _, m := range ml.Members {
		if !m.StartedAt.IsZero() {
			nodes = append(nodes, m.NodeID)
		}
	}
	return nodes, nil
}

// statsAll prints the counters of every registered node and their sum.
// A node that does not answer gets its error in its row, and the command
// exits 1, having printed the others: an operator looking at a cluster in
// trouble wants what can be had.
func (a *app) statsAll(ctx context.Context, c *client.Client) error {
	nodes, err := a.registeredNodes(ctx, c)
	if err != nil {
		return err
	}
	stats, errs := askEach(nodes, func(node string) (client.Stats, error) { return c.StatsOf(ctx, node) })
	rows := make([]nodeStats, len(nodes))
	for i, n := range nodes {
		rows[i].NodeID = n
		switch st := stats[i]; {
		case errs[i] != nil:
			rows[i].Error = describe(errs[i])
		case st.NodeID != n:
			rows[i].Error = fmt.Sprintf("the node at --addr, %s, is older than stats --all: it answered with its own counters", st.NodeID)
		default:
			rows[i].Stats = &st
		}
	}
	var total client.Stats
	failed := 0
	for _, r := range rows {
		if r.Stats == nil {
			failed++
			continue
		}
		total.ActiveActors += r.Stats.ActiveActors
		total.Calls += r.Stats.Calls
		total.Commits += r.Stats.Commits
		total.CommitBatches += r.Stats.CommitBatches
		total.PartitionsOwned += r.Stats.PartitionsOwned
	}
	total.NodeID = "total"
	if a.output == "json" {
		if rows == nil {
			rows = []nodeStats{}
		}
		if err := a.printValue(map[string]any{"nodes": rows, "total": total}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tACTIVE\tCALLS\tCOMMITS\tBATCHES\tPARTITIONS")
		row := func(name string, st client.Stats) {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", printable(name), st.ActiveActors, st.Calls, st.Commits, st.CommitBatches, st.PartitionsOwned)
		}
		for _, r := range rows {
			if r.Stats == nil {
				fmt.Fprintf(tw, "%s\t%s\n", printable(r.NodeID), printable("no answer: "+r.Error))
				continue
			}
			row(r.NodeID, *r.Stats)
		}
		if failed > 0 {
			total.NodeID = fmt.Sprintf("total (%d of %d nodes)", len(rows)-failed, len(rows))
		}
		row(total.NodeID, total)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d nodes did not answer", failed, len(rows))
	}
	return nil
}
