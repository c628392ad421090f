package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newHost[S any](initial S) *workflowtest.Host[S] {
	return workflowtest.NewHost(initial, workflowtest.NewClock(t0))
}

// drive runs fn to its end on h, failing the test if it takes more than a
// few seconds of real time (a hang, never a timing assumption).
func drive[S any](t *testing.T, h *workflowtest.Host[S], fn func(*workflow.Ctx[S]) error) workflow.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, fn, workflowtest.DriveOptions{})
	if ctx.Err() != nil {
		t.Fatalf("workflow did not finish: %+v", out)
	}
	return out
}
