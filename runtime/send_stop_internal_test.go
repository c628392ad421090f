package runtime

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type boxState struct {
	Seen int `json:"seen"`
}

// A message sent while the node stops leaves the stopped workflow a due
// wakeup record (docs/architecture.md, Wakeups). Here the Send has counted
// its arrival and decided on the record (the old, past time: no record of
// its own) when the stop's yield reads the arrivals: the Send counts the
// message pending in the same breath, so the yield records a wakeup due
// now rather than one for messages only (which a restart does not wake),
// and the workflow takes the message after the restart.
func TestAMessageArrivingAsTheWorkflowYieldsIsTakenAfterTheRestart(t *testing.T) {
	t.Parallel()
	release, inStep := make(chan struct{}), make(chan struct{}, 1)
	var releaseOnce sync.Once
	releaseB := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseB()
	box := rivet.Actor[boxState]{
		Name:   "box",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[boxState]) error {
			return ctx.Loop("serve", func(lc *workflow.Ctx[boxState]) error {
				if _, err := workflow.Next[int](lc, "m"); err != nil {
					return err
				}
				return lc.Step("count", func(s *workflow.StepCtx[boxState]) error { s.State.Seen++; return nil })
			})
		},
	}
	// stuck's step does not heed its context: it holds the node's Stop
	// in its wait for the workflows until released, so that the Send's
	// wait is not answered before it has queued its message.
	stuck := rivet.Actor[boxState]{
		Name: "stuck",
		Run: func(ctx *workflow.Ctx[boxState]) error {
			return ctx.Step("block", func(s *workflow.StepCtx[boxState]) error {
				select {
				case inStep <- struct{}{}:
				default:
				}
				<-release
				return nil
			})
		},
	}
	reg, err := rivet.Setup(box, stuck)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	defer store.Close()
	h, stop := memHostOn(t, reg, store)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "box", Key: []string{"b"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.GetOrCreate(ctx, Ref{Name: "stuck", Key: []string{"s"}}, nil); err != nil {
		t.Fatal(err)
	}
	// Both runs are where they wait.
	select {
	case <-inStep:
	case <-time.After(10 * time.Second):
		t.Fatal("stuck's step did not start")
	}
	a := h.loaded(ref)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r := a.runner()
		waiting := false
		if r != nil {
			r.mu.Lock()
			waiting = r.waiting
			r.mu.Unlock()
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("box's workflow never waited")
		}
	}

	stopErr := make(chan error, 1)
	var hooked atomic.Bool
	h.sendWaitHook = func(a *activation) {
		if a.ref.Name != "box" || !hooked.CompareAndSwap(false, true) {
			return
		}
		// The Send counted its arrival. The node stops now (no turn
		// needed): box's run records its wakeup and ends.
		r := a.runner()
		go func() {
			sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer scancel()
			stopErr <- stop(sctx)
		}()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Error("box's run did not end")
		}
	}
	res, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), Wait: true, Timeout: 2 * time.Second})
	if !hooked.Load() {
		t.Fatal("the hook did not run")
	}
	t.Logf("send: %+v, %v", res, err)
	releaseB()
	if err := <-stopErr; err != nil {
		t.Logf("stop: %v", err)
	}

	part := a.part
	enc := storage.EncodeKey(ref.Key)
	prefix := storage.ActorPrefix(part, "box", enc)
	kv, err := store.Get(ctx, storage.WakeupKey(part, "box", enc))
	if err != nil {
		t.Fatalf("wakeup record: %v", err)
	}
	qs, err := store.List(ctx, prefix+storage.QueueSuffix, storage.ListOptions{KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the stop: wakeup record %s, %d message(s) queued", kv.Value, len(qs))

	// The node starts again: the workflow must take the message.
	h2, _ := memHostOn(t, reg, store)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// The durable state, which a step may have written in its history
		// entry (statehome.go).
		st, err := h2.readActor(ctx, prefix, true)
		if err == nil && strings.Contains(string(st.state), `"seen":1`) {
			return
		}
		if time.Now().After(deadline) {
			var s string
			if err == nil {
				s = string(st.state)
			}
			qs, _ := store.List(ctx, prefix+storage.QueueSuffix, storage.ListOptions{KeysOnly: true})
			t.Fatalf("10 s after the restart the message sent during the stop is still queued (%d message(s), state %s): the workflow was never woken", len(qs), s)
		}
	}
}
