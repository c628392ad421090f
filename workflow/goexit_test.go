package workflow_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// driveApart is drive for a run that may never return: it drives on a
// goroutine of its own, so that a hang fails the test rather than the
// whole package's run.
func driveApart[S any](t *testing.T, h *workflowtest.Host[S], fn func(*workflow.Ctx[S]) error) workflow.Outcome {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan workflow.Outcome, 1)
	go func() {
		out, _ := h.Drive(ctx, fn, workflowtest.DriveOptions{})
		done <- out
	}()
	select {
	case out := <-done:
		return out
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not return")
		return workflow.Outcome{}
	}
}

// runtime.Goexit in workflow code (testing's t.FailNow and t.Fatal call
// it; so does a helper that ends its goroutine) ends the goroutine that
// runs the code, which is the engine's: the run must fail with a
// *PanicError that says so and where, as a panic does, not hang its
// caller, and no join may take the branch it cut short for a success.
func TestGoexitInWorkflowCodeFailsTheRun(t *testing.T) {
	step := func(name string) func(c *workflow.Ctx[rst]) error {
		return func(c *workflow.Ctx[rst]) error {
			return c.Step(name, func(s *workflow.StepCtx[rst]) error { s.State.N++; return nil })
		}
	}
	cases := map[string]struct {
		fn    func(c *workflow.Ctx[rst]) error
		where string
	}{
		"top level": {func(c *workflow.Ctx[rst]) error {
			if err := step("a")(c); err != nil {
				return err
			}
			runtime.Goexit()
			return nil
		}, ""},
		"step body": {func(c *workflow.Ctx[rst]) error {
			return c.Step("exits", func(s *workflow.StepCtx[rst]) error {
				s.State.N += 100
				runtime.Goexit()
				return nil
			})
		}, `step "exits"`},
		"join branch": {func(c *workflow.Ctx[rst]) error {
			_, err := workflow.Join(c, "j", workflow.Branches[rst, int]{
				"x": func(c *workflow.Ctx[rst]) (int, error) { runtime.Goexit(); return 1, nil },
				"y": func(c *workflow.Ctx[rst]) (int, error) { return 2, step("b")(c) },
			})
			return err
		}, ""},
		"step body in a race branch": {func(c *workflow.Ctx[rst]) error {
			_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[rst, int]{
				{Name: "x", Run: func(c *workflow.Ctx[rst]) (int, error) {
					return workflow.Step(c, "exits", func(*workflow.StepCtx[rst]) (int, error) { runtime.Goexit(); return 1, nil })
				}},
				{Name: "y", Run: func(c *workflow.Ctx[rst]) (int, error) { return 2, c.Sleep("z", time.Hour) }},
			})
			return err
		}, `step "r/x/exits"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHost(rst{})
			out := driveApart(t, h, tc.fn)
			var pe *workflow.PanicError
			if out.Status != workflow.RunFailed || !errors.As(out.Err, &pe) || !errors.Is(out.Err, workflow.ErrGoexit) {
				t.Fatalf("outcome %+v (%T), want failed with a *PanicError of ErrGoexit", out, out.Err)
			}
			msg := out.Err.Error()
			if !strings.Contains(msg, "runtime.Goexit called") {
				t.Fatalf("error %q does not say what ended the code", msg)
			}
			if tc.where == "" && strings.Contains(msg, "in the body of") {
				t.Fatalf("error %q names a step body; the code outside steps called runtime.Goexit", msg)
			}
			if !strings.Contains(msg, tc.where) {
				t.Fatalf("error %q does not say where: %s", msg, tc.where)
			}
			if h.State().N >= 100 {
				t.Fatalf("the cut-off step's change was kept: state %+v", h.State())
			}
			for _, e := range h.History() {
				if e.Kind == workflow.KindJoin && e.Status == workflow.StatusCompleted {
					t.Fatalf("the join completed: %s", h.HistoryJSON())
				}
			}
		})
	}
}

// A rollback handler that calls runtime.Goexit, after a step body did,
// is charged to neither that step nor any other: the error of each says
// where it happened, and the handler's names no step body.
func TestGoexitInARollbackHandlerNamesNoStepBody(t *testing.T) {
	h := newHost(rst{})
	out := driveApart(t, h, func(c *workflow.Ctx[rst]) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "a"},
			func(*workflow.StepCtx[rst]) (int, error) { return 1, nil },
			func(*workflow.StepCtx[rst], int) error { runtime.Goexit(); return nil }); err != nil {
			return err
		}
		return c.Step("b", func(*workflow.StepCtx[rst]) error { runtime.Goexit(); return nil })
	})
	if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrGoexit) {
		t.Fatalf("outcome %+v, want failed with ErrGoexit", out)
	}
	msg := out.Err.Error()
	if n := strings.Count(msg, "runtime.Goexit called"); n != 2 {
		t.Fatalf("error %q tells of %d Goexits, want 2 (step b's and the rollback handler's)", msg, n)
	}
	if n := strings.Count(msg, `in the body of step "b"`); n != 1 {
		t.Fatalf("error %q charges %d Goexits to step b, want 1", msg, n)
	}
	if !strings.Contains(msg, `in the body of the rollback handler of step "a"`) {
		t.Fatalf("error %q does not say the rollback handler of step a called it", msg)
	}
}
