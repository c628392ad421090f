package workflow_test

// Promises of rivet-semantics.md that no other test asserted.

import (
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rivet-go/rivet/workflow"
)

// A join records its entry, every branch pending, before any branch runs;
// when it settles, its error holds every failed branch's error by name
// (codes kept) and none of the branches that succeeded; a replay returns
// the same error from the record without running a branch again
// (rivet-semantics.md 1.7).
func TestJoinAggregatesItsFailedBranchesAndReplaysThem(t *testing.T) {
	h := newHost(log{})
	var first []workflow.HistoryWrite
	h.OnBatch = func(batch []workflow.HistoryWrite) {
		if first == nil {
			first = append([]workflow.HistoryWrite{}, batch...)
		}
	}
	var runs atomic.Int32
	wf := func(c *logCtx) error {
		_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
			"card": func(c *logCtx) (int, error) {
				runs.Add(1)
				return workflow.StepOpts(c, workflow.StepOptions{Name: "charge", MaxRetries: workflow.NoRetries}, func(*logStep) (int, error) {
					return 0, codedErr{}
				})
			},
			"own": func(c *logCtx) (int, error) {
				runs.Add(1)
				return 0, errors.New("no stock")
			},
			"ok": func(c *logCtx) (int, error) {
				runs.Add(1)
				return workflow.Step(c, "s", func(*logStep) (int, error) { return 1, nil })
			},
		})
		return err
	}
	out := drive(t, h, wf)
	check := func(out workflow.Outcome) {
		t.Helper()
		je := failedWith[*workflow.JoinError](t, out)
		if je.Path != "j" || len(je.Errors) != 2 || je.Errors["own"] == nil || je.Errors["own"].Error() != "no stock" {
			t.Fatalf("join error %+v", je)
		}
		var coder interface{ ErrorCode() string }
		if !errors.As(je.Errors["card"], &coder) || coder.ErrorCode() != "card_declined" || !errors.As(out.Err, &coder) {
			t.Fatalf("the card branch's code is lost: %v", je.Errors["card"])
		}
		if !strings.Contains(out.Err.Error(), "card") || !strings.Contains(out.Err.Error(), "no stock") {
			t.Fatalf("the join's message does not name every failure: %v", out.Err)
		}
	}
	check(out)
	if len(first) != 1 || first[0].Put == nil || first[0].Put.Path != "j" || first[0].Put.Status != workflow.StatusPending {
		t.Fatalf("first commit %+v, want the join entry alone", first)
	}
	for _, n := range []string{"card", "own", "ok"} {
		if b, ok := first[0].Put.Branches[n]; !ok || b.Status != workflow.StatusPending {
			t.Fatalf("branch %q in the first commit: %+v", n, first[0].Put.Branches)
		}
	}
	e := entryAt(t, h.History(), "j")
	if e.Branches["ok"].Status != workflow.StatusCompleted || e.Branches["own"].Status != workflow.StatusFailed || e.Branches["card"].Status != workflow.StatusFailed {
		t.Fatalf("join entry %+v", e)
	}
	ran := runs.Load()
	check(drive(t, h, wf))
	if runs.Load() != ran {
		t.Fatalf("the replay ran %d branches again", runs.Load()-ran)
	}
}

// A race in flight whose code gained or lost a branch diverges, naming the
// branch, as a join does (rivet-semantics.md 1.12: "a join or race branch
// recorded in history is missing from the code").
func TestRaceRecordedBranchesMustMatch(t *testing.T) {
	branch := func(name string) workflow.RaceBranch[log, int] {
		return workflow.RaceBranch[log, int]{Name: name, Run: func(c *logCtx) (int, error) {
			m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{name}})
			return m.Body.N, err
		}}
	}
	race := func(names ...string) func(c *logCtx) error {
		return func(c *logCtx) error {
			var bs []workflow.RaceBranch[log, int]
			for _, n := range names {
				bs = append(bs, branch(n))
			}
			_, _, err := workflow.Race(c, "r", bs)
			return err
		}
	}
	for _, c := range []struct {
		name, path string
		v2         []string
	}{
		{"removed", "r/b", []string{"a"}},
		{"added", "r/c", []string{"a", "b", "c"}},
		{"renamed", "r/x", []string{"a", "x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := inFlight(t, race("a", "b"))
			de := failedWith[*workflow.DivergenceError](t, drive(t, h, race(c.v2...)))
			if de.Path != c.path {
				t.Fatalf("divergence %+v, want it at %q", de, c.path)
			}
		})
	}
	// Unchanged, it runs on.
	h := inFlight(t, race("a", "b"))
	h.Send("b", job{2})
	if out := drive(t, h, race("a", "b")); out.Status != workflow.RunCompleted {
		t.Fatalf("unchanged race: %+v", out)
	}
}

// A version gate is retired by putting Removed(name, KindVersionCheck) where
// it was (rivet-semantics.md 1.10): an instance that recorded the gate
// replays, a new one records the placeholder, and either takes the path
// the code kept.
func TestRemovedRetiresAVersionGate(t *testing.T) {
	gated := func(c *logCtx) error {
		v, err := c.GetVersion("gate", 2)
		if err != nil {
			return err
		}
		step := "old"
		if v == 2 {
			step = "new"
		}
		if err := note(c, step); err != nil {
			return err
		}
		return wait(c, "w")
	}
	retired := func(c *logCtx) error {
		if err := c.Removed("gate", workflow.KindVersionCheck); err != nil {
			return err
		}
		if err := note(c, "new"); err != nil {
			return err
		}
		return wait(c, "w")
	}
	h := newHostWith(t, gated)
	if out := drive(t, h, retired); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"new"}) {
		t.Fatalf("in flight: %+v %v", out, h.State().Log)
	}
	if e := entryAt(t, h.History(), "gate"); e.Kind != workflow.KindVersionCheck {
		t.Fatalf("the recorded gate was replaced: %+v", e)
	}
	h2 := newHost(log{})
	h2.Send("q", job{1})
	if out := drive(t, h2, retired); out.Status != workflow.RunCompleted {
		t.Fatalf("new: %+v", out)
	}
	if e := entryAt(t, h2.History(), "gate"); e.Kind != workflow.KindRemoved || e.RemovedKind != workflow.KindVersionCheck {
		t.Fatalf("placeholder %+v", e)
	}
	if out := drive(t, h2, retired); out.Status != workflow.RunCompleted {
		t.Fatalf("replay: %+v", out)
	}
	// Retiring the gate as the wrong kind is a divergence.
	out := drive(t, newHostWith(t, gated), func(c *logCtx) error { return c.Removed("gate", workflow.KindStep) })
	failedWith[*workflow.DivergenceError](t, out)
}
