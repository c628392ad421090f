package workflow_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/rivet-go/rivet/workflow"
)

// oneWay marshals to JSON that its UnmarshalJSON rejects: a value that
// cannot be read back from its record.
type oneWay struct{ V string }

func (o oneWay) MarshalJSON() ([]byte, error) { return []byte(`{"v":"` + o.V + `"}`), nil }
func (o *oneWay) UnmarshalJSON([]byte) error  { return errors.New("oneWay reads nothing") }

// picky reads only a JSON number, where code that recorded a string ran
// before: the type of a recorded value changed.
type picky int

func (p *picky) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] == '"' {
		return errors.New("picky wants a number")
	}
	*p = picky(len(b))
	return nil
}

// A step whose value marshals but does not decode back fails as a step,
// at once (critical, one attempt), naming the type, when it first runs:
// not as a divergence, which would send the user looking for a code change
// that never happened, and not only when a replay reads it. A Do step too.
func TestAStepValueThatDoesNotDecodeBackFailsTheStep(t *testing.T) {
	for name, fn := range map[string]func(c *workflow.Ctx[rst]) error{
		"Step": func(c *workflow.Ctx[rst]) error {
			_, err := workflow.Step(c, "s", func(s *workflow.StepCtx[rst]) (oneWay, error) { s.State.N++; return oneWay{"x"}, nil })
			return err
		},
		"Do": func(c *workflow.Ctx[rst]) error {
			_, err := workflow.Do(c, "s", func(*workflow.DoCtx) (oneWay, error) { return oneWay{"x"}, nil })
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHost(rst{})
			out := drive(t, h, fn)
			if errors.Is(out.Err, workflow.ErrDiverged) {
				t.Fatalf("reported as a divergence: %v", out.Err)
			}
			var se *workflow.StepError
			if out.Status != workflow.RunFailed || !errors.As(out.Err, &se) {
				t.Fatalf("outcome %s %v, want a failed step", out.Status, out.Err)
			}
			if se.Path != "s" || se.Kind != workflow.FailureCritical || se.Attempts != 1 {
				t.Fatalf("step error %+v, want step \"s\" critical after 1 attempt", se)
			}
			if msg := se.Error(); !strings.Contains(msg, "workflow_test.oneWay") || !strings.Contains(msg, "does not decode") {
				t.Fatalf("error %q does not say the value of type workflow_test.oneWay does not decode", msg)
			}
			// Failed as recorded: a replay fails the same way.
			if again := h.Run(t.Context(), fn); !errors.As(again.Err, &se) || se.Path != "s" {
				t.Fatalf("replay: %s %v", again.Status, again.Err)
			}
		})
	}
}

// A recorded value that the code's type no longer reads (its type, or its
// UnmarshalJSON, changed since it was recorded) fails the run with a
// *DecodeError naming the path and the type, not a *DivergenceError: the
// code reached the same entries, only its type cannot read one. Checked
// for a step's value, a loop's result, a join branch's value and
// a race winner's.
func TestARecordedValueThatNoLongerDecodesIsADecodeError(t *testing.T) {
	type pair struct {
		before, after func(c *workflow.Ctx[rst]) error
		path          string
	}
	for name, p := range map[string]pair{
		"step": {
			func(c *workflow.Ctx[rst]) error {
				_, err := workflow.Step(c, "s", func(*workflow.StepCtx[rst]) (string, error) { return "abc", nil })
				return err
			},
			func(c *workflow.Ctx[rst]) error {
				_, err := workflow.Step(c, "s", func(*workflow.StepCtx[rst]) (picky, error) { return 1, nil })
				return err
			}, "s"},
		"loop": {
			func(c *workflow.Ctx[rst]) error {
				_, err := workflow.LoopWith(c, workflow.LoopOptions[string]{Name: "l", State: "a"},
					func(c *workflow.Ctx[rst], s string) (string, error) {
						if s == "ab" {
							return s, workflow.Break
						}
						return s + "b", nil
					})
				return err
			},
			func(c *workflow.Ctx[rst]) error {
				_, err := workflow.LoopWith(c, workflow.LoopOptions[picky]{Name: "l", State: 1},
					func(c *workflow.Ctx[rst], s picky) (picky, error) { return s, workflow.Break })
				return err
			}, "l"},
		"join branch": {
			func(c *workflow.Ctx[rst]) error {
				_, err := workflow.Join(c, "j", workflow.Branches[rst, string]{"x": func(*workflow.Ctx[rst]) (string, error) { return "abc", nil }})
				return err
			},
			func(c *workflow.Ctx[rst]) error {
				_, err := workflow.Join(c, "j", workflow.Branches[rst, picky]{"x": func(*workflow.Ctx[rst]) (picky, error) { return 1, nil }})
				return err
			}, "j/x"},
		"race winner": {
			func(c *workflow.Ctx[rst]) error {
				_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[rst, string]{{Name: "x", Run: func(*workflow.Ctx[rst]) (string, error) { return "abc", nil }}})
				return err
			},
			func(c *workflow.Ctx[rst]) error {
				_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[rst, picky]{{Name: "x", Run: func(*workflow.Ctx[rst]) (picky, error) { return 1, nil }}})
				return err
			}, "r/x"},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHost(rst{})
			if out := drive(t, h, p.before); out.Status != workflow.RunCompleted {
				t.Fatalf("first run: %s %v", out.Status, out.Err)
			}
			out := h.Run(t.Context(), p.after)
			if errors.Is(out.Err, workflow.ErrDiverged) {
				t.Fatalf("reported as a divergence: %v", out.Err)
			}
			var de *workflow.DecodeError
			if out.Status != workflow.RunFailed || !errors.As(out.Err, &de) || !errors.Is(out.Err, workflow.ErrDecode) {
				t.Fatalf("outcome %s %v, want a *DecodeError", out.Status, out.Err)
			}
			if de.Path != p.path || de.Type != "workflow_test.picky" {
				t.Fatalf("decode error %+v, want path %q and type workflow_test.picky", de, p.path)
			}
			if msg := de.Error(); !strings.Contains(msg, p.path) || !strings.Contains(msg, "workflow_test.picky") || !strings.Contains(msg, "picky wants a number") {
				t.Fatalf("error %q does not name the path, the type and the cause", msg)
			}
		})
	}
}

// failsAt2 does not marshal once it reaches 2.
type failsAt2 int

func (f failsAt2) MarshalJSON() ([]byte, error) {
	if f >= 2 {
		return nil, errors.New("failsAt2 cannot be written")
	}
	return []byte{'0' + byte(f)}, nil
}

// A loop state that stops marshalling mid-loop is misuse, reported as a
// first state that does not marshal is: ErrInvalid, naming the loop and
// the iteration that returned it, failing the run (no rollback: no
// workflow error). It was a plain error, which a rollback followed.
func TestALoopStateThatStopsMarshallingMidLoopIsInvalid(t *testing.T) {
	h := newHost(rst{})
	rolledBack := false
	out := drive(t, h, func(c *workflow.Ctx[rst]) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "s"}, func(*workflow.StepCtx[rst]) (int, error) { return 1, nil },
			func(*workflow.StepCtx[rst], int) error { rolledBack = true; return nil }); err != nil {
			return err
		}
		_, err := workflow.LoopWith(c, workflow.LoopOptions[failsAt2]{Name: "l"}, func(c *workflow.Ctx[rst], s failsAt2) (failsAt2, error) {
			return s + 1, nil
		})
		return err
	})
	if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrInvalid) {
		t.Fatalf("outcome %s %v, want a failure with ErrInvalid", out.Status, out.Err)
	}
	if msg := out.Err.Error(); !strings.Contains(msg, `loop "l"`) || !strings.Contains(msg, "iteration 1") || !strings.Contains(msg, "failsAt2 cannot be written") {
		t.Fatalf("error %q does not name the loop, the iteration and the cause", msg)
	}
	if rolledBack {
		t.Fatal("misuse ran the rollback")
	}
}
