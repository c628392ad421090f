package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A join or race opened before any entry that records a time, whose
// branches pass none either (a version gate, nothing at all), records the
// host's time when it opens: Ctx.Now after it must be that time on every
// replay too, not the clock of the run that replays it. (Found by
// TestRandomSim, seed 72: a race's time noted before a receive, logged by
// the step after it, changed when a crash made the step run again. Seed
// 1093 at size 24: the time, recorded when the join settled, changed when
// a crash lost that record, which waits for the next commit.)
func TestNowAfterASettledJoinOrRaceWithoutTimes(t *testing.T) {
	type st struct{}
	type wctx = workflow.Ctx[st]
	for _, what := range []string{"join", "race"} {
		t.Run(what, func(t *testing.T) {
			h := workflowtest.NewHost(st{}, workflowtest.NewClock(t0))
			var seen []time.Duration
			wf := func(c *wctx) error {
				if err := c.RollbackCheckpoint("cp"); err != nil {
					return err
				}
				var err error
				if what == "join" {
					_, err = workflow.Join(c, "j", workflow.Branches[st, int]{
						"a": func(c *wctx) (int, error) { return 1, nil },
						"b": func(c *wctx) (int, error) { _, err := c.GetVersion("v", 2); return 2, err },
					})
				} else {
					_, _, err = workflow.Race(c, "r", []workflow.RaceBranch[st, int]{
						{Name: "now", Run: func(c *wctx) (int, error) { _, err := c.GetVersion("v", 2); return 1, err }},
						{Name: "later", Run: func(c *wctx) (int, error) { return 2, c.Sleep("z", time.Hour) }},
					})
				}
				if err != nil {
					return err
				}
				seen = append(seen, c.Now().Sub(t0))
				// A receive with a timeout records its deadline at once,
				// and with it the settled join's record (which waits for
				// the next commit: lost, the join would run again).
				_, err = workflow.Next[int](c, "m", workflow.NextOptions{Names: []string{"q"}, Timeout: time.Hour})
				return err
			}
			// The first run settles the join or race at t0, then waits for
			// a message and is evicted; the second, a minute later, replays.
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-h.Wakes(); cancel() }()
			if out := h.Run(ctx, wf); out.Status != workflow.RunYielded {
				t.Fatalf("first run: %+v", out)
			}
			h.Clock.Advance(time.Minute)
			h.Send("q", 1)
			if out := h.Run(context.Background(), wf); out.Status != workflow.RunCompleted {
				t.Fatalf("second run: %+v", out)
			}
			if len(seen) != 2 || seen[0] != 0 || seen[1] != 0 {
				t.Fatalf("Now after the %s: %v in the two runs, want 0s both times", what, seen)
			}
		})
	}
}
