package main

import (
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
