package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// memHost starts a Host alone on a memory store, owning every partition,
// and stops it when the test ends.
func memHost(t *testing.T, reg *rivet.Registry) *Host {
	t.Helper()
	store := storage.NewMemory()
	t.Cleanup(func() { store.Close() }) // after the Host's stop, registered below
	h, _ := memHostOn(t, reg, store)
	return h
}

// memHostOn is memHost on store, which it leaves open (a second Host on it
// is the node started again); stop stops the Host, once, as the test's end
// does if the test has not. Each of with changes the Host's configuration.
func memHostOn(t *testing.T, reg *rivet.Registry, store storage.Store, with ...func(*Config)) (h *Host, stop func(context.Context) error) {
	t.Helper()
	const parts = 4
	ctx, cancel := context.WithCancel(context.Background())
	com := storage.NewCommitter(store, storage.DefaultCommitterConfig())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = com.Run(ctx) }()
	own := NewOwnership(store, NodeRecord{NodeID: "n1"}, 5*time.Second, nil)
	if err := own.Establish(ctx, AllPartitions(parts)); err != nil {
		cancel()
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = own.Run(ctx) }()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Partitions = "n1", parts
	for _, f := range with {
		f(&cfg)
	}
	h, err := New(cfg, reg, store, com, own)
	if err != nil {
		cancel()
		wg.Wait()
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		cancel()
		wg.Wait()
		t.Fatal(err)
	}
	var once sync.Once
	stop = func(sctx context.Context) error {
		var err error
		once.Do(func() {
			err = h.Stop(sctx)
			_ = own.Resign(sctx)
			cancel()
			wg.Wait()
		})
		return err
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := stop(sctx); err != nil {
			t.Errorf("host stop: %v", err)
		}
	})
	return h, stop
}

type echoState struct{}

// A Send that waits for its message's completion, whose actor is evicted
// in its turn just before it registers for the completion (an eviction
// needs no turn: a failed commit, a lost claim), finds the activation
// answering no completions any more. Nothing was written and the next
// activation runs the workflow: the sender is told to retry
// (UNAVAILABLE), not that the actor has no workflow (FAILED_PRECONDITION,
// which clients do not retry). A retry is then completed.
func TestSendWaitRacingAnEvictionIsToldToRetry(t *testing.T) {
	echo := rivet.Actor[echoState]{
		Name:   "echo",
		Queues: rivet.Queues{"ask": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[echoState]) error {
			return ctx.Loop("serve", func(lc *workflow.Ctx[echoState]) error {
				msg, err := workflow.Next[int](lc, "ask")
				if err != nil {
					return err
				}
				return msg.Complete(msg.Body * 2)
			})
		},
	}
	reg, err := rivet.Setup(echo)
	if err != nil {
		t.Fatal(err)
	}
	h := memHost(t, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := Ref{Name: "echo", Key: []string{"e"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	var evicted atomic.Bool
	h.sendWaitHook = func(a *activation) {
		if evicted.CompareAndSwap(false, true) {
			h.evict(a)
		}
	}
	req := SendRequest{Ref: ref, Queue: "ask", Body: json.RawMessage(`21`), Wait: true, Timeout: 20 * time.Second}
	_, err = h.Send(ctx, req)
	if !evicted.Load() {
		t.Fatal("the hook did not run")
	}
	if !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("SendWait racing an eviction = %v, want UNAVAILABLE", err)
	}
	ins, err := h.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins.Queues) != 0 {
		t.Fatalf("the refused message was queued: %v", ins.Queues)
	}
	res, err := h.Send(ctx, req)
	if err != nil || res.Status != SendCompleted || string(res.Response) != "42" {
		t.Fatalf("retried SendWait = %+v, %v; want completed with 42", res, err)
	}
}

// A wait that runs out says whether the workflow took the message or it is
// still queued, and leaves nothing behind; a send to an actor whose
// workflow has ended says so.
func TestSendSaysWhatBecameOfTheMessage(t *testing.T) {
	t.Parallel()
	taker := rivet.Actor[echoState]{
		Name:   "taker",
		Queues: rivet.Queues{"jobs": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[echoState]) error {
			if _, err := workflow.Next[int](ctx, "take"); err != nil {
				return err
			}
			return ctx.Sleep("nap", time.Hour)
		},
	}
	quitter := rivet.Actor[echoState]{
		Name:   "quitter",
		Queues: rivet.Queues{"jobs": rivet.QueueOf[int]()},
		Run:    func(*workflow.Ctx[echoState]) error { return errors.New("gave up") },
	}
	reg, err := rivet.Setup(taker, quitter)
	if err != nil {
		t.Fatal(err)
	}
	h := memHost(t, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ref := Ref{Name: "taker", Key: []string{"t"}}
	send := func(wait time.Duration) SendResult {
		t.Helper()
		res, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "jobs", Body: json.RawMessage(`1`), CreateIfMissing: true, Wait: true, Timeout: wait})
		if err != nil || res.Status != SendTimedOut {
			t.Fatalf("send = %+v, %v; want timed out", res, err)
		}
		return res
	}
	if res := send(2 * time.Second); res.MessageState != MessageTaken || res.WorkflowStatus != "" {
		t.Errorf("first message = %+v, want taken (and no workflow status)", res)
	}
	if res := send(100 * time.Millisecond); res.MessageState != MessageQueued {
		t.Errorf("second message = %+v, want queued", res)
	}
	h.mu.Lock()
	a := h.actors["taker/"+storage.EncodeKey(ref.Key)]
	h.mu.Unlock()
	a.wf.notifyMu.Lock()
	left := len(a.wf.completions) + len(a.wf.taken)
	a.wf.notifyMu.Unlock()
	if left != 0 {
		t.Errorf("%d waits left behind", left)
	}

	q := Ref{Name: "quitter", Key: []string{"q"}}
	if _, _, err := h.GetOrCreate(ctx, q, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ins, err := h.Inspect(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if ins.WorkflowStatus == WorkflowFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("quitter's workflow is %q, want failed", ins.WorkflowStatus)
		}
	}
	res, err := h.Send(ctx, SendRequest{Ref: q, Queue: "jobs", Body: json.RawMessage(`1`)})
	if err != nil || res.Status != SendEnqueued || res.WorkflowStatus != WorkflowFailed {
		t.Fatalf("send to a failed workflow = %+v, %v; want enqueued, workflow failed", res, err)
	}
}

// A waiting send from a caller whose deadline comes before the wait's end
// (a client's gRPC deadline shorter than its timeout_ms, or none given: the
// default 30 s) hears "timed out" with the message's id before its
// deadline, not a deadline error that hides a message queued for good.
func TestAWaitingSendEndsBeforeItsCallersDeadline(t *testing.T) {
	t.Parallel()
	idle := rivet.Actor[echoState]{
		Name:   "idle",
		Queues: rivet.Queues{"jobs": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[echoState]) error {
			return ctx.Sleep("nap", time.Hour)
		},
	}
	reg, err := rivet.Setup(idle)
	if err != nil {
		t.Fatal(err)
	}
	h := memHost(t, reg)
	for _, wait := range []time.Duration{0, time.Minute} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		res, err := h.Send(ctx, SendRequest{Ref: Ref{Name: "idle", Key: []string{"i"}}, Queue: "jobs", Body: json.RawMessage(`1`), CreateIfMissing: true, Wait: true, Timeout: wait})
		expired := ctx.Err()
		cancel()
		if err != nil || res.Status != SendTimedOut || res.MessageID == 0 || res.MessageState != MessageQueued || expired != nil {
			t.Fatalf("wait %v under a 1 s deadline: send = %+v, %v (context %v); want timed out, queued, with an id, before the deadline", wait, res, err, expired)
		}
	}
}
