package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type floodState struct {
	N int `json:"n"`
}

// floodActor's hold takes the actor's turn until release closes (or its
// context ends); bump counts the calls that ran.
func floodActor(held chan<- struct{}, release <-chan struct{}) rivet.Actor[floodState] {
	return rivet.Actor[floodState]{
		Name:   "flooded",
		Queues: rivet.Queues{"jobs": rivet.QueueOf[int]()},
		Run:    func(*workflow.Ctx[floodState]) error { return nil },
		Actions: rivet.Actions[floodState]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[floodState]) (int, error) {
				held <- struct{}{}
				select {
				case <-release:
					return c.State.N, nil
				case <-c.Context().Done():
					return 0, c.Context().Err()
				}
			}),
			"bump": rivet.Action0(func(c *rivet.ActionCtx[floodState]) (int, error) {
				c.State.N++
				return c.State.N, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[floodState]) (int, error) { return c.State.N, nil }),
		},
	}
}

// holdFlooded waits for flooded f's workflow to end (its end is a turn:
// over before a test counts the turns waiting), then starts its hold,
// which takes the actor's turn until release closes; the channel gets
// hold's result.
func holdFlooded(t *testing.T, e *env, held <-chan struct{}) <-chan error {
	t.Helper()
	waitFor(t, "the workflow to complete", 30*time.Second, func() bool {
		return inspect(t, e.host, "flooded", "f").WorkflowStatus == runtime.WorkflowCompleted
	})
	holding := make(chan error, 1)
	go func() {
		_, err := call(t, e.host, "flooded", "f", "hold", false)
		holding <- err
	}()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("hold did not start")
	}
	return holding
}

// A call that finds MaxWaitingCalls turns waiting for its actor is refused
// at once, UNAVAILABLE actor.overloaded, and does not run: actions,
// queries and sends alike, counted in Stats. The turns that waited run
// when the actor is free, and an operator's turn is never refused.
func TestACallBehindMaxWaitingCallsIsRefusedWithoutRunning(t *testing.T) {
	held, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, counterReg(t, floodActor(held, release)), func(c *runtime.Config) {
		c.MaxWaitingCalls = 3
		c.ActionTimeout = time.Minute
	})
	ref := runtime.Ref{Name: "flooded", Key: []string{"f"}}
	if got := callInt(t, e.host, "flooded", "f", "bump", true); got != 1 {
		t.Fatalf("first bump = %d, want 1", got)
	}
	holding := holdFlooded(t, e, held)
	waiting := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := call(t, e.host, "flooded", "f", "bump", false)
			waiting <- err
		}()
	}
	waitFor(t, "three bumps waiting for the turn", 30*time.Second, func() bool { return e.host.GateWaiters(ref) == 3 })

	// Each of these would wait behind hold until release: refused instead.
	overloaded := func(what string, err error) {
		t.Helper()
		var rerr *rivet.Error
		if !errors.Is(err, rivet.ErrUnavailable) || !errors.As(err, &rerr) || rerr.Group != "actor" || rerr.Code != "overloaded" {
			t.Fatalf("%s behind 3 waiting turns: %v; want UNAVAILABLE actor.overloaded", what, err)
		}
	}
	_, err := call(t, e.host, "flooded", "f", "bump", false)
	overloaded("a bump", err)
	_, err = e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "get", ReadOnly: true})
	overloaded("a query", err)
	_, err = e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "jobs", Body: json.RawMessage(`1`), IdempotencyKey: "k1"})
	overloaded("a send", err)
	if n := e.host.Stats().CallsShed; n != 3 {
		t.Fatalf("Stats().CallsShed = %d, want 3", n)
	}

	// An operator's turn waits, beyond the limit.
	admin := make(chan error, 1)
	go func() {
		_, err := e.host.CancelWorkflow(ctx(t), ref, "flood")
		admin <- err
	}()
	waitFor(t, "the operator's cancel waiting for the turn", 30*time.Second, func() bool { return e.host.GateWaiters(ref) == 4 })

	close(release)
	if err := <-holding; err != nil {
		t.Fatalf("hold: %v", err)
	}
	for range 3 {
		if err := <-waiting; err != nil {
			t.Fatalf("a bump that waited: %v", err)
		}
	}
	// Its workflow ended on its own: the cancel got the turn, and says so.
	if err := <-admin; !errors.Is(err, rivet.ErrWorkflowFailed) {
		t.Fatalf("the operator's cancel: %v; want the workflow.ended refusal it gets once it has the turn", err)
	}
	// The refused bump did not run; the refused send queued nothing.
	if got := callInt(t, e.host, "flooded", "f", "get", false); got != 4 {
		t.Fatalf("n = %d after 1 + 3 bumps that ran, want 4", got)
	}
	for _, q := range inspect(t, e.host, "flooded", "f").Queues {
		if q.Depth != 0 {
			t.Fatalf("queue %+v after a refused send, want empty", q)
		}
	}
	// Nor did it keep its idempotency key: sent again, it queues.
	res, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "jobs", Body: json.RawMessage(`1`), IdempotencyKey: "k1"})
	if err != nil || res.Duplicate {
		t.Fatalf("the refused send sent again: %+v, %v; want queued, not a duplicate", res, err)
	}
}

// A call an actor's turn makes (here a workflow step's) is not refused
// however many turns wait: it waits for its turn, as it did before there
// was a bound, rather than fail the step.
func TestAStepsCallToAnOverloadedActorWaitsForItsTurn(t *testing.T) {
	held, release := make(chan struct{}, 1), make(chan struct{})
	caller := rivet.Actor[floodState]{
		Name: "caller",
		Run: func(ctx *workflow.Ctx[floodState]) error {
			return ctx.StepWith(workflow.StepOptions{Name: "bump", Timeout: time.Minute}, func(s *workflow.StepCtx[floodState]) error {
				n, err := rivet.Call[int](s.Context(), s.Client().Get("flooded", "f"), "bump")
				s.State.N = n
				return err
			})
		},
	}
	e := newEnv(t, counterReg(t, floodActor(held, release), caller), func(c *runtime.Config) {
		c.MaxWaitingCalls = 1
		c.ActionTimeout = time.Minute
	})
	ref := runtime.Ref{Name: "flooded", Key: []string{"f"}}
	callInt(t, e.host, "flooded", "f", "bump", true)
	holding := holdFlooded(t, e, held)
	waiting := make(chan error, 1)
	go func() {
		_, err := call(t, e.host, "flooded", "f", "bump", false)
		waiting <- err
	}()
	waitFor(t, "a bump waiting", 30*time.Second, func() bool { return e.host.GateWaiters(ref) == 1 })
	if _, err := call(t, e.host, "flooded", "f", "bump", false); !isOverloadedErr(err) {
		t.Fatalf("a client's bump behind the limit: %v; want actor.overloaded", err)
	}
	if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "caller", Key: []string{"c"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the step's call waiting beside the bump", 30*time.Second, func() bool { return e.host.GateWaiters(ref) == 2 })
	close(release)
	if err := <-holding; err != nil {
		t.Fatalf("hold: %v", err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("the waiting bump: %v", err)
	}
	waitFor(t, "the caller's workflow to complete", 30*time.Second, func() bool {
		return inspect(t, e.host, "caller", "c").WorkflowStatus == runtime.WorkflowCompleted
	})
	if s := e.host.Stats().CallsShed; s != 1 {
		t.Fatalf("CallsShed = %d, want 1 (the client's bump alone)", s)
	}
	if got := callInt(t, e.host, "flooded", "f", "get", false); got != 3 {
		t.Fatalf("n = %d; want 3: the first bump, the one that waited and the step's", got)
	}
}

func isOverloadedErr(err error) bool {
	var rerr *rivet.Error
	return errors.Is(err, rivet.ErrUnavailable) && errors.As(err, &rerr) && rerr.Group == "actor" && rerr.Code == "overloaded"
}

// MaxWaitingCalls < 0 bounds nothing: calls wait, as many as come.
func TestNegativeMaxWaitingCallsRefusesNone(t *testing.T) {
	held, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, counterReg(t, floodActor(held, release)), func(c *runtime.Config) {
		c.MaxWaitingCalls = -1
		c.ActionTimeout = time.Minute
	})
	ref := runtime.Ref{Name: "flooded", Key: []string{"f"}}
	callInt(t, e.host, "flooded", "f", "bump", true)
	holding := holdFlooded(t, e, held)
	const n = 1500 // past the default limit
	cctx, cancel := context.WithTimeout(ctx(t), time.Minute)
	defer cancel()
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := e.host.Call(cctx, runtime.CallRequest{Ref: ref, Action: "bump"})
			errs <- err
		}()
	}
	waitFor(t, "every bump waiting", 30*time.Second, func() bool { return e.host.GateWaiters(ref) == n })
	close(release)
	if err := <-holding; err != nil {
		t.Fatalf("hold: %v", err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("a bump: %v", err)
		}
	}
	if s := e.host.Stats().CallsShed; s != 0 {
		t.Fatalf("CallsShed = %d with no bound", s)
	}
}
