package runtime_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A workflow retry is logged on the node that ran it, at INFO, as a
// cancel is: the actor, its key, what the workflow was, the entry it ran
// again from and how many entries it removed (a user trial: `workflow
// cancel` left a line, `workflow retry`, which rewrites the history, none).
// A dry run writes nothing, and logs nothing.
func TestAWorkflowRetryIsLogged(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	fail.Store(true)
	act := rivet.Actor[stepsState]{
		Name: "retriedOnce",
		Run: func(ctx *workflow.Ctx[stepsState]) error {
			if err := ctx.Step("a", func(*workflow.StepCtx[stepsState]) error { return nil }); err != nil {
				return err
			}
			return ctx.StepWith(workflow.StepOptions{Name: "b", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[stepsState]) error {
				if fail.Load() {
					return errors.New("down")
				}
				return nil
			})
		},
		Actions: rivet.Actions[stepsState]{"getState": rivet.Query(getState)},
	}
	core, logs := observer.New(zap.InfoLevel)
	e := newEnv(t, counterReg(t, act), func(c *runtime.Config) { c.Logger = zap.New(core) })
	ref := runtime.Ref{Name: "retriedOnce", Key: []string{"r1"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "retriedOnce", "r1").WorkflowStatus == runtime.WorkflowFailed
	})
	if _, err := e.host.RetryWorkflowWith(ctx(t), ref, runtime.RetryOptions{From: "a", DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage("workflow retried").Len(); n != 0 {
		t.Fatalf("a dry run logged %d \"workflow retried\" lines, want none", n)
	}
	fail.Store(false)
	if _, err := e.host.RetryWorkflowWith(ctx(t), ref, runtime.RetryOptions{From: "a"}); err != nil {
		t.Fatal(err)
	}
	found := logs.FilterMessage("workflow retried").All()
	if len(found) != 1 {
		t.Fatalf("%d \"workflow retried\" lines, want 1; all: %+v", len(found), logs.All())
	}
	m := found[0].ContextMap()
	if found[0].Level != zap.InfoLevel || m["actor"] != "retriedOnce" || fmt.Sprint(m["key"]) != "[r1]" || m["was"] != "failed" || m["from"] != "a" || m["entries_removed"] != int64(2) {
		t.Errorf("retry logged at %v with %v; want INFO naming retriedOnce [r1], was failed, from a, 2 entries removed", found[0].Level, m)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "retriedOnce", "r1").WorkflowStatus == runtime.WorkflowCompleted
	})
}
