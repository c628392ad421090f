package workflow_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A branch that took a message in a loop iteration that pruning has since
// deleted still holds the race's claim: it took the message before any
// branch finished, so it wins when it finishes, live as on a replay that
// no longer finds the receive. (Found by TestRandomSim, seed 60175 at size
// 28: after a crash that followed the prune, the replay gave the claim up
// and the branch that finished first won.)
func TestRaceClaimSurvivesPrunedIterations(t *testing.T) {
	type st struct{}
	type wctx = workflow.Ctx[st]
	wf := func(c *wctx) error {
		w, _, err := workflow.Race(c, "r", []workflow.RaceBranch[st, int]{
			{Name: "a", Run: func(c *wctx) (int, error) { return 1, c.Sleep("z", 3*time.Second) }},
			{Name: "b", Run: func(c *wctx) (int, error) {
				return workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 1, HistorySize: 1}, func(c *wctx, i int) (int, error) {
					var err error
					switch i {
					case 0:
						_, err = workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"q"}})
					case 1:
						err = c.Sleep("z", time.Second)
					default:
						if err := c.Sleep("z", 4*time.Second); err != nil {
							return i, err
						}
						return i + 1, workflow.Break
					}
					return i + 1, err
				})
			}},
		})
		if err != nil {
			return err
		}
		if w != "b" {
			return errors.New("won by " + w)
		}
		return nil
	}
	completesAtEveryCrash(t, wf, func(h *workflowtest.Host[st]) { h.Send("q", 1) }, 0)
}

// But a message that the pruned iteration completed is owed to no one: the
// loop holds no claim for it (Entry.TookMessages stays unset), and the
// branch that finished first wins, live as on a replay.
func TestRaceClaimGoesWithPrunedIterationsThatCompletedTheirMessages(t *testing.T) {
	type st struct{}
	type wctx = workflow.Ctx[st]
	wf := func(c *wctx) error {
		w, _, err := workflow.Race(c, "r", []workflow.RaceBranch[st, int]{
			{Name: "a", Run: func(c *wctx) (int, error) { return 1, c.Sleep("z", 3*time.Second) }},
			{Name: "b", Run: func(c *wctx) (int, error) {
				return workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 1, HistorySize: 1}, func(c *wctx, i int) (int, error) {
					switch i {
					case 0:
						m, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"q"}})
						if err != nil {
							return i, err
						}
						return i + 1, m.Complete("done")
					case 1:
						return i + 1, c.Sleep("z", time.Second)
					default:
						if err := c.Sleep("z", 4*time.Second); err != nil {
							return i, err
						}
						return i + 1, workflow.Break
					}
				})
			}},
		})
		return wonBy(w, err, "a")
	}
	completesAtEveryCrash(t, wf, func(h *workflowtest.Host[st]) { h.Send("q", 1) }, 0)
}
