package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

func TestLoopContinueAndBreak(t *testing.T) {
	h := newHost(log{})
	out := drive(t, h, func(c *logCtx) error {
		return c.Loop("count", func(c *logCtx) error {
			n, err := workflow.Step(c, "inc", func(s *logStep) (int, error) {
				s.State.N++
				return s.State.N, nil
			})
			if err != nil {
				return err
			}
			if n == 5 {
				return workflow.Break
			}
			return nil
		})
	})
	if out.Status != workflow.RunCompleted || h.State().N != 5 {
		t.Fatalf("outcome %+v n=%d", out, h.State().N)
	}
	e := entryAt(t, h.History(), "count")
	if e.Kind != workflow.KindLoop || e.Status != workflow.StatusCompleted || e.Iteration != 5 {
		t.Fatalf("loop entry %+v", e)
	}
	for i := 0; i < 5; i++ {
		entryAt(t, h.History(), fmt.Sprintf("count/~%d/inc", i))
	}
}

func TestLoopWithState(t *testing.T) {
	h := newHost(log{})
	var bodies atomic.Int32
	wf := func(c *logCtx) error {
		sum, err := workflow.LoopWith(c, workflow.LoopOptions[[2]int]{Name: "sum", State: [2]int{1, 0}}, func(c *logCtx, st [2]int) ([2]int, error) {
			bodies.Add(1)
			i, total := st[0], st[1]+st[0]
			if i == 10 {
				return [2]int{i, total}, workflow.Break
			}
			return [2]int{i + 1, total}, nil
		})
		if err != nil {
			return err
		}
		return c.Step("save", func(s *logStep) error { s.State.N = sum[1]; return nil })
	}
	out := drive(t, h, wf)
	if out.Status != workflow.RunCompleted || h.State().N != 55 || bodies.Load() != 10 {
		t.Fatalf("outcome %+v sum=%d bodies=%d", out, h.State().N, bodies.Load())
	}
	// A completed loop is replayed from its record, not re-run.
	out = drive(t, h, wf)
	if out.Status != workflow.RunCompleted || bodies.Load() != 10 {
		t.Fatalf("replay re-ran the loop: bodies=%d", bodies.Load())
	}
}

func TestLoopErrorEndsIt(t *testing.T) {
	h := newHost(log{})
	boom := errors.New("boom")
	out := drive(t, h, func(c *logCtx) error {
		return c.Loop("l", func(*logCtx) error { return boom })
	})
	if out.Status != workflow.RunFailed || !errors.Is(out.Err, boom) {
		t.Fatalf("outcome %+v", out)
	}
}

// TestLoopPruning runs 10,000 iterations and checks after every commit that
// the history never holds more than interval+size iterations.
func TestLoopPruning(t *testing.T) {
	for _, c := range []struct {
		name           string
		interval, size int
		keptAtEnd      int
	}{
		{"defaults", 0, 0, 20},
		{"size 5", 20, 5, 5},
		{"interval 7 size 3", 7, 3, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(log{})
			interval, size := c.interval, c.size
			if interval == 0 {
				interval = workflow.DefaultHistoryPruneInterval
			}
			if size == 0 {
				size = interval
			}
			maxKept := 0
			h.OnCommit = func(paths []string) {
				iters := map[string]bool{}
				for _, p := range paths {
					if rest, ok := strings.CutPrefix(p, "l/~"); ok {
						iters[strings.SplitN(rest, "/", 2)[0]] = true
					}
				}
				maxKept = max(maxKept, len(iters))
			}
			out := drive(t, h, func(c *logCtx) error {
				_, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: interval, HistorySize: size}, func(c *logCtx, i int) (int, error) {
					if err := c.Step("s", func(s *logStep) error { s.State.N++; return nil }); err != nil {
						return i, err
					}
					if i == 9999 {
						return i, workflow.Break
					}
					return i + 1, nil
				})
				return err
			})
			if out.Status != workflow.RunCompleted || h.State().N != 10000 {
				t.Fatalf("outcome %+v n=%d", out, h.State().N)
			}
			if maxKept > interval+size {
				t.Fatalf("history held %d iterations, bound %d", maxKept, interval+size)
			}
			var kept []string
			for _, e := range h.History() {
				if strings.HasPrefix(e.Path, "l/~") {
					kept = append(kept, e.Path)
				}
			}
			if len(kept) != c.keptAtEnd || kept[len(kept)-1] != "l/~9999/s" {
				t.Fatalf("kept at the end: %v", kept)
			}
		})
	}
	t.Run("NoPrune", func(t *testing.T) {
		h := newHost(log{})
		out := drive(t, h, func(c *logCtx) error {
			_, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: workflow.NoPrune}, func(c *logCtx, i int) (int, error) {
				if err := c.Step("s", func(*logStep) error { return nil }); err != nil {
					return i, err
				}
				if i == 99 {
					return i, workflow.Break
				}
				return i + 1, nil
			})
			return err
		})
		if out.Status != workflow.RunCompleted || len(h.History()) != 101 {
			t.Fatalf("outcome %+v, %d entries", out, len(h.History()))
		}
	})
}

// TestLoopPruneRidesWithNextCommit: a periodic prune goes out with the next
// iteration's step rather than a commit of its own, and iterations that
// commit nothing do not pile prunes up: no commit carries more than one
// interval's trees.
func TestLoopPruneRidesWithNextCommit(t *testing.T) {
	for _, c := range []struct {
		name      string
		stepEvery int // a step in every this many iterations
	}{{"step each iteration", 1}, {"step every 25 iterations", 25}} {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(log{})
			const interval = 5
			maxTrees, alone := 0, 0
			h.OnBatch = func(batch []workflow.HistoryWrite) {
				trees := 0
				for _, w := range batch {
					if w.DeleteTree != "" {
						trees++
					}
				}
				maxTrees = max(maxTrees, trees)
				if trees > 0 && len(batch) == trees+1 {
					alone++ // the prune and the loop's progress, nothing else
				}
			}
			out := drive(t, h, func(c2 *logCtx) error {
				_, err := workflow.LoopWith(c2, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: interval}, func(c2 *logCtx, i int) (int, error) {
					if i%c.stepEvery == 0 {
						if err := c2.Step("s", func(s *logStep) error { s.State.N++; return nil }); err != nil {
							return i, err
						}
					}
					if i == 99 {
						return i, workflow.Break
					}
					return i + 1, nil
				})
				return err
			})
			if out.Status != workflow.RunCompleted {
				t.Fatalf("outcome %+v", out)
			}
			if maxTrees > interval {
				t.Fatalf("a commit deleted %d trees, more than one interval (%d)", maxTrees, interval)
			}
			// With a step in every iteration, only the end's prune goes
			// alone.
			if c.stepEvery == 1 && alone != 1 {
				t.Fatalf("%d prunes committed alone, want 1 (the end)", alone)
			}
		})
	}
}

// TestLoopResumesAtRecordedIteration crashes a loop mid-way: the next
// activation starts from the last checkpoint (every prune interval) and
// its state, without re-running the iterations before it; the iterations
// after it replay from their recorded entries, their steps not re-run.
func TestLoopResumesAtRecordedIteration(t *testing.T) {
	h := newHost(log{})
	starts := map[int]int{}
	wf := func(c *logCtx) error {
		opts := workflow.LoopOptions[int]{Name: "l", State: 100, HistoryPruneInterval: 2}
		_, err := workflow.LoopWith(c, opts, func(c *logCtx, v int) (int, error) {
			i := v - 100
			starts[i]++
			if err := c.Step("s", func(s *logStep) error {
				s.State.Log = append(s.State.Log, fmt.Sprint(v))
				return nil
			}); err != nil {
				return v, err
			}
			if i == 6 {
				return v, workflow.Break
			}
			return v + 1, nil
		})
		return err
	}
	// Commits: the steps of iterations 0-3, the third with the checkpoint
	// "next is 2"; the fifth, iteration 4's step with the checkpoint
	// "next is 4", crashes.
	h.CrashAt(5, false)
	out := drive(t, h, wf)
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if want := []string{"100", "101", "102", "103", "104", "105", "106"}; !reflect.DeepEqual(h.State().Log, want) {
		t.Fatalf("log %v", h.State().Log)
	}
	// Iteration 4 ran twice (its commit crashed); 2 and 3 replayed from
	// the checkpoint "next is 2" (their steps did not run again: the log
	// holds each value once); 0 and 1 were never re-run.
	if want := map[int]int{0: 1, 1: 1, 2: 2, 3: 2, 4: 2, 5: 1, 6: 1}; !reflect.DeepEqual(starts, want) {
		t.Fatalf("iteration starts %v, want %v", starts, want)
	}
}

func TestSleepDeadlineIsRecordedOnce(t *testing.T) {
	h := newHost(log{})
	wf := func(c *logCtx) error {
		if err := c.Sleep("nap", time.Minute); err != nil {
			return err
		}
		return c.Step("after", func(s *logStep) error { s.State.Times = append(s.State.Times, h.Clock.Now()); return nil })
	}
	// First activation: evicted while it sleeps.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-h.Wakes(); cancel() }()
	out := h.Run(ctx, wf)
	cancel()
	if out.Status != workflow.RunYielded || !out.Wake.At.Equal(t0.Add(time.Minute)) || out.Wake.AnyQueue || len(out.Wake.Queues) != 0 {
		t.Fatalf("yield %+v", out)
	}
	// Woken early: the replay waits only for what is left.
	h.Clock.Advance(30 * time.Second)
	out = drive(t, h, wf)
	if out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Times, []time.Time{t0.Add(time.Minute)}) {
		t.Fatalf("outcome %+v, woke at %v", out, h.State().Times)
	}
	if e := entryAt(t, h.History(), "nap"); !e.Deadline.Equal(t0.Add(time.Minute)) {
		t.Fatalf("deadline %v", e.Deadline)
	}
}

func TestSleepUntilPastNeedsNoCommit(t *testing.T) {
	h := newHost(log{})
	out := drive(t, h, func(c *logCtx) error {
		return c.SleepUntil("past", t0.Add(-time.Hour))
	})
	// One commit: the final flush of the completed sleep.
	if out.Status != workflow.RunCompleted || h.Commits() != 1 {
		t.Fatalf("outcome %+v, %d commits", out, h.Commits())
	}
}

// TestNowIsReplayed: Ctx.Now returns the time recorded by the last entry,
// so a replay an hour later computes the same values.
func TestNowIsReplayed(t *testing.T) {
	h := newHost(log{})
	wf := func(c *logCtx) error {
		if err := c.Step("a", func(*logStep) error { return nil }); err != nil {
			return err
		}
		afterA := c.Now()
		if _, err := workflow.Next[int](c, "wait"); err != nil {
			return err
		}
		afterWait := c.Now()
		return c.Step("rec", func(s *logStep) error {
			s.State.Times = []time.Time{afterA, afterWait}
			return nil
		})
	}
	out := drive(t, h, wf) // blocks on the message: evicted
	if out.Status != workflow.RunYielded || !out.Wake.AnyQueue {
		t.Fatalf("first run %+v", out)
	}
	h.Clock.Advance(time.Hour)
	h.Send("q", 1)
	out = drive(t, h, wf)
	if want := []time.Time{t0, t0.Add(time.Hour)}; out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Times, want) {
		t.Fatalf("outcome %+v, times %v, want %v", out, h.State().Times, want)
	}
}

type loopJob struct{ N int }

// jobsLoop handles one job per iteration; audit, if set, adds a step after
// the handling (gated if gate is set).
func jobsLoop(audit, gate bool) func(*logCtx) error {
	return func(c *logCtx) error {
		return c.Loop("jobs", func(c *logCtx) error {
			m, err := workflow.Next[loopJob](c, "wait", workflow.NextOptions{Names: []string{"jobs"}})
			if err != nil {
				return err
			}
			if err := c.Step("handle", func(s *logStep) error {
				s.State.Log = append(s.State.Log, fmt.Sprint("handle ", m.Body.N))
				return nil
			}); err != nil {
				return err
			}
			if !audit {
				return nil
			}
			if gate {
				v, err := c.GetVersion("audit-gate", 2)
				if err != nil || v < 2 {
					return err
				}
			}
			return c.Step("audit", func(s *logStep) error {
				s.State.Log = append(s.State.Log, fmt.Sprint("audit ", m.Body.N))
				return nil
			})
		})
	}
}

// A loop resumes at its last checkpoint and re-runs the bodies of the
// iterations after it. An upgrade that adds a step behind a version gate
// must not run it for iterations the old code completed: they take the
// old path, as they would if they were not re-run. (The last iteration
// with entries may be one whose end was not recorded yet, as in Rivet: it
// takes the new path.)
func TestLoopUpgradeGatedStepSkipsCompletedIterations(t *testing.T) {
	h := newHost(log{})
	for i := 1; i <= 5; i++ {
		h.Send("jobs", loopJob{i})
	}
	if out := drive(t, h, jobsLoop(false, false)); out.Status != workflow.RunYielded {
		t.Fatalf("old code: %+v", out)
	}
	h.Send("jobs", loopJob{6})
	if out := drive(t, h, jobsLoop(true, true)); out.Status != workflow.RunYielded {
		t.Fatalf("new code: %+v", out)
	}
	var audits []string
	for _, l := range h.State().Log {
		if strings.HasPrefix(l, "audit") {
			audits = append(audits, l)
		}
	}
	if want := []string{"audit 5", "audit 6"}; !reflect.DeepEqual(audits, want) {
		t.Fatalf("audits %q, want %q (log %q)", audits, want, h.State().Log)
	}
}

// Without a gate, the same addition is a divergence that names a completed
// iteration, not a new step run for every job the old code handled.
func TestLoopUpgradeUngatedStepInCompletedIterationDiverges(t *testing.T) {
	h := newHost(log{})
	for i := 1; i <= 5; i++ {
		h.Send("jobs", loopJob{i})
	}
	if out := drive(t, h, jobsLoop(false, false)); out.Status != workflow.RunYielded {
		t.Fatalf("old code: %+v", out)
	}
	out := drive(t, h, jobsLoop(true, false))
	var div *workflow.DivergenceError
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &div) || div.Path != "jobs/~0/audit" {
		t.Fatalf("outcome %v %v, want a divergence at jobs/~0/audit", out.Status, out.Err)
	}
	for _, l := range h.State().Log {
		if strings.HasPrefix(l, "audit") {
			t.Fatalf("the new step ran: %q", h.State().Log)
		}
	}
}
