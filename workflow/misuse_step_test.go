package workflow_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rivet-go/rivet/workflow"
)

// A step body that returns the error of a misused primitive (one called on
// the workflow's Ctx from inside the body: nested steps are not a thing)
// or Break (which ends loops, not steps) fails the step at once, as a
// critical error: retried, it fails the same way, after backoffs, each
// attempt's changes to the state committed.
func TestAStepBodyReturningAMisuseErrorFailsAtOnce(t *testing.T) {
	cases := map[string]struct {
		fn   func(c *workflow.Ctx[rst]) error
		want string
	}{
		"nested step": {func(c *workflow.Ctx[rst]) error {
			return c.Step("outer", func(s *workflow.StepCtx[rst]) error {
				s.State.N++
				return c.Step("inner", func(*workflow.StepCtx[rst]) error { return nil })
			})
		}, `step "inner" called while step "outer" runs`},
		"Break": {func(c *workflow.Ctx[rst]) error {
			return c.Step("outer", func(s *workflow.StepCtx[rst]) error { s.State.N++; return workflow.Break })
		}, "workflow: break (returned by a step's body: Break ends only the Loop or LoopWith whose own body returns it"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHost(rst{})
			out := drive(t, h, tc.fn)
			var se *workflow.StepError
			if out.Status != workflow.RunFailed || !errors.As(out.Err, &se) {
				t.Fatalf("outcome %+v, want failed with a *StepError", out)
			}
			if se.Kind != workflow.FailureCritical || se.Attempts != 1 || h.State().N != 1 {
				t.Fatalf("step error %v (kind %s, %d attempts), state %+v: want critical after 1 attempt", se, se.Kind, se.Attempts, h.State())
			}
			if !strings.Contains(se.Error(), tc.want) {
				t.Fatalf("step error %q should say %q", se, tc.want)
			}
		})
	}
}

// Break ends the loop whose body returns it. One that reaches the end of
// the workflow (returned by its function, or by a branch outside any
// loop) ended nothing: the run fails with ErrInvalid saying so, not with a
// bare "workflow: break".
func TestBreakOutsideALoopFailsTheRunSayingSo(t *testing.T) {
	for name, fn := range map[string]func(c *workflow.Ctx[rst]) error{
		"the workflow's function": func(c *workflow.Ctx[rst]) error {
			if err := c.Step("a", func(*workflow.StepCtx[rst]) error { return nil }); err != nil {
				return err
			}
			return workflow.Break
		},
		"a join branch": func(c *workflow.Ctx[rst]) error {
			_, err := workflow.Join(c, "j", workflow.Branches[rst, int]{
				"x": func(*workflow.Ctx[rst]) (int, error) { return 0, workflow.Break },
			})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			out := driveApart(t, newHost(rst{}), fn)
			if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrInvalid) {
				t.Fatalf("outcome %+v, want failed with ErrInvalid", out)
			}
			if !strings.Contains(out.Err.Error(), "Break reached the end of") {
				t.Fatalf("error %q does not say Break ended no loop", out.Err)
			}
		})
	}
}

// wrapErr is an error type with an Unwrap, as many are. A nil *wrapErr
// returned as an error (Go's typed nil) panics in Error and Unwrap.
type wrapErr struct {
	msg   string
	inner error
}

func (e *wrapErr) Error() string { return e.msg }
func (e *wrapErr) Unwrap() error { return e.inner }

// Workflow code that fails with a typed nil whose methods panic, wherever
// the engine takes its error (the function, a branch, a loop body, a try
// block, a step body), fails the run as any error does. The engine reads
// it (errors.Is, errors.As) on the workflow's goroutine, where a panic
// would take the node down, and every node that took the workflow over.
func TestATypedNilErrorWhoseMethodsPanicFailsTheRun(t *testing.T) {
	nilErr := func() error {
		var e *wrapErr
		return e
	}
	for name, fn := range map[string]func(c *workflow.Ctx[rst]) error{
		"the function": func(*workflow.Ctx[rst]) error { return nilErr() },
		"a branch": func(c *workflow.Ctx[rst]) error {
			_, err := workflow.Join(c, "j", workflow.Branches[rst, int]{
				"x": func(*workflow.Ctx[rst]) (int, error) { return 0, nilErr() },
			})
			return err
		},
		"a loop body": func(c *workflow.Ctx[rst]) error {
			return c.Loop("l", func(*workflow.Ctx[rst]) error { return nilErr() })
		},
		"a try block": func(c *workflow.Ctx[rst]) error {
			_, err := c.Try("t", func(*workflow.Ctx[rst]) error { return nilErr() })
			return err
		},
		"a step body": func(c *workflow.Ctx[rst]) error {
			return c.StepWith(workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[rst]) error { return nilErr() })
		},
	} {
		t.Run(name, func(t *testing.T) {
			out := driveApart(t, newHost(rst{}), fn)
			if out.Status != workflow.RunFailed || out.Err == nil {
				t.Fatalf("outcome %+v, want failed", out)
			}
			_ = out.Err.Error() // and what it says can be read
		})
	}
}
