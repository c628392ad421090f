package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A branch cancelled before the decision because it can no longer win (a
// branch holding messages has yet to finish, and another finished first:
// see race.doomLocked) must stay cancelled when a crash makes the race
// replay: catching up on its timers, it must not run work it never ran.
// (Found by TestRandomSim, seed 741 at size 24.)
func TestRaceDoomedBranchStaysCancelledOnReplay(t *testing.T) {
	type st struct {
		Log []string `json:"log"`
	}
	type wctx = workflow.Ctx[st]
	wf := func(c *wctx) error {
		_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[st, int]{
			{Name: "holder", Run: func(c *wctx) (int, error) {
				if _, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"q"}}); err != nil {
					return 0, err
				}
				return 1, c.Sleep("z", 2*time.Second)
			}},
			{Name: "first", Run: func(c *wctx) (int, error) { return 2, c.Sleep("z", time.Second) }},
			{Name: "doomed", Run: func(c *wctx) (int, error) {
				if err := c.Sleep("z", 1500*time.Millisecond); err != nil {
					return 0, err
				}
				return 3, c.Step("late", func(s *workflow.StepCtx[st]) error {
					s.State.Log = append(s.State.Log, "late")
					return nil
				})
			}},
		})
		return err
	}
	run := func(crash int) (workflow.Outcome, st, int) {
		h := workflowtest.NewHost(st{}, workflowtest.NewClock(t0))
		h.Send("q", 1)
		if crash > 0 {
			h.CrashAt(crash, false)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{})
		return out, h.State(), h.Commits()
	}
	out, base, commits := run(0)
	if out.Status != workflow.RunCompleted || len(base.Log) != 0 {
		t.Fatalf("crash-free: %+v %+v", out, base)
	}
	for i := 0; i < 50; i++ {
		for k := 1; k <= commits; k++ {
			out, got, _ := run(k)
			if out.Status != workflow.RunCompleted || fmt.Sprint(got.Log) != fmt.Sprint(base.Log) {
				t.Fatalf("crash at commit %d (try %d): %s, log %q; want the crash-free run's %q", k, i, out.Status, got.Log, base.Log)
			}
		}
	}
}
