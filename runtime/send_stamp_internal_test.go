package runtime

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// stampState is what a stamp actor's workflow saw: the messages of its
// timed-out batch receive, as the run after the gate got them.
type stampState struct {
	After []int `json:"after"`
	Done  bool  `json:"done"`
}

// stampActor receives a batch from queue "a" with a timeout, keeps what it
// got, then waits on queue "go" only, recording nothing more until a step
// after it: the timed-out receive's record waits for that commit.
func stampActor(timeout time.Duration) rivet.Actor[stampState] {
	return rivet.Actor[stampState]{
		Name:   "stamp",
		Queues: rivet.Queues{"a": rivet.QueueOf[int](), "go": rivet.QueueOf[int]()},
		Run: func(c *workflow.Ctx[stampState]) error {
			ms, err := workflow.NextBatch[int](c, "first", workflow.NextOptions{Names: []string{"a"}, Count: 5, Timeout: timeout})
			if err != nil {
				return err
			}
			bodies := []int{}
			for _, m := range ms {
				bodies = append(bodies, m.Body)
			}
			if _, err := workflow.Next[int](c, "gate", workflow.NextOptions{Names: []string{"go"}}); err != nil {
				return err
			}
			return c.Step("rec", func(s *workflow.StepCtx[stampState]) error {
				s.State.After, s.State.Done = bodies, true
				return nil
			})
		},
		Actions: rivet.Actions[stampState]{"get": rivet.Query(func(c *rivet.ActionCtx[stampState]) (stampState, error) { return *c.State, nil })},
	}
}

// waitsOn reports whether a's workflow run waits for a message of queues
// only.
func waitsOn(a *activation, queues ...string) bool {
	r := a.runner()
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting && slices.Equal(r.wake.Queues, queues)
}

// A Send held in its turn before its message is counted (here by a hook;
// in production by its first read of the actor's idempotency keys from
// storage) while a receive of its queue times out: the message is stamped
// as it becomes visible, after the deadline, so that the replay of the
// receive after a restart, which finds its timeout unrecorded (nothing
// committed after it), times out as the first run did, and the message
// stays queued. Stamped as the Send's turn began, before the deadline, it
// was taken by the replay: the workflow went on with a message its first
// run had not received.
func TestAReceiveThatTimedOutBesideAHeldSendReplaysTimedOut(t *testing.T) {
	reg, err := rivet.Setup(stampActor(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	defer store.Close()
	h, stop := memHostOn(t, reg, store)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	held, release := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	h.sendHoldHook = func(a *activation) {
		if a.ref.Name == "stamp" && armed.CompareAndSwap(true, false) {
			close(held)
			<-release
		}
	}
	armed.Store(true)
	ref := Ref{Name: "stamp", Key: []string{"s"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	a := h.loaded(ref)
	waitUntil(t, ctx, "the workflow to wait on a", func() bool { return waitsOn(a, "a") })
	sent := make(chan error, 1)
	go func() {
		_, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "a", Body: json.RawMessage(`7`)})
		sent <- err
	}()
	select {
	case <-held:
	case err := <-sent:
		t.Fatalf("the send ended (%v) without the hook holding it", err)
	}
	// The receive times out while the send is held (its wait needs no
	// turn), and the workflow goes on to wait on go.
	waitUntil(t, ctx, "the receive to time out", func() bool { return waitsOn(a, "go") })
	close(release)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}

	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := stop(sctx); err != nil {
		t.Fatal(err)
	}
	// The premise: the timeout's record was not committed, so the
	// replay looks at the queue again.
	kv, err := store.Get(ctx, historyKey(a.prefix, "first"))
	if err != nil {
		t.Fatal(err)
	}
	var first workflow.Entry
	if err := json.Unmarshal(kv.Value, &first); err != nil {
		t.Fatal(err)
	}
	if first.Status != workflow.StatusPending {
		t.Fatalf("the receive's entry is %s once the host stopped, want it pending (its timeout not committed)", first.Status)
	}

	h2, _ := memHostOn(t, reg, store)
	if _, err := h2.Send(ctx, SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	var s stampState
	waitUntil(t, ctx, "the workflow's end", func() bool {
		out, err := h2.Call(ctx, CallRequest{Ref: ref, Action: "get"})
		return err == nil && json.Unmarshal(out, &s) == nil && s.Done
	})
	if len(s.After) != 0 {
		t.Errorf("the timed-out receive replayed with %v, want none (it timed out before the message was there)", s.After)
	}
	in, err := h2.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	depth := map[string]uint64{}
	for _, q := range in.Queues {
		depth[q.Queue] = q.Depth
	}
	if depth["a"] != 1 || depth["go"] != 0 {
		t.Errorf("queue depths %v, want a 1 (the message the receive did not take) and go 0", depth)
	}
}
