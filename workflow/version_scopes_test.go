package workflow_test

import (
	"reflect"
	"testing"

	"github.com/rivet-go/rivet/workflow"
)

// Version gates in a join or race branch of a workflow in flight, put
// before the step the branch recorded, take the old path there, on every
// replay; a new instance takes the new path. Two gates, as two changes
// deployed at once: the second used to be recorded after the step it
// stands before, and the next replay failed with a divergence.
func TestVersionGatesInBranchesOfAWorkflowInFlight(t *testing.T) {
	for _, kind := range []string{"join", "race"} {
		t.Run(kind, func(t *testing.T) {
			var got []int
			branchA := func(gated bool) func(c *logCtx) (int, error) {
				return func(c *logCtx) (int, error) {
					for _, g := range []string{"g1", "g2"} {
						if !gated {
							break
						}
						v, err := c.GetVersion(g, 2)
						if err != nil {
							return 0, err
						}
						got = append(got, v)
						if v == 2 {
							if err := note(c, "new-"+g); err != nil {
								return 0, err
							}
						}
					}
					if err := note(c, "a1"); err != nil {
						return 0, err
					}
					if _, err := workflow.Next[job](c, "wait-a", workflow.NextOptions{Names: []string{"qa"}}); err != nil {
						return 0, err
					}
					_, err := workflow.Next[job](c, "wait-a2", workflow.NextOptions{Names: []string{"qa2"}})
					return 1, err
				}
			}
			branchB := func(c *logCtx) (int, error) {
				_, err := workflow.Next[job](c, "wait-b", workflow.NextOptions{Names: []string{"qb"}})
				return 2, err
			}
			wf := func(gated bool) func(c *logCtx) error {
				return func(c *logCtx) error {
					if kind == "join" {
						_, err := workflow.Join(c, "p", workflow.Branches[log, int]{"a": branchA(gated), "b": branchB})
						return err
					}
					_, _, err := workflow.Race(c, "p", []workflow.RaceBranch[log, int]{{Name: "a", Run: branchA(gated)}, {Name: "b", Run: branchB}})
					return err
				}
			}
			h := inFlight(t, wf(false))
			// The first run under the new code records the gates (with
			// the message it takes), the second replays them.
			h.Send("qa", job{1})
			for i := range 2 {
				if out := drive(t, h, wf(true)); out.Status != workflow.RunYielded {
					t.Fatalf("run %d under the new code: %+v, log %v", i, out, h.State().Log)
				}
			}
			h.Send("qa2", job{1})
			if kind == "join" {
				h.Send("qb", job{2})
			}
			if out := drive(t, h, wf(true)); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"a1"}) || !reflect.DeepEqual(got, []int{1, 1, 1, 1, 1, 1}) {
				t.Fatalf("in flight: %+v, log %v, versions %v", out, h.State().Log, got)
			}
			got = nil
			h2 := newHost(log{})
			h2.Send("qa", job{1})
			h2.Send("qa2", job{1})
			if kind == "join" {
				h2.Send("qb", job{2})
			}
			if out := drive(t, h2, wf(true)); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h2.State().Log, []string{"new-g1", "new-g2", "a1"}) || !reflect.DeepEqual(got, []int{2, 2}) {
				t.Fatalf("new instance: %+v, log %v, versions %v", out, h2.State().Log, got)
			}
		})
	}
}
