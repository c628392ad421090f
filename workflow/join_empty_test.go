package workflow_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// A fan-out sized at run time may have nothing to fan out: a join with no
// branches returns an empty map at once (as Promise.allSettled([]) does),
// its record holds no branches, and a crash at any commit replays to the
// crash-free run's state and history. It failed the run with ErrInvalid.
func TestAJoinWithNoBranchesReturnsAnEmptyMap(t *testing.T) {
	fanOut := func(c *logCtx, name string, n int) error {
		br := workflow.Branches[log, int]{}
		for i := range n {
			br[fmt.Sprint("b", i)] = func(c *logCtx) (int, error) {
				return workflow.Step(c, "work", func(s *logStep) (int, error) {
					s.State.Log = append(s.State.Log, fmt.Sprint(name, " branch ", i))
					return i, nil
				})
			}
		}
		got, err := workflow.Join(c, name, br)
		if err != nil {
			return err
		}
		if got == nil || len(got) != n {
			return fmt.Errorf("join %q gave %v, want a map of %d", name, got, n)
		}
		return c.Step(name+"-done", func(s *logStep) error {
			s.State.Log = append(s.State.Log, fmt.Sprintf("%s: %d", name, len(got)))
			return nil
		})
	}
	wf := func(c *logCtx) error {
		for i, n := range []int{0, 2, 0} {
			if err := fanOut(c, fmt.Sprint("fan", i), n); err != nil {
				return err
			}
		}
		// Two empty joins back to back, nothing between them committed.
		if err := fanOut(c, "empty-a", 0); err != nil {
			return err
		}
		return fanOut(c, "empty-b", 0)
	}
	h := newHost(log{})
	out := drive(t, h, wf)
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %v %v, want completed", out.Status, out.Err)
	}
	// The branches of fan1 run side by side: their lines come in either
	// order.
	sorted := func(l []string) []string { return slices.Sorted(slices.Values(l)) }
	want := sorted(h.State().Log)
	wantHist := h.HistoryJSON()
	found := false
	for _, e := range h.History() {
		if e.Path == "fan0" {
			found = true
			if e.Kind != workflow.KindJoin || e.Status != workflow.StatusCompleted || len(e.Branches) != 0 || e.Time.IsZero() {
				t.Fatalf("fan0's record %+v, want a completed join with no branches, at the host's time", e)
			}
		}
	}
	if !found {
		t.Fatalf("no record of the empty join fan0 in %s", wantHist)
	}
	for k := 1; k <= h.Commits()+1; k++ {
		for _, after := range []bool{false, true} {
			hk := newHost(log{})
			hk.CrashAt(k, after)
			out := drive(t, hk, wf)
			if out.Status != workflow.RunCompleted || !reflect.DeepEqual(sorted(hk.State().Log), want) || hk.HistoryJSON() != wantHist {
				t.Errorf("crash at commit %d (after: %v): outcome %v %v, log %q, want %q; history\n%s\nwant\n%s", k, after, out.Status, out.Err, hk.State().Log, want, hk.HistoryJSON(), wantHist)
			}
		}
	}
}

// A race needs a branch: one with none could never be decided.
func TestARaceWithNoBranchesFailsTheRun(t *testing.T) {
	h := newHost(log{})
	out := drive(t, h, func(c *logCtx) error {
		_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{})
		return err
	})
	if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrInvalid) {
		t.Fatalf("outcome %v %v, want failed with ErrInvalid", out.Status, out.Err)
	}
}

// A join recorded pending with no branches (no build writes one, an
// imported or hand-made history may hold one) settles as a new one does:
// it left the run's count of threads at work one short, so that a later
// join reported itself waiting while a branch still ran a step, and the
// host's clock, moved on, timed that step out.
func TestAJoinRecordedPendingWithNoBranchesSettles(t *testing.T) {
	h := newHost(log{})
	h.SetHistory([]workflow.Entry{{Path: "j", Seq: 1, Kind: workflow.KindJoin, Status: workflow.StatusPending, Time: t0}})
	out := drive(t, h, func(c *logCtx) error {
		if _, err := workflow.Join(c, "j", workflow.Branches[log, int]{}); err != nil {
			return err
		}
		_, err := workflow.Join(c, "k", workflow.Branches[log, int]{
			"a": func(c *logCtx) (int, error) { return 0, c.Sleep("z", time.Minute) },
			"b": func(c *logCtx) (int, error) {
				// A step at work for a while of real time: the run is
				// not waiting meanwhile.
				return 1, c.Step("s", func(s *logStep) error { time.Sleep(300 * time.Millisecond); return nil })
			},
		})
		return err
	})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %v %v, want completed", out.Status, out.Err)
	}
	for _, e := range h.History() {
		if e.Path == "j" && e.Status != workflow.StatusCompleted {
			t.Errorf("j's record %+v, want completed", e)
		}
	}
}
