package main

import (
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/client"
)

// A partition changing hands during the scan is listed by its old owner
// (from its record) and its new one (the actor in memory there): the
// workflow is shown once, as the node with it in memory says, and the
// partition is counted as listed twice.
func TestActorsSleepingMergeDeduplicates(t *testing.T) {
	now := time.Now()
	old := client.WaitList{NodeID: "a", Partitions: []uint32{1, 2}, Workflows: []client.WaitingWorkflow{
		{Name: "timer", Key: []string{"x"}, Node: "a", Partition: 2, WakeAt: now.Add(-time.Hour), Reason: ""},
		{Name: "nap", Key: []string{"y"}, Node: "a", Partition: 1, WakeAt: now.Add(2 * time.Hour), Reason: client.WakeSleep},
	}}
	moved := client.WaitList{NodeID: "b", Partitions: []uint32{2, 3}, Workflows: []client.WaitingWorkflow{
		{Name: "timer", Key: []string{"x"}, Node: "b", Partition: 2, WakeAt: now.Add(time.Hour), Reason: client.WakeReceive, InMemory: true},
	}}
	for _, lists := range [][]client.WaitList{{old, moved}, {moved, old}} {
		out, covered, twice := mergeWaitLists(lists)
		if len(out) != 2 || out[0].Name != "timer" || out[0].Node != "b" || !out[0].InMemory || out[1].Name != "nap" {
			t.Errorf("merged %+v; want timer once (b's, in memory) then nap", out)
		}
		if twice != 1 || len(covered) != 3 {
			t.Errorf("%d partitions twice, %d covered; want 1 and 3", twice, len(covered))
		}
	}
}

// A node whose answer was cut short (by its size, about 1 MiB, or by
// --limit) left out rows after its last that may wake before other nodes'
// later rows: the merged list stops at its last row, and counts what it
// drops as left out, rather than show another node's later rows in their
// place.
func TestActorsSleepingStopsAtAnAnswerCutShort(t *testing.T) {
	t0 := time.Now()
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	a := client.WaitList{NodeID: "a", Omitted: 5, Partitions: []uint32{1}, Workflows: []client.WaitingWorkflow{
		{Name: "w", Key: []string{"a1"}, WakeAt: at(1)},
		{Name: "w", Key: []string{"a2"}, WakeAt: at(10)},
	}}
	b := client.WaitList{NodeID: "b", Partitions: []uint32{2}, Workflows: []client.WaitingWorkflow{
		{Name: "w", Key: []string{"b1"}, WakeAt: at(5)},
		{Name: "w", Key: []string{"b2"}, WakeAt: at(10)},
		{Name: "w", Key: []string{"b3"}, WakeAt: at(20)},
		{Name: "w", Key: []string{"b4"}, WakeAt: at(60)},
	}}
	for _, lists := range [][]client.WaitList{{a, b}, {b, a}} {
		merged, _, _ := mergeWaitLists(lists)
		out, dropped := cutAtShortAnswers(merged, lists)
		var keys []string
		for _, w := range out {
			keys = append(keys, w.Key[0])
		}
		if !slices.Equal(keys, []string{"a1", "b1", "a2"}) || dropped != 3 {
			t.Errorf("kept %v, dropped %d; want [a1 b1 a2] (b2 sorts after a2 by key at the same time), 3 dropped", keys, dropped)
		}
	}
	// An answer with no row and some left out: nothing is known to come
	// first.
	empty := client.WaitList{NodeID: "c", Omitted: 1}
	merged, _, _ := mergeWaitLists([]client.WaitList{b, empty})
	if out, dropped := cutAtShortAnswers(merged, []client.WaitList{b, empty}); len(out) != 0 || dropped != 4 {
		t.Errorf("kept %d, dropped %d; want none kept, 4 dropped", len(out), dropped)
	}
	// No answer cut short: all kept.
	merged, _, _ = mergeWaitLists([]client.WaitList{b})
	if out, dropped := cutAtShortAnswers(merged, []client.WaitList{b}); len(out) != 4 || dropped != 0 {
		t.Errorf("kept %d, dropped %d; want 4, 0", len(out), dropped)
	}
}
