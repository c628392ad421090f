package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

var errPayment = errors.New("payment refused")

// flakySaga books "hold", whose rollback handler fails its first fails
// attempts with undoErr (every attempt if fails < 0), logging each attempt
// with its number and the time it ran; then "pay" fails the workflow.
func flakySaga(clk *workflowtest.Clock, opts workflow.StepOptions, fails int, undoErr error) func(c *workflow.Ctx[rvState]) error {
	opts.Name = "hold"
	return func(c *workflow.Ctx[rvState]) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		if _, err := workflow.StepWithRollback(c, opts,
			func(s *workflow.StepCtx[rvState]) (int, error) {
				s.State.Log = append(s.State.Log, "hold")
				return 1, nil
			},
			func(s *workflow.StepCtx[rvState], _ int) error {
				s.State.Log = append(s.State.Log, fmt.Sprintf("undo #%d at %s", s.Attempt(), clk.Now().Sub(t0)))
				if fails < 0 || s.Attempt() <= fails {
					return undoErr
				}
				return nil
			}); err != nil {
			return err
		}
		return c.StepWith(workflow.StepOptions{Name: "pay", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[rvState]) error {
			return errPayment
		})
	}
}

// failedAtPay reports whether err holds the failure of flakySaga's "pay",
// which started the rollback.
func failedAtPay(err error) bool {
	var se *workflow.StepError
	return errors.As(err, &se) && se.Path == "pay" && se.Err.Error() == errPayment.Error()
}

// A rollback handler that fails is retried under its step's retry policy,
// after the step's backoff (base·2^n: 2 s, then 4 s), and the rollback
// completes when an attempt succeeds: the workflow fails with its own
// error only. Run in place, and evicted at every wait (each backoff
// resumed by a new activation).
func TestAFailingRollbackHandlerIsRetriedAfterItsBackoff(t *testing.T) {
	opts := workflow.StepOptions{MaxRetries: 3, RetryBackoffBase: time.Second, RetryBackoffMax: time.Minute}
	for _, evict := range []bool{false, true} {
		h := newHost(rvState{})
		out := driveEvicting(t, h, flakySaga(h.Clock, opts, 2, errors.New("hotel service down")), evict)
		if out.Status != workflow.RunFailed || !failedAtPay(out.Err) {
			t.Fatalf("evict=%v: %s %v, want failed with the payment's error", evict, out.Status, out.Err)
		}
		var rf *workflow.RollbackFailedError
		if errors.As(out.Err, &rf) {
			t.Fatalf("evict=%v: the rollback failed: %v", evict, out.Err)
		}
		want := []string{"hold", "undo #1 at 0s", "undo #2 at 2s", "undo #3 at 6s"}
		if got := h.State().Log; !slices.Equal(got, want) {
			t.Fatalf("evict=%v: log %q, want %q", evict, got, want)
		}
		e := entryAt(t, h.History(), "hold")
		if !e.RollbackDone || e.RollbackAttempts != 3 || e.RollbackError != nil || e.RollbackRetryError != nil {
			t.Fatalf("evict=%v: entry %+v, want rolled back in 3 attempts", evict, e)
		}
	}
}

// A handler's failure that no retry would change is not retried: a
// Critical error, and a timeout unless RetryOnTimeout (the step's own
// rules); the rollback stops there as before retries.
func TestARollbackHandlerFailingCriticallyIsNotRetried(t *testing.T) {
	opts := workflow.StepOptions{MaxRetries: 3, RetryBackoffBase: time.Second}
	h := newHost(rvState{})
	out := drive(t, h, flakySaga(h.Clock, opts, -1, workflow.Critical(errors.New("no such booking"))))
	rf := failedWith[*workflow.RollbackFailedError](t, out)
	if rf.Path != "hold" || rf.Err.Error() != "no such booking" || !failedAtPay(out.Err) {
		t.Fatalf("error %v", out.Err)
	}
	if got, want := h.State().Log, []string{"hold", "undo #1 at 0s"}; !slices.Equal(got, want) {
		t.Fatalf("log %q, want %q", got, want)
	}
	if e := entryAt(t, h.History(), "hold"); e.RollbackDone || e.RollbackAttempts != 1 || e.RollbackError == nil || e.RollbackError.Message != "no such booking" {
		t.Fatalf("entry %+v, want its rollback failed after 1 attempt", e)
	}

	for _, retryOnTimeout := range []bool{false, true} {
		h := newHost(rvState{})
		attempts := 0
		out := drive(t, h, func(c *workflow.Ctx[rvState]) error {
			if err := c.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "hold", Timeout: time.Second, MaxRetries: 2, RetryOnTimeout: retryOnTimeout},
				func(*workflow.StepCtx[rvState]) (int, error) { return 1, nil },
				func(s *workflow.StepCtx[rvState], _ int) error {
					attempts++
					h.Hang(s.Context())
					return s.Context().Err()
				}); err != nil {
				return err
			}
			return errPayment
		})
		rf := failedWith[*workflow.RollbackFailedError](t, out)
		want := 1
		if retryOnTimeout {
			want = 3
		}
		if rf.Err.Error() != "rollback timed out after 1s" || attempts != want {
			t.Fatalf("RetryOnTimeout %v: %v after %d attempts, want a timeout after %d", retryOnTimeout, rf, attempts, want)
		}
	}
}

// A handler that fails every attempt stops the rollback once its retries
// are used up, with its last error, as a handler that fails once did
// before retries (and still does with NoRetries).
func TestARollbackHandlerThatAlwaysFailsStopsAfterItsRetries(t *testing.T) {
	for _, tc := range []struct {
		retries int
		want    []string
	}{
		{2, []string{"hold", "undo #1 at 0s", "undo #2 at 2s", "undo #3 at 6s"}},
		{workflow.NoRetries, []string{"hold", "undo #1 at 0s"}},
	} {
		h := newHost(rvState{})
		opts := workflow.StepOptions{MaxRetries: tc.retries, RetryBackoffBase: time.Second}
		out := drive(t, h, flakySaga(h.Clock, opts, -1, errors.New("cannot undo")))
		rf := failedWith[*workflow.RollbackFailedError](t, out)
		if rf.Path != "hold" || rf.Err.Error() != "cannot undo" || !failedAtPay(out.Err) {
			t.Fatalf("retries %d: error %v", tc.retries, out.Err)
		}
		if got := h.State().Log; !slices.Equal(got, tc.want) {
			t.Fatalf("retries %d: log %q, want %q", tc.retries, got, tc.want)
		}
		e := entryAt(t, h.History(), "hold")
		if e.RollbackDone || e.RollbackAttempts != len(tc.want)-1 || e.RollbackError == nil || e.RollbackError.Message != "cannot undo" || e.RollbackRetryError != nil {
			t.Fatalf("retries %d: entry %+v, want its rollback failed after %d attempts", tc.retries, e, len(tc.want)-1)
		}
		// The failure is sticky: a run again runs no handler.
		if out := drive(t, h, flakySaga(h.Clock, opts, -1, errors.New("cannot undo"))); out.Status != workflow.RunFailed || len(h.State().Log) != len(tc.want) {
			t.Fatalf("retries %d: rerun %s, log %q", tc.retries, out.Status, h.State().Log)
		}
	}
}

// A run evicted during a handler's backoff yields until the backoff's
// end, recorded with the failed attempt: the next activation waits out
// the rest of it, runs the handler again and completes the rollback. A
// crash at any commit of the saga ends the same way.
func TestARollbackResumesAfterAnEvictionDuringItsBackoff(t *testing.T) {
	opts := workflow.StepOptions{MaxRetries: 3, RetryBackoffBase: time.Second}
	want := []string{"hold", "undo #1 at 0s", "undo #2 at 2s"}

	h := newHost(rvState{})
	wf := flakySaga(h.Clock, opts, 1, errors.New("hotel service down"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, evict := context.WithCancel(ctx)
	done := make(chan workflow.Outcome, 1)
	go func() { done <- h.Run(runCtx, wf) }()
	var w workflow.Wake
	select {
	case w = <-h.Wakes():
	case out := <-done:
		t.Fatalf("the run ended before it waited: %s %v", out.Status, out.Err)
	case <-ctx.Done():
		t.Fatal("the run never waited")
	}
	if at := t0.Add(2 * time.Second); !w.At.Equal(at) {
		t.Fatalf("waits until %v, want the backoff's end %v", w.At, at)
	}
	e := entryAt(t, h.History(), "hold")
	if e.RollbackAttempts != 1 || e.RollbackRetryError == nil || e.RollbackError != nil || e.RollbackDone {
		t.Fatalf("entry during the backoff %+v, want 1 failed attempt to retry", e)
	}
	evict()
	out := <-done
	if out.Status != workflow.RunYielded || !out.Wake.At.Equal(w.At) {
		t.Fatalf("evicted: %s %v wake %v, want yielded until %v", out.Status, out.Err, out.Wake.At, w.At)
	}
	h.Clock.Advance(time.Second) // half way through the backoff
	out = drive(t, h, wf)
	if out.Status != workflow.RunFailed || !failedAtPay(out.Err) || errors.As(out.Err, new(*workflow.RollbackFailedError)) {
		t.Fatalf("resumed: %s %v, want failed with the payment's error, rolled back", out.Status, out.Err)
	}
	if got := h.State().Log; !slices.Equal(got, want) {
		t.Fatalf("log %q, want %q", got, want)
	}
	if e := entryAt(t, h.History(), "hold"); !e.RollbackDone || e.RollbackAttempts != 2 {
		t.Fatalf("entry %+v, want rolled back in 2 attempts", e)
	}

	for k := 1; ; k++ {
		h := newHost(rvState{})
		h.CrashAt(k, k%2 == 0)
		out := drive(t, h, flakySaga(h.Clock, opts, 1, errors.New("hotel service down")))
		if out.Status != workflow.RunFailed || !failedAtPay(out.Err) || errors.As(out.Err, new(*workflow.RollbackFailedError)) {
			t.Fatalf("crash at %d: %s %v", k, out.Status, out.Err)
		}
		// A crash before its commit runs an attempt again (at least once):
		// the log, committed with the attempt, holds each once.
		if got := h.State().Log; !slices.Equal(got, want) {
			t.Fatalf("crash at %d: log %q, want %q", k, got, want)
		}
		if e := entryAt(t, h.History(), "hold"); !e.RollbackDone || e.RollbackAttempts != 2 {
			t.Fatalf("crash at %d: entry %+v", k, e)
		}
		if k > h.Commits() {
			break // past the last commit: no crash happened
		}
	}
}

// Code that now allows a handler fewer retries than it already used
// fails it at once, with its last attempt's error, rather than run it
// again.
func TestARollbackHandlerPastItsLoweredRetriesFailsWithItsLastError(t *testing.T) {
	h := newHost(rvState{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, evict := context.WithCancel(ctx)
	done := make(chan workflow.Outcome, 1)
	opts := workflow.StepOptions{MaxRetries: 3, RetryBackoffBase: time.Second}
	go func() { done <- h.Run(runCtx, flakySaga(h.Clock, opts, -1, errors.New("hotel service down"))) }()
	select {
	case <-h.Wakes(): // in the handler's backoff
	case out := <-done:
		t.Fatalf("the run ended before it waited: %s %v", out.Status, out.Err)
	}
	evict()
	<-done
	h.Clock.Advance(time.Hour)
	out := drive(t, h, flakySaga(h.Clock, workflow.StepOptions{MaxRetries: workflow.NoRetries}, -1, errors.New("hotel service down")))
	rf := failedWith[*workflow.RollbackFailedError](t, out)
	if rf.Err.Error() != "hotel service down" || len(h.State().Log) != 2 {
		t.Fatalf("error %v, log %q: want the first attempt's error, no second attempt", out.Err, h.State().Log)
	}
	if e := entryAt(t, h.History(), "hold"); e.RollbackAttempts != 1 || e.RollbackError == nil || e.RollbackRetryError != nil {
		t.Fatalf("entry %+v, want its rollback failed for good after 1 attempt", e)
	}
}

// A saga's Do steps compensate as its Steps do: the branches of a join
// book a flight and a hotel at once (Do), a payment then fails, and both
// handlers run with their step's value, the later completion first, each
// retried under its step's policy (the hotel's fails once); evicted at
// every wait, too.
func TestDoStepsWithRollbackHandlersCompensate(t *testing.T) {
	for _, evict := range []bool{false, true} {
		var (
			mu   sync.Mutex
			undo []string
		)
		saga := func(c *workflow.Ctx[rvState]) error {
			if err := c.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			book := func(name string, fails int) func(*workflow.Ctx[rvState]) (string, error) {
				return func(bc *workflow.Ctx[rvState]) (string, error) {
					return workflow.DoWithRollback(bc, workflow.StepOptions{Name: "book-" + name, MaxRetries: 2},
						func(d *workflow.DoCtx) (string, error) { return name + "-1", nil },
						func(d *workflow.DoCtx, booking string) error {
							mu.Lock()
							defer mu.Unlock()
							undo = append(undo, fmt.Sprintf("cancel %s #%d", booking, d.Attempt()))
							if d.Attempt() <= fails {
								return errors.New(name + " service down")
							}
							return nil
						})
				}
			}
			if _, err := workflow.Join(c, "book", workflow.Branches[rvState, string]{"flight": book("flight", 0), "hotel": book("hotel", 1)}); err != nil {
				return err
			}
			return c.StepWith(workflow.StepOptions{Name: "pay", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[rvState]) error {
				return errPayment
			})
		}
		h := newHost(rvState{})
		out := driveEvicting(t, h, saga, evict)
		if out.Status != workflow.RunFailed || !failedAtPay(out.Err) {
			t.Fatalf("evict=%v: %s %v, want failed with the payment's error", evict, out.Status, out.Err)
		}
		// Both compensated, each with its own value; the hotel's twice.
		mu.Lock()
		got := slices.Clone(undo)
		mu.Unlock()
		slices.Sort(got)
		if want := []string{"cancel flight-1 #1", "cancel hotel-1 #1", "cancel hotel-1 #2"}; !slices.Equal(got, want) {
			t.Fatalf("evict=%v: compensations %q, want %q", evict, got, want)
		}
		for _, p := range []string{"book/flight/book-flight", "book/hotel/book-hotel"} {
			if e := entryAt(t, h.History(), p); !e.RollbackDone {
				t.Fatalf("evict=%v: %s not rolled back: %+v", evict, p, e)
			}
		}
	}
}
