package runtime

import (
	"strconv"
	"strings"

	"github.com/rivet-go/rivet/workflow"
)

// A loop first recorded while every node reads storage format 2 keeps its
// iterations in slots (workflow.Entry.Slots = its prune interval plus its
// history size): iteration i's entries are stored under "loop/~(i mod
// Slots)/...", overwriting those of iteration i-Slots, which pruning has
// dropped by then, and a prune deletes nothing. A pruned iteration cost a
// delete per entry, an etcd tombstone as costly as the put that wrote it
// (docs/benchmarks.md, session 26). Entries keep their real path in their
// value; a load drops the ones of iterations before their loop's
// pruned_before (dropPrunedSlots), which a later iteration had not
// overwritten. A loop recorded without Slots (by an older build, or before
// every node read format 2) keeps an entry per path, as before, to its end.

// LoopSlots lets a loop first recorded now keep its iterations in slots:
// only while every node reads them (SetStateInHistory, format 2).
func (w *wfHost) LoopSlots() bool { return w.a.h.stateInHistory.Load() }

var _ workflow.SlotHost = (*wfHost)(nil)

// noteSlots records that the loop at path keeps n slots. Called with
// a.slotMu held.
func (a *activation) noteSlots(path string, n int) {
	if a.slots == nil {
		a.slots = map[string]int{}
	}
	a.slots[path] = n
}

// inSlots reports whether tree is an iteration of a loop that keeps its
// iterations in slots. Called with a.slotMu held.
func (a *activation) inSlots(tree string) bool {
	i := strings.LastIndex(tree, "/~")
	return i > 0 && workflow.IsIteration(tree) && a.slots[tree[:i]] > 0
}

// forgetSlotsUnder forgets the loops under tree (a deleted or pruned
// scope), so that loops nested in a loop do not pile up. Called with
// a.slotMu held.
func (a *activation) forgetSlotsUnder(tree string) {
	for p := range a.slots {
		if workflow.Under(p, tree) {
			delete(a.slots, p)
		}
	}
}

// slotPath returns the path under which the entry at path is stored: each
// iteration of a loop that keeps slots is replaced by its slot. Called
// with a.slotMu held.
func (a *activation) slotPath(path string) string {
	return slotPath(a.slots, path)
}

func slotPath(slots map[string]int, path string) string {
	if len(slots) == 0 {
		return path
	}
	var b []byte
	done := 0 // path[:done] is in b (once b is made)
	for i := 0; ; {
		j := strings.Index(path[i:], "/~")
		if j < 0 {
			break
		}
		j += i
		end := strings.IndexByte(path[j+2:], '/')
		if end < 0 {
			end = len(path)
		} else {
			end += j + 2
		}
		if n := slots[path[:j]]; n > 0 {
			if it, err := strconv.Atoi(path[j+2 : end]); err == nil {
				b = append(b, path[done:j+2]...)
				b = strconv.AppendInt(b, int64(it%n), 10)
				done = end
			}
		}
		i = end
	}
	if b == nil {
		return path
	}
	return string(append(b, path[done:]...))
}

// loopSlots returns the slots of the loops in hist, by path.
func loopSlots(hist []workflow.Entry) map[string]int {
	var m map[string]int
	for i := range hist {
		if e := &hist[i]; e.Kind == workflow.KindLoop && e.Slots > 0 {
			if m == nil {
				m = map[string]int{}
			}
			m[e.Path] = e.Slots
		}
	}
	return m
}

// dropPrunedSlots returns hist without the entries of iterations that
// their loop, which keeps slots, pruned: left in a slot that no later
// iteration wrote to.
func dropPrunedSlots(hist []workflow.Entry) []workflow.Entry {
	var before map[string]int
	for i := range hist {
		if e := &hist[i]; e.Kind == workflow.KindLoop && e.Slots > 0 && e.PrunedBefore > 0 {
			if before == nil {
				before = map[string]int{}
			}
			before[e.Path] = e.PrunedBefore
		}
	}
	if before == nil {
		return hist
	}
	out := hist[:0]
	for _, e := range hist {
		if !prunedIn(before, e.Path) {
			out = append(out, e)
		}
	}
	return out
}

// prunedIn reports whether path lies in an iteration before its loop's
// pruned_before.
func prunedIn(before map[string]int, path string) bool {
	for i := 0; ; {
		j := strings.Index(path[i:], "/~")
		if j < 0 {
			return false
		}
		j += i
		end := strings.IndexByte(path[j+2:], '/')
		if end < 0 {
			end = len(path)
		} else {
			end += j + 2
		}
		if pb, ok := before[path[:j]]; ok {
			if it, err := strconv.Atoi(path[j+2 : end]); err == nil && it < pb {
				return true
			}
		}
		i = end
	}
}
