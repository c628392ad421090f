package workflowtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A step whose attempt fails with an error its NonRetryable picks fails at
// once, critical, as Temporal's non-retryable error types do; any other
// error is retried as before.
func TestNonRetryableFailsAStepAtOnceForTheErrorsItPicks(t *testing.T) {
	unknown := rivet.Errorf(rivet.ErrUnknownAction, "actor payments has no action chrage")
	for _, c := range []struct {
		name     string
		err      error
		attempts int
		status   workflow.Status
	}{
		{"picked", unknown, 1, workflow.StatusExhausted},
		{"not picked", errors.New("flaky"), 4, workflow.StatusExhausted},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			calls := 0
			out, _ := h.Drive(ctx, func(wc *workflow.Ctx[struct{}]) error {
				_, err := workflow.StepOpts(wc, workflow.StepOptions{Name: "charge", NonRetryable: func(err error) bool {
					return errors.Is(err, rivet.ErrUnknownAction)
				}}, func(*workflow.StepCtx[struct{}]) (int, error) {
					calls++
					return 0, c.err
				})
				return err
			}, workflowtest.DriveOptions{MaxActivations: 20})
			hist := h.History()
			if out.Status != workflow.RunFailed || calls != c.attempts || len(hist) != 1 || hist[0].Status != c.status || hist[0].Attempts != c.attempts {
				t.Fatalf("outcome %v (%v), %d calls, history %+v; want failed after %d attempts", out.Status, out.Err, calls, hist, c.attempts)
			}
			wantKind := workflow.FailureExhausted
			if c.attempts == 1 {
				wantKind = workflow.FailureCritical
			}
			if hist[0].Failure != wantKind {
				t.Fatalf("failure kind %q, want %q", hist[0].Failure, wantKind)
			}
		})
	}
}

// A NonRetryable that panics fails the step, critical, with the panic in
// its error: not a crash of the run that runs the body again and again.
func TestANonRetryableThatPanicsFailsTheStep(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	calls := 0
	out, _ := h.Drive(ctx, func(wc *workflow.Ctx[struct{}]) error {
		return wc.StepWith(workflow.StepOptions{Name: "charge", NonRetryable: func(error) bool { panic("oops") }}, func(*workflow.StepCtx[struct{}]) error {
			calls++
			return errors.New("declined")
		})
	}, workflowtest.DriveOptions{MaxActivations: 20})
	hist := h.History()
	if out.Status != workflow.RunFailed || calls != 1 || len(hist) != 1 || hist[0].Failure != workflow.FailureCritical ||
		hist[0].Error == nil || !strings.Contains(hist[0].Error.Message, "NonRetryable panicked on it: oops") {
		t.Fatalf("outcome %v (%v), %d calls, history %+v; want the step failed, critical, after one attempt, naming the panic", out.Status, out.Err, calls, hist)
	}
}

// A step's NonRetryable is its body's: its rollback handler retries its
// compensation as before (a refund keeps retrying what a charge gave up
// on).
func TestNonRetryableDoesNotStopARollbackHandlersRetries(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	refunds := 0
	h.Drive(ctx, func(wc *workflow.Ctx[struct{}]) error {
		all := func(error) bool { return true }
		if err := wc.RollbackCheckpoint("saga"); err != nil {
			return err
		}
		if _, err := workflow.StepWithRollback(wc, workflow.StepOptions{Name: "charge", NonRetryable: all}, func(*workflow.StepCtx[struct{}]) (int, error) {
			return 1, nil
		}, func(*workflow.StepCtx[struct{}], int) error {
			refunds++
			if refunds < 3 {
				return errors.New("refund service down")
			}
			return nil
		}); err != nil {
			return err
		}
		return wc.Step("ship", func(*workflow.StepCtx[struct{}]) error { return workflow.Rollback(errors.New("out of stock")) })
	}, workflowtest.DriveOptions{MaxActivations: 50})
	if refunds != 3 {
		t.Fatalf("the rollback handler ran %d times, want 3: retried past its failures though the body's NonRetryable says no to all", refunds)
	}
}
