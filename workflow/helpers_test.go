package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/internal/hosthook"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// newHost returns a host without attempt markers (hosthook.NoAttemptMarkers):
// the engine's tests compare a run with crashes to the same run without,
// which a host that counts the attempts a crash cuts short does not keep.
// The markers' own tests: attempt_marker_test.go, workflowtest's, runtime's.
func newHost[S any](initial S) *workflowtest.Host[S] {
	h := workflowtest.NewHost(initial, workflowtest.NewClock(t0))
	hosthook.NoAttemptMarkers(h)
	return h
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
