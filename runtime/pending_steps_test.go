package runtime_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// pendingPayBackoff is the wait before pendingPay's second attempt
// (workflow.Backoff: twice the base): long enough to be seen.
const pendingPayBackoff = 3 * time.Second

// pendingPay's workflow charges a card in a loop's first iteration, then
// ships: each attempt says it started (its number, on pendingEntered;
// shipping's, 100) and returns what pendingRelease gives it.
var (
	pendingEntered chan int
	pendingRelease chan error
	pendingPay     = rivet.Actor[payState]{
		Name: "pendingpay",
		Run: func(c *workflow.Ctx[payState]) error {
			err := c.Loop("charge-loop", func(lc *workflow.Ctx[payState]) error {
				opts := workflow.StepOptions{Name: "charge-card", MaxRetries: 3,
					RetryBackoffBase: pendingPayBackoff / 2, RetryBackoffMax: pendingPayBackoff}
				if err := lc.StepWith(opts, func(s *workflow.StepCtx[payState]) error {
					pendingEntered <- s.Attempt()
					select {
					case err := <-pendingRelease:
						return err
					case <-s.Context().Done():
						return s.Context().Err()
					}
				}); err != nil {
					return err
				}
				return workflow.Break
			})
			if err != nil {
				return err
			}
			// Then it ships, an attempt that says it started as 100.
			return c.Step("ship", func(s *workflow.StepCtx[payState]) error {
				pendingEntered <- 100
				select {
				case err := <-pendingRelease:
					return err
				case <-s.Context().Done():
					return s.Context().Err()
				}
			})
		},
	}
)

// Inspect shows the steps a workflow has in flight, without waiting for
// the turn their bodies hold: which (its path), which attempt, since when,
// the error of the attempt before; while it waits out its retry backoff,
// the attempt that comes next, when, and the last error; once it has
// ended, nothing.
func TestInspectShowsTheStepsInFlight(t *testing.T) {
	pendingEntered, pendingRelease = make(chan int), make(chan error) // not parallel: -count N runs it again
	e := newEnv(t, counterReg(t, pendingPay), nil)
	ref := runtime.Ref{Name: "pendingpay", Key: []string{"k"}}
	before := time.Now()
	if _, err := e.host.Create(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	entered := func(want int) {
		t.Helper()
		select {
		case n := <-pendingEntered:
			if n != want {
				t.Fatalf("attempt %d started, want %d", n, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("attempt %d did not start", want)
		}
	}
	const path = "charge-loop/~0/charge-card"

	// Attempt 1 runs, holding the actor's turn.
	entered(1)
	ins := inspect(t, e.host, "pendingpay", "k")
	if len(ins.PendingSteps) != 1 {
		t.Fatalf("pending steps while attempt 1 runs: %+v, want one", ins.PendingSteps)
	}
	first := ins.PendingSteps[0]
	if first.Path != path || first.Attempt != 1 || first.MaxAttempts != 4 || first.LastError != "" || !first.NextAttemptAt.IsZero() ||
		first.StartedAt.Before(before.Truncate(time.Millisecond)) || first.StartedAt.After(time.Now()) {
		t.Fatalf("pending step while attempt 1 runs: %+v, want %s, attempt 1, started since the test did, no error, no next attempt", first, path)
	}

	// It fails: the step waits out its backoff.
	pendingRelease <- errors.New("card declined")
	var backoff runtime.PendingStep
	waitFor(t, "the backoff shown", 10*time.Second, func() bool {
		ins = inspect(t, e.host, "pendingpay", "k")
		if len(ins.PendingSteps) == 1 && !ins.PendingSteps[0].NextAttemptAt.IsZero() {
			backoff = ins.PendingSteps[0]
			return true
		}
		return false
	})
	if want := first.StartedAt.Add(pendingPayBackoff); backoff.Path != path || backoff.Attempt != 2 || backoff.MaxAttempts != 4 || backoff.LastError != "card declined" ||
		!backoff.StartedAt.IsZero() || !backoff.NextAttemptAt.Equal(want) {
		t.Fatalf("pending step in the backoff: %+v, want %s, attempt 2 next at %v, last error %q", backoff, path, want, "card declined")
	}
	if ins.WorkflowStatus != runtime.WorkflowSleeping || !ins.WorkflowWake.At.Equal(backoff.NextAttemptAt) {
		t.Errorf("workflow in the backoff: %q, wakes at %v; want sleeping until %v", ins.WorkflowStatus, ins.WorkflowWake.At, backoff.NextAttemptAt)
	}

	// Attempt 2 runs, with the error of attempt 1.
	entered(2)
	ins = inspect(t, e.host, "pendingpay", "k")
	if len(ins.PendingSteps) != 1 {
		t.Fatalf("pending steps while attempt 2 runs: %+v, want one", ins.PendingSteps)
	}
	if s := ins.PendingSteps[0]; s.Path != path || s.Attempt != 2 || s.LastError != "card declined" || !s.NextAttemptAt.IsZero() ||
		s.StartedAt.Before(backoff.NextAttemptAt) {
		t.Fatalf("pending step while attempt 2 runs: %+v, want %s, attempt 2, started after %v, last error %q", s, path, backoff.NextAttemptAt, "card declined")
	}

	// It succeeds, and the next step runs: it alone is in flight.
	pendingRelease <- nil
	entered(100)
	ins = inspect(t, e.host, "pendingpay", "k")
	if len(ins.PendingSteps) != 1 || ins.PendingSteps[0].Path != "ship" || ins.PendingSteps[0].Attempt != 1 || ins.PendingSteps[0].LastError != "" {
		t.Fatalf("pending steps while shipping: %+v, want ship's attempt 1 alone", ins.PendingSteps)
	}

	// Once it has succeeded too, nothing is in flight.
	pendingRelease <- nil
	waitFor(t, "the workflow's end", 20*time.Second, func() bool {
		ins = inspect(t, e.host, "pendingpay", "k")
		return ins.WorkflowStatus == runtime.WorkflowCompleted
	})
	if len(ins.PendingSteps) != 0 {
		t.Fatalf("pending steps once the workflow completed: %+v", ins.PendingSteps)
	}
}
