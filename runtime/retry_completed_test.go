package runtime_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type retryDoneState struct {
	Log []string `json:"log"`
}

// retryDoneActor is a workflow of steps a, b (v1), with b renamed (v2: a
// change that no gate covers) or a step added after b (v3).
func retryDoneActor(version int) rivet.Actor[retryDoneState] {
	step := func(ctx *workflow.Ctx[retryDoneState], name string) error {
		return ctx.Step(name, func(s *workflow.StepCtx[retryDoneState]) error {
			s.State.Log = append(s.State.Log, name)
			return nil
		})
	}
	return rivet.Actor[retryDoneState]{
		Name: "retryDone",
		Run: func(ctx *workflow.Ctx[retryDoneState]) error {
			second := "b"
			if version == 2 {
				second = "b2"
			}
			for _, name := range []string{"a", second} {
				if err := step(ctx, name); err != nil {
					return err
				}
			}
			if version == 3 {
				return step(ctx, "c")
			}
			return nil
		},
	}
}

// A plain retry of a completed workflow replays it with the code deployed
// now, to run what was added after its end. With code that no longer
// replays its history, the retry is refused, naming the divergence, and
// the workflow stays completed: it used to be run, fail at once, and be
// listed failed for a retry that changed nothing (a user trial). Code that
// still replays it is retried as before, and runs what it added.
func TestAPlainRetryOfACompletedWorkflowThatNoLongerReplaysIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, retryDoneActor(1)), nil)
	ref := runtime.Ref{Name: "retryDone", Key: []string{"k"}}
	runToItsEnd(t, e, "retryDone")
	if st := inspect(t, e.host, "retryDone", "k").WorkflowStatus; st != runtime.WorkflowCompleted {
		t.Fatalf("v1: workflow %s, want completed", st)
	}

	e.reg = counterReg(t, retryDoneActor(2))
	e.restart()
	_, err := e.host.RetryWorkflow(ctx(t), ref, "")
	var re *rivet.Error
	if !errors.Is(err, rivet.ErrWorkflowFailed) || !errors.As(err, &re) || re.Code != "diverged" || !strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), "stays completed") {
		t.Fatalf("v2 retry: %v; want ErrWorkflowFailed, reason workflow.diverged, naming entry b", err)
	}
	ins := inspect(t, e.host, "retryDone", "k")
	if ins.WorkflowStatus != runtime.WorkflowCompleted || ins.WorkflowError != "" {
		t.Fatalf("after the refused retry: workflow %s (%q), want completed as it was", ins.WorkflowStatus, ins.WorkflowError)
	}

	e.reg = counterReg(t, retryDoneActor(3))
	e.restart()
	if _, err := e.host.RetryWorkflow(ctx(t), ref, ""); err != nil {
		t.Fatalf("v3 retry: %v", err)
	}
	waitFor(t, "v3 to run its step c", 20*time.Second, func() bool {
		return inspect(t, e.host, "retryDone", "k").WorkflowStatus == runtime.WorkflowCompleted && strings.Contains(string(inspect(t, e.host, "retryDone", "k").State), `"c"`)
	})
	var st retryDoneState
	decodeJSON(t, inspect(t, e.host, "retryDone", "k").State, &st)
	if strings.Join(st.Log, ",") != "a,b,c" {
		t.Fatalf("log %v, want a,b,c: the retry replays a and b and runs c", st.Log)
	}
}

// The replay that checks a plain retry of a completed workflow runs the
// workflow's code outside its steps: code that blocks there (on a lock, a
// channel) does not hold the retry, and the actor's turn, past the
// caller's deadline.
func TestTheRetrysReplayCheckEndsWithItsCaller(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	var block atomic.Bool
	actor := rivet.Actor[retryDoneState]{
		Name: "retryBlocks",
		Run: func(ctx *workflow.Ctx[retryDoneState]) error {
			if err := ctx.Step("a", func(s *workflow.StepCtx[retryDoneState]) error { return nil }); err != nil {
				return err
			}
			if block.Load() {
				<-release // a bug of the code's: it would stall a real run too
			}
			return nil
		},
	}
	e := newEnv(t, counterReg(t, actor), nil)
	runToItsEnd(t, e, "retryBlocks")
	block.Store(true)
	c, cancel := context.WithTimeout(ctx(t), time.Second)
	defer cancel()
	start := time.Now()
	_, err := e.host.RetryWorkflow(c, runtime.Ref{Name: "retryBlocks", Key: []string{"k"}}, "")
	if err == nil || time.Since(start) > 8*time.Second {
		t.Fatalf("retry: %v after %v; want an error once its 1 s deadline passed, before the check's own 10 s bound", err, time.Since(start))
	}
	if st := inspect(t, e.host, "retryBlocks", "k").WorkflowStatus; st != runtime.WorkflowCompleted {
		t.Fatalf("workflow %s, want it completed as it was", st)
	}
}

// So is a plain retry of a cancelled workflow, which resumes it where it
// stopped: with code that no longer replays its history the retry is
// refused and the workflow stays cancelled (it was run, failed at once and
// listed failed); with code that does, it resumes.
func TestAPlainRetryOfACancelledWorkflowThatNoLongerReplaysIsRefused(t *testing.T) {
	t.Parallel()
	actor := func(second string) rivet.Actor[retryDoneState] { return stepsThenSleep("retryCancelled", second) }
	e := newEnv(t, counterReg(t, actor("b")), nil)
	ref := runtime.Ref{Name: "retryCancelled", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow's sleep", 20*time.Second, func() bool {
		return inspect(t, e.host, "retryCancelled", "k").WorkflowStatus == runtime.WorkflowSleeping
	})
	if _, err := e.host.CancelWorkflow(ctx(t), ref, "paused"); err != nil {
		t.Fatal(err)
	}

	e.reg = counterReg(t, actor("b2"))
	e.restart()
	_, err := e.host.RetryWorkflow(ctx(t), ref, "")
	var re *rivet.Error
	if !errors.Is(err, rivet.ErrWorkflowFailed) || !errors.As(err, &re) || re.Code != "diverged" || !strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), "stays cancelled") {
		t.Fatalf("changed code's retry: %v; want ErrWorkflowFailed, reason workflow.diverged, naming entry b", err)
	}
	if ins := inspect(t, e.host, "retryCancelled", "k"); ins.WorkflowStatus != runtime.WorkflowCancelled {
		t.Fatalf("after the refused retry: workflow %s (%q), want cancelled as it was", ins.WorkflowStatus, ins.WorkflowError)
	}

	e.reg = counterReg(t, actor("b"))
	e.restart()
	if _, err := e.host.RetryWorkflow(ctx(t), ref, ""); err != nil {
		t.Fatalf("same code's retry: %v", err)
	}
	waitFor(t, "the resumed sleep", 20*time.Second, func() bool {
		return inspect(t, e.host, "retryCancelled", "k").WorkflowStatus == runtime.WorkflowSleeping
	})
	var st retryDoneState
	decodeJSON(t, inspect(t, e.host, "retryCancelled", "k").State, &st)
	if strings.Join(st.Log, ",") != "a,b" {
		t.Fatalf("log %v, want a,b: the resumed run replays its steps", st.Log)
	}
}

// A workflow cancelled while it rolled back replays, with its code
// unchanged, to the failure that began the rollback: the check takes that
// for the workflow's own failure, not a divergence, and the retry resumes
// the rollback (a review found it refused, which left no way to finish
// the compensations but --from).
func TestAPlainRetryResumesAWorkflowCancelledWhileItRolledBack(t *testing.T) {
	t.Parallel()
	actor := rivet.Actor[retryDoneState]{
		Name: "retryRollingBack",
		Run: func(ctx *workflow.Ctx[retryDoneState]) error {
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(ctx, workflow.StepOptions{Name: "reserve", RetryBackoffBase: time.Hour, RetryBackoffMax: time.Hour},
				func(*workflow.StepCtx[retryDoneState]) (int, error) { return 1, nil },
				func(*workflow.StepCtx[retryDoneState], int) error { return errors.New("undo is down") }); err != nil {
				return err
			}
			return ctx.Step("pay", func(*workflow.StepCtx[retryDoneState]) error {
				return workflow.Rollback(errors.New("payment refused"))
			})
		},
	}
	e := newEnv(t, counterReg(t, actor), nil)
	ref := runtime.Ref{Name: "retryRollingBack", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the compensation's backoff", 20*time.Second, func() bool {
		return inspect(t, e.host, "retryRollingBack", "k").WorkflowStatus == runtime.WorkflowSleeping
	})
	if _, err := e.host.CancelWorkflow(ctx(t), ref, "paused"); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if _, err := e.host.RetryWorkflow(ctx(t), ref, ""); err != nil {
		t.Fatalf("retry of the unchanged code: %v", err)
	}
	waitFor(t, "the rollback resumed", 20*time.Second, func() bool {
		return inspect(t, e.host, "retryRollingBack", "k").WorkflowStatus == runtime.WorkflowSleeping
	})
}

// stepsThenSleep is an actor whose workflow runs steps "a" and second,
// each logging its name, then sleeps for an hour: a deploy that renames
// second changes the code under a run in flight.
func stepsThenSleep(name, second string) rivet.Actor[retryDoneState] {
	return rivet.Actor[retryDoneState]{
		Name: name,
		Run: func(ctx *workflow.Ctx[retryDoneState]) error {
			for _, name := range []string{"a", second} {
				if err := ctx.Step(name, func(s *workflow.StepCtx[retryDoneState]) error {
					s.State.Log = append(s.State.Log, name)
					return nil
				}); err != nil {
					return err
				}
			}
			return ctx.Sleep("wait", time.Hour)
		},
	}
}

// A plain retry of a workflow that failed on a divergence, with code that
// still does not replay its history, is refused and the workflow stays
// failed: it used to be restarted, fail again at once, and count as
// retried in `retry --all-failed` after a deploy that did not fix it (a
// user trial). With code that replays it, the retry resumes it.
func TestAPlainRetryOfAFailedWorkflowThatStillDoesNotReplayIsRefused(t *testing.T) {
	t.Parallel()
	actor := func(second string) rivet.Actor[retryDoneState] { return stepsThenSleep("retryDiverged", second) }
	e := newEnv(t, counterReg(t, actor("b")), nil)
	ref := runtime.Ref{Name: "retryDiverged", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow's sleep", 20*time.Second, func() bool {
		return inspect(t, e.host, "retryDiverged", "k").WorkflowStatus == runtime.WorkflowSleeping
	})

	e.reg = counterReg(t, actor("b2")) // deployed without a gate
	e.restart()
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil { // loaded, it replays
		t.Fatal(err)
	}
	waitFor(t, "the divergence", 20*time.Second, func() bool {
		return inspect(t, e.host, "retryDiverged", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	_, err := e.host.RetryWorkflow(ctx(t), ref, "")
	var re *rivet.Error
	if !errors.Is(err, rivet.ErrWorkflowFailed) || !errors.As(err, &re) || re.Code != "diverged" || !strings.Contains(err.Error(), `"b"`) || !strings.Contains(err.Error(), "stays failed") {
		t.Fatalf("a retry with code that still diverges: %v; want ErrWorkflowFailed, reason workflow.diverged, naming entry b", err)
	}
	if ins := inspect(t, e.host, "retryDiverged", "k"); ins.WorkflowStatus != runtime.WorkflowFailed {
		t.Fatalf("after the refused retry: workflow %s, want failed as it was", ins.WorkflowStatus)
	}

	e.reg = counterReg(t, actor("b")) // the fix
	e.restart()
	if _, err := e.host.RetryWorkflow(ctx(t), ref, ""); err != nil {
		t.Fatalf("a retry with code that replays it: %v", err)
	}
	waitFor(t, "the resumed sleep", 20*time.Second, func() bool {
		return inspect(t, e.host, "retryDiverged", "k").WorkflowStatus == runtime.WorkflowSleeping
	})
	var st retryDoneState
	decodeJSON(t, inspect(t, e.host, "retryDiverged", "k").State, &st)
	if strings.Join(st.Log, ",") != "a,b" {
		t.Fatalf("log %v, want a,b: no step ran again", st.Log)
	}
}
