package runtime

import (
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// A retry from an entry that records no time of its own (a rollback
// checkpoint, a version check, a removed marker) deletes it and what came
// after it (rivet-semantics.md 1.11), not the entries of scopes that
// completed before it: its place in time is that of the entries before it
// (the latest of the entries before it in the code's order). Deleted, the steps
// of a settled join before it would lose their records (and their rollback
// handlers' marks), and those of a try block before it would run again.
func TestRetryFromAnEntryWithoutATimeKeepsTheScopesBeforeIt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	entries := []workflow.Entry{
		{Path: "a", Seq: 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(1)},
		{Path: "j", Seq: 2, Kind: workflow.KindJoin, Status: workflow.StatusCompleted, Time: at(3)},
		{Path: "j/x/s", Seq: 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(2)},
		{Path: "t/s", Seq: 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(4)},
		{Path: "cp", Seq: 4, Kind: workflow.KindRollbackCheckpoint, Status: workflow.StatusCompleted},
		{Path: "b", Seq: 5, Kind: workflow.KindStep, Status: workflow.StatusExhausted, Time: at(5)},
		{Path: "l", Seq: 6, Kind: workflow.KindLoop, Status: workflow.StatusPending, Time: at(6)},
		{Path: "l/~0/s", Seq: 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(6)},
	}
	trees, _, err := retryTrees(entries, "cp", "b")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(trees)
	if want := []string{"b", "cp", "l"}; !slices.Equal(trees, want) {
		t.Fatalf("retry --from cp deletes %v, want %v", trees, want)
	}

	// In a branch of a join in progress: what the branch made after it
	// goes, whatever its time, and so do the other branch's entries that
	// ended after the entries before it.
	entries = []workflow.Entry{
		{Path: "a", Seq: 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(1)},
		{Path: "j", Seq: 2, Kind: workflow.KindJoin, Status: workflow.StatusPending},
		{Path: "j/x/s1", Seq: 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(9)},
		{Path: "j/y/s0", Seq: 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(2)},
		{Path: "j/y/v", Seq: 2, Kind: workflow.KindVersionCheck, Status: workflow.StatusCompleted},
		{Path: "j/y/s2", Seq: 3, Kind: workflow.KindStep, Status: workflow.StatusExhausted, Time: at(5)},
	}
	trees, _, err = retryTrees(entries, "j/y/v", "j")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(trees)
	if want := []string{"j/x/s1", "j/y/s2", "j/y/v"}; !slices.Equal(trees, want) {
		t.Fatalf("retry --from j/y/v deletes %v, want %v", trees, want)
	}
}

// The places the history records order the entries a retry keeps and
// deletes, with or without times: a pending join first in a later loop
// iteration (it records no time until it settles) goes with its branches'
// gates, and a gate a replay put before a recorded step, which shares that
// step's place (History.PlaceBefore), was made before it, whatever their
// names.
func TestRetryOrdersEntriesByTheirPlacesNotTheirNames(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	entries := []workflow.Entry{
		{Path: "l", Seq: 1, Kind: workflow.KindLoop, Status: workflow.StatusPending},
		{Path: "l/~0/s", Seq: 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(1)},
		{Path: "l/~1/j", Seq: 1, Kind: workflow.KindJoin, Status: workflow.StatusPending},
		{Path: "l/~1/j/x/g", Seq: 1, Kind: workflow.KindVersionCheck, Status: workflow.StatusCompleted, Version: 1},
		{Path: "l/~1/j/y/g", Seq: 1, Kind: workflow.KindVersionCheck, Status: workflow.StatusCompleted, Version: 1},
		{Path: "l/~1/j/y/s", Seq: 2, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(2)},
	}
	trees, _, err := retryTrees(entries, "l/~0/s", "")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(trees)
	if want := []string{"l/~0/s", "l/~1/j"}; !slices.Equal(trees, want) {
		t.Errorf("retry --from l/~0/s deletes %v, want %v", trees, want)
	}

	entries = []workflow.Entry{
		{Path: "a", Seq: 1, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(1)},
		{Path: "z", Seq: 2, Kind: workflow.KindVersionCheck, Status: workflow.StatusCompleted, Version: 1},
		{Path: "b", Seq: 2, Kind: workflow.KindStep, Status: workflow.StatusCompleted, Time: at(2)},
		{Path: "c", Seq: 3, Kind: workflow.KindStep, Status: workflow.StatusExhausted, Time: at(3)},
	}
	for from, want := range map[string][]string{"z": {"b", "c", "z"}, "b": {"b", "c"}} {
		trees, _, err := retryTrees(slices.Clone(entries), from, "c")
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(trees)
		if !slices.Equal(trees, want) {
			t.Errorf("retry --from %s deletes %v, want %v", from, trees, want)
		}
	}
}
