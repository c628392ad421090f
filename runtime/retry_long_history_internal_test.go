package runtime

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// A retry from an early entry of a long history deletes about as many
// trees as the history holds entries; its plan is made in the actor's
// turn. Checked against each tree for each entry, it took 3 s for 20,000
// entries and grew with their square (about 27 s at the 60,000 here); by
// the entries' scopes it takes about 0.1 s. The bound is far from both, so
// that a loaded machine does not fail it and the quadratic plan does; not
// under the race detector, which slows it 5-20 times (it failed under
// -race at a load average of 15).
func TestARetryFromAnEarlyEntryOfALongHistoryIsPlannedQuickly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 60000
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
	if took > 10*time.Second && !raceDetector {
		t.Fatalf("planning the retry of %d entries took %v", n, took)
	}
}

// The same for a plain retry of a long history that rolled back from an
// entry where no retry can start (a completed loop): it starts the loop
// again, and checks that doing so runs again no step the rollback left
// undone, against the trees of both plans, which count about as many as
// the entries. Checked against each tree for each entry, that took 1.6 s
// for 20,000 entries and grew with their square (about 40 s at the
// 100,000 here); by the entries' scopes, about 0.1 s.
func TestAPlainRetryOfALongRolledBackHistoryIsPlannedQuickly(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 100000
	entries := make([]workflow.Entry, 0, n+2)
	entries = append(entries, workflow.Entry{Path: "l", Seq: 1, Kind: workflow.KindLoop, Status: workflow.StatusCompleted, Iteration: n / 4, Time: t0.Add((n + 1) * time.Millisecond)})
	for i := range n {
		entries = append(entries, workflow.Entry{Path: fmt.Sprintf("l/~%d/s%d", i/4, i%4+1), Seq: i%4 + 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted,
			Time: t0.Add(time.Duration(i+1) * time.Millisecond), HasRollback: true, RollbackDone: true})
	}
	entries = append(entries, workflow.Entry{Path: "f", Seq: 2, Kind: workflow.KindStep, Status: workflow.StatusExhausted, Time: t0.Add((n + 2) * time.Millisecond), Error: &workflow.RecordedError{Message: "declined"}})
	start := time.Now()
	trees, _, err := retryTrees(entries, "", "f")
	took := time.Since(start)
	if err != nil || !slices.Equal(trees, []string{"l", "f"}) {
		t.Fatalf("the retry deletes %v (%v), want [l f]: the loop holding the first compensated step, and the failed step", trees, err)
	}
	if took > 10*time.Second && !raceDetector {
		t.Fatalf("planning the retry of %d entries took %v", n, took)
	}
}
