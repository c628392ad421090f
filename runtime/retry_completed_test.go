package runtime_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	rivet "github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// doneActor runs steps in order and completes.
func doneActor(steps ...string) rivet.Actor[stepsState] {
	return rivet.Actor[stepsState]{
		Name: "done",
		Run: func(ctx *workflow.Ctx[stepsState]) error {
			for _, s := range steps {
				if err := ctx.Step(s, func(st *workflow.StepCtx[stepsState]) error {
					st.State.Done = append(st.State.Done, s)
					return nil
				}); err != nil {
					return err
				}
			}
			return nil
		},
		Actions: rivet.Actions[stepsState]{"getState": rivet.Query(getState)},
	}
}

// A retry without a from entry of a workflow that completed is refused
// (FAILED_PRECONDITION, workflow.not_failed), and nothing changes: it had
// no failure to retry, and the replay it ran under code changed since
// turned a completed run into a failed one (a user trial). From an entry
// it still runs again, as Temporal's reset does.
func TestARetryOfACompletedWorkflowIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, doneActor("a", "b")), nil)
	ref := runtime.Ref{Name: "done", Key: []string{"d"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "done", "d").WorkflowStatus == runtime.WorkflowCompleted
	})
	before, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}

	// The code changes: "b" is renamed, which a replay of the run takes
	// for a divergence.
	e.reg = counterReg(t, doneActor("a", "c"))
	e.restart()
	n, err := e.host.RetryWorkflow(ctx(t), ref, "")
	var re *rivet.Error
	if !errors.Is(err, rivet.ErrWorkflowFailed) || !errors.As(err, &re) || re.Group+"."+re.Code != "workflow.not_failed" ||
		!strings.Contains(err.Error(), "has completed") || !strings.Contains(err.Error(), "--from") || n != 0 {
		t.Fatalf("retry of a completed workflow: %d, %v; want it refused (workflow.not_failed), saying --from runs it again", n, err)
	}
	ins := inspect(t, e.host, "done", "d")
	after, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if ins.WorkflowStatus != runtime.WorkflowCompleted || ins.WorkflowError != "" || len(after.Entries) != len(before.Entries) || string(ins.State) != `{"done":["a","b"]}` {
		t.Fatalf("after the refused retry: %s %q, state %s, %d entries (%d before); want it completed and unchanged", ins.WorkflowStatus, ins.WorkflowError, ins.State, len(after.Entries), len(before.Entries))
	}

	// From an entry it runs again, under the code deployed now.
	if n, err := e.host.RetryWorkflow(ctx(t), ref, "b"); err != nil || n != 1 {
		t.Fatalf("retry --from b: %d, %v", n, err)
	}
	waitFor(t, "the workflow retried from b to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "done", "d").WorkflowStatus == runtime.WorkflowCompleted
	})
	if st := string(inspect(t, e.host, "done", "d").State); st != `{"done":["a","b","c"]}` {
		t.Fatalf("state after the retry from b: %s", st)
	}
}
