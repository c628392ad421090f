package workflow_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type rvState struct {
	Log []string `json:"log"`
}

// driveEvicting is drive, evicting the run at every wait when evict is set:
// a replay after each, as after a crash or a move.
func driveEvicting[S any](t *testing.T, h *workflowtest.Host[S], fn func(*workflow.Ctx[S]) error, evict bool) workflow.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, fn, workflowtest.DriveOptions{Evict: func(workflow.Wake) bool { return evict }})
	if ctx.Err() != nil {
		t.Fatalf("workflow did not finish: %+v", out)
	}
	return out
}

// reserve is a step with a rollback handler, each logging in the state.
func reserve(c *workflow.Ctx[rvState], name string) error {
	_, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: name},
		func(s *workflow.StepCtx[rvState]) (int, error) {
			s.State.Log = append(s.State.Log, name)
			return 1, nil
		},
		func(s *workflow.StepCtx[rvState], v int) error {
			s.State.Log = append(s.State.Log, "undo "+name)
			return nil
		})
	return err
}

// A rollback checkpoint taken in a loop iteration holds for that iteration
// only. Had it held after the loop, a replay (which does not run a
// finished loop again) would have failed the step the first run took.
func TestRollbackCheckpointInALoopHoldsForItsIteration(t *testing.T) {
	after := func(c *workflow.Ctx[rvState]) error {
		if err := c.Loop("setup", func(c *workflow.Ctx[rvState]) error {
			if err := c.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if err := reserve(c, "inside"); err != nil { // covered
				return err
			}
			return workflow.Break
		}); err != nil {
			return err
		}
		if err := c.Sleep("nap", time.Second); err != nil {
			return err
		}
		return reserve(c, "after") // not covered
	}
	for _, evict := range []bool{false, true} {
		h := newHost(rvState{})
		out := driveEvicting(t, h, after, evict)
		if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrRollbackCheckpoint) {
			t.Fatalf("evict=%v: %s (%v); want failed with ErrRollbackCheckpoint at the step after the loop", evict, out.Status, out.Err)
		}
		if got := h.State().Log; !slices.Equal(got, []string{"inside"}) {
			t.Fatalf("evict=%v: steps ran %v, want [inside]", evict, got)
		}
	}
}

// A rollback checkpoint taken in a Try block holds after the block too, as
// its doc says, in the first run and in a replay after each wait.
func TestRollbackCheckpointInATryBlockHoldsAfterIt(t *testing.T) {
	wf := func(c *workflow.Ctx[rvState]) error {
		if f, err := c.Try("setup", func(c *workflow.Ctx[rvState]) error { return c.RollbackCheckpoint("cp") }); err != nil || f != nil {
			return errors.Join(err, f)
		}
		if err := c.Sleep("nap", time.Second); err != nil {
			return err
		}
		if err := reserve(c, "after"); err != nil { // covered
			return err
		}
		return c.Step("fail", func(*workflow.StepCtx[rvState]) error { return workflow.Critical(errors.New("no")) })
	}
	for _, evict := range []bool{false, true} {
		h := newHost(rvState{})
		out := driveEvicting(t, h, wf, evict)
		if out.Status != workflow.RunFailed || errors.Is(out.Err, workflow.ErrRollbackCheckpoint) {
			t.Fatalf("evict=%v: %s (%v); want failed by step fail, after rolling back", evict, out.Status, out.Err)
		}
		if got := h.State().Log; !slices.Equal(got, []string{"after", "undo after"}) {
			t.Fatalf("evict=%v: steps ran %v, want [after, undo after]", evict, got)
		}
	}
}

// Handlers run latest completion first even when the workflow moved to a
// node whose clock is behind the one that ran the earlier steps: entries
// are never stamped before the workflow time already reached.
func TestRollbackOrderSurvivesAMoveToANodeWhoseClockIsBehind(t *testing.T) {
	wf := func(c *workflow.Ctx[rvState]) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		for _, n := range []string{"a", "b"} {
			if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: n},
				func(s *workflow.StepCtx[rvState]) (int, error) { return 1, nil },
				func(s *workflow.StepCtx[rvState], v int) error {
					s.State.Log = append(s.State.Log, "undo "+n)
					return nil
				}); err != nil {
				return err
			}
			if n == "a" {
				if _, err := workflow.Next[int](c, "wait"); err != nil {
					return err
				}
			}
		}
		return c.StepWith(workflow.StepOptions{Name: "fail", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[rvState]) error {
			return errors.New("boom")
		})
	}
	h := newHost(rvState{})
	// The first node runs step a, then waits for a message: it is evicted.
	actx, cancel := context.WithCancel(t.Context())
	done := make(chan workflow.Outcome, 1)
	go func() { done <- h.Run(actx, wf) }()
	<-h.Wakes()
	cancel()
	<-done
	// The next node's clock is 10 s behind.
	h.Clock = workflowtest.NewClock(t0.Add(-10 * time.Second))
	h.Send("q", 1)
	go func() { done <- h.Run(t.Context(), wf) }()
	out := <-done
	if out.Status != workflow.RunFailed {
		t.Fatalf("workflow %s (%v), want failed after its rollback", out.Status, out.Err)
	}
	if got := h.State().Log; !slices.Equal(got, []string{"undo b", "undo a"}) {
		t.Fatalf("compensations ran %v, want [undo b undo a] (latest completion first)", got)
	}
}

// A step of a race branch that loses is not compensated when the workflow
// later rolls back: the loser's history, its handlers with it, is dropped
// when the race is decided (StepWithRollback's doc); the winner's is.
func TestARaceLosersStepIsNotCompensated(t *testing.T) {
	wf := func(c *workflow.Ctx[rvState]) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		if _, _, err := workflow.Race(c, "r", []workflow.RaceBranch[rvState, int]{
			{Name: "slow", Run: func(c *workflow.Ctx[rvState]) (int, error) {
				if err := reserve(c, "slow-booking"); err != nil {
					return 0, err
				}
				return 1, c.Sleep("wait", time.Hour)
			}},
			{Name: "fast", Run: func(c *workflow.Ctx[rvState]) (int, error) {
				if err := c.Sleep("wait", time.Minute); err != nil {
					return 0, err
				}
				return 2, reserve(c, "fast-booking")
			}},
		}); err != nil {
			return err
		}
		return c.Step("fail", func(*workflow.StepCtx[rvState]) error { return workflow.Critical(errors.New("no")) })
	}
	for _, evict := range []bool{false, true} {
		h := newHost(rvState{})
		out := driveEvicting(t, h, wf, evict)
		if out.Status != workflow.RunFailed {
			t.Fatalf("evict=%v: %s (%v); want failed by step fail, after rolling back", evict, out.Status, out.Err)
		}
		if got, want := h.State().Log, []string{"slow-booking", "fast-booking", "undo fast-booking"}; !slices.Equal(got, want) {
			t.Fatalf("evict=%v: steps ran %v, want %v", evict, got, want)
		}
	}
}
