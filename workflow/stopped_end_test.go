package workflow_test

import (
	"context"
	"testing"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A run stopped once its code has returned, before its end is recorded,
// yields to run again at once: its outcome is left to record. With no
// wake it waited for any message, and a node stopped between a workflow's
// last step and its end left it asleep for good (runtime's
// TestReceivesInASlottedLoopAcrossRestarts, under load).
func TestARunStoppedAsItsCodeReturnsRunsAgainAtOnce(t *testing.T) {
	type st struct{}
	h := workflowtest.NewHost(st{}, workflowtest.NewClock(t0))
	ctx, cancel := context.WithCancel(context.Background())
	out := h.Run(ctx, func(c *workflow.Ctx[st]) error {
		if err := c.Step("s", func(*workflow.StepCtx[st]) error { return nil }); err != nil {
			return err
		}
		cancel() // the node stops now
		return nil
	})
	if out.Status != workflow.RunYielded || !out.Wake.At.Equal(t0) {
		t.Fatalf("outcome %+v, want yielded to run again at once (t0)", out)
	}
	if out := h.Run(context.Background(), func(c *workflow.Ctx[st]) error {
		return c.Step("s", func(*workflow.StepCtx[st]) error { return nil })
	}); out.Status != workflow.RunCompleted {
		t.Fatalf("the next run: %+v, want completed", out)
	}
}
