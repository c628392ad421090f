package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// noPanic runs fn and fails the test if a panic escapes it: on a node, a
// panic on a request's goroutine (gRPC does not recover them) takes the
// process down with every actor it serves.
func noPanic(t *testing.T, what string, fn func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: a panic of the actor's code escaped the host: %v", what, r)
			err = fmt.Errorf("panicked: %v", r)
		}
	}()
	return fn()
}

// A CreateState that panics (on an input it did not expect) fails the
// create with INTERNAL, as an action's panic does; the failed load leaves
// nothing behind, so a create with a good input goes through at once
// rather than waiting out its deadline for a load that never ends.
func TestAPanicInCreateStateFailsTheCreateAndNothingElse(t *testing.T) {
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name: "mkPanic",
		CreateState: func(in json.RawMessage) (st, error) {
			if string(in) == `"boom"` {
				panic("CreateState panicked")
			}
			return st{N: 1}, nil
		},
		Actions: rivet.Actions[st]{"get": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil })},
	}
	e := newEnv(t, counterReg(t, a), nil)
	ref := runtime.Ref{Name: "mkPanic", Key: []string{"k"}}
	err := noPanic(t, "create", func() error { _, err := e.host.Create(ctx(t), ref, json.RawMessage(`"boom"`)); return err })
	if !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("create whose CreateState panicked: %v, want ErrInternal", err)
	}
	if _, err := e.host.Get(ctx(t), ref); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("Get after the failed create: %v, want ErrNotFound", err)
	}
	if _, err := e.host.Create(ctx(t), ref, json.RawMessage(`"ok"`)); err != nil {
		t.Fatalf("create with a good input: %v", err)
	}
	if n := callInt(t, e.host, "mkPanic", "k", "get", false); n != 1 {
		t.Fatalf("state = %d, want 1", n)
	}
}

// panicky decodes from a JSON number, and panics on the string "boom": a
// decoder of the actor's own with a bug.
type panicky struct{ N int }

func (p *panicky) UnmarshalJSON(b []byte) error {
	if string(b) == `"boom"` {
		panic("decoder panicked")
	}
	return json.Unmarshal(b, &p.N)
}

// An action argument or a queue message whose decoder (the actor's own
// UnmarshalJSON) panics fails the request with INTERNAL, as the same panic
// in the action's turn does, whether or not the actor is in memory, and
// the actor goes on serving.
func TestAPanickingDecoderOfArgumentsOrMessagesFailsOnlyTheRequest(t *testing.T) {
	t.Parallel()
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name:   "argPanic",
		Queues: rivet.Queues{"jobs": rivet.QueueOf[panicky]()},
		Run:    func(*workflow.Ctx[st]) error { return nil },
		Actions: rivet.Actions[st]{
			"set": rivet.Action(func(c *rivet.ActionCtx[st], p panicky) (int, error) { c.State.N = p.N; return p.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	err := noPanic(t, "call of an actor not in memory", func() error { _, err := call(t, e.host, "argPanic", "k", "set", true, "boom"); return err })
	if !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("call of an actor not in memory: %v, want ErrInternal", err)
	}
	if n := callInt(t, e.host, "argPanic", "k", "set", true, 3); n != 3 {
		t.Fatalf("set = %d, want 3", n)
	}
	err = noPanic(t, "send", func() error {
		_, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: runtime.Ref{Name: "argPanic", Key: []string{"k"}}, Queue: "jobs", Body: json.RawMessage(`"boom"`)})
		return err
	})
	if !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("send: %v, want ErrInternal", err)
	}
	if n := callInt(t, e.host, "argPanic", "k", "set", false, 4); n != 4 {
		t.Fatalf("set after the panics = %d, want 4", n)
	}
}

// closePanics is vars whose Close panics.
type closePanics struct{ closed chan struct{} }

func (v *closePanics) Close() error { close(v.closed); panic("Close panicked") }

// Vars whose Close panics are logged as a failed close: the panic, on the
// reaper's goroutine, took the node down.
func TestVarsWhoseClosePanicsDoNotTakeTheNodeDown(t *testing.T) {
	t.Parallel()
	type st struct{ N int }
	vars := make(chan *closePanics, 2)
	a := rivet.Actor[st]{
		Name: "closePanic",
		CreateVars: func(*rivet.ActionCtx[st]) (any, error) {
			v := &closePanics{closed: make(chan struct{})}
			vars <- v
			return v, nil
		},
		Actions: rivet.Actions[st]{"inc": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N++; return c.State.N, nil })},
	}
	e := newEnv(t, counterReg(t, a), func(c *runtime.Config) { c.IdleTimeout = 20 * time.Millisecond })
	callInt(t, e.host, "closePanic", "k", "inc", true)
	v := <-vars
	waitFor(t, "the idle actor's vars to close", 10*time.Second, func() bool {
		select {
		case <-v.closed:
			return e.host.Stats().ActiveActors == 0
		default:
			return false
		}
	})
	if n := callInt(t, e.host, "closePanic", "k", "inc", false); n != 2 {
		t.Fatalf("inc after the sleep = %d, want 2", n)
	}
}

// An OnSleep that panics after changing the state is a failed OnSleep: its
// change is discarded and the actor sleeps all the same; an OnDestroy that
// panics does not stop the destroy.
func TestPanickingOnSleepAndOnDestroyAreFailedHooks(t *testing.T) {
	t.Parallel()
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name:      "hookPanic",
		OnSleep:   func(c *rivet.ActionCtx[st]) error { c.State.N = 1000; panic("OnSleep panicked") },
		OnDestroy: func(c *rivet.ActionCtx[st]) error { panic("OnDestroy panicked") },
		Actions:   rivet.Actions[st]{"inc": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N++; return c.State.N, nil })},
		Options:   rivet.Options{IdleTimeout: 100 * time.Millisecond},
	}
	e := newEnv(t, counterReg(t, a), nil)
	callInt(t, e.host, "hookPanic", "k", "inc", true)
	waitFor(t, "the actor to sleep", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	if n := callInt(t, e.host, "hookPanic", "k", "inc", false); n != 2 {
		t.Fatalf("inc after a panicking OnSleep = %d, want 2 (its change discarded)", n)
	}
	ref := runtime.Ref{Name: "hookPanic", Key: []string{"k"}}
	if err := noPanic(t, "destroy", func() error { return e.host.Destroy(ctx(t), ref) }); err != nil {
		t.Fatalf("destroy with a panicking OnDestroy: %v", err)
	}
	if _, err := e.host.Get(ctx(t), ref); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("Get after the destroy: %v, want ErrNotFound", err)
	}
}

// fragile is a state whose decoder has a bug: it panics on N == 13, a
// value its encoder writes.
type fragile struct{ N int }

func (f *fragile) UnmarshalJSON(b []byte) error {
	var v struct{ N int }
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.N == 13 {
		panic("state decoder panicked")
	}
	f.N = v.N
	return nil
}

// A failed turn puts the state back by decoding what was last committed
// with the actor's own decoder; one that panics there fails the call with
// the action's error and drops the activation, and the panic stays in the
// node, not on the request's goroutine (gRPC would not recover it), even
// from the path that is itself recovering the action's panic.
func TestAStateDecoderPanickingWhileATurnIsUndoneStaysInTheNode(t *testing.T) {
	a := rivet.Actor[fragile]{
		Name: "fragile",
		Actions: rivet.Actions[fragile]{
			"set": rivet.Action(func(c *rivet.ActionCtx[fragile], n int) (int, error) { c.State.N = n; return n, nil }),
			"fail": rivet.Action0(func(c *rivet.ActionCtx[fragile]) (int, error) {
				c.State.N = 99
				return 0, rivet.Errorf(rivet.ErrFailedPrecondition, "no")
			}),
			"panic": rivet.Action0(func(c *rivet.ActionCtx[fragile]) (int, error) {
				c.State.N = 99
				panic("action panicked")
			}),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	for i, action := range []string{"fail", "panic"} {
		key := fmt.Sprint("k", i)
		if n := callInt(t, e.host, "fragile", key, "set", true, 13); n != 13 {
			t.Fatalf("set = %d", n)
		}
		err := noPanic(t, action, func() error { _, err := call(t, e.host, "fragile", key, action, false); return err })
		if err == nil {
			t.Fatalf("%s: no error", action)
		}
		if action == "fail" && !errors.Is(err, rivet.ErrFailedPrecondition) {
			t.Fatalf("fail: %v, want the action's own FAILED_PRECONDITION", err)
		}
		if action == "panic" && !errors.Is(err, rivet.ErrInternal) {
			t.Fatalf("panic: %v, want ErrInternal", err)
		}
	}
}

// nilErr is an error type whose Error reads its receiver: a nil *nilErr
// returned as an error (Go's typed nil) panics when asked its text.
type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

// A workflow that fails with an error whose Error method panics (a typed
// nil, say) is a failed workflow: its text was read on the workflow's
// goroutine with nothing to recover the panic, which took the node down,
// and every node that ran the workflow after it.
func TestAWorkflowFailingWithAnErrorWhoseErrorPanicsFails(t *testing.T) {
	type st struct{}
	a := rivet.Actor[st]{
		Name: "nilErrWf",
		Run: func(*workflow.Ctx[st]) error {
			var err *nilErr
			return err
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if _, err := e.host.Create(ctx(t), runtime.Ref{Name: "nilErrWf", Key: []string{"k"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 10*time.Second, func() bool {
		return inspect(t, e.host, "nilErrWf", "k").WorkflowStatus == runtime.WorkflowFailed
	})
}
