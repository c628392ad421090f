package node_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/node/nodetest"
	"github.com/rivet-go/rivet/workflow"
)

// A retry for a failed workflow only (what rivetctl workflow retry
// --all-failed sends, from a listing that may be stale by then) leaves a
// workflow that completed or was cancelled as it is, and says why
// (FAILED_PRECONDITION workflow.not_failed); a failed one it retries.
func TestARetryOnlyIfFailedLeavesACompletedOrCancelledWorkflow(t *testing.T) {
	var doneRuns, napRuns, flakyRuns atomic.Int32
	var flakyUp atomic.Bool
	c, _ := nodetest.Start(t, t.TempDir(),
		rivet.Actor[tally]{Name: "done", Run: func(ctx *workflow.Ctx[tally]) error {
			return ctx.Step("a", func(s *workflow.StepCtx[tally]) error { doneRuns.Add(1); return countStep(s) })
		}},
		rivet.Actor[tally]{Name: "nap", Run: func(ctx *workflow.Ctx[tally]) error {
			if err := ctx.Step("a", func(s *workflow.StepCtx[tally]) error { napRuns.Add(1); return countStep(s) }); err != nil {
				return err
			}
			return ctx.Sleep("wait", time.Hour)
		}},
		rivet.Actor[tally]{Name: "flaky", Run: func(ctx *workflow.Ctx[tally]) error {
			return ctx.StepWith(workflow.StepOptions{Name: "a", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[tally]) error {
				flakyRuns.Add(1)
				if !flakyUp.Load() {
					return errors.New("card service down")
				}
				return countStep(s)
			})
		}},
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitStatus := func(h *client.ActorHandle, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			in, err := h.Inspect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if in.WorkflowStatus == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's workflow is %s after 10 s, want %s", h.Name(), in.WorkflowStatus, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	onlyFailed := client.RetryOptions{OnlyFailed: true}

	done, nap, flaky := c.Actor("done", "x"), c.Actor("nap", "x"), c.Actor("flaky", "x")
	for _, h := range []*client.ActorHandle{done, nap, flaky} {
		if _, err := h.Info(ctx); err != nil {
			t.Fatal(err)
		}
	}
	done, nap, flaky = done.NoCreate(), nap.NoCreate(), flaky.NoCreate()
	waitStatus(done, "completed")
	waitStatus(nap, "sleeping")
	if _, err := nap.CancelWorkflow(ctx, "not wanted"); err != nil {
		t.Fatal(err)
	}
	waitStatus(flaky, "failed")

	for _, tc := range []struct {
		h      *client.ActorHandle
		status string
		runs   *atomic.Int32
	}{{done, "completed", &doneRuns}, {nap, "cancelled", &napRuns}} {
		res, err := tc.h.RetryWorkflowWith(ctx, onlyFailed)
		n := res.Removed
		var e *rivet.Error
		if !errors.As(err, &e) || !errors.Is(err, rivet.ErrWorkflowFailed) || rpcerr.CodeName(rpcerr.Code(e)) != "FAILED_PRECONDITION" ||
			e.Group+"."+e.Code != "workflow.not_failed" {
			t.Fatalf("a retry only if failed of a %s workflow: %d, %v; want FAILED_PRECONDITION workflow.not_failed", tc.status, n, err)
		}
		in, err := tc.h.Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hist, err := tc.h.History(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if in.WorkflowStatus != tc.status || len(hist.Entries) == 0 || hist.Entries[0].Path != "a" || tc.runs.Load() != 1 {
			t.Fatalf("after a refused retry the workflow is %s with %d entries, its step run %d times; want it %s as it was, run once",
				in.WorkflowStatus, len(hist.Entries), tc.runs.Load(), tc.status)
		}
	}

	flakyUp.Store(true)
	if res, err := flaky.RetryWorkflowWith(ctx, onlyFailed); err != nil || res.Removed != 1 {
		t.Fatalf("a retry only if failed of a failed workflow: %d, %v; want its failed step deleted", res.Removed, err)
	}
	waitStatus(flaky, "completed")
	if flakyRuns.Load() != 2 {
		t.Fatalf("the failed step ran %d times, want 2 (once again after the retry)", flakyRuns.Load())
	}
}
