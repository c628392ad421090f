package workflow_test

import (
	"context"
	"reflect"
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
