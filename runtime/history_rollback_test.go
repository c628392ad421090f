package runtime_test

import (
	"errors"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// The history of a saga that rolled back says which compensations ran:
// the last step's handler succeeded (rolled back), the one before it failed
// (its error and code, where the rollback stopped, after its step's default
// retries: 4 attempts), and the first step's handler did not run.
func TestHistoryShowsWhichCompensationsRan(t *testing.T) {
	t.Parallel()
	reserve := func(c *workflow.Ctx[bookingLoopState], name string, undo error) error {
		_, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: name},
			func(*workflow.StepCtx[bookingLoopState]) (int, error) { return 1, nil },
			func(*workflow.StepCtx[bookingLoopState], int) error { return undo })
		return err
	}
	saga := rivet.Actor[bookingLoopState]{
		Name: "saga",
		Run: func(ctx *workflow.Ctx[bookingLoopState]) error {
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if err := reserve(ctx, "flight", nil); err != nil {
				return err
			}
			if err := reserve(ctx, "hotel", rivet.UserError("hotel.down", "hotel service down", nil)); err != nil {
				return err
			}
			if err := reserve(ctx, "car", nil); err != nil {
				return err
			}
			return ctx.Step("pay", func(*workflow.StepCtx[bookingLoopState]) error {
				return workflow.Rollback(errors.New("payment refused"))
			})
		},
	}
	e := newEnv(t, counterReg(t, saga), nil)
	ref := runtime.Ref{Name: "saga", Key: []string{"s"}}
	createUntilFailed(t, e, ref)
	h, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]runtime.HistoryEntry{}
	for _, he := range h.Entries {
		got[he.Path] = he
	}
	if c := got["car"]; !c.HasRollback || !c.RollbackDone || c.RollbackError != "" || c.RollbackAttempts != 1 {
		t.Errorf("car = %+v, want rolled back", c)
	}
	if c := got["hotel"]; !c.HasRollback || c.RollbackDone || c.RollbackError != "hotel service down" || c.RollbackErrorCode != "hotel.down" || c.RollbackAttempts != 1+workflow.DefaultMaxRetries {
		t.Errorf("hotel = %+v, want its rollback failed with hotel.down after %d attempts", c, 1+workflow.DefaultMaxRetries)
	}
	if c := got["flight"]; !c.HasRollback || c.RollbackDone || c.RollbackError != "" || c.RollbackAttempts != 0 {
		t.Errorf("flight = %+v, want a handler that did not run", c)
	}
	if c := got["pay"]; c.HasRollback || c.RollbackDone || c.RollbackError != "" {
		t.Errorf("pay = %+v, want no rollback", c)
	}
}
