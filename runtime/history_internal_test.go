package runtime

import (
	"slices"
	"testing"

	"github.com/rivet-go/rivet/workflow"
)

// History lists entries in the order the workflow made them, each followed
// by the entries under it: a scope's entries by their place (their keys
// sort "step-10" before "step-2", and "a" before a "work" loop the code ran
// first), a loop's iterations by number (keys: ~10 before ~2), branches by
// name.
func TestHistoryListsEntriesInTheOrderTheWorkflowMadeThem(t *testing.T) {
	places := map[string]int{
		"steps": 1, "work": 2, "a": 3, "step-2": 4, "step-10": 5, "par": 6,
		"work/~1/step": 1, "work/~1/step/inner": 1, "work/~2/step": 1, "work/~9/step": 1, "work/~10/step": 1,
		"par/y/fetch": 1, "par/x/fetch": 1, "par/x/save": 2,
	}
	var entries []workflow.Entry
	for _, p := range []string{"work/~10/step", "step-10", "work", "par/x/save", "work/~2/step", "a", "par", "work/~9/step", "step-2",
		"steps", "par/y/fetch", "work/~1/step/inner", "par/x/fetch", "work/~1/step"} {
		entries = append(entries, workflow.Entry{Path: p, Seq: places[p]})
	}
	sortHistory(entries)
	var got []string
	for _, e := range entries {
		got = append(got, e.Path)
	}
	want := []string{"steps", "work", "work/~1/step", "work/~1/step/inner", "work/~2/step", "work/~9/step", "work/~10/step",
		"a", "step-2", "step-10", "par", "par/x/fetch", "par/x/save", "par/y/fetch"}
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
