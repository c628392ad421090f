package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/internal/hosthook"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// heldSimWorkflow has joins and races whose branches fail while others
// wait (one with a receive's timeout, one after taking a message), nested
// in each other and in a pruned loop: each such failure is recorded in the
// pending join's or race's entry at once, and a restart holds it (see
// TestJoinHoldsAFailedBranchWhileOthersWait), which sim_test.go covers
// only for a join and a race at the top level.
func heldSimWorkflow(c *loopSimCtx) error {
	if err := c.RollbackCheckpoint("cp"); err != nil {
		return err
	}
	n, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 1, HistorySize: 1}, func(c *loopSimCtx, i int) (int, error) {
		f, err := c.Try("t", func(c *loopSimCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[loopSimState, int]{
				"bad": func(c *loopSimCtx) (int, error) {
					if err := c.Step("x", func(s *loopSimStep) error { loopSimLog(s, "x %d", i); return nil }); err != nil {
						return 0, err
					}
					return 0, fmt.Errorf("bad %d", i)
				},
				"raced": func(c *loopSimCtx) (int, error) {
					_, v, err := workflow.Race(c, "r", []workflow.RaceBranch[loopSimState, int]{
						{Name: "lose", Run: func(c *loopSimCtx) (int, error) {
							_, err := workflow.Join(c, "ij", workflow.Branches[loopSimState, int]{
								"f": func(c *loopSimCtx) (int, error) {
									return workflow.StepOpts(c, workflow.StepOptions{Name: "fs", MaxRetries: workflow.NoRetries}, func(s *loopSimStep) (int, error) {
										loopSimLog(s, "f %d", i)
										return 0, errors.New("f failed")
									})
								},
								"w": func(c *loopSimCtx) (int, error) {
									if err := c.Sleep("z", 500*time.Millisecond); err != nil {
										return 0, err
									}
									return workflow.Step(c, "ws", func(s *loopSimStep) (int, error) { loopSimLog(s, "w %d", i); return 1, nil })
								},
							})
							return 0, err
						}},
						{Name: "win", Run: func(c *loopSimCtx) (int, error) {
							if err := c.Sleep("z", time.Second); err != nil {
								return 0, err
							}
							return workflow.Step(c, "s", func(s *loopSimStep) (int, error) { loopSimLog(s, "win %d", i); return 2, nil })
						}},
					})
					return v, err
				},
				// Fails with a receive's timeout, which the join's
				// error still matches (ErrTimeout).
				"late": func(c *loopSimCtx) (int, error) {
					m, err := workflow.Next[job](c, "none", workflow.NextOptions{Names: []string{"never"}, Timeout: 300 * time.Millisecond})
					return m.Body.N, err
				},
				"slow": func(c *loopSimCtx) (int, error) {
					if err := c.Sleep("z", 2*time.Second); err != nil {
						return 0, err
					}
					return workflow.Step(c, "s", func(s *loopSimStep) (int, error) { loopSimLog(s, "slow %d", i); return 3, nil })
				},
			})
			return err
		})
		if err != nil {
			return i, err
		}
		// A branch that takes a message and fails while the other
		// sleeps: the message goes back with the decision.
		if _, _, err := workflow.Race(c, "m", []workflow.RaceBranch[loopSimState, int]{
			{Name: "take", Run: func(c *loopSimCtx) (int, error) {
				if _, err := workflow.Next[job](c, "offer", workflow.NextOptions{Names: []string{"offers"}}); err != nil {
					return 0, err
				}
				return 0, errors.New("desk down")
			}},
			{Name: "wait", Run: func(c *loopSimCtx) (int, error) {
				if err := c.Sleep("z", time.Second); err != nil {
					return 0, err
				}
				m, err := workflow.Next[job](c, "bid", workflow.NextOptions{Names: []string{"bids"}})
				if err != nil {
					return 0, err
				}
				return m.Body.N, c.Step("s", func(s *loopSimStep) error { loopSimLog(s, "bid %d", m.Body.N); return nil })
			}},
		}); err != nil {
			return i, err
		}
		m, err := workflow.Next[job](c, "retake", workflow.NextOptions{Names: []string{"offers"}})
		if err != nil {
			return i, err
		}
		if err := c.Step("rec", func(s *loopSimStep) error {
			loopSimLog(s, "%d: %s %q (timeout %v), offer %d at %v", i, f.Source, f.Error(), errors.Is(f, workflow.ErrTimeout), m.Body.N, c.Now().Sub(t0))
			return nil
		}); err != nil {
			return i, err
		}
		if i == 1 {
			return i, workflow.Break
		}
		return i + 1, nil
	})
	if err != nil {
		return err
	}
	return c.Step("end", func(s *loopSimStep) error { loopSimLog(s, "end %d at %v", n, c.Now().Sub(t0)); return nil })
}

func heldSimRun(t *testing.T, crashes map[int]bool, evict func(workflow.Wake) bool) (loopSimResult, int) {
	t.Helper()
	h := workflowtest.NewHost(loopSimState{}, workflowtest.NewClock(t0))
	hosthook.NoAttemptMarkers(h) // compared with the crash-free run (newHost)
	for i := 1; i <= 2; i++ {
		h.Send("offers", job{i})
		h.Send("bids", job{10 * i})
	}
	for n, a := range crashes {
		h.CrashAt(n, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, heldSimWorkflow, workflowtest.DriveOptions{Evict: evict})
	if ctx.Err() != nil {
		t.Fatalf("hung %v", crashes)
	}
	// Steps of concurrent branches log in any order.
	r := loopSimResult{status: out.Status, log: slices.Sorted(slices.Values(h.State().Log)), history: h.HistoryJSON()}
	if out.Err != nil {
		r.err = out.Err.Error()
	}
	return r, h.Commits()
}

// TestHeldSimCrashAtEveryCommit: crashed before and after each of its
// commits (among them those that record a branch's failure in a pending
// join or race), or at random ones and evicted at random, the run ends
// with the outcome, the step log and the history of the crash-free run.
func TestHeldSimCrashAtEveryCommit(t *testing.T) {
	base, commits := heldSimRun(t, nil, nil)
	if base.status != workflow.RunCompleted || len(base.log) != 2*7+1 || !strings.Contains(base.log[0], "late: ") ||
		!strings.Contains(base.log[0], "(timeout true), offer 1 at 3s") || base.log[2] != "bid 10" || base.log[3] != "bid 20" {
		t.Fatalf("base %s %s %q", base.status, base.err, base.log)
	}
	same := func(what string, got loopSimResult) {
		t.Helper()
		if got.status != base.status || got.err != base.err || !reflect.DeepEqual(got.log, base.log) || got.history != base.history {
			t.Fatalf("%s:\n got %s %s %q\nwant %q\nhistory\n%s\nwant\n%s", what, got.status, got.err, got.log, base.log, got.history, base.history)
		}
	}
	for k := 1; k <= commits+2; k++ {
		for _, after := range []bool{false, true} {
			got, _ := heldSimRun(t, map[int]bool{k: after}, nil)
			same(fmt.Sprintf("crash at %d (after=%v)", k, after), got)
		}
	}
	for seed := int64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewSource(seed))
		crashes := map[int]bool{}
		for i := 0; i < 1+rng.Intn(4); i++ {
			crashes[1+rng.Intn(commits+5)] = rng.Intn(2) == 0
		}
		got, _ := heldSimRun(t, crashes, func(workflow.Wake) bool { return rng.Intn(2) == 0 })
		same(fmt.Sprintf("seed %d crashes %v", seed, crashes), got)
	}
	t.Logf("%d commits, log %q", commits, base.log)
}
