package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/rivet-go/rivet/client"
)

// Workflow statuses actors --status lists.
const (
	statusFailed   = "failed"
	statusRetrying = "retrying"
)

// retryingNote says what actors --status retrying cannot know.
const retryingNote = "retrying lists the actors in memory on their nodes: a workflow whose retry backoff outlasts its actor's idle timeout leaves memory until its next attempt, and is not listed meanwhile"

// listRetrying asks every registered node for its actors in memory whose
// workflow retries a step, of name ("" for all), with their steps whose
// last error contains errorContains. Each node filters before it cuts its
// list. Each call has its own --timeout: the command's context has none
// (actors pages for as long as it takes), and a node that accepts but
// never answers must not hold it. Nodes that do not answer are noted, and
// fail the command once those that answered are printed: partial says
// so, err that nothing can be printed.
func (a *app) listRetrying(ctx context.Context, c *client.Client, name, errorContains string) (_ []client.RetryingWorkflow, partial, err error) {
	q := client.RetryingQuery{Limit: client.MaxHotActors, Name: name, ErrorContains: errorContains}
	nodes, lists, errs, err := askRegistered(ctx, a, c, func(ctx context.Context, node string) (client.RetryingList, error) {
		return c.RetryingWorkflows(ctx, node, q)
	})
	if err != nil {
		return nil, nil, err
	}
	var out []client.RetryingWorkflow
	failed := 0
	for i, err := range errs {
		if err != nil {
			a.note("node %s: %s", printable(nodes[i]), describe(err))
			failed++
			continue
		}
		l := lists[i]
		if len(l.Workflows)+l.Omitted >= client.MaxHotActors {
			a.note("node %s has %d or more actors retrying: the first %d by name and key are counted", printable(nodes[i]), client.MaxHotActors, client.MaxHotActors)
		}
		if l.Omitted > 0 {
			a.note("node %s left out %d more retrying actors after the ones listed, to keep its answer small: narrow the list with a NAME or --error-contains", printable(nodes[i]), l.Omitted)
		}
		out = append(out, l.Workflows...)
	}
	slices.SortStableFunc(out, func(x, y client.RetryingWorkflow) int {
		return cmp.Or(strings.Compare(x.Name, y.Name), slices.Compare(x.Key, y.Key))
	})
	switch {
	case failed > 0 && failed == len(nodes):
		return nil, nil, fmt.Errorf("no node answered (%d asked)", failed)
	case failed > 0:
		return out, fmt.Errorf("%d of %d nodes did not answer", failed, len(nodes)), nil
	}
	return out, nil, nil
}

// printRetrying prints one row per retrying step: the actor, its node and
// the step as inspect's pending step rows show it.
func (a *app) printRetrying(rs []client.RetryingWorkflow, name, errorContains string) error {
	a.note("%s", retryingNote)
	if a.output == "json" {
		if rs == nil {
			rs = []client.RetryingWorkflow{}
		}
		return a.printValue(rs)
	}
	if len(rs) == 0 {
		what := "no workflows retrying a step"
		if errorContains != "" {
			what += fmt.Sprintf(" with an error containing %q", errorContains)
		}
		if name != "" {
			what += " among the actors named " + printable(name)
		}
		_, err := fmt.Fprintln(a.stdout, what)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKEY\tNODE\tSTEP")
	for _, r := range rs {
		for _, s := range r.Steps {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", printable(r.Name), formatKey(r.Key), printable(r.Node), printable(describePendingStep(s)))
		}
		if r.StepsOmitted > 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t(%d more retrying steps: rivetctl inspect lists them)\n", printable(r.Name), formatKey(r.Key), printable(r.Node), r.StepsOmitted)
		}
	}
	return tw.Flush()
}
