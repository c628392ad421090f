package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// stubbornActors returns stubborn, whose hold ignores its context and
// returns when release closes, and impatient, which calls stubborn's hold
// with a short deadline of its own (a test's, so that it runs again with
// -count).
func stubbornActors(release <-chan struct{}) (stubborn, impatient rivet.Actor[tickState]) {
	stubborn = rivet.Actor[tickState]{
		Name: "stubborn",
		Actions: rivet.Actions[tickState]{
			"hold": rivet.Query(func(c *rivet.ActionCtx[tickState]) (int, error) {
				<-release
				return 1, nil
			}),
			"ping": rivet.Query(func(c *rivet.ActionCtx[tickState]) (int, error) {
				return 0, nil
			}),
		},
	}
	impatient = rivet.Actor[tickState]{
		Name: "impatient",
		Actions: rivet.Actions[tickState]{
			"ask": rivet.Query(func(c *rivet.ActionCtx[tickState]) (int, error) {
				ctx, cancel := context.WithTimeout(c.Context(), 100*time.Millisecond)
				defer cancel()
				return rivet.Call[int](ctx, c.Client().GetOrCreate("stubborn", "s"), "hold")
			}),
		},
	}
	return stubborn, impatient
}

// A call from an actor's code to an actor of the same node ends with the
// caller's context, as one to another node's does (its gRPC call ends),
// even if the called actor's code does not heed it: the caller's step or
// turn is not held (nor a workflow cancel or a destroy that waits for it)
// while the called code goes on. The called code runs to its end.
func TestACallToAnActorOfTheSameNodeEndsWithItsContext(t *testing.T) {
	t.Parallel()
	stubbornRelease := make(chan struct{})
	stubborn, impatient := stubbornActors(stubbornRelease)
	e := newEnv(t, counterReg(t, stubborn, impatient), nil)
	released := false
	release := func() {
		if !released {
			released = true
			close(stubbornRelease)
		}
	}
	t.Cleanup(release)
	// stubborn exists before the impatient call, so that its 100 ms go to
	// the hold and not to stubborn's create (which a loaded machine can cut
	// short, leaving no stubborn).
	if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "stubborn", Key: []string{"s"}}, Action: "ping", CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "impatient", Key: []string{"i"}}, Action: "ask", CreateIfMissing: true})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, rivet.ErrTimeout) {
			t.Fatalf("the call ended with %v, want ErrTimeout", err)
		}
	case <-time.After(15 * time.Second):
		release()
		t.Fatalf("the call waited for the called actor's code to return (%v after it was let go)", <-done)
	}
	// The called code goes on, and its actor answers once it returns.
	release()
	res, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "stubborn", Key: []string{"s"}}, Action: "hold"})
	if err != nil || string(res) != "1" {
		t.Fatalf("stubborn's hold after: %s, %v", res, err)
	}
}

// lingerActors returns lingerer and goeson, sharing their own signals (a
// test's, so that it runs again with -count). goeson calls lingerer with a
// short deadline and goes on in its turn; lingerer's linger ignores its
// context and calls back its caller once the caller's turn has gone on
// without it. inside counts the callbacks that ran while the caller's
// turn went on.
func lingerActors() (lingerer, goeson rivet.Actor[tickState], inside *atomic.Int32) {
	var callerOffCall atomic.Bool // caller's turn runs past its call
	callerGoesOn, calledBack := make(chan struct{}), make(chan struct{})
	inside = new(atomic.Int32)
	lingerer = rivet.Actor[tickState]{
		Name: "lingerer",
		Actions: rivet.Actions[tickState]{
			"linger": rivet.Action0(func(c *rivet.ActionCtx[tickState]) (int, error) {
				select {
				case <-callerGoesOn:
				case <-time.After(3 * time.Second): // a caller held by this call never goes on
				}
				_, err := rivet.Call[int](c.Context(), c.Client().Get("goeson", "g"), "bump")
				close(calledBack)
				return 0, err
			}),
		},
	}
	goeson = rivet.Actor[tickState]{
		Name: "goeson",
		Actions: rivet.Actions[tickState]{
			"run": rivet.Action0(func(c *rivet.ActionCtx[tickState]) (int, error) {
				ctx, cancel := context.WithTimeout(c.Context(), 100*time.Millisecond)
				_, err := rivet.Call[int](ctx, c.Client().GetOrCreate("lingerer", "l"), "linger")
				cancel()
				if err == nil {
					return 0, errors.New("linger answered within 100 ms")
				}
				callerOffCall.Store(true)
				defer callerOffCall.Store(false)
				close(callerGoesOn)
				select {
				case <-calledBack:
				case <-time.After(5 * time.Second):
				}
				c.State.Seen++
				return c.State.Seen, nil
			}),
			"bump": rivet.Action0(func(c *rivet.ActionCtx[tickState]) (int, error) {
				if callerOffCall.Load() {
					inside.Add(1)
				}
				c.State.Seen += 10
				return c.State.Seen, nil
			}),
		},
	}
	return lingerer, goeson, inside
}

// A call whose caller has given up (its context ended) runs no action, as
// a gRPC call with an ended context is never sent: an action of the same
// node, left running by a call that ended, that calls back into its caller
// with its own (ended) context does not re-enter the caller's actor while
// the caller's turn goes on, where both would change the state at once.
func TestACallBackFromACallThatEndedDoesNotRunBesideTheCallersTurn(t *testing.T) {
	t.Parallel()
	lingerer, goeson, callbackInside := lingerActors()
	e := newEnv(t, counterReg(t, lingerer, goeson), nil)
	if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "goeson", Key: []string{"g"}}, Action: "run", CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	if n := callbackInside.Load(); n != 0 {
		t.Fatalf("%d call(s) back ran inside the caller's actor while its turn went on", n)
	}
}

// A load that its caller's deadline cuts short ends with that deadline
// (DEADLINE_EXCEEDED), not as storage unavailable: an action that calls an
// actor with a short deadline of its own, whose load is slow, sees the
// time it gave run out (a CI run's TestACallToAnActorOfTheSameNodeEndsWithItsContext
// saw "unavailable" where the called actor's read outlived 100 ms).
func TestALoadCutShortByItsCallersDeadlineIsATimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t), nil)
	e.store.stallGetSub.Store("slowload")
	cctx, cancel := context.WithTimeout(ctx(t), 200*time.Millisecond)
	defer cancel()
	_, err := e.host.Call(cctx, runtime.CallRequest{Ref: runtime.Ref{Name: "counter", Key: []string{"slowload"}}, Action: "getCount", CreateIfMissing: true})
	if !errors.Is(err, rivet.ErrTimeout) {
		t.Fatalf("the call ended with %v, want ErrTimeout", err)
	}
	if v, _ := e.store.stallGetSub.Load().(string); v != "" {
		t.Fatalf("the load did not read the actor's record (the stall was not reached): %v", err)
	}
	// Nothing was lost: the actor loads with a deadline that suffices.
	if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "counter", Key: []string{"slowload"}}, Action: "getCount", CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
}
