package workflowtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A step body in a loop that returns Break fails the step, and the run,
// saying that only the loop's body ends the loop, where it said only
// "workflow: break" (a user trial); the loop's body returning Break after
// the step ends it.
func TestBreakFromAStepBodySaysOnlyTheLoopsBodyEndsTheLoop(t *testing.T) {
	type st struct{ N int }
	run := func(fromStep bool) workflow.Outcome {
		h := workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, _ := h.Drive(ctx, func(c *workflow.Ctx[st]) error {
			return c.Loop("l", func(c *workflow.Ctx[st]) error {
				err := c.Step("s", func(s *workflow.StepCtx[st]) error {
					s.State.N++
					if fromStep {
						return workflow.Break
					}
					return nil
				})
				if err != nil {
					return err
				}
				return workflow.Break
			})
		}, workflowtest.DriveOptions{})
		return out
	}
	out := run(true)
	var se *workflow.StepError
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &se) || se.Kind != workflow.FailureCritical || se.Attempts != 1 {
		t.Fatalf("Break from the step's body: %v %v; want the step failed, critical, after 1 attempt", out.Status, out.Err)
	}
	if msg := out.Err.Error(); !strings.Contains(msg, "workflow: break (returned by a step's body: Break ends only the Loop or LoopWith whose own body returns it") {
		t.Fatalf("Break from the step's body: %q does not say that only the loop's body ends the loop", msg)
	}
	if out := run(false); out.Status != workflow.RunCompleted {
		t.Fatalf("Break from the loop's body: %v %v; want completed", out.Status, out.Err)
	}
}
