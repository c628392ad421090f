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

// The same, with the crash where the first run recorded the doom: the
// replay, at that time, dooms the branch again once it has replayed what
// it did before (its entries hold it back until then), whatever the order
// the branches replay in. (TestRandomSim, seed 734 at size 24.)
func TestRaceDoomedAgainAfterACrashBeforeItsRecord(t *testing.T) {
	type st struct {
		Log []string `json:"log"`
	}
	type wctx = workflow.Ctx[st]
	step := func(c *wctx, name string) error {
		return c.Step(name, func(s *workflow.StepCtx[st]) error {
			s.State.Log = append(s.State.Log, name)
			return nil
		})
	}
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
				for i := range 5 {
					if err := step(c, fmt.Sprint("early-", i)); err != nil {
						return 0, err
					}
				}
				if err := c.Sleep("z", 1500*time.Millisecond); err != nil {
					return 0, err
				}
				return 3, step(c, "late")
			}},
		})
		return err
	}
	run := func(crash int) (workflow.Outcome, st, int) {
		h := workflowtest.NewHost(st{}, workflowtest.NewClock(t0))
		h.Send("q", 1)
		doom, n := 0, 0
		h.OnBatch = func(b []workflow.HistoryWrite) { // with the host's lock held
			n++
			for _, w := range b {
				if w.Put != nil && w.Put.Path == "r" && w.Put.Status == workflow.StatusPending && w.Put.Branches["doomed"].Status == workflow.StatusCancelled && doom == 0 {
					doom = n
				}
			}
		}
		if crash > 0 {
			h.CrashAt(crash, false)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{})
		return out, h.State(), doom
	}
	out, base, doom := run(0)
	if out.Status != workflow.RunCompleted || len(base.Log) != 5 || doom == 0 {
		t.Fatalf("crash-free: %+v %q, doom recorded by commit %d", out, base.Log, doom)
	}
	// Which branch replays first is the scheduler's choice: try often.
	for i := 0; i < 500; i++ {
		out, got, _ := run(doom)
		if out.Status != workflow.RunCompleted || fmt.Sprint(got.Log) != fmt.Sprint(base.Log) {
			t.Fatalf("crash at commit %d, where the doom is recorded (try %d): %s, log %q; want %q", doom, i, out.Status, got.Log, base.Log)
		}
	}
}
