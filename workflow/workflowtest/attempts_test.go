package workflowtest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A step whose body crashes its node at every attempt counts each such
// attempt, as on a node (runtime's attempt markers; e2e
// TestAStepThatKillsItsNodeEachTimeEndsExhausted): with MaxRetries 1 the
// host crashes twice, and the run after the second crash records the step
// exhausted and fails the workflow, the history saying how its attempts
// ended. Before, every activation ran the step again as attempt 1, and
// crashed, until Drive's MaxActivations.
func TestAStepThatCrashesItsNodeEachTimeEndsExhausted(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	var mu sync.Mutex
	var attempts []int
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, n := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		return c.StepWith(workflow.StepOptions{Name: "poison", MaxRetries: 1}, func(s *workflow.StepCtx[struct{}]) error {
			mu.Lock()
			attempts = append(attempts, s.Attempt())
			mu.Unlock()
			h.Crash(s.Context())
			return s.Context().Err()
		})
	}, workflowtest.DriveOptions{MaxActivations: 10})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 2}) {
		t.Fatalf("the body ran as attempts %v, want [1 2]: each crash counted", attempts)
	}
	var se *workflow.StepError
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &se) || se.Attempts != 2 || !strings.Contains(out.Err.Error(), "exhausted") {
		t.Fatalf("outcome %v (%v) after %d activations; want failed, the step exhausted after 2 attempts", out.Status, out.Err, n)
	}
	if n != 3 {
		t.Errorf("%d activations, want 3: two crashed, the third recorded the step exhausted", n)
	}
	hist := h.History()
	if len(hist) != 1 || hist[0].Status != workflow.StatusExhausted || hist[0].Attempts != 2 ||
		hist[0].Error == nil || hist[0].Error.Message != workflow.AbandonedAttemptMessage(2) {
		t.Fatalf("history %+v; want poison exhausted after 2 attempts, the last ended with its node", hist)
	}
}

// After a crash in a step's body, the step's next run is attempt 2
// (StepCtx.Attempt), and the history keeps the lost attempt; a crash
// before the commit of an attempt's record counts the same, as a node's
// lost write does. A crash in a later body of a run (not marked) is not
// counted, as on a node: that step, the first body of the next run, runs
// again as attempt 1.
func TestAStepAfterACrashInItsBodyRunsItsNextAttempt(t *testing.T) {
	type st struct {
		Seen []int `json:"seen"`
	}
	var mu sync.Mutex
	crashes := map[string]int{}
	var h *workflowtest.Host[st]
	step := func(c *workflow.Ctx[st], name string, crash int) error {
		return c.Step(name, func(s *workflow.StepCtx[st]) error {
			s.State.Seen = append(s.State.Seen, s.Attempt())
			mu.Lock()
			n := crashes[name]
			crashes[name]++
			mu.Unlock()
			if n < crash {
				h.Crash(s.Context())
				return s.Context().Err()
			}
			return nil
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	h = workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[st]) error { return step(c, "first", 1) }, workflowtest.DriveOptions{MaxActivations: 10})
	hist := h.History()
	if out.Status != workflow.RunCompleted || !slices.Equal(h.State().Seen, []int{2}) || len(hist) != 1 || hist[0].Attempts != 2 {
		t.Fatalf("crash in the body: outcome %v (%v), state %v, history %+v; want completed at attempt 2", out.Status, out.Err, h.State().Seen, hist)
	}

	h = workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	var doAttempts []int
	out, _ = h.Drive(ctx, func(c *workflow.Ctx[st]) error {
		_, err := workflow.Do(c, "call", func(d *workflow.DoCtx) (int, error) {
			mu.Lock()
			doAttempts = append(doAttempts, d.Attempt())
			n := len(doAttempts)
			mu.Unlock()
			if n == 1 {
				h.Crash(d.Context())
				return 0, d.Context().Err()
			}
			return n, nil
		})
		return err
	}, workflowtest.DriveOptions{MaxActivations: 10})
	mu.Lock()
	got := slices.Clone(doAttempts)
	mu.Unlock()
	if out.Status != workflow.RunCompleted || !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("crash in a Do body: outcome %v (%v), attempts %v; want completed at attempt 2", out.Status, out.Err, got)
	}

	h = workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.CrashAt(1, false) // the record of the step's first attempt never commits
	out, _ = h.Drive(ctx, func(c *workflow.Ctx[st]) error { return step(c, "lost", 0) }, workflowtest.DriveOptions{MaxActivations: 10})
	if out.Status != workflow.RunCompleted || !slices.Equal(h.State().Seen, []int{2}) {
		t.Fatalf("crash at the record's commit: outcome %v (%v), state %v; want completed at attempt 2", out.Status, out.Err, h.State().Seen)
	}

	h = workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	out, _ = h.Drive(ctx, func(c *workflow.Ctx[st]) error {
		if err := step(c, "a", 0); err != nil {
			return err
		}
		return step(c, "b", 1)
	}, workflowtest.DriveOptions{MaxActivations: 10})
	if out.Status != workflow.RunCompleted || !slices.Equal(h.State().Seen, []int{1, 1}) {
		t.Fatalf("crash in a run's second body: outcome %v (%v), state %v; want completed, b at attempt 1 (its crash not marked)", out.Status, out.Err, h.State().Seen)
	}
}

// A body cut off by an eviction (the run's context cancelled: the host's
// graceful stop) is not counted, as a node does not count the bodies its
// graceful leave abandons: the next run runs the step as attempt 1 again.
func TestAStepCutOffByAnEvictionIsNotCounted(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	var attempts []int
	wf := func(c *workflow.Ctx[struct{}]) error {
		return c.Step("work", func(s *workflow.StepCtx[struct{}]) error {
			mu.Lock()
			attempts = append(attempts, s.Attempt())
			first := len(attempts) == 1
			mu.Unlock()
			if first {
				started <- struct{}{}
				<-s.Context().Done()
				return s.Context().Err()
			}
			return nil
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rctx, evict := context.WithCancel(ctx)
	go func() {
		select {
		case <-started:
		case <-ctx.Done():
		}
		evict()
	}()
	if out := h.Run(rctx, wf); out.Status != workflow.RunYielded {
		t.Fatalf("evicted run: %v (%v), want yielded", out.Status, out.Err)
	}
	if out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{MaxActivations: 5}); out.Status != workflow.RunCompleted {
		t.Fatalf("second run: %v (%v), want completed", out.Status, out.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 1}) {
		t.Fatalf("attempts %v, want [1 1]: the evicted body is not counted", attempts)
	}
	if hist := h.History(); len(hist) != 1 || hist[0].Attempts != 1 {
		t.Fatalf("history %+v; want work completed at attempt 1", hist)
	}
}

// A node unloads a workflow that waits longer than its IdleTimeout, and the
// wake starts a new run, which marks its first body: a crash in the first
// step after a long sleep counts, though the step is not the first of the
// activation Drive keeps in memory. A short wait keeps the run in memory
// on a node too: a crash in the step after it goes uncounted.
func TestACrashInTheFirstStepAfterALongWaitCounts(t *testing.T) {
	type st struct {
		Seen []int `json:"seen"`
	}
	run := func(wait time.Duration) ([]int, workflow.Outcome) {
		h := workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
		crashed := false
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, _ := h.Drive(ctx, func(c *workflow.Ctx[st]) error {
			if err := c.Step("a", func(s *workflow.StepCtx[st]) error {
				s.State.Seen = append(s.State.Seen, s.Attempt())
				return nil
			}); err != nil {
				return err
			}
			if err := c.Sleep("wait", wait); err != nil {
				return err
			}
			return c.Step("b", func(s *workflow.StepCtx[st]) error {
				s.State.Seen = append(s.State.Seen, s.Attempt())
				if !crashed { // bodies run one at a time here
					crashed = true
					return h.Crash(s.Context())
				}
				return nil
			})
		}, workflowtest.DriveOptions{MaxActivations: 10})
		return h.State().Seen, out
	}
	if seen, out := run(24 * time.Hour); out.Status != workflow.RunCompleted || !slices.Equal(seen, []int{1, 2}) {
		t.Errorf("after a 24 h sleep: outcome %v (%v), attempts %v; want completed, b at attempt 2 (its crash counted, as on a node, which unloaded the workflow)", out.Status, out.Err, seen)
	}
	if seen, out := run(10 * time.Second); out.Status != workflow.RunCompleted || !slices.Equal(seen, []int{1, 1}) {
		t.Errorf("after a 10 s sleep: outcome %v (%v), attempts %v; want completed, b at attempt 1 (a node with room for the actor keeps the run in memory: b not marked)", out.Status, out.Err, seen)
	}
}

// A node's reaper counts idleness from the actor's last turn (a commit),
// not from the start of the wait it sees: after a join's branches sleep
// 50 s and 100 s (IdleTimeout 30 s), the wait from 50 s to 100 s follows
// no commit since step a's, so a node unloads the workflow in it (at
// 60-70 s: idle for more than 30 s, the wake still more than 30 s away),
// although neither wait is longer than twice IdleTimeout. b, the first
// body of the new run, is marked, and its crash counts.
func TestIdlenessCountsFromTheLastCommitNotTheWaitsStart(t *testing.T) {
	type st struct {
		Seen []int `json:"seen"`
	}
	h := workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	crashed := false
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sleeper := func(d time.Duration) func(*workflow.Ctx[st]) (int, error) {
		return func(c *workflow.Ctx[st]) (int, error) { return 0, c.Sleep("nap", d) }
	}
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[st]) error {
		if err := c.Step("a", func(s *workflow.StepCtx[st]) error {
			s.State.Seen = append(s.State.Seen, s.Attempt())
			return nil
		}); err != nil {
			return err
		}
		if _, err := workflow.Join(c, "naps", workflow.Branches[st, int]{
			"short": sleeper(50 * time.Second),
			"long":  sleeper(100 * time.Second),
		}); err != nil {
			return err
		}
		return c.Step("b", func(s *workflow.StepCtx[st]) error {
			s.State.Seen = append(s.State.Seen, s.Attempt())
			if !crashed { // bodies run one at a time here
				crashed = true
				return h.Crash(s.Context())
			}
			return nil
		})
	}, workflowtest.DriveOptions{MaxActivations: 10})
	if seen := h.State().Seen; out.Status != workflow.RunCompleted || !slices.Equal(seen, []int{1, 2}) {
		t.Errorf("outcome %v (%v), attempts %v; want completed, b at attempt 2 (a node unloads the workflow 30 s after a's commit, with the wake 100 s after it: b's crash counted)", out.Status, out.Err, seen)
	}

	// A step's commit between the sleeps is a turn: no wait then has 30
	// s of idleness with its wake still 30 s away, and the node keeps
	// the run.
	h = workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	crashed = false
	out, _ = h.Drive(ctx, func(c *workflow.Ctx[st]) error {
		if err := c.Step("a", func(s *workflow.StepCtx[st]) error {
			s.State.Seen = append(s.State.Seen, s.Attempt())
			return nil
		}); err != nil {
			return err
		}
		if err := c.Sleep("first", 50*time.Second); err != nil {
			return err
		}
		if err := c.Step("mid", func(*workflow.StepCtx[st]) error { return nil }); err != nil {
			return err
		}
		if err := c.Sleep("second", 50*time.Second); err != nil {
			return err
		}
		return c.Step("b", func(s *workflow.StepCtx[st]) error {
			s.State.Seen = append(s.State.Seen, s.Attempt())
			if !crashed {
				crashed = true
				return h.Crash(s.Context())
			}
			return nil
		})
	}, workflowtest.DriveOptions{MaxActivations: 10})
	if seen := h.State().Seen; out.Status != workflow.RunCompleted || !slices.Equal(seen, []int{1, 1}) {
		t.Errorf("with a step between the sleeps: outcome %v (%v), attempts %v; want completed, b at attempt 1 (the step's commit is a turn: a node keeps the run, b not marked)", out.Status, out.Err, seen)
	}
}

// Crash takes any context of a running activation: the workflow's own,
// between steps, crashes the run there; a second call is harmless. A
// context kept past its Run, or of another host, panics rather than crash
// nothing (or hang).
func TestCrashTakesAContextOfARunningActivationOnly(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var kept context.Context
	var errs []error
	out := h.Run(ctx, func(c *workflow.Ctx[struct{}]) error {
		kept = c.Context()
		errs = append(errs, h.Crash(context.WithoutCancel(c.Context())), h.Crash(c.Context()))
		return c.Step("after", func(*workflow.StepCtx[struct{}]) error { return nil })
	})
	if len(errs) != 2 || !errors.Is(errs[0], workflowtest.ErrCrash) || !errors.Is(errs[1], workflowtest.ErrCrash) {
		t.Fatalf("Crash returned %v, want ErrCrash twice", errs)
	}
	if out.Status != workflow.RunYielded || !errors.Is(out.Err, workflowtest.ErrCrash) || len(h.History()) != 0 {
		t.Fatalf("outcome %v (%v), history %+v; want the run crashed before its step", out.Status, out.Err, h.History())
	}
	panics := func(name string, ctx context.Context) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("Crash with %s did not panic", name)
			}
		}()
		h.Crash(ctx)
	}
	panics("a context kept past its Run", kept)
	panics("a context of no run", ctx)
	other := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	other.Run(ctx, func(c *workflow.Ctx[struct{}]) error {
		panics("another host's run's context", c.Context())
		return nil
	})
}

// CrashAt before the commit of a marked step's record counts the attempt
// (CrashAt's doc): a step without retries whose first record is lost ends
// exhausted, and fails the workflow, as on a node; it completed when the
// host kept no markers.
func TestALostRecordOfAStepWithoutRetriesExhaustsIt(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.CrashAt(1, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		return c.StepWith(workflow.StepOptions{Name: "once", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[struct{}]) error { return nil })
	}, workflowtest.DriveOptions{MaxActivations: 10})
	hist := h.History()
	if out.Status != workflow.RunFailed || len(hist) != 1 || hist[0].Status != workflow.StatusExhausted || hist[0].Attempts != 1 {
		t.Fatalf("outcome %v (%v), history %+v; want failed, the step exhausted after its lost attempt", out.Status, out.Err, hist)
	}
}

// SetHistory rewrites the history as a node's retry does, and deletes the
// markers with it: a crash's marker from before does not count against
// the step the next run runs.
func TestSetHistoryDeletesTheMarkers(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var attempts []int
	crash := true
	fn := func(c *workflow.Ctx[struct{}]) error {
		return c.Step("s", func(s *workflow.StepCtx[struct{}]) error {
			attempts = append(attempts, s.Attempt()) // one body at a time
			if crash {
				crash = false
				return h.Crash(s.Context())
			}
			return nil
		})
	}
	if out := h.Run(ctx, fn); !errors.Is(out.Err, workflowtest.ErrCrash) {
		t.Fatalf("first run: %v (%v), want crashed", out.Status, out.Err)
	}
	h.SetHistory(h.History())
	if out, _ := h.Drive(ctx, fn, workflowtest.DriveOptions{MaxActivations: 10}); out.Status != workflow.RunCompleted {
		t.Fatalf("second run: %v (%v), want completed", out.Status, out.Err)
	}
	if !slices.Equal(attempts, []int{1, 1}) {
		t.Fatalf("attempts %v, want [1 1]: SetHistory deleted the crash's marker", attempts)
	}
}

// An ephemeral step's body is not marked (the engine does not ask, as on a
// node): a crash in it goes uncounted, and it runs again as attempt 1.
func TestACrashInAnEphemeralStepIsNotCounted(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var attempts []int
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		return c.StepWith(workflow.StepOptions{Name: "cheap", Ephemeral: true}, func(s *workflow.StepCtx[struct{}]) error {
			attempts = append(attempts, s.Attempt())
			if len(attempts) == 1 {
				return h.Crash(s.Context())
			}
			return nil
		})
	}, workflowtest.DriveOptions{MaxActivations: 10})
	if out.Status != workflow.RunCompleted || !slices.Equal(attempts, []int{1, 1}) {
		t.Fatalf("outcome %v (%v), attempts %v; want completed, [1 1]", out.Status, out.Err, attempts)
	}
}

// A run marks at most 64 bodies, as a node: of 70 Do bodies that start
// together (before any records its end) and crash, 64 run again as
// attempt 2, the 6 past the cap as attempt 1.
func TestARunMarksAtMost64Bodies(t *testing.T) {
	const n = 70
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var mu sync.Mutex
	started := 0
	var second []int
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		branches := workflow.Branches[struct{}, int]{}
		for i := range n {
			branches[fmt.Sprintf("b%02d", i)] = func(c *workflow.Ctx[struct{}]) (int, error) {
				return workflow.Do(c, "call", func(d *workflow.DoCtx) (int, error) {
					mu.Lock()
					defer mu.Unlock()
					if started < n {
						// The first run: every body starts, then the
						// last one crashes the node.
						if started++; started == n {
							return 0, h.Crash(d.Context())
						}
						mu.Unlock()
						select {
						case <-d.Context().Done():
						case <-time.After(10 * time.Second):
						}
						mu.Lock()
						return 0, d.Context().Err()
					}
					second = append(second, d.Attempt())
					return d.Attempt(), nil
				})
			}
		}
		_, err := workflow.Join(c, "fan", branches)
		return err
	}, workflowtest.DriveOptions{MaxActivations: 10})
	mu.Lock()
	defer mu.Unlock()
	twos := 0
	for _, a := range second {
		if a == 2 {
			twos++
		}
	}
	if out.Status != workflow.RunCompleted || started != n || len(second) != n || twos != 64 {
		t.Fatalf("outcome %v (%v), %d bodies started in the first run, second run's attempts %v; want completed, 64 of %d at attempt 2", out.Status, out.Err, started, second, n)
	}
}

// A sender that waits for a message's completion (SendWait) keeps a
// node's reaper off the workflow, however long it sleeps: the run stays
// in memory, and the first body after the sleep is not marked again.
func TestASendWaitersPendingCompletionKeepsTheRunThroughALongWait(t *testing.T) {
	type st struct {
		Seen []int `json:"seen"`
	}
	h := workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	_, answered := h.SendWait("q", 1)
	crashed := false
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[st]) error {
		if err := c.Step("a", func(s *workflow.StepCtx[st]) error {
			s.State.Seen = append(s.State.Seen, s.Attempt())
			return nil
		}); err != nil {
			return err
		}
		if err := c.Sleep("wait", 24*time.Hour); err != nil {
			return err
		}
		if err := c.Step("b", func(s *workflow.StepCtx[st]) error {
			s.State.Seen = append(s.State.Seen, s.Attempt())
			if !crashed {
				crashed = true
				return h.Crash(s.Context())
			}
			return nil
		}); err != nil {
			return err
		}
		m, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"q"}})
		if err != nil {
			return err
		}
		return m.Complete(m.Body + 1)
	}, workflowtest.DriveOptions{MaxActivations: 10})
	if seen := h.State().Seen; out.Status != workflow.RunCompleted || !slices.Equal(seen, []int{1, 1}) {
		t.Errorf("outcome %v (%v), attempts %v; want completed, b at attempt 1 (a node keeps a run whose sender waits: b not marked)", out.Status, out.Err, seen)
	}
	select {
	case r := <-answered:
		if string(r) != "2" {
			t.Errorf("the sender got %s, want 2", r)
		}
	default:
		t.Error("the sender got no answer")
	}
}

// Drive ends a run that waits for messages only, and the Drive after the
// test's Send runs a new one, as a node's load after an idle unload: the
// first body after the receive is marked, and its crash counts.
func TestTheFirstBodyAfterDriveReturnedForMessagesIsMarked(t *testing.T) {
	type st struct {
		Seen []int `json:"seen"`
	}
	h := workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	crashed := false
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run := func(c *workflow.Ctx[st]) error {
		if err := c.Step("a", func(s *workflow.StepCtx[st]) error {
			s.State.Seen = append(s.State.Seen, s.Attempt())
			return nil
		}); err != nil {
			return err
		}
		if _, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"q"}}); err != nil {
			return err
		}
		return c.Step("b", func(s *workflow.StepCtx[st]) error {
			s.State.Seen = append(s.State.Seen, s.Attempt())
			if !crashed {
				crashed = true
				return h.Crash(s.Context())
			}
			return nil
		})
	}
	if out, _ := h.Drive(ctx, run, workflowtest.DriveOptions{MaxActivations: 10}); out.Status != workflow.RunYielded || !out.Wake.At.IsZero() {
		t.Fatalf("first Drive: outcome %v (%v), wake %+v; want yielded, waiting for messages", out.Status, out.Err, out.Wake)
	}
	h.Send("q", 1)
	out, _ := h.Drive(ctx, run, workflowtest.DriveOptions{MaxActivations: 10})
	if seen := h.State().Seen; out.Status != workflow.RunCompleted || !slices.Equal(seen, []int{1, 2}) {
		t.Errorf("outcome %v (%v), attempts %v; want completed, b at attempt 2 (the first body of the second Drive's run is marked)", out.Status, out.Err, seen)
	}
}
