package runtime

import (
	"fmt"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// A retry from an early entry of a long history deletes about as many
// trees as the history holds entries; its plan is made in the actor's
// turn. Checked against each tree for each entry, it took 3 s for 20,000
// entries (and grew with their square: a minute at 100,000); by the
// entries' scopes it takes milliseconds.
func TestARetryFromAnEarlyEntryOfALongHistoryIsPlannedQuickly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 20000
	entries := make([]workflow.Entry, 0, n+1)
	entries = append(entries, workflow.Entry{Path: "l", Seq: 1, Kind: workflow.KindLoop, Status: workflow.StatusPending, Time: t0})
	for i := range n {
		e := workflow.Entry{Path: fmt.Sprintf("l/~%d/s%d", i/4, i%4+1), Seq: i%4 + 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: t0.Add(time.Duration(i+1) * time.Millisecond)}
		if i%4 == 0 {
			e.Kind, e.Time = workflow.KindVersionCheck, time.Time{} // a gate first in each iteration
		}
		entries = append(entries, e)
	}
	start := time.Now()
	trees, _, err := retryTrees(entries, "l/~1/s2", "")
	took := time.Since(start)
	if err != nil || len(trees) < n-10 {
		t.Fatalf("retry from l/~1/s2 deletes %d trees (%v), want about %d", len(trees), err, n)
	}
	if took > 1500*time.Millisecond {
		t.Fatalf("planning the retry of %d entries took %v", n, took)
	}
}
