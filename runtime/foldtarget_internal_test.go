package runtime

import (
	"testing"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// The op a step's state may ride in is the put of its entry, wherever the
// batch's other writes put it: here a prune of an iteration of a loop in
// slots (no op) comes before a delete of the tree holding that loop, which
// forgets its slots: counted again afterwards, the prune took an op, and
// the state went into the op after the entry's (the state key's own put,
// then dropped: the state was written nowhere).
func TestTheFoldTargetIsTheStepsEntry(t *testing.T) {
	a := &activation{prefix: "a/", slots: map[string]int{"o/~0/l": 4}}
	writes := []workflow.HistoryWrite{
		{DeleteTree: "o/~0/l/~1", Prune: true},
		{DeleteTree: "o/~0", Prune: true},
		{Put: &workflow.Entry{Path: "o/~1/s", Kind: workflow.KindStep, Status: workflow.StatusCompleted}},
	}
	ops, _, target, err := a.historyOps(writes)
	if err != nil {
		t.Fatal(err)
	}
	if target < 0 || target >= len(ops) || ops[target].Kind != storage.OpPut || ops[target].Key != historyKey("a/", "o/~1/s") {
		t.Fatalf("fold target %d in %v, want the put of o/~1/s", target, ops)
	}
}
