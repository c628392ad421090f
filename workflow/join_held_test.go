package workflow_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// TestJoinHoldsAFailedBranchWhileOthersWait: a join whose branch failed
// while another still waits (for a message) is restarted; the failed
// branch comes back failed from its record, as rivet-semantics.md 1.7 has
// it ("failed branches stay failed and are not run again"), even if its
// code changed since so that it would now succeed, and its step does not
// run again. The join then fails with the recorded failure once the other
// branch ends.
func TestJoinHoldsAFailedBranchWhileOthersWait(t *testing.T) {
	forHeldModes(t, func(t *testing.T, apart bool) {
		for _, tc := range heldBranches() {
			t.Run(tc.name, func(t *testing.T) {
				h := newHost(log{})
				h.HeldBranchesApart = apart
				var runs atomic.Int32
				wf := func(lenient bool) func(*logCtx) error {
					return func(c *logCtx) error {
						_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
							"a": tc.a(lenient, &runs),
							"b": func(c *logCtx) (int, error) {
								m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"go"}})
								return m.Body.N, err
							},
						})
						return err
					}
				}
				if out := drive(t, h, wf(false)); out.Status != workflow.RunYielded || runs.Load() != 1 {
					t.Fatalf("first run: %s %v, a's step ran %d times", out.Status, out.Err, runs.Load())
				}
				h.Send("go", job{1})
				out := drive(t, h, wf(true))
				je := failedWith[*workflow.JoinError](t, out)
				var coder interface{ ErrorCode() string }
				if len(je.Errors) != 1 || !errors.As(je.Errors["a"], &coder) || coder.ErrorCode() != "card_declined" {
					t.Fatalf("join error %v, want a's recorded failure", je)
				}
				if runs.Load() != 1 {
					t.Fatalf("a's step ran %d times", runs.Load())
				}
				if e := entryAt(t, h.History(), "j"); e.Branches["b"].Status != workflow.StatusCompleted {
					t.Fatalf("join entry %+v", e)
				}
			})
		}
	})
}

// TestJoinHeldBranchKeepsItsRollbacks: a held branch still replays its
// steps after a restart, so that a rollback knows their handlers.
func TestJoinHeldBranchKeepsItsRollbacks(t *testing.T) {
	forHeldModes(t, func(t *testing.T, apart bool) {
		h := newHost(log{})
		h.HeldBranchesApart = apart
		wf := func(c *logCtx) error {
			if err := c.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
				"a": func(c *logCtx) (int, error) {
					if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "reserve"}, func(*logStep) (int, error) { return 1, nil },
						func(s *logStep, _ int) error { s.State.Log = append(s.State.Log, "undo reserve"); return nil }); err != nil {
						return 0, err
					}
					return 0, codedErr{}
				},
				"b": func(c *logCtx) (int, error) {
					m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"go"}})
					return m.Body.N, err
				},
			})
			return err
		}
		if out := drive(t, h, wf); out.Status != workflow.RunYielded {
			t.Fatalf("first run: %s %v", out.Status, out.Err)
		}
		h.Send("go", job{1})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{})
		failedWith[*workflow.JoinError](t, out)
		if got := h.State().Log; len(got) != 1 || got[0] != "undo reserve" {
			t.Fatalf("rollbacks %v (%v)", got, out.Err)
		}
	})
}

// forHeldModes runs f with a host that holds the failures of a join's
// branches in the join's record (the default, which nodes write) and with
// one that holds them in entries of their own (workflow.HeldBranchesHost).
func forHeldModes(t *testing.T, f func(t *testing.T, apart bool)) {
	for _, apart := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-record", true: "apart"}[apart], func(t *testing.T) { f(t, apart) })
	}
}

// heldBranch is a join's or race's branch that fails for good before a
// restart: a is its code, or with lenient its code after the restart,
// which would succeed; runs counts what it runs.
type heldBranch struct {
	name string
	a    func(lenient bool, runs *atomic.Int32) func(*logCtx) (int, error)
}

// heldBranches are the ways a branch fails that changed code would not.
func heldBranches() []heldBranch {
	return []heldBranch{
		{"failed step, caught by new code", func(lenient bool, runs *atomic.Int32) func(*logCtx) (int, error) {
			return func(c *logCtx) (int, error) {
				body := func(*logStep) (int, error) { runs.Add(1); return 0, workflow.Critical(codedErr{}) }
				if lenient {
					_, _, err := workflow.TryStep(c, "charge", body)
					return 1, err
				}
				return workflow.Step(c, "charge", body)
			}
		}},
		{"own error, dropped by new code", func(lenient bool, runs *atomic.Int32) func(*logCtx) (int, error) {
			return func(c *logCtx) (int, error) {
				v, err := workflow.Step(c, "check", func(*logStep) (int, error) { runs.Add(1); return 3, nil })
				if err != nil {
					return 0, err
				}
				if !lenient && v < 5 {
					return 0, codedErr{}
				}
				return v, nil
			}
		}},
	}
}
