package runtime

import (
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// History lists entries in the order the workflow made them, each followed
// by the entries under it: a scope's entries by their place (their keys
// sort "step-10" before "step-2", and "a" before a "work" loop the code ran
// first), a try block (no entry of its own) at the place it took, a loop's
// iterations by number (keys: ~10 before ~2), branches by name.
func TestHistoryListsEntriesInTheOrderTheWorkflowMadeThem(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type rec struct {
		seq  int
		kind workflow.Kind
		at   int // seconds after t0
	}
	recs := map[string]rec{
		// The root: steps, a loop, a try block at place 4 holding two
		// steps, another at place 7 holding a step, a join.
		"steps": {1, workflow.KindStep, 1}, "work": {2, workflow.KindLoop, 2}, "a": {3, workflow.KindStep, 3},
		"z-try/inner": {1, workflow.KindStep, 4}, "z-try/inner-2": {2, workflow.KindStep, 5},
		"step-2": {5, workflow.KindStep, 6}, "step-10": {6, workflow.KindStep, 7},
		"b-try/only":   {1, workflow.KindStep, 8},
		"par":          {8, workflow.KindJoin, 9},
		"work/~1/step": {1, workflow.KindStep, 2}, "work/~1/step/inner": {1, workflow.KindStep, 2}, "work/~2/step": {1, workflow.KindStep, 2},
		"work/~9/step": {1, workflow.KindStep, 2}, "work/~10/step": {1, workflow.KindStep, 2},
		// In a branch: a try block at place 1, then a step.
		"par/y/fetch": {1, workflow.KindStep, 9}, "par/x/t/fetch": {1, workflow.KindStep, 9}, "par/x/save": {2, workflow.KindStep, 9},
	}
	var entries []workflow.Entry
	for _, p := range []string{"work/~10/step", "step-10", "work", "par/x/save", "b-try/only", "work/~2/step", "a", "par", "z-try/inner-2", "work/~9/step", "step-2",
		"steps", "par/y/fetch", "work/~1/step/inner", "par/x/t/fetch", "z-try/inner", "work/~1/step"} {
		r := recs[p]
		entries = append(entries, workflow.Entry{Path: p, Seq: r.seq, Kind: r.kind, Time: t0.Add(time.Duration(r.at) * time.Second)})
	}
	sortHistory(entries)
	var got []string
	for _, e := range entries {
		got = append(got, e.Path)
	}
	want := []string{"steps", "work", "work/~1/step", "work/~1/step/inner", "work/~2/step", "work/~9/step", "work/~10/step",
		"a", "z-try/inner", "z-try/inner-2", "step-2", "step-10", "b-try/only", "par", "par/x/t/fetch", "par/x/save", "par/y/fetch"}
	if !slices.Equal(got, want) {
		t.Fatalf("order:\n got %v\nwant %v", got, want)
	}
}

// A try block whose entries record its place (Entry.TryPlaces) is listed
// at it, not at the first place no entry holds: an empty block before it
// took that one.
func TestHistoryListsATryBlockAtItsRecordedPlace(t *testing.T) {
	entries := []workflow.Entry{
		{Path: "a", Seq: 1, Kind: workflow.KindStep},
		{Path: "b", Seq: 3, Kind: workflow.KindStep},
		{Path: "c", Seq: 5, Kind: workflow.KindStep},
		{Path: "t/x", Seq: 1, TryPlaces: []int{4}, Kind: workflow.KindStep},
		{Path: "old/y", Seq: 1, Kind: workflow.KindStep}, // recorded without a place
		{Path: "d", Seq: 7, Kind: workflow.KindStep},
		{Path: "u/v/z", Seq: 1, TryPlaces: []int{1, 8}, Kind: workflow.KindStep},
		{Path: "e", Seq: 9, Kind: workflow.KindStep},
	}
	sortHistory(entries)
	var got []string
	for _, e := range entries {
		got = append(got, e.Path)
	}
	want := []string{"a", "old/y", "b", "t/x", "c", "d", "u/v/z", "e"}
	if !slices.Equal(got, want) {
		t.Fatalf("order:\n got %v\nwant %v", got, want)
	}
}

// The order is a strict weak order over odd segments and places too (sort
// needs one): no cycle, nothing less than itself.
func TestHistoryOrderIsAStrictWeakOrder(t *testing.T) {
	seq := map[string]int{"a": 2, "b": 1, "c": 1, "b/~2/x": 3, "b/~10/x": 1, "b/y": 0}
	odd := []string{"~9", "~10", "~1a", "~01", "~1", "a", "", "~", "b/~2", "b/~10", "b", "c", "d", "b/~2/x", "b/~10/x", "b/y", "a/", "a//b"}
	for _, x := range odd {
		if historyLess(seq, x, x) {
			t.Errorf("%q < itself", x)
		}
		for _, y := range odd {
			if x != y && historyLess(seq, x, y) == historyLess(seq, y, x) {
				t.Errorf("%q and %q are not ordered one way", x, y)
			}
			for _, z := range odd {
				if historyLess(seq, x, y) && historyLess(seq, y, z) && !historyLess(seq, x, z) {
					t.Errorf("not transitive: %q < %q < %q but not %q < %q", x, y, z, x, z)
				}
			}
		}
	}
}
