package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A join or race opened before any entry that records a time, whose
// branches pass none either (a version gate, nothing at all), records the
// host's time when it opens: Ctx.Now after it must be that time on every
// replay too, not the clock of the run that replays it. (Found by
// TestRandomSim, seed 72: a race's time noted before a receive, logged by
// the step after it, changed when a crash made the step run again. Seed
// 1093 at size 24: the time, recorded when the join settled, changed when
// a crash lost that record, which waits for the next commit.)
func TestNowAfterASettledJoinOrRaceWithoutTimes(t *testing.T) {
	type st struct{}
	type wctx = workflow.Ctx[st]
	for _, what := range []string{"join", "race"} {
		t.Run(what, func(t *testing.T) {
			h := workflowtest.NewHost(st{}, workflowtest.NewClock(t0))
			var seen []time.Duration
			wf := func(c *wctx) error {
				if err := c.RollbackCheckpoint("cp"); err != nil {
					return err
				}
				var err error
				if what == "join" {
					_, err = workflow.Join(c, "j", workflow.Branches[st, int]{
						"a": func(c *wctx) (int, error) { return 1, nil },
						"b": func(c *wctx) (int, error) { _, err := c.GetVersion("v", 2); return 2, err },
					})
				} else {
					_, _, err = workflow.Race(c, "r", []workflow.RaceBranch[st, int]{
						{Name: "now", Run: func(c *wctx) (int, error) { _, err := c.GetVersion("v", 2); return 1, err }},
						{Name: "later", Run: func(c *wctx) (int, error) { return 2, c.Sleep("z", time.Hour) }},
					})
				}
				if err != nil {
					return err
				}
				seen = append(seen, c.Now().Sub(t0))
				// A receive with a timeout records its deadline at once,
				// and with it the settled join's record (which waits for
				// the next commit: lost, the join would run again).
				_, err = workflow.Next[int](c, "m", workflow.NextOptions{Names: []string{"q"}, Timeout: time.Hour})
				return err
			}
			// The first run settles the join or race at t0, then waits for
			// a message and is evicted; the second, a minute later, replays.
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-h.Wakes(); cancel() }()
			if out := h.Run(ctx, wf); out.Status != workflow.RunYielded {
				t.Fatalf("first run: %+v", out)
			}
			h.Clock.Advance(time.Minute)
			h.Send("q", 1)
			if out := h.Run(context.Background(), wf); out.Status != workflow.RunCompleted {
				t.Fatalf("second run: %+v", out)
			}
			if len(seen) != 2 || seen[0] != 0 || seen[1] != 0 {
				t.Fatalf("Now after the %s: %v in the two runs, want 0s both times", what, seen)
			}
		})
	}
}

// Before any entry that records a time (at the top of the workflow, after
// a version gate, a Removed or a rollback checkpoint), Ctx.Now is when the
// workflow started, on the first run, on a replay a minute later, and in
// a replay of the history's export alike: a deadline computed as the
// workflow starts is the same every time, where it used to be the
// replaying run's clock. A history recorded before the start was kept
// (no entry says it) goes on reading the clock there, as its first run
// did, and gains no start from a later run.
func TestNowBeforeAnyTimedEntryIsTheWorkflowsStart(t *testing.T) {
	type st struct{}
	type wctx = workflow.Ctx[st]
	var seen []time.Duration
	wf := func(c *wctx) error {
		seen = append(seen, c.Now().Sub(t0))
		if _, err := c.GetVersion("v", 2); err != nil {
			return err
		}
		if err := c.Removed("old", workflow.KindStep); err != nil {
			return err
		}
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		seen = append(seen, c.Now().Sub(t0))
		// A receive with a timeout records its deadline at once: the
		// first run commits its entries, and with them its start.
		_, err := workflow.Next[int](c, "m", workflow.NextOptions{Names: []string{"q"}, Timeout: time.Hour})
		return err
	}
	for _, legacy := range []bool{false, true} {
		seen = nil
		h := workflowtest.NewHost(st{}, workflowtest.NewClock(t0))
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-h.Wakes(); cancel() }()
		if out := h.Run(ctx, wf); out.Status != workflow.RunYielded {
			t.Fatalf("first run: %+v", out)
		}
		hist := h.History()
		if len(hist) != 4 {
			t.Fatalf("the first run committed %d entries, want 4: %s", len(hist), h.HistoryJSON())
		}
		for i := range hist {
			if legacy {
				hist[i].StartedAt = time.Time{}
			} else if !hist[i].StartedAt.Equal(t0) {
				t.Errorf("entry %s says the workflow started at %v, want t0", hist[i].Path, hist[i].StartedAt)
			}
		}
		h.SetHistory(hist)
		h.Clock.Advance(time.Minute)
		x := &workflow.HistoryExport{Format: workflow.HistoryExportFormat, Actor: h.Name, Key: h.Key, WorkflowStatus: "sleeping", ExportedAt: h.Clock.Now()}
		for _, e := range hist {
			b, err := workflow.MarshalEntry(&e)
			if err != nil {
				t.Fatal(err)
			}
			x.Entries = append(x.Entries, b)
		}
		if err := workflowtest.Replay(context.Background(), x, wf); err != nil {
			t.Fatalf("replay of the export: %v", err)
		}
		h.Send("q", 1)
		if out := h.Run(context.Background(), wf); out.Status != workflow.RunCompleted {
			t.Fatalf("second run: %+v", out)
		}
		want := []time.Duration{0, 0, 0, 0, 0, 0}
		if legacy {
			want = []time.Duration{0, 0, time.Minute, time.Minute, time.Minute, time.Minute}
			for _, e := range h.History() {
				if !e.StartedAt.IsZero() {
					t.Errorf("a run of a history without a start recorded one: %s says %v", e.Path, e.StartedAt)
				}
			}
		}
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Errorf("legacy %v: Now before any timed entry in the first run, the export's replay and the second run: %v, want %v", legacy, seen, want)
		}
	}
}

// A workflow whose first entries are in a try block (which records no
// entry of its own) records its start on them: a replay reads it there,
// and so does every run after the first.
func TestNowAtTheStartOfAWorkflowThatStartsWithATry(t *testing.T) {
	type st struct{}
	type wctx = workflow.Ctx[st]
	var seen []time.Duration
	wf := func(c *wctx) error {
		seen = append(seen, c.Now().Sub(t0))
		if _, err := c.Try("t", func(c *wctx) error {
			_, err := workflow.Next[int](c, "m", workflow.NextOptions{Names: []string{"q"}, Timeout: time.Hour})
			return err
		}); err != nil {
			return err
		}
		return c.Step("s", func(*workflow.StepCtx[st]) error { return nil })
	}
	h := workflowtest.NewHost(st{}, workflowtest.NewClock(t0))
	for run := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-h.Wakes(); cancel() }()
		if out := h.Run(ctx, wf); out.Status != workflow.RunYielded {
			t.Fatalf("run %d: %+v", run+1, out)
		}
		h.Clock.Advance(time.Minute)
	}
	h.Send("q", 1)
	if out := h.Run(context.Background(), wf); out.Status != workflow.RunCompleted {
		t.Fatalf("last run: %+v", out)
	}
	if fmt.Sprint(seen) != "[0s 0s 0s]" {
		t.Errorf("Now at the top in three runs a minute apart: %v, want 0s each time", seen)
	}
	for _, e := range h.History() {
		if !e.StartedAt.Equal(t0) {
			t.Errorf("entry %s says the workflow started at %v, want t0", e.Path, e.StartedAt)
		}
	}
}
