package runtime

import (
	"strconv"
	"strings"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// A loop that prunes, first recorded while every node reads storage
// format 2, keeps its iterations in slots (workflow.Entry.Slots = its prune
// interval plus its history size): iteration i's entries are stored under
// "loop/~(i mod Slots)/...", overwriting those of iteration i-Slots, which
// pruning has dropped by then, and a prune deletes only what that
// overwrite missed (below: none when the iterations record the same
// names). A pruned
// iteration cost a delete per entry, an etcd tombstone as costly as the
// put that wrote it (docs/benchmarks.md, session 26). Entries keep their
// real path in their value; a load drops the ones of iterations before
// their loop's pruned_before (dropPrunedSlots), which a later iteration had
// not overwritten. A loop that does not prune (NoPrune), or recorded
// without Slots (by an older build, or before every node read format 2),
// keeps an entry per path, as before, to its end.

// LoopSlots lets a loop first recorded now keep its iterations in slots:
// only while every node reads them (SetWriteFormat, format 2).
func (w *wfHost) LoopSlots() bool { return w.a.h.writes(2) }

var _ workflow.SlotHost = (*wfHost)(nil)

// JoinOutputsApart implements workflow.JoinOutputsHost.
func (w *wfHost) JoinOutputsApart() bool { return w.a.h.writes(3) }

var _ workflow.JoinOutputsHost = (*wfHost)(nil)

// HeldBranchesApart implements workflow.HeldBranchesHost.
func (w *wfHost) HeldBranchesApart() bool { return w.a.h.writes(4) }

var _ workflow.HeldBranchesHost = (*wfHost)(nil)

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
	return slotKeyIn(slots, "", path)
}

// slotKeyIn returns head + slotPath(slots, path), made with one allocation
// (none if head is "" and no iteration is replaced): every step in a loop
// stores an entry under its slot's key.
func slotKeyIn(slots map[string]int, head, path string) string {
	if len(slots) == 0 {
		return head + path
	}
	var b strings.Builder
	done := 0 // path[:done] is in b (once it is grown)
	for j, end := nextIteration(path, 0); j >= 0; j, end = nextIteration(path, end) {
		if n := slots[path[:j]]; n > 0 {
			if it, err := strconv.Atoi(path[j+2 : end]); err == nil {
				if b.Cap() == 0 {
					b.Grow(len(head) + len(path))
					b.WriteString(head)
				}
				b.WriteString(path[done : j+2])
				var nb [20]byte
				b.Write(strconv.AppendInt(nb[:0], int64(it%n), 10))
				done = end
			}
		}
	}
	if b.Cap() == 0 {
		return head + path
	}
	b.WriteString(path[done:])
	return b.String()
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
	for j, end := nextIteration(path, 0); j >= 0; j, end = nextIteration(path, end) {
		if pb, ok := before[path[:j]]; ok {
			if it, err := strconv.Atoi(path[j+2 : end]); err == nil && it < pb {
				return true
			}
		}
	}
	return false
}

// nextIteration returns the first loop iteration in path at or after i:
// the loop's path is path[:j], the iteration's number path[j+2:end] ("/~"
// between them; names cannot start with '~'); j is -1 if there is none.
func nextIteration(path string, i int) (j, end int) {
	j = strings.Index(path[i:], "/~")
	if j < 0 {
		return -1, 0
	}
	j += i
	end = strings.IndexByte(path[j+2:], '/')
	if end < 0 {
		return j, len(path)
	}
	return j, end + j + 2
}

// A pruned iteration's entries stay in its slot until the iteration that
// takes the slot next overwrites them; those it does not (it recorded
// other names: a step named after the item it handles, an inner loop
// that ran fewer iterations) are deleted when that iteration is pruned in
// turn. Without, a loop whose iterations record names of their own would
// grow its history without bound: at most two iterations' entries are
// kept per slot. A loop that records the same names deletes nothing.

// inSlotTree reports whether path lies in an iteration of a loop of
// slots, one that keeps its iterations in slots.
func inSlotTree(slots map[string]int, path string) bool {
	for j, end := nextIteration(path, 0); j >= 0; j, end = nextIteration(path, end) {
		if slots[path[:j]] > 0 {
			return true
		}
	}
	return false
}

// noteSlotKey records that the entry at path is stored at key. Called
// with a.slotMu held.
func (a *activation) noteSlotKey(key, path string) {
	if !inSlotTree(a.slots, path) {
		return
	}
	if a.slotKeys == nil {
		a.slotKeys = map[string]string{}
	}
	a.slotKeys[key] = path
}

// forgetSlotKeysUnder forgets the keys that a delete of key and the keys
// under it removes. Called with a.slotMu held.
func (a *activation) forgetSlotKeysUnder(key string) {
	for k := range a.slotKeys {
		if workflow.Under(k, key) {
			delete(a.slotKeys, k)
		}
	}
}

// staleInSlot adds to stale, and forgets, the keys of slot (the key of the
// pruned iteration tree) that hold entries of iterations before tree's:
// the iteration that took the slot after them did not overwrite them.
// Called with a.slotMu held.
func (a *activation) staleInSlot(tree, slot string, stale map[string]bool) map[string]bool {
	for k, p := range a.slotKeys {
		if workflow.Under(k, slot) && !workflow.Under(p, tree) {
			if stale == nil {
				stale = map[string]bool{}
			}
			stale[k] = true
			delete(a.slotKeys, k)
		}
	}
	return stale
}

// storedSlotKeys returns the keys (paths after "wf/") of the entries kvs
// hold in loops that keep slots, with the entries' paths: hist, decoded
// from kvs, before dropPrunedSlots.
func storedSlotKeys(prefix string, kvs []storage.KV, hist []workflow.Entry) map[string]string {
	slots := loopSlots(hist)
	if len(slots) == 0 {
		return nil
	}
	keys := map[string]string{}
	for i, kv := range kvs {
		if inSlotTree(slots, hist[i].Path) {
			keys[strings.TrimPrefix(kv.Key, prefix+storage.WorkflowSuffix)] = hist[i].Path
		}
	}
	return keys
}
