package runtime

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// A turn in flight at a graceful stop that sends to a workflow actor of
// this node and waits for the completion (rivet.SendWait) gets its
// message queued and SendEnqueued at once, as when the actor moves: the
// stop lets the send in (beginOn), but no run here completes anything any
// more. To an actor in memory as the stop began, whose waits the stop had
// closed, the send failed workflow.failed ("has no running workflow to
// complete the message"), nothing queued; to one the send loaded, whose
// waits no one closed, it waited out its timeout (timed_out after 30 s),
// holding the stop to its deadline. The workflow takes the message after
// a restart.
func TestASendWaitLetInByAStopIsQueuedNotWaitedFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		inMemory bool // the target is in memory as the stop begins
	}{
		{"to an actor in memory", true},
		{"to an actor the send loads", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testStopSendWait(t, c.inMemory)
		})
	}
}

func testStopSendWait(t *testing.T, inMemory bool) {
	box := rivet.Actor[boxState]{
		Name:   "box",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[boxState]) error {
			return ctx.Loop("serve", func(lc *workflow.Ctx[boxState]) error {
				msg, err := workflow.Next[int](lc, "m")
				if err != nil {
					return err
				}
				if err := lc.Step("count", func(s *workflow.StepCtx[boxState]) error { s.State.Seen++; return nil }); err != nil {
					return err
				}
				return msg.Complete("done")
			})
		},
	}
	entered, proceed := make(chan struct{}), make(chan struct{})
	sender := rivet.Actor[boxState]{
		Name: "sender",
		Actions: rivet.Actions[boxState]{
			"go": rivet.Action(func(c *rivet.ActionCtx[boxState], key string) (string, error) {
				close(entered)
				<-proceed
				res, err := rivet.SendWait(c.Context(), c.Client().GetOrCreate("box", key), "q", 1, 30*time.Second)
				return res.Status, err
			}),
		},
	}
	reg, err := rivet.Setup(box, sender)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	defer store.Close()
	h, stop := memHostOn(t, reg, store)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := Ref{Name: "box", Key: []string{"b"}}
	if inMemory {
		if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
			t.Fatal(err)
		}
	}

	type answer struct {
		raw json.RawMessage
		err error
		at  time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		raw, err := h.Call(ctx, CallRequest{Ref: Ref{Name: "sender", Key: []string{"s"}}, Action: "go", Args: json.RawMessage(`["b"]`), CreateIfMissing: true})
		answered <- answer{raw, err, time.Now()}
	}()
	select {
	case <-entered:
	case got := <-answered:
		t.Fatalf("the sender's call ended (%s, %v) before its turn began", got.raw, got.err)
	case <-ctx.Done():
		t.Fatal("the sender's turn never began")
	}
	stopped := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		stopped <- stop(sctx)
	}()
	// The send goes once the stop has closed the waits of the actors in
	// memory (those there are): the one it makes must not be left to them.
	closed := func() bool {
		if !h.isStopping() {
			return false
		}
		a := h.loaded(ref)
		if a == nil {
			return !inMemory
		}
		a.wf.notifyMu.Lock()
		defer a.wf.notifyMu.Unlock()
		return a.wf.closed
	}
	for deadline := time.Now().Add(10 * time.Second); !closed(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the stop did not close the waits within 10 s")
		}
	}
	released := time.Now()
	close(proceed)
	got := <-answered
	if got.err != nil || string(got.raw) != `"enqueued"` {
		t.Fatalf("the send waiting in a turn in flight at the stop: %s, %v; want enqueued", got.raw, got.err)
	}
	// A bound for a hang (the send's 30 s), not a speed target.
	if took := got.at.Sub(released); took > 5*time.Second {
		t.Errorf("the send answered %v after it was made: it waited for a completion no run here makes", took)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}

	// The node starts again: the workflow takes the message.
	h2, _ := memHostOn(t, reg, store)
	part, err := h2.PartitionOf(ref)
	if err != nil {
		t.Fatal(err)
	}
	prefix := storage.ActorPrefix(part, "box", storage.EncodeKey(ref.Key))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := h2.readActor(ctx, prefix, true)
		if err == nil && strings.Contains(string(st.state), `"seen":1`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the restart the message sent during the stop is not taken (state %s, %v)", st.state, err)
		}
	}
}
