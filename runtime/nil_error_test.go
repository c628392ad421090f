package runtime_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A scheduled call whose action fails with an error whose Error method
// panics (a nil *nilErr: Go's typed nil) is used up, as any failing call
// is: asking its text panicked in the turn that records the failure, the
// turn failed, and the call ran again and again, its effects with it. A
// recurring call's next run records what happened.
func TestAScheduledCallFailingWithAnErrorWhoseErrorPanicsIsUsedUp(t *testing.T) {
	var runs atomic.Int32
	a := rivet.Actor[alarmState]{
		Name: "nilErrCall",
		Actions: rivet.Actions[alarmState]{
			"later": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (string, error) {
				return c.Schedule().After(0, "fail")
			}),
			"every": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (string, error) {
				return c.Schedule().Every("f", time.Second, "fail")
			}),
			"fail": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
				runs.Add(1)
				var err *nilErr
				return 0, err
			}),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	callString(t, e.host, "nilErrCall", "once", "later", true)
	waitFor(t, "the one-off call used up", 10*time.Second, func() bool { return e.host.Stats().SchedulesFailed >= 1 })
	if ins := inspect(t, e.host, "nilErrCall", "once"); len(ins.Schedules) != 0 {
		t.Fatalf("the failed call is still stored: %+v", ins.Schedules)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the action ran %d times, want once", n)
	}

	callString(t, e.host, "nilErrCall", "every", "every", true)
	waitFor(t, "the recurring call's run used up", 10*time.Second, func() bool { return e.host.Stats().SchedulesFailed >= 2 })
	ins := inspect(t, e.host, "nilErrCall", "every")
	if len(ins.Schedules) != 1 || !strings.Contains(ins.Schedules[0].LastError, "Error method panicked") {
		t.Fatalf("after a failed run: %+v, want the next run, saying how this one failed", ins.Schedules)
	}
}

// A workflow step failing with an error whose Error method panics is a
// failed attempt, as any error is: retried as its policy says, then failed
// for good. Asking its text panicked in the step's turn, which evicted the
// actor, and the workflow ran the step again from storage without end.
func TestAStepFailingWithAnErrorWhoseErrorPanicsFails(t *testing.T) {
	type st struct{}
	var attempts atomic.Int32
	a := rivet.Actor[st]{
		Name: "nilErrStep",
		Run: func(c *workflow.Ctx[st]) error {
			return c.StepWith(workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[st]) error {
				attempts.Add(1)
				var err *nilErr
				return err
			})
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if _, err := e.host.Create(ctx(t), runtime.Ref{Name: "nilErrStep", Key: []string{"k"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 10*time.Second, func() bool {
		return inspect(t, e.host, "nilErrStep", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	if ins := inspect(t, e.host, "nilErrStep", "k"); !strings.Contains(ins.WorkflowError, "Error method panicked") {
		t.Fatalf("workflow error %q: want it to say the step's error could not be read", ins.WorkflowError)
	}
	if n := attempts.Load(); n != 1 {
		t.Fatalf("the step ran %d times, want once (no retries)", n)
	}
}
