package workflowtest_test

import (
	"context"
	"errors"
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
