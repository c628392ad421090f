package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// stubbornRelease ends stubborn's hold; the test that uses it closes it.
var stubbornRelease = make(chan struct{})

// stubborn's hold ignores its context: it returns when the test lets it.
var stubborn = rivet.Actor[tickState]{
	Name: "stubborn",
	Actions: rivet.Actions[tickState]{
		"hold": rivet.Query(func(c *rivet.ActionCtx[tickState]) (int, error) {
			<-stubbornRelease
			return 1, nil
		}),
	},
}

// impatient calls stubborn's hold with a short deadline of its own.
var impatient = rivet.Actor[tickState]{
	Name: "impatient",
	Actions: rivet.Actions[tickState]{
		"ask": rivet.Query(func(c *rivet.ActionCtx[tickState]) (int, error) {
			ctx, cancel := context.WithTimeout(c.Context(), 100*time.Millisecond)
			defer cancel()
			return rivet.Call[int](ctx, c.Client().GetOrCreate("stubborn", "s"), "hold")
		}),
	},
}

// A call from an actor's code to an actor of the same node ends with the
// caller's context, as one to another node's does (its gRPC call ends),
// even if the called actor's code does not heed it: the caller's step or
// turn is not held (nor a workflow cancel or a destroy that waits for it)
// while the called code goes on. The called code runs to its end.
func TestACallToAnActorOfTheSameNodeEndsWithItsContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, stubborn, impatient), nil)
	released := false
	release := func() {
		if !released {
			released = true
			close(stubbornRelease)
		}
	}
	t.Cleanup(release)
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
