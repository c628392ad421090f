package workflow_test

import (
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

type rst struct{ N int }

// SleepUntil of the zero time is a deadline long past: the sleep ends at
// once, rather than blocking with no deadline to wake it.
func TestReviewSleepUntilZeroTime(t *testing.T) {
	h := newHost(rst{})
	out := drive(t, h, func(c *workflow.Ctx[rst]) error {
		if err := c.SleepUntil("z", time.Time{}); err != nil {
			return err
		}
		return c.Step("s", func(s *workflow.StepCtx[rst]) error { s.State.N++; return nil })
	})
	if out.Status != workflow.RunCompleted || h.State().N != 1 {
		t.Fatalf("outcome %+v, state %+v", out, h.State())
	}
}
