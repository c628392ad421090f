package runtime

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// gatedState is the state of the workflows below; they record what they
// did in their history only.
type gatedState struct{}

// untimedLeads are the entries that record no time of their own, as the
// first entry of a loop iteration or a branch: each returns the path the
// code takes after it (1 the old one, 2 the new one; only a gate changes
// it).
var untimedLeads = map[string]func(c *workflow.Ctx[gatedState], latest int) (int, error){
	"version gate": func(c *workflow.Ctx[gatedState], latest int) (int, error) {
		return c.GetVersion("g", latest)
	},
	"removed": func(c *workflow.Ctx[gatedState], latest int) (int, error) {
		return 1, c.Removed("g", workflow.KindStep)
	},
	"rollback checkpoint": func(c *workflow.Ctx[gatedState], latest int) (int, error) {
		return 1, c.RollbackCheckpoint("g")
	},
}

// retryAndRerun plans a retry of h's workflow from from, deletes what the
// plan deletes from h's history, and runs the workflow (run) again with
// a message queued on "w". It fails t if the plan deletes an entry of keep, or
// if the run does not complete (a divergence fails it).
func retryAndRerun(t *testing.T, h *workflowtest.Host[gatedState], run func(*workflow.Ctx[gatedState]) error, from string, keep []string) []string {
	t.Helper()
	entries := h.History()
	trees, _, err := retryTrees(slices.Clone(entries), from, "")
	if err != nil {
		t.Fatalf("retry --from %s: %v", from, err)
	}
	slices.Sort(trees)
	for _, k := range keep {
		if slices.ContainsFunc(trees, func(tr string) bool { return workflow.Under(k, tr) }) {
			t.Errorf("retry --from %s deletes %s, which the run made before it (deletes %v)", from, k, trees)
		}
	}
	kept := slices.DeleteFunc(entries, func(e workflow.Entry) bool {
		return slices.ContainsFunc(trees, func(tr string) bool { return workflow.Under(e.Path, tr) })
	})
	h.SetHistory(kept)
	h.Send("w", 1)
	if out := driveOut(t, h, run); out.Status != workflow.RunCompleted {
		t.Fatalf("retried from %s (deleting %v): %+v", from, trees, out)
	}
	return trees
}

// driveOut runs h's workflow until it ends or waits for a message.
func driveOut[S any](t *testing.T, h *workflowtest.Host[S], run func(*workflow.Ctx[S]) error) workflow.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, run, workflowtest.DriveOptions{})
	if ctx.Err() != nil {
		t.Fatalf("workflow did not finish: %+v", out)
	}
	return out
}

// ran says that h's history holds an entry at path.
func ran(h *workflowtest.Host[gatedState], path string) bool {
	return slices.ContainsFunc(h.History(), func(e workflow.Entry) bool { return e.Path == path })
}

// A loop iteration's first entry records no time of its own when it is a
// version gate, a Removed placeholder or a rollback checkpoint. A retry
// from a step of an iteration runs the iterations after it again, so it
// deletes their first entries too: kept, an iteration's gate kept the
// decision of the code that recorded it (the old path, though the code
// now takes the new one), and an iteration after the retried one holding
// entries made the replay take the retried iteration for a completed one,
// whose deleted step the code then made anew (a divergence).
func TestRetryFromALoopIterationRunsTheNextIterationsGatesAgain(t *testing.T) {
	for name, lead := range untimedLeads {
		t.Run(name, func(t *testing.T) {
			clock := workflowtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			run := loopWithLead(clock, lead)
			h := workflowtest.NewHost(gatedState{}, clock)
			if out := driveOut(t, h, run(1)); out.Status != workflow.RunYielded {
				t.Fatalf("first run: %+v", out)
			}
			// The code now takes the new path; the operator runs the
			// iterations from the second one's step s again.
			trees := retryAndRerun(t, h, run(2), "l/~1/s", []string{"a", "l/~0/g", "l/~0/old", "l/~0/s", "l/~1/g", "l/~1/old"})
			if want := []string{"l/~1/s", "l/~2/g", "l/~2/old", "l/~2/s"}; !slices.Equal(trees, want) {
				t.Errorf("retry --from l/~1/s deletes %v, want %v", trees, want)
			}
			if !ran(h, "l/~1/old") || ran(h, "l/~1/new") {
				t.Errorf("iteration 1, before the retried entry, did not keep its old path: %s", h.HistoryJSON())
			}
			if name == "version gate" && (!ran(h, "l/~2/new") || ran(h, "l/~2/old")) {
				t.Errorf("iteration 2, after the retried entry, kept the old gate's decision: %s", h.HistoryJSON())
			}
		})
	}
}

// A retry from an entry that records no time itself (case "l/~1/g": the
// retried iteration's first entry) places it by the code's order too:
// what came before it stays, and its own iteration and the later ones run
// again, the gate deciding anew.
func TestRetryFromAnIterationsFirstEntryRunsItAgain(t *testing.T) {
	for name, lead := range untimedLeads {
		t.Run(name, func(t *testing.T) {
			clock := workflowtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			run := loopWithLead(clock, lead)
			h := workflowtest.NewHost(gatedState{}, clock)
			if out := driveOut(t, h, run(1)); out.Status != workflow.RunYielded {
				t.Fatalf("first run: %+v", out)
			}
			retryAndRerun(t, h, run(2), "l/~1/g", []string{"a", "l/~0/g", "l/~0/old", "l/~0/s"})
			if name == "version gate" && (!ran(h, "l/~1/new") || !ran(h, "l/~2/new") || !ran(h, "l/~0/old")) {
				t.Errorf("the retried iterations did not take the new path, or the one before them did: %s", h.HistoryJSON())
			}
		})
	}
}

// The branches of a join start at once, so an entry that records no time
// first in a branch was made when the join started. A retry from a step in
// one branch keeps the other branch's first gate (made before that step;
// its decision stands), and a retry from the gate first in a branch (made
// at the join's start) deletes the other branch's too: it was made at that
// time, not before it. A retry from before the join runs all of it again.
func TestRetryInAJoinPlacesItsBranchesFirstEntriesAtItsStart(t *testing.T) {
	for _, tc := range []struct {
		from string
		keep []string
		// gone: entries the retry deletes (besides from's).
		gone []string
		// newIn: the branches that take the new path after the retry.
		newIn []string
	}{
		{"j/x/s", []string{"a", "j/x/g", "j/x/old", "j/y/g"}, nil, nil},
		{"j/x/g", []string{"a"}, []string{"j/x/old", "j/x/s", "j/y/g"}, []string{"x", "y"}},
		{"a", nil, []string{"j"}, []string{"x", "y"}},
	} {
		for name, lead := range untimedLeads {
			t.Run(tc.from+"/"+name, func(t *testing.T) {
				clock := workflowtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
				step := func(c *workflow.Ctx[gatedState], name string) error {
					return c.Step(name, func(*workflow.StepCtx[gatedState]) error { clock.Advance(time.Second); return nil })
				}
				path := func(v int) string { return map[bool]string{true: "old", false: "new"}[v == 1] }
				// Branch x runs its steps; branch y waits for a message
				// after its first step, so that the join is still running
				// when the first run stops.
				run := func(latest int) func(c *workflow.Ctx[gatedState]) error {
					return func(c *workflow.Ctx[gatedState]) error {
						if err := step(c, "a"); err != nil {
							return err
						}
						_, err := workflow.Join(c, "j", workflow.Branches[gatedState, int]{
							"x": func(c *workflow.Ctx[gatedState]) (int, error) {
								v, err := lead(c, latest)
								if err != nil {
									return 0, err
								}
								if err := step(c, path(v)); err != nil {
									return 0, err
								}
								return 0, step(c, "s")
							},
							"y": func(c *workflow.Ctx[gatedState]) (int, error) {
								v, err := lead(c, latest)
								if err != nil {
									return 0, err
								}
								// Its first step commits the gate with it.
								if err := c.Step("y0", func(*workflow.StepCtx[gatedState]) error { return nil }); err != nil {
									return 0, err
								}
								if _, err := workflow.Next[int](c, "w"); err != nil {
									return 0, err
								}
								return 0, step(c, path(v))
							},
						})
						return err
					}
				}
				h := workflowtest.NewHost(gatedState{}, clock)
				if out := driveOut(t, h, run(1)); out.Status != workflow.RunYielded {
					t.Fatalf("first run: %+v", out)
				}
				trees := retryAndRerun(t, h, run(2), tc.from, tc.keep)
				for _, g := range tc.gone {
					if !slices.ContainsFunc(trees, func(tr string) bool { return workflow.Under(g, tr) }) {
						t.Errorf("retry --from %s keeps %s (deletes %v)", tc.from, g, trees)
					}
				}
				if name != "version gate" {
					return
				}
				for _, b := range []string{"x", "y"} {
					want := path(1)
					if slices.Contains(tc.newIn, b) {
						want = path(2)
					}
					if !ran(h, "j/"+b+"/"+want) {
						t.Errorf("branch %s did not take the %s path: %s", b, want, h.HistoryJSON())
					}
				}
			})
		}
	}
}

// loopWithLead is a workflow that runs step a, then a loop of three
// iterations, each lead, then step old or new (as lead decides, given the
// latest version), then step s; the last one waits for a message on "w".
func loopWithLead(clock *workflowtest.Clock, lead func(*workflow.Ctx[gatedState], int) (int, error)) func(latest int) func(*workflow.Ctx[gatedState]) error {
	step := func(c *workflow.Ctx[gatedState], name string) error {
		return c.Step(name, func(*workflow.StepCtx[gatedState]) error { clock.Advance(time.Second); return nil })
	}
	return func(latest int) func(*workflow.Ctx[gatedState]) error {
		return func(c *workflow.Ctx[gatedState]) error {
			if err := step(c, "a"); err != nil {
				return err
			}
			_, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "l"}, func(c *workflow.Ctx[gatedState], i int) (int, error) {
				v, err := lead(c, latest)
				if err != nil {
					return i, err
				}
				if err := step(c, map[bool]string{true: "old", false: "new"}[v == 1]); err != nil {
					return i, err
				}
				if err := step(c, "s"); err != nil {
					return i, err
				}
				if i < 2 {
					return i + 1, nil
				}
				if _, err := workflow.Next[int](c, "w"); err != nil {
					return i, err
				}
				return i, workflow.Break
			})
			return err
		}
	}
}
