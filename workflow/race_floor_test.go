package workflow_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A race of sleeps in which one branch is itself a race is won by the
// earlier deadline also when the run gets there after every deadline
// passed: the nested race, decided for its earlier sleep, holds the outer
// decision until its branch returns, while its loser stops.
func TestANestedRaceWinsByItsEarlierDeadlineWhenWokenLate(t *testing.T) {
	wf := func(c *logCtx) error {
		winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
			{Name: "late", Run: func(c *logCtx) (int, error) { return 2, c.Sleep("nap", 2*time.Second) }},
			{Name: "nested", Run: func(c *logCtx) (int, error) {
				_, v, err := workflow.Race(c, "in", []workflow.RaceBranch[log, int]{
					{Name: "early", Run: func(c *logCtx) (int, error) { return 1, c.Sleep("nap", time.Second) }},
					{Name: "never", Run: func(c *logCtx) (int, error) { return 3, c.Sleep("nap", time.Hour) }},
				})
				return v, err
			}},
		})
		if err != nil {
			return err
		}
		return c.Step("rec", func(s *logStep) error { s.State.Log = append(s.State.Log, winner); return nil })
	}
	want := []string{"nested"}
	h := newHost(log{})
	if out := drive(t, h, wf); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, want) {
		t.Fatalf("without an eviction: %+v, log %v", out, h.State().Log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 300; i++ {
		h := newHost(log{})
		out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{Stop: func(workflow.Wake) bool { return true }})
		if out.Status != workflow.RunYielded {
			t.Fatalf("run %d: first run %+v", i, out)
		}
		h.Clock.Set(t0.Add(10 * time.Second)) // back after both short deadlines
		if out := drive(t, h, wf); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, want) {
			t.Fatalf("run %d: %+v, log %v, want %v", i, out, h.State().Log, want)
		}
	}
	// Crashed at every commit, before or after it applies, and back late.
	for k := 1; k <= 10; k++ {
		for _, after := range []bool{false, true} {
			for i := 0; i < 10; i++ {
				h := newHost(log{})
				h.CrashAt(k, after)
				if out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{MaxActivations: 1}); out.Status != workflow.RunYielded {
					break // no commit k
				}
				// A sleep whose start the crash lost starts again, late.
				started := map[string]bool{}
				for _, e := range h.History() {
					started[e.Path] = true
				}
				want := want
				if started["r/late/nap"] && !started["r/nested/in/early/nap"] {
					want = []string{"late"}
				}
				h.Clock.Set(t0.Add(10 * time.Second))
				if out := drive(t, h, wf); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, want) {
					t.Fatalf("crash at commit %d (after=%v), run %d: %+v, log %v, want %v", k, after, i, out, h.State().Log, want)
				}
			}
		}
	}
}

// A live race is decided at the timeout's deadline whatever the other
// branches do meanwhile: run a step until they lose, wait out a retry
// backoff, wait for a message, or run a join of such.
func TestATimeoutWinsALiveRaceAtItsDeadline(t *testing.T) {
	// Step bodies run one at a time (the actor's turn): the first holds
	// the turn until its branch loses, the others wait for it.
	running := make(chan struct{})
	var once sync.Once
	untilLost := func(c *logCtx, name string) (int, error) {
		return workflow.Step(c, name, func(s *logStep) (int, error) {
			once.Do(func() { close(running) })
			<-s.Context().Done()
			return 0, s.Context().Err()
		})
	}
	wf := func(c *logCtx) error {
		winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
			{Name: "step", Run: func(c *logCtx) (int, error) { return untilLost(c, "long") }},
			{Name: "backoff", Run: func(c *logCtx) (int, error) {
				return workflow.StepOpts(c, workflow.StepOptions{Name: "flaky", RetryBackoffBase: time.Hour}, func(s *logStep) (int, error) {
					return 0, errors.New("down")
				})
			}},
			{Name: "listen", Run: func(c *logCtx) (int, error) {
				m, err := workflow.Next[job](c, "take", workflow.NextOptions{Names: []string{"never"}})
				return m.Body.N, err
			}},
			{Name: "join", Run: func(c *logCtx) (int, error) {
				_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
					"step": func(c *logCtx) (int, error) { return untilLost(c, "long") },
					"listen": func(c *logCtx) (int, error) {
						m, err := workflow.Next[job](c, "take", workflow.NextOptions{Names: []string{"never"}})
						return m.Body.N, err
					},
				})
				return 0, err
			}},
			{Name: "timeout", Run: func(c *logCtx) (int, error) { return 0, c.Sleep("nap", time.Minute) }},
		})
		if err != nil {
			return err
		}
		return c.Step("rec", func(s *logStep) error { s.State.Log = append(s.State.Log, winner); return nil })
	}
	h := newHost(log{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan workflow.Outcome, 1)
	go func() { done <- h.Run(ctx, wf) }()
	// The nap's timer (the backoff's may come first).
	for n := 1; !slices.Contains(h.Clock.Timers(), t0.Add(time.Minute)); n++ {
		if err := h.Clock.WaitTimers(ctx, n); err != nil {
			t.Fatalf("the nap never started: timers %v", h.Clock.Timers())
		}
	}
	<-running
	h.Clock.Set(t0.Add(time.Minute))
	select {
	case out := <-done:
		if want := []string{"timeout"}; out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, want) {
			t.Fatalf("outcome %+v, log %v, want %v", out, h.State().Log, want)
		}
	case <-ctx.Done():
		t.Fatal("the race was not decided at the timeout's deadline")
	}
}
