package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	rt "github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A step body that calls runtime.Goexit (t.Fatal in a test's actor does)
// ends the goroutine that holds the actor's turn: the turn must be given
// back, its change to the state dropped, and the workflow failed with an
// error that names the step, not the actor left with its turn taken (every
// later call waiting until its deadline) and its workflow never ending.
func TestAStepBodyThatCallsGoexitFailsTheWorkflowAndFreesTheTurn(t *testing.T) {
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name: "goexits",
		Run: func(c *workflow.Ctx[st]) error {
			return c.Step("exits", func(s *workflow.StepCtx[st]) error {
				s.State.N = 100
				runtime.Goexit()
				return nil
			})
		},
		Actions: rivet.Actions[st]{
			"inc": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N++; return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if _, _, err := e.host.GetOrCreate(ctx(t), rt.Ref{Name: "goexits", Key: []string{"k"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 10*time.Second, func() bool {
		return inspect(t, e.host, "goexits", "k").WorkflowStatus == rt.WorkflowFailed
	})
	if msg := inspect(t, e.host, "goexits", "k").WorkflowError; !strings.Contains(msg, "Goexit") || !strings.Contains(msg, `"exits"`) {
		t.Fatalf("workflow error %q should say the step called runtime.Goexit", msg)
	}
	cctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	raw, err := e.host.Call(cctx, rt.CallRequest{Ref: rt.Ref{Name: "goexits", Key: []string{"k"}}, Action: "inc"})
	if err != nil {
		t.Fatalf("a call after the step's Goexit: %v", err)
	}
	if string(raw) != "1" {
		t.Fatalf("inc = %s, want 1 (the cut-off step's change dropped)", raw)
	}
}

// goexits runs fn on a goroutine of its own, as a request's handler runs,
// since fn may end it with the actor's runtime.Goexit, and waits for that
// goroutine to end; it returns fn's error, and whether fn returned at all.
func goexits(t *testing.T, what string, fn func() error) (err error, returned bool) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = fn()
		returned = true
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: still running after 20s", what)
	}
	return err, returned
}

// callWithin is call bounded by d, well below the action timeout: an actor
// whose turn is held by a goroutine that ended answers no call before its
// deadline.
func callWithin(t *testing.T, h *rt.Host, d time.Duration, name, key, action string) (json.RawMessage, error) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx(t), d)
	defer cancel()
	return h.Call(cctx, rt.CallRequest{Ref: rt.Ref{Name: name, Key: []string{key}}, Action: action})
}

// An action that calls runtime.Goexit (t.Fatal in a test's actor) ends the
// goroutine of its request: no answer can come back on it, but the actor's
// turn must not go with it. The next call is served at once, on the state
// as last committed, whether the action changed the state or only read it.
func TestAnActionThatCallsGoexitLeavesTheActorServing(t *testing.T) {
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name: "gxAction",
		Actions: rivet.Actions[st]{
			"inc":  rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N++; return c.State.N, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil }),
			"exit": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N = 100; runtime.Goexit(); return 0, nil }),
			"peek": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { runtime.Goexit(); return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if n := callInt(t, e.host, "gxAction", "k", "inc", true); n != 1 {
		t.Fatalf("inc = %d, want 1", n)
	}
	for i, action := range []string{"exit", "peek"} {
		if err, returned := goexits(t, action, func() error { _, err := call(t, e.host, "gxAction", "k", action, false); return err }); returned && err == nil {
			t.Fatalf("%s: answered with no error", action)
		}
		raw, err := callWithin(t, e.host, 5*time.Second, "gxAction", "k", "inc")
		if err != nil {
			t.Fatalf("a call after %s's Goexit: %v", action, err)
		}
		if want := fmt.Sprint(i + 2); string(raw) != want {
			t.Fatalf("inc after %s's Goexit = %s, want %s (its change dropped)", action, raw, want)
		}
	}
}
