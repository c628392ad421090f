package runtime_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A saga rolls back, the operator retries it from the failed step (the
// compensated steps stay undone, as --from says), and it goes on. A later
// failure that rolls nothing back (here a cancel) is resumed by a plain
// retry where it stopped: the compensations of the earlier rollback are
// settled, not compensations of this failure. Before, the retry took them
// for these and ran the saga again from its first step (hotel booked a
// second time, pay charged a third).
func TestAPlainRetryAfterARetryPastCompensationsResumesTheWorkflow(t *testing.T) {
	t.Parallel()
	var payOK atomic.Bool
	var hotelRuns, payRuns atomic.Int32
	saga := rivet.Actor[retrySagaState]{
		Name: "settledsaga",
		Run: func(ctx *workflow.Ctx[retrySagaState]) error {
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(ctx, workflow.StepOptions{Name: "flight"},
				func(*workflow.StepCtx[retrySagaState]) (int, error) { return 1, nil },
				func(sc *workflow.StepCtx[retrySagaState], _ int) error { sc.State.Undone++; return nil }); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(ctx, workflow.StepOptions{Name: "hotel"},
				func(*workflow.StepCtx[retrySagaState]) (int, error) { hotelRuns.Add(1); return 1, nil },
				func(sc *workflow.StepCtx[retrySagaState], _ int) error { sc.State.Undone++; return nil }); err != nil {
				return err
			}
			if err := ctx.Step("pay", func(*workflow.StepCtx[retrySagaState]) error {
				payRuns.Add(1)
				if !payOK.Load() {
					return workflow.Rollback(errors.New("payment refused"))
				}
				return nil
			}); err != nil {
				return err
			}
			return ctx.Sleep("nap", time.Hour)
		},
	}
	e := newEnv(t, counterReg(t, saga), nil)
	ref := runtime.Ref{Name: "settledsaga", Key: []string{"s"}}
	createUntilFailed(t, e, ref)
	payOK.Store(true)
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "pay"); err != nil {
		t.Fatal(err)
	}
	napping := func() bool {
		return inspect(t, e.host, ref.Name, ref.Key[0]).WorkflowStatus == runtime.WorkflowSleeping
	}
	waitFor(t, "the retried run to nap", 20*time.Second, napping)
	if _, err := e.host.CancelWorkflow(ctx(t), ref, "stop"); err != nil {
		t.Fatal(err)
	}
	removed, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if err != nil {
		t.Fatal(err)
	}
	if removed != 0 {
		t.Errorf("the plain retry of the cancelled workflow deleted %d entries, want 0 (it resumes)", removed)
	}
	waitFor(t, "the resumed run to nap", 20*time.Second, napping)
	if hotelRuns.Load() != 1 || payRuns.Load() != 2 {
		t.Errorf("hotel ran %d times and pay %d, want 1 and 2", hotelRuns.Load(), payRuns.Load())
	}
	h, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, he := range h.Entries {
		if (he.Path == "flight" || he.Path == "hotel") && (!he.RollbackDone || !he.RollbackSettled) {
			t.Errorf("%s: rolled back %v, settled %v; want both (compensated, and the retry went on past it)", he.Path, he.RollbackDone, he.RollbackSettled)
		}
	}
	if st := inspect(t, e.host, ref.Name, ref.Key[0]).State; string(st) != `{"undone":2}` {
		t.Errorf("state %s, want each compensation run once", st)
	}
}
