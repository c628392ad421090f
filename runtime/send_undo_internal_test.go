package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// sendUndoSeen is what an activation's memory holds of the messages sent
// to its workflow.
type sendUndoSeen struct {
	arrivals uint64
	wakeAt   int64
	pending  int
}

func (a *activation) sendUndoSeen(queue string) sendUndoSeen {
	a.mu.Lock()
	s := sendUndoSeen{arrivals: a.wf.arrivals, wakeAt: a.wf.wakeAt}
	a.mu.Unlock()
	a.wf.notifyMu.Lock()
	s.pending = a.wf.pending[queue]
	a.wf.notifyMu.Unlock()
	return s
}

// A Send refused after its turn counted the message (arrived, pending, and
// a wakeup record decided on, for a workflow that waits for messages only)
// undoes all of it, as a step's refused commit does (stagedDropped):
// memory then holds what storage does. Left counted, memory believed in a
// wakeup record storage never got (wakeAt is what a later send compares
// its time with to decide whether it writes one), and in an arrival that
// never was (which a yield reads to learn whether a send raced it).
//
// Refused two ways, both an eviction under the Send's turn (which needs
// none: a failed commit, a lost claim): its enqueue refused (the eviction
// retired the activation, but had not answered the waiters yet), and its
// wait for the completion refused (the eviction was over).
func TestASendRefusedAfterItsCountingUndoesAllOfIt(t *testing.T) {
	t.Parallel()
	inbox := rivet.Actor[echoState]{
		Name:   "inbox",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[echoState]) error {
			return ctx.Loop("serve", func(lc *workflow.Ctx[echoState]) error {
				msg, err := workflow.Next[int](lc, "m")
				if err != nil {
					return err
				}
				return msg.Complete(msg.Body)
			})
		},
	}
	reg, err := rivet.Setup(inbox)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	modes := []string{"enqueue refused", "wait refused"}
	refs := make([]Ref, len(modes))
	for i, m := range modes {
		refs[i] = Ref{Name: "inbox", Key: []string{m}}
	}
	// Each workflow waits for a message, then the node stops: it yields
	// to a wakeup record for messages only (At 0), which the next
	// activation loads as its wakeAt. The next send writes a record due
	// at its time.
	h1, stop1 := memHostOn(t, reg, store)
	for _, ref := range refs {
		if _, _, err := h1.GetOrCreate(ctx, ref, nil); err != nil {
			t.Fatal(err)
		}
		a := h1.loaded(ref)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			waiting := false
			if r := a.runner(); r != nil {
				r.mu.Lock()
				waiting = r.waiting
				r.mu.Unlock()
			}
			if waiting {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's workflow never waited", ref.Key[0])
			}
		}
	}
	if err := stop1(ctx); err != nil {
		t.Fatal(err)
	}

	h2, _ := memHostOn(t, reg, store)
	var mode atomic.Value
	var hooked atomic.Int32
	h2.sendWaitHook = func(a *activation) {
		hooked.Add(1)
		switch mode.Load() {
		case "enqueue refused":
			// As an eviction does before it answers the waiters: every
			// later write is refused.
			a.retire()
		case "wait refused":
			h2.evict(a)
		}
	}
	for i, m := range modes {
		ref := refs[i]
		if _, _, err := h2.GetOrCreate(ctx, ref, nil); err != nil {
			t.Fatal(err)
		}
		a := h2.loaded(ref)
		if a == nil {
			t.Fatalf("%s: not loaded", m)
		}
		before := a.sendUndoSeen("q")
		if before.wakeAt != 0 {
			t.Fatalf("%s: loaded with wakeAt %d, want 0 (a record for messages only)", m, before.wakeAt)
		}
		mode.Store(m)
		n := hooked.Load()
		_, err := h2.Send(ctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), Wait: true, Timeout: 10 * time.Second})
		if hooked.Load() != n+1 {
			t.Fatalf("%s: the hook did not run", m)
		}
		if !errors.Is(err, rivet.ErrUnavailable) {
			t.Fatalf("%s: Send = %v, want UNAVAILABLE", m, err)
		}
		after := a.sendUndoSeen("q")
		// arrivals only rises (uncountArrivedLocked): one more.
		if want := (sendUndoSeen{arrivals: before.arrivals + 1, wakeAt: before.wakeAt, pending: before.pending}); after != want {
			t.Errorf("%s: after the refused send memory holds arrivals %d, wakeAt %d, pending %d; want %d, %d, %d (nothing was written; arrivals only rises)",
				m, after.arrivals, after.wakeAt, after.pending, want.arrivals, want.wakeAt, want.pending)
		}
		// Nothing was written indeed.
		part, enc := a.part, storage.EncodeKey(ref.Key)
		kv, err := store.Get(ctx, storage.WakeupKey(part, "inbox", enc))
		if err != nil {
			t.Fatalf("%s: wakeup record: %v", m, err)
		}
		var rec wakeupRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.At != 0 {
			t.Fatalf("%s: wakeup record %s (%v), want the yield's, for messages only", m, kv.Value, err)
		}
		qs, err := store.List(ctx, storage.ActorPrefix(part, "inbox", enc)+storage.QueueSuffix, storage.ListOptions{KeysOnly: true})
		if err != nil || len(qs) != 0 {
			t.Fatalf("%s: %d message(s) queued (%v), want none", m, len(qs), err)
		}
		if m == "enqueue refused" {
			h2.evict(a) // the rest of the eviction
		}
	}
}
