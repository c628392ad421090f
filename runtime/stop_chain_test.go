package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A graceful stop finishes the turns in flight, calls those turns make to
// actors of this node included: back into their own actor along their
// chain (A -> B -> A, B here too) and into an actor not in memory yet, and
// their sends and creates.
// The host refused them as new requests (UNAVAILABLE "node is stopping"),
// so a re-entrant call chain in flight at a SIGTERM failed, and its
// caller was told it may have run (a trial ported from Dapr, whose
// reentrant calls a drain lets finish). Calls of other callers are still
// refused.
func TestAStopLetsTheTurnsInFlightCallActorsOfTheirNode(t *testing.T) {
	t.Parallel()
	type st struct {
		N   int      `json:"n"`
		Log []string `json:"log"`
	}
	entered, proceed := make(chan struct{}), make(chan struct{})
	outer := rivet.Actor[st]{
		Name: "outer",
		Actions: rivet.Actions[st]{
			"go": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				c.State.Log = append(c.State.Log, "go")
				close(entered)
				<-proceed
				n, err := rivet.Call[int](c.Context(), c.Client().GetOrCreate("inner", "b"), "bounce", c.Key()[0])
				if err != nil {
					return 0, err
				}
				c.State.N += n
				if err := c.Client().GetOrCreate("box", "m").Send(c.Context(), "q", 7); err != nil {
					return 0, err
				}
				if _, err := rivet.Create(c.Context(), c.Client(), "box", []string{"new"}, nil); err != nil {
					return 0, err
				}
				return c.State.N, nil
			}),
			"back": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				c.State.Log = append(c.State.Log, "back")
				return 10, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[st]) (st, error) { return *c.State, nil }),
		},
	}
	inner := rivet.Actor[st]{
		Name: "inner",
		Actions: rivet.Actions[st]{
			"bounce": rivet.Action(func(c *rivet.ActionCtx[st], key string) (int, error) {
				n, err := rivet.Call[int](c.Context(), c.Client().GetOrCreate("outer", key), "back")
				if err != nil {
					return 0, err
				}
				c.State.N += n
				return n + 1, nil
			}),
		},
	}
	box := rivet.Actor[st]{
		Name:   "box",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[st]) error {
			msg, err := workflow.Next[int](ctx, "take")
			if err != nil {
				return err
			}
			return ctx.Step("keep", func(s *workflow.StepCtx[st]) error { s.State.N = msg.Body; return nil })
		},
		Actions: rivet.Actions[st]{
			"get": rivet.Query(func(c *rivet.ActionCtx[st]) (st, error) { return *c.State, nil }),
		},
	}
	e := newEnv(t, counterReg(t, outer, inner, box), nil)
	done := make(chan error, 1)
	go func() { _, err := call(t, e.host, "outer", "a", "go", true); done <- err }()
	<-entered
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- e.host.Stop(sctx)
	}()
	// Stopping: a client's call is refused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := call(t, e.host, "counter", "c", "increment", true, 1)
		if errors.Is(err, rivet.ErrUnavailable) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host did not start stopping: a call got %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(proceed)
	if err := <-done; err != nil {
		t.Fatalf("the call in flight at the stop: %v, want its answer", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	e.restart()
	raw, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "outer", Key: []string{"a"}}, Action: "get"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"n":11,"log":["go","back"]}`; string(raw) != want {
		t.Fatalf("outer after the stop: %s, want %s", raw, want)
	}
	// The message sent in the stop is queued: the workflow takes it.
	deadline = time.Now().Add(20 * time.Second)
	for {
		raw, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "box", Key: []string{"m"}}, Action: "get"})
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) == `{"n":7,"log":null}` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("box after the stop: %s, want the message sent in the stop taken", raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := e.host.Get(ctx(t), runtime.Ref{Name: "box", Key: []string{"new"}}); err != nil {
		t.Fatalf("the actor created in the stop: %v", err)
	}
}
