package runtime_test

import (
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

// A step body that ignores its context holds the actor's turn past its
// timeout: the node logs it at WARN, once for the attempt, with the actor,
// its key, the step, the timeout and how long after it the body returned
// (a user trial: nothing said so). A body that returns when its context
// is done is not logged.
func TestAStepBodyThatIgnoresItsTimeoutIsLogged(t *testing.T) {
	t.Parallel()
	const timeout = 20 * time.Millisecond
	const overrun = 500 * time.Millisecond
	slow := rivet.Actor[stepsState]{
		Name: "overrunner",
		Run: func(ctx *workflow.Ctx[stepsState]) error {
			return ctx.StepWith(workflow.StepOptions{Name: "slow", Timeout: timeout, MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[stepsState]) error {
				time.Sleep(timeout + overrun) // the overrun is the point: it never looks at its context
				return nil
			})
		},
		Actions: rivet.Actions[stepsState]{"getState": rivet.Query(getState)},
	}
	// How late the polite body saw its context end: on a loaded machine
	// the process may not run it for a while, which the node logs too.
	var politeLate atomic.Int64
	polite := rivet.Actor[stepsState]{
		Name: "polite",
		Run: func(ctx *workflow.Ctx[stepsState]) error {
			return ctx.StepWith(workflow.StepOptions{Name: "waits", Timeout: timeout, MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[stepsState]) error {
				<-s.Context().Done()
				if d, ok := s.Context().Deadline(); ok {
					politeLate.Store(int64(time.Since(d)))
				}
				return s.Context().Err()
			})
		},
		Actions: rivet.Actions[stepsState]{"getState": rivet.Query(getState)},
	}
	core, logs := observer.New(zap.WarnLevel)
	e := newEnv(t, counterReg(t, slow, polite), func(c *runtime.Config) { c.Logger = zap.New(core) })
	for _, name := range []string{"overrunner", "polite"} {
		if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: name, Key: []string{"k"}}, nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, name+"'s workflow to fail", 20*time.Second, func() bool {
			return inspect(t, e.host, name, "k").WorkflowStatus == runtime.WorkflowFailed
		})
	}
	var found []observer.LoggedEntry
	for _, l := range logs.All() {
		if _, ok := l.ContextMap()["past_timeout"]; ok {
			if l.ContextMap()["actor"] == "polite" && time.Duration(politeLate.Load()) > 100*time.Millisecond {
				continue // the process did not run the body for that long: logged as such
			}
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d logs of an overrun, want 1 (the overrunner's): %+v", len(found), logs.All())
	}
	l := found[0]
	m := l.ContextMap()
	if l.Level != zap.WarnLevel || m["actor"] != "overrunner" || fmt.Sprint(m["key"]) != "[k]" || m["step"] != "slow" || m["timeout"] != timeout {
		t.Fatalf("overrun logged at %v with %v; want WARN naming overrunner [k], step slow, timeout %v", l.Level, m, timeout)
	}
	// It slept the overrun past its timeout (give or take the clock's
	// reading of when the body began).
	if late, _ := m["past_timeout"].(time.Duration); late < overrun-timeout || late > time.Minute {
		t.Fatalf("past_timeout %v, want about %v", m["past_timeout"], overrun)
	}
}
