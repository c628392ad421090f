package runtime_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

//go:noinline
func panicInStepBody() { panic("step body bug") }

//go:noinline
func panicInWorkflowCode() { panic("workflow code bug") }

// A panic in a step body (a failed attempt) and one in the workflow's own
// code (its failure) are recorded with their value only; the node logs
// each one's stack, once, at ERROR, with the actor and the step's path,
// as it logs an action's.
func TestWorkflowPanicsLogTheirStack(t *testing.T) {
	t.Parallel()
	inStep := rivet.Actor[stepsState]{
		Name: "stepPanic",
		Run: func(ctx *workflow.Ctx[stepsState]) error {
			return ctx.StepWith(workflow.StepOptions{Name: "boom", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[stepsState]) error {
				panicInStepBody()
				return nil
			})
		},
		Actions: rivet.Actions[stepsState]{"getState": rivet.Query(getState)},
	}
	inCode := rivet.Actor[stepsState]{
		Name: "codePanic",
		Run: func(ctx *workflow.Ctx[stepsState]) error {
			if err := ctx.Step("fine", func(*workflow.StepCtx[stepsState]) error { return nil }); err != nil {
				return err
			}
			panicInWorkflowCode()
			return nil
		},
		Actions: rivet.Actions[stepsState]{"getState": rivet.Query(getState)},
	}
	core, logs := observer.New(zap.ErrorLevel)
	e := newEnv(t, counterReg(t, inStep, inCode), func(c *runtime.Config) { c.Logger = zap.New(core) })
	for _, name := range []string{"stepPanic", "codePanic"} {
		if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: name, Key: []string{"x"}}, nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, name+"'s workflow to fail", 10*time.Second, func() bool {
			return inspect(t, e.host, name, "x").WorkflowStatus == runtime.WorkflowFailed
		})
	}
	check := func(msg, actor, frame string, fields map[string]string) {
		t.Helper()
		var found []observer.LoggedEntry
		for _, l := range logs.FilterMessage(msg).All() {
			if l.ContextMap()["actor"] == actor {
				found = append(found, l)
			}
		}
		if len(found) != 1 {
			t.Fatalf("%d %q logs for %s, want 1; all: %+v", len(found), msg, actor, logs.All())
		}
		l := found[0]
		m := l.ContextMap()
		if l.Level != zap.ErrorLevel {
			t.Errorf("%q logged at %v, want ERROR", msg, l.Level)
		}
		if stack, _ := m["stack"].(string); !strings.Contains(stack, frame) {
			t.Errorf("%q for %s: stack %q names no frame of %s", msg, actor, stack, frame)
		}
		for k, v := range fields {
			if got, _ := m[k].(string); got != v {
				t.Errorf("%q for %s: %s = %q, want %q", msg, actor, k, got, v)
			}
		}
	}
	check("workflow step panicked", "stepPanic", "runtime_test.panicInStepBody", map[string]string{"step": "boom", "panic": "step body bug"})
	check("workflow code panicked", "codePanic", "runtime_test.panicInWorkflowCode", map[string]string{"panic": "workflow code bug"})
	// The history keeps the value only.
	if ins := inspect(t, e.host, "stepPanic", "x"); strings.Contains(ins.WorkflowError, "goroutine") || !strings.Contains(ins.WorkflowError, "step body bug") {
		t.Errorf("recorded error %q: want the panic's value and no stack", ins.WorkflowError)
	}
}

type boomState struct {
	N int `json:"n"`
}

// A scheduled call whose action panicked is dropped with a warning that
// says so, not "the action returned an error" beside "panic: ..." (a
// user trial).
func TestAScheduledCallThatPanickedIsDroppedSayingSo(t *testing.T) {
	t.Parallel()
	a := rivet.Actor[boomState]{
		Name: "schedBoom",
		Actions: rivet.Actions[boomState]{
			"arm": rivet.Action0(func(c *rivet.ActionCtx[boomState]) (bool, error) {
				_, err := c.Schedule().After(0, "boom")
				return err == nil, err
			}),
			"boom": rivet.Action0(func(c *rivet.ActionCtx[boomState]) (int, error) { panic("scheduled boom") }),
		},
	}
	core, logs := observer.New(zap.WarnLevel)
	e := newEnv(t, counterReg(t, a), func(c *runtime.Config) { c.Logger = zap.New(core) })
	if _, err := call(t, e.host, "schedBoom", "k", "arm", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failed call's warning", 15*time.Second, func() bool {
		return logs.FilterMessage("scheduled call failed; not retried").Len() > 0
	})
	l := logs.FilterMessage("scheduled call failed; not retried").All()[0]
	if m := l.ContextMap(); m["why"] != "the action panicked" || !strings.Contains(fmt.Sprint(m["error"]), "panic: scheduled boom") {
		t.Fatalf("warning's fields %v; want why: the action panicked, and the panic's value", m)
	}
}
