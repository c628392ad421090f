package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/rivet-go/rivet/storage"
)

// A workflow step that changes the actor's state stores the state in its
// own history entry, not in the state key: one etcd key per step instead of
// two (docs/architecture.md, "A step's state rides in its history entry").
// The state key trails: it is written by actions, at creation, by a step
// that cannot fold (writes of the actor queued, or a node of an older build
// registered), and whenever the entry that holds the newest state (the
// activation's home) is deleted.
// A load takes the newest of the state key and the entries that carry a
// state, by the revision they were written at.
//
// What keeps that newest the right one:
//   - Folding happens only when none of the activation's writes is queued or
//     in flight, so a folded entry is its commit's first state write: a
//     state-key write packed into the same store transaction (same revision)
//     came after it, and a tie goes to the state key.
//   - Every later write of the home entry carries the home's state again (a
//     rewrite would otherwise drop it), and a delete of the home writes the
//     state key in the same transaction; either, if the state would make
//     the transaction too large, writes the state key in a commit of its
//     own just before instead (the limit checks made before the writes are
//     queued count the writes alone, not a state a rewrite or a delete
//     may add: a workflow write refused by the store would evict the actor
//     and replay into it for ever).
//   - All of it is decided under the commit pipeline's lock, when the writes
//     are queued, so that it follows the order of the commits whichever
//     goroutine queues them (the workflow's Commit is not a turn).

// StorageFormat is the newest storage format this build writes, advertised
// in its node record. 2: a step's state may ride in its history entry, and
// a loop's iterations be stored in slots (loopslots.go), which builds
// advertising none (format 1) do not read; a node writes format 2 only
// while every registered node advertises it (SetWriteFormat). 3: a
// join's large branch values may be committed apart from its record
// (workflow.JoinOutputsHost, `<join>/~outputs/<n>`), which a build of
// format 2 replays as zero values; written only while every registered
// node advertises 3. 4: a pending join's branch
// failures may be committed in entries of their own
// (workflow.HeldBranchesHost, `<join>/~held/<branch>`), whose branches a
// build of format 3 would run again on replay, failing the workflow on a
// divergence; written only while every registered node advertises 4.
const StorageFormat = 4

// foldedStateField opens a history entry that carries the actor's state:
// first, so that a load tells such an entry by its prefix (the entry's
// output, raw JSON, could hold the same bytes further on).
const foldedStateField = `{"actor_state":`

// withState returns entry (a JSON object) with state as its first field.
func withState(entry, state []byte) []byte {
	b := make([]byte, 0, len(foldedStateField)+len(state)+len(entry)+1)
	b = append(b, foldedStateField...)
	b = append(b, orNull(state)...)
	if len(entry) > 2 {
		b = append(b, ',')
	}
	return append(b, entry[1:]...)
}

// foldReq asks placeState to move a step's state write into its entry:
// ops[stateIdx] is the state key's put, ops[targetIdx] the put of the
// entry at path (its key after "wf/", which names its slot if it has one).
type foldReq struct {
	stateIdx, targetIdx int
	path                string
}

// placeState applies the rules above to a group of writes about to be
// queued, and returns it, and the state-key write to queue before it if
// the group alone would be too large with the state (nil if none). Called
// with a.mu held, by enqueueFlush.
func (a *activation) placeState(ops []storage.Op, fold *foldReq) (pre, out []storage.Op) {
	if fold != nil && a.h.writes(2) && a.version == a.committed && a.failed == nil {
		// In place: the step's turn built ops for this call alone. The
		// group shrinks (one key fewer): it fits.
		st := ops[fold.stateIdx].Value
		ops[fold.targetIdx].Value = withState(ops[fold.targetIdx].Value, st)
		a.home, a.homeState = fold.path, st
		return nil, slices.Delete(ops, fold.stateIdx, fold.stateIdx+1)
	}
	if a.home == "" {
		return nil, ops
	}
	stateKey := a.stateKey()
	for _, op := range ops {
		if op.Kind == storage.OpPut && op.Key == stateKey {
			// The newest state goes to the state key.
			a.home, a.homeState = "", nil
			return nil, ops
		}
	}
	homeKey := historyKey(a.prefix, a.home)
	var placed []storage.Op // ops as they carry the home's state
	deleted := false
	for i, op := range ops {
		if op.Kind == storage.OpDelete && op.Key == homeKey ||
			op.Kind == storage.OpDeletePrefix && strings.HasPrefix(homeKey, op.Key) {
			placed, deleted = append(slices.Clip(ops), storage.Put(stateKey, a.homeState)), true
			break
		}
		if op.Kind == storage.OpPut && op.Key == homeKey && !bytes.HasPrefix(op.Value, []byte(foldedStateField)) {
			placed = slices.Clone(ops)
			placed[i].Value = withState(op.Value, a.homeState)
			break
		}
	}
	if placed == nil {
		return nil, ops
	}
	if a.h.store.Limits().Check(storage.Txn{Fence: a.fence, Ops: placed}) != nil {
		// Too large with the state: the state key takes it, in a commit
		// of its own, first (each fits alone: the state is within
		// MaxStateBytes, the ops were checked).
		pre = []storage.Op{storage.Put(stateKey, a.homeState)}
		a.home, a.homeState = "", nil
		return pre, ops
	}
	if deleted {
		a.home, a.homeState = "", nil
	}
	return nil, placed
}

// foldedState is the newest state the history entries of one actor carry.
type foldedState struct {
	state []byte
	rev   int64  // 0: none carries one
	path  string // the entry's key after "wf/" (its slot's, in slots)
}

// newestFolded returns the newest state that the history entries kvs (an
// actor's wf/ keys, prefix included) carry.
func newestFolded(prefix string, kvs []storage.KV) (foldedState, error) {
	var best *storage.KV
	for i := range kvs {
		if bytes.HasPrefix(kvs[i].Value, []byte(foldedStateField)) && (best == nil || kvs[i].ModRevision > best.ModRevision) {
			best = &kvs[i]
		}
	}
	if best == nil {
		return foldedState{}, nil
	}
	var e struct {
		State json.RawMessage `json:"actor_state"`
	}
	if err := json.Unmarshal(best.Value, &e); err != nil {
		return foldedState{}, fmt.Errorf("history entry %s does not decode: %w", best.Key, err)
	}
	return foldedState{state: e.State, rev: best.ModRevision, path: strings.TrimPrefix(best.Key, prefix+storage.WorkflowSuffix)}, nil
}

// SetWriteFormat sets the newest storage format this host may write:
// the newest every node of the cluster reads (StorageFormat's history).
// Below 2, steps write the state key, as builds before format 2 do; below
// 3, a join records its branch values in its record; below 4, a join
// rewrites its record for each failed branch rather than holding the
// failures in entries of their own (`<join>/~held/<branch>`). A Host alone
// writes format 3 until told (not 4: it may be a test's host of a history
// an older build reads); the node sets it from the node records it
// watches, once every registered node reads the format (its gateFormats).
func (h *Host) SetWriteFormat(f int) { h.writeFormat.Store(int64(f)) }

// WriteFormat reports what SetWriteFormat last set.
func (h *Host) WriteFormat() int { return int(h.writeFormat.Load()) }

// writes reports whether the host may write storage format f.
func (h *Host) writes(f int) bool { return h.writeFormat.Load() >= int64(f) }
