package runtime_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A step whose attempts fail is logged at WARN, naming the actor, its key,
// the step, the attempt and the error (a user trial: 68 failed attempts of
// a step retrying behind a dependency's outage left no log line at any
// level). Rationed per step: its first failure, then at most one line a
// minute (none here, the retries coming within milliseconds), and its
// failure for good, which says how many failures were not logged. The
// workflow counters are kept by actor type.
func TestFailedStepAttemptsAreLoggedRationed(t *testing.T) {
	t.Parallel()
	const cause = "POST https://psp.internal/v1/charges: dial tcp 10.0.0.5:443: connect: connection refused"
	flaky := rivet.Actor[stepsState]{
		Name: "flakyPayment",
		Run: func(ctx *workflow.Ctx[stepsState]) error {
			return ctx.StepWith(workflow.StepOptions{Name: "charge-card", MaxRetries: 5, RetryBackoffBase: time.Millisecond, RetryBackoffMax: 2 * time.Millisecond},
				func(*workflow.StepCtx[stepsState]) error { return errors.New(cause) })
		},
		Actions: rivet.Actions[stepsState]{"getState": rivet.Query(getState)},
	}
	core, logs := observer.New(zap.WarnLevel)
	e := newEnv(t, counterReg(t, flaky), func(c *runtime.Config) { c.Logger = zap.New(core) })
	if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "flakyPayment", Key: []string{"p-1001"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "flakyPayment", "p-1001").WorkflowStatus == runtime.WorkflowFailed
	})
	check := func(msg string, want map[string]any) {
		t.Helper()
		found := logs.FilterMessage(msg).All()
		if len(found) != 1 {
			t.Fatalf("%d %q lines, want 1; all: %+v", len(found), msg, logs.All())
		}
		m := found[0].ContextMap()
		if found[0].Level != zap.WarnLevel || m["actor"] != "flakyPayment" || fmt.Sprint(m["key"]) != "[p-1001]" || m["step"] != "charge-card" || m["error"] != cause {
			t.Errorf("%q logged at %v with %v; want WARN naming flakyPayment [p-1001], step charge-card, and the whole error", msg, found[0].Level, m)
		}
		for k, v := range want {
			if m[k] != v {
				t.Errorf("%q: %s = %#v, want %#v", msg, k, m[k], v)
			}
		}
	}
	check("workflow step attempt failed: it will be retried after its backoff", map[string]any{"attempt": int64(1)})
	check("workflow step failed for good", map[string]any{"attempt": int64(6), "failure": "exhausted", "failures_not_logged": int64(4)})

	byType := e.host.WorkflowStatsByType()
	if _, ok := byType["counter"]; ok {
		t.Errorf("workflow stats for counter, which has no workflow: %+v", byType)
	}
	got := byType["flakyPayment"]
	if want := (runtime.WorkflowTypeStats{Failed: 1, StepsFailed: 5, StepsExhausted: 1}); got != want {
		t.Errorf("flakyPayment's workflow stats = %+v, want %+v", got, want)
	}
	if st := e.host.Stats(); st.StepsFailed != 5 || st.StepsExhausted != 1 || st.WorkflowsFailed != 1 {
		t.Errorf("stats: steps failed %d, exhausted %d, workflows failed %d; want 5, 1, 1 (the types' sums)", st.StepsFailed, st.StepsExhausted, st.WorkflowsFailed)
	}
}
