package workflow_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/rivet-go/rivet/workflow"
)

// A workflow that ends with an error before reaching entries an earlier
// run recorded diverged: unchanged code replaying the same results fails
// where it failed then, with nothing recorded after. It is a divergence
// naming the first entry not reached, and no compensation runs for it.
func TestAnErrorBeforeRecordedEntriesIsADivergence(t *testing.T) {
	var undone atomic.Bool
	v := func(stopEarly bool) func(c *logCtx) error {
		return func(c *logCtx) error {
			if err := c.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "a"}, func(*logStep) (int, error) { return 1, nil },
				func(*logStep, int) error { undone.Store(true); return nil }); err != nil {
				return err
			}
			if stopEarly {
				return errors.New("v2 rejects this order")
			}
			if err := note(c, "b"); err != nil {
				return err
			}
			return wait(c, "w")
		}
	}
	h := inFlight(t, v(false))
	out := drive(t, h, v(true))
	var de *workflow.DivergenceError
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &de) || de.Path != "b" {
		t.Errorf("outcome %s %v, want a divergence at %q", out.Status, out.Err, "b")
	}
	if undone.Load() {
		t.Error("the compensation of a ran, for a history the code no longer matches")
	}
}
