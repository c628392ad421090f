package runtime_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	rt "github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A step body that calls runtime.Goexit (t.Fatal in a test's actor does)
// ends the goroutine that holds the actor's turn: the turn must be given
// back, its change to the state dropped, and the workflow failed with an
// error that names the step, not the actor left with its turn taken (every
// later call waiting until its deadline) and its workflow never ending.
func TestAStepBodyThatCallsGoexitFailsTheWorkflowAndFreesTheTurn(t *testing.T) {
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name: "goexits",
		Run: func(c *workflow.Ctx[st]) error {
			return c.Step("exits", func(s *workflow.StepCtx[st]) error {
				s.State.N = 100
				runtime.Goexit()
				return nil
			})
		},
		Actions: rivet.Actions[st]{
			"inc": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N++; return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if _, _, err := e.host.GetOrCreate(ctx(t), rt.Ref{Name: "goexits", Key: []string{"k"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 10*time.Second, func() bool {
		return inspect(t, e.host, "goexits", "k").WorkflowStatus == rt.WorkflowFailed
	})
	if msg := inspect(t, e.host, "goexits", "k").WorkflowError; !strings.Contains(msg, "Goexit") || !strings.Contains(msg, `"exits"`) {
		t.Fatalf("workflow error %q should say the step called runtime.Goexit", msg)
	}
	cctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	raw, err := e.host.Call(cctx, rt.CallRequest{Ref: rt.Ref{Name: "goexits", Key: []string{"k"}}, Action: "inc"})
	if err != nil {
		t.Fatalf("a call after the step's Goexit: %v", err)
	}
	if string(raw) != "1" {
		t.Fatalf("inc = %s, want 1 (the cut-off step's change dropped)", raw)
	}
}
