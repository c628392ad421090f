package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/internal/hosthook"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type loopSimState struct {
	Log []string `json:"log"`
}
type loopSimCtx = workflow.Ctx[loopSimState]
type loopSimStep = workflow.StepCtx[loopSimState]

func loopSimLog(s *loopSimStep, f string, a ...any) {
	s.State.Log = append(s.State.Log, fmt.Sprintf(f, a...))
}

// loopSimWorkflow is a 31-iteration loop whose iterations rotate through
// every primitive inside a loop: pure computation (no entry), sleep and
// time, a version gate and a join with a sleeping branch, a race, a try
// around a failing step and a step with a rollback, a nested pruned loop,
// and a receive that times out followed by an ephemeral step. With loop
// progress recorded only at checkpoints, a replay re-runs the bodies of
// the iterations since the last one: these tests check that it changes
// nothing, whatever the crash.
func loopSimWorkflow(interval, size int) func(c *loopSimCtx) error {
	return func(c *loopSimCtx) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		out, err := workflow.LoopWith(c, workflow.LoopOptions[[2]int]{Name: "outer", HistoryPruneInterval: interval, HistorySize: size},
			func(c *loopSimCtx, st [2]int) ([2]int, error) {
				i := st[0]
				st[0]++
				switch i % 7 {
				case 0: // pure computation
					st[1] += i * 3
					return st, nil
				case 1: // step + sleep + time
					if err := c.Sleep("nap", time.Duration(i)*time.Second); err != nil {
						return st, err
					}
					v, err := workflow.Step(c, "s", func(s *loopSimStep) (int, error) { loopSimLog(s, "s %d at %v", i, c.Now().Sub(t0)); return i, nil })
					if err != nil {
						return st, err
					}
					st[1] += v
				case 2: // join + version
					v, err := c.GetVersion("ver", 3)
					if err != nil {
						return st, err
					}
					j, err := workflow.Join(c, "j", workflow.Branches[loopSimState, int]{
						"a": func(c *loopSimCtx) (int, error) {
							return workflow.Step(c, "a", func(s *loopSimStep) (int, error) { loopSimLog(s, "a %d", i); return 1, nil })
						},
						"b": func(c *loopSimCtx) (int, error) {
							if err := c.Sleep("z", time.Second); err != nil {
								return 0, err
							}
							return workflow.Step(c, "b", func(s *loopSimStep) (int, error) { loopSimLog(s, "b %d", i); return 2, nil })
						},
					})
					if err != nil {
						return st, err
					}
					st[1] += j["a"] + j["b"] + v
				case 3: // race
					w, v, err := workflow.Race(c, "r", []workflow.RaceBranch[loopSimState, int]{
						{Name: "slow", Run: func(c *loopSimCtx) (int, error) {
							if err := c.Sleep("long", time.Hour); err != nil {
								return 0, err
							}
							return workflow.Step(c, "slow", func(s *loopSimStep) (int, error) { loopSimLog(s, "slow %d", i); return 100, nil })
						}},
						{Name: "fast", Run: func(c *loopSimCtx) (int, error) {
							if err := c.Sleep("short", time.Second); err != nil {
								return 0, err
							}
							return workflow.Step(c, "fast", func(s *loopSimStep) (int, error) { loopSimLog(s, "fast %d", i); return 10, nil })
						}},
					})
					if err != nil {
						return st, err
					}
					st[1] += v + len(w)
				case 4: // try with a failing step + rollback step
					f, err := c.Try("t", func(c *loopSimCtx) error {
						return c.StepWith(workflow.StepOptions{Name: "bad", MaxRetries: 1, RetryBackoffBase: time.Second}, func(s *loopSimStep) error {
							loopSimLog(s, "bad %d attempt %d", i, s.Attempt())
							return errors.New("nope")
						})
					})
					if err != nil {
						return st, err
					}
					if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "rb"}, func(s *loopSimStep) (int, error) { loopSimLog(s, "rb %d", i); return i, nil },
						func(s *loopSimStep, v int) error { loopSimLog(s, "undo %d", v); return nil }); err != nil {
						return st, err
					}
					st[1] += len(f.Kind)
				case 5: // nested loop
					n, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "inner", HistoryPruneInterval: 2, HistorySize: 1}, func(c *loopSimCtx, k int) (int, error) {
						if k%2 == 0 {
							if err := c.Step("is", func(s *loopSimStep) error { loopSimLog(s, "inner %d/%d", i, k); return nil }); err != nil {
								return k, err
							}
						}
						if k == 4 {
							return k, workflow.Break
						}
						return k + 1, nil
					})
					if err != nil {
						return st, err
					}
					st[1] += n
				case 6: // receive with timeout (none comes) then ephemeral step
					ms, err := workflow.NextBatch[int](c, "q", workflow.NextOptions{Names: []string{"none"}, Timeout: 2 * time.Second})
					if err != nil {
						return st, err
					}
					if err := c.StepWith(workflow.StepOptions{Name: "e", Ephemeral: true}, func(s *loopSimStep) error { loopSimLog(s, "eph %d %d", i, len(ms)); return nil }); err != nil {
						return st, err
					}
				}
				if i == 30 {
					return st, workflow.Break
				}
				return st, nil
			})
		if err != nil {
			return err
		}
		return c.Step("end", func(s *loopSimStep) error { loopSimLog(s, "end %v at %v", out, c.Now().Sub(t0)); return nil })
	}
}

type loopSimResult struct {
	status  workflow.RunStatus
	err     string
	log     []string
	history string
}

func loopSimRun(t *testing.T, interval, size int, crashes map[int]bool, evict func(workflow.Wake) bool) (loopSimResult, int) {
	h := workflowtest.NewHost(loopSimState{}, workflowtest.NewClock(t0))
	hosthook.NoAttemptMarkers(h) // compared with the crash-free run (newHost)
	for n, a := range crashes {
		h.CrashAt(n, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, loopSimWorkflow(interval, size), workflowtest.DriveOptions{Evict: evict})
	if ctx.Err() != nil {
		t.Fatalf("hung %v", crashes)
	}
	r := loopSimResult{status: out.Status, log: h.State().Log, history: h.HistoryJSON()}
	if out.Err != nil {
		r.err = out.Err.Error()
	}
	return r, h.Commits()
}

// The loop's run, crashed before and after each of its commits in turn
// under several prune intervals and history sizes, ends with the outcome,
// the step log and the stored history of the crash-free run.
func TestLoopSimCrashAtEveryCommit(t *testing.T) {
	for _, c := range [][2]int{{3, 1}, {4, 6}, {workflow.NoPrune, 0}, {1, 1}, {5, 2}} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			base, commits := loopSimRun(t, c[0], c[1], nil, nil)
			if base.status != workflow.RunCompleted {
				t.Fatalf("base %+v", base)
			}
			for k := 1; k <= commits+2; k++ {
				for _, after := range []bool{false, true} {
					got, _ := loopSimRun(t, c[0], c[1], map[int]bool{k: after}, nil)
					if got.status != base.status || got.err != base.err || !reflect.DeepEqual(got.log, base.log) || got.history != base.history {
						t.Fatalf("crash %d after=%v:\n got %s %s %q\nwant %q\nhist diff: %v", k, after, got.status, got.err, got.log, base.log, got.history == base.history)
					}
				}
			}
			t.Logf("%d commits, log %d lines", commits, len(base.log))
		})
	}
}

// The same with random crashes and evictions (fixed seeds).
func TestLoopSimRandomCrashesAndEvictions(t *testing.T) {
	for _, c := range [][2]int{{3, 1}, {workflow.NoPrune, 0}, {5, 2}} {
		base, commits := loopSimRun(t, c[0], c[1], nil, nil)
		for seed := int64(1); seed <= 60; seed++ {
			rng := rand.New(rand.NewSource(seed))
			crashes := map[int]bool{}
			for i := 0; i < 1+rng.Intn(6); i++ {
				crashes[1+rng.Intn(commits+10)] = rng.Intn(2) == 0
			}
			got, _ := loopSimRun(t, c[0], c[1], crashes, func(workflow.Wake) bool { return rng.Intn(2) == 0 })
			if got.status != base.status || got.err != base.err || !reflect.DeepEqual(got.log, base.log) || got.history != base.history {
				t.Fatalf("%v seed %d crashes %v:\n got %s %s %q\nwant %q\nhist same: %v", c, seed, crashes, got.status, got.err, got.log, base.log, got.history == base.history)
			}
		}
	}
}
