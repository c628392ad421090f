package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rivet-go/rivet/client"
)

// Workflow statuses actors --status lists from the wakeup index.
const (
	statusSleeping = "sleeping"
	statusWaiting  = "waiting"
)

// parseDueBefore reads --due-before: a duration from now ("10m"; "-1h",
// overdue by more than an hour) or an RFC 3339 time.
func parseDueBefore(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("--due-before %q: want a duration from now (10m, 2h, -1h) or an RFC 3339 time (2026-12-06T15:00:00Z)", s)
}

// listWaiting asks every registered node for the sleeping (or waiting)
// workflows of the partitions it serves, merges them (the earliest to wake
// first, waiting ones by name and key) and cuts the whole to limit. Each
// node's call has its own --timeout, as listRetrying's. Nodes that do not
// answer, and partitions no answering node listed, are noted, and fail
// the command once the rest is printed (partial).
func (a *app) listWaiting(ctx context.Context, c *client.Client, q client.WaitQuery) (_ []client.WaitingWorkflow, partial, err error) {
	nodes, lists, errs, err := askRegistered(ctx, a, c, func(ctx context.Context, node string) (client.WaitList, error) {
		return c.WaitingWorkflows(ctx, node, q)
	})
	if err != nil {
		return nil, nil, err
	}
	failed, omitted := 0, 0
	var answered []client.WaitList
	for i, err := range errs {
		if err != nil {
			a.note("node %s: %s", printable(nodes[i]), describe(err))
			failed++
			continue
		}
		answered = append(answered, lists[i])
		omitted += lists[i].Omitted
	}
	if failed > 0 && failed == len(nodes) {
		return nil, nil, fmt.Errorf("no node answered (%d asked)", failed)
	}
	out, covered, twice := mergeWaitLists(answered)
	out, past := cutAtShortAnswers(out, answered)
	omitted += past
	if twice > 0 {
		a.note("%d partitions were listed by two nodes (changing hands?): a workflow listed twice is shown once, as the node with its actor in memory told", twice)
	}
	var count uint32
	for _, l := range answered {
		count = max(count, l.PartitionCount)
	}
	if len(out) > q.Limit {
		omitted += len(out) - q.Limit
		out = out[:q.Limit]
	}
	if omitted > 0 {
		what := "ones to wake after the last listed"
		if q.Waiting {
			what = "after the last listed by name and key"
		}
		a.note("%d more %s workflows left out, %s: narrow the list with ACTOR or --due-before, or raise --limit (at most %d)", omitted, map[bool]string{true: statusWaiting, false: statusSleeping}[q.Waiting], what, client.MaxWaiting)
	}
	if missing := int(count) - len(covered); missing > 0 && failed == 0 {
		// A partition changing hands (or with no owner) was listed by
		// no one: its workflows are not in the list.
		a.note("%d of %d partitions were served by no node that answered (changing hands?): their workflows are not listed", missing, count)
		return out, fmt.Errorf("%d of %d partitions not listed", missing, count), nil
	}
	if failed > 0 {
		return out, fmt.Errorf("%d of %d nodes did not answer", failed, len(nodes)), nil
	}
	return out, nil, nil
}

// mergeWaitLists merges the nodes' lists, the earliest to wake first
// (waiting ones by name and key), each workflow once: a partition changing
// hands during the scan may be listed by its old owner and its new one,
// and the row of the node with the actor in memory is kept (its record may
// be stale). It returns the partitions listed, and how many of them were
// listed twice.
func mergeWaitLists(lists []client.WaitList) (out []client.WaitingWorkflow, covered map[uint32]bool, twice int) {
	covered = map[uint32]bool{}
	for _, l := range lists {
		for _, p := range l.Partitions {
			if covered[p] {
				twice++
			}
			covered[p] = true
		}
		out = append(out, l.Workflows...)
	}
	byKey := func(x, y client.WaitingWorkflow) int {
		return cmp.Or(strings.Compare(x.Name, y.Name), slices.Compare(x.Key, y.Key))
	}
	// In memory first among the rows of one workflow, so that Compact
	// keeps it.
	slices.SortStableFunc(out, func(x, y client.WaitingWorkflow) int {
		return cmp.Or(byKey(x, y), -cmpBool(x.InMemory, y.InMemory))
	})
	out = slices.CompactFunc(out, func(x, y client.WaitingWorkflow) bool { return byKey(x, y) == 0 })
	slices.SortStableFunc(out, waitOrder)
	return out, covered, twice
}

// waitOrder is the merged list's order: the earliest to wake first, then
// by name and key (waiting ones, whose time is zero, by name and key).
func waitOrder(x, y client.WaitingWorkflow) int {
	return cmp.Or(x.WakeAt.Compare(y.WakeAt), strings.Compare(x.Name, y.Name), slices.Compare(x.Key, y.Key))
}

// cutAtShortAnswers keeps of the merged list out only the rows before the
// last row of every answer that left some out (by --limit, or by its size:
// a node sends about 1 MiB), and returns how many it dropped. A node that
// left out rows after its last may have had ones that come before another
// node's later rows: shown, those would make a list out of order, and a
// note saying the rest wake after the last listed untrue.
func cutAtShortAnswers(out []client.WaitingWorkflow, answered []client.WaitList) ([]client.WaitingWorkflow, int) {
	var cut *client.WaitingWorkflow
	for _, l := range answered {
		switch {
		case l.Omitted == 0:
		case len(l.Workflows) == 0:
			// Nothing listed, some left out: no row is known to come
			// before what it left out.
			return out[:0], len(out)
		case cut == nil || waitOrder(l.Workflows[len(l.Workflows)-1], *cut) < 0:
			cut = &l.Workflows[len(l.Workflows)-1]
		}
	}
	if cut == nil {
		return out, 0
	}
	n, _ := slices.BinarySearchFunc(out, *cut, waitOrder)
	// The cut row itself stays (it is at n if no other answer moved it).
	for n < len(out) && waitOrder(out[n], *cut) <= 0 {
		n++
	}
	return out[:n], len(out) - n
}

// cmpBool orders false before true.
func cmpBool(x, y bool) int {
	switch {
	case x == y:
		return 0
	case y:
		return -1
	}
	return 1
}

// describeReason says what wakes a sleeping workflow at its time.
func describeReason(w client.WaitingWorkflow) string {
	switch w.Reason {
	case client.WakeSleep:
		return "sleep"
	case client.WakeReceive:
		if len(w.Queues) > 0 {
			return "receive timeout (or a message in " + strings.Join(w.Queues, ", ") + ")"
		}
		return "receive timeout (or a message)"
	case client.WakeRetry:
		return "step retry"
	case "":
		return "run again (created, stopped mid-run, or a message came)"
	}
	return w.Reason
}

// describeWaitingQueues says which messages wake a waiting workflow.
func describeWaitingQueues(w client.WaitingWorkflow) string {
	switch {
	case w.AnyQueue:
		return "any message"
	case len(w.Queues) > 0:
		return "a message in " + strings.Join(w.Queues, ", ")
	}
	return "a message (queues not recorded)"
}

// describeDue is how far off a time is, or how long overdue.
func describeDue(at, now time.Time) string {
	d := at.Sub(now).Round(time.Second)
	if d < 0 {
		return "overdue " + (-d).String()
	}
	return "in " + d.String()
}

// printWaiting prints the sleeping (or waiting) workflows, one a row.
func (a *app) printWaiting(ws []client.WaitingWorkflow, q client.WaitQuery) error {
	if a.output == "json" {
		if ws == nil {
			ws = []client.WaitingWorkflow{}
		}
		return a.printValue(ws)
	}
	if len(ws) == 0 {
		what := "no sleeping workflows"
		if q.Waiting {
			what = "no workflows waiting for a message only"
		}
		if !q.DueBefore.IsZero() {
			what += " due before " + formatTime(q.DueBefore)
		}
		if q.Name != "" {
			what += " among the actors named " + printable(q.Name)
		}
		_, err := fmt.Fprintln(a.stdout, what)
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	now := time.Now()
	if q.Waiting {
		fmt.Fprintln(tw, "NAME\tKEY\tNODE\tWAITS FOR")
		for _, w := range ws {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", printable(w.Name), formatKey(w.Key), printable(w.Node), printable(describeWaitingQueues(w)))
		}
		return tw.Flush()
	}
	fmt.Fprintln(tw, "NAME\tKEY\tNODE\tWAKES AT\tDUE\tFOR")
	for _, w := range ws {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", printable(w.Name), formatKey(w.Key), printable(w.Node), formatTime(w.WakeAt), describeDue(w.WakeAt, now), printable(describeReason(w)))
	}
	return tw.Flush()
}
