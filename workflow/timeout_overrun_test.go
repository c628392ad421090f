package workflow_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// A step whose body returns after its timeout, without looking at its
// context, fails with kind timeout (rivet-semantics.md 1.2: the timeout
// wins whatever the work does after it), on a host whose clock has no
// AfterFunc (workflowtest's) as on one that has: the attempt's result must
// not depend on whether the timer's goroutine ran before the body returned.
func TestAStepThatOverrunsItsTimeoutTimesOutWhateverTheClock(t *testing.T) {
	t.Run("default timeout", func(t *testing.T) {
		h := newHost(log{})
		out := drive(t, h, func(c *logCtx) error {
			return c.Step("slow", func(s *logStep) error {
				s.State.N++
				h.Clock.Advance(workflow.DefaultStepTimeout + time.Second)
				return nil
			})
		})
		se := failedWith[*workflow.StepError](t, out)
		if se.Kind != workflow.FailureTimeout || se.Attempts != 1 || !errors.Is(se, workflow.ErrTimeout) || h.State().N != 1 {
			t.Fatalf("step error %+v, n=%d", se, h.State().N)
		}
	})
	t.Run("retried with RetryOnTimeout", func(t *testing.T) {
		h := newHost(log{})
		out := drive(t, h, func(c *logCtx) error {
			return c.StepWith(workflow.StepOptions{Name: "slow", Timeout: time.Second, RetryOnTimeout: true}, func(s *logStep) error {
				s.State.N++
				h.Clock.Advance(2 * time.Second)
				return nil
			})
		})
		se := failedWith[*workflow.StepError](t, out)
		if se.Kind != workflow.FailureExhausted || se.Attempts != 4 || h.State().N != 4 {
			t.Fatalf("step error %+v, n=%d", se, h.State().N)
		}
	})
}
