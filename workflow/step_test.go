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
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// log is the test state: steps append to it, so it shows which step bodies
// committed and in what order.
type log struct {
	Log   []string    `json:"log"`
	Times []time.Time `json:"times,omitempty"`
	N     int         `json:"n"`
}

type logCtx = workflow.Ctx[log]
type logStep = workflow.StepCtx[log]

func failedWith[E error](t *testing.T, out workflow.Outcome) E {
	t.Helper()
	var e E
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &e) {
		t.Fatalf("outcome %s %v, want a failure with %T", out.Status, out.Err, e)
	}
	return e
}

func entryAt(t *testing.T, hist []workflow.Entry, path string) workflow.Entry {
	t.Helper()
	for _, e := range hist {
		if e.Path == path {
			return e
		}
	}
	t.Fatalf("no entry %q in %v", path, hist)
	return workflow.Entry{}
}

func TestStepRetriesWithDefaultBackoff(t *testing.T) {
	for _, evict := range []bool{false, true} {
		h := newHost(log{})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, activations := h.Drive(ctx, func(c *logCtx) error {
			return c.Step("flaky", func(s *logStep) error {
				s.State.Times = append(s.State.Times, h.Clock.Now())
				return errors.New("unavailable")
			})
		}, workflowtest.DriveOptions{Evict: func(workflow.Wake) bool { return evict }})
		cancel()
		se := failedWith[*workflow.StepError](t, out)
		if se.Kind != workflow.FailureExhausted || se.Attempts != 4 || se.Path != "flaky" || se.Err.Error() != "unavailable" {
			t.Fatalf("step error %+v", se)
		}
		// Roll-forward: every failed attempt's change to the state was kept.
		want := []time.Time{t0, t0.Add(200 * time.Millisecond), t0.Add(600 * time.Millisecond), t0.Add(1400 * time.Millisecond)}
		if got := h.State().Times; !reflect.DeepEqual(got, want) {
			t.Fatalf("evict=%v: attempts at %v, want %v", evict, got, want)
		}
		if evict && activations != 4 {
			t.Fatalf("backoffs yielded %d activations, want 4", activations)
		}
		e := entryAt(t, h.History(), "flaky")
		if e.Status != workflow.StatusExhausted || e.Attempts != 4 || e.Failure != workflow.FailureExhausted {
			t.Fatalf("entry %+v", e)
		}
		// The failure is sticky: running again replays it without an attempt.
		again := drive(t, h, func(c *logCtx) error {
			return c.Step("flaky", func(s *logStep) error { t.Fatal("exhausted step re-ran"); return nil })
		})
		failedWith[*workflow.StepError](t, again)
	}
}

func TestStepOptionsRetriesAndValue(t *testing.T) {
	h := newHost(log{})
	var got string
	out := drive(t, h, func(c *logCtx) error {
		v, err := workflow.StepOpts(c, workflow.StepOptions{Name: "charge-card", MaxRetries: 5, RetryBackoffBase: 200 * time.Millisecond, RetryBackoffMax: 2 * time.Second},
			func(s *logStep) (string, error) {
				s.State.Times = append(s.State.Times, h.Clock.Now())
				if s.Attempt() < 6 {
					return "", errors.New("busy")
				}
				return "charge-1", nil
			})
		got = v
		return err
	})
	if out.Status != workflow.RunCompleted || got != "charge-1" {
		t.Fatalf("outcome %+v value %q", out, got)
	}
	// min(2s, 200ms·2^n): 400ms, 800ms, 1.6s, 2s, 2s.
	want := []time.Duration{0, 400, 1200, 2800, 4800, 6800}
	for i, ms := range want {
		if at := h.State().Times[i]; !at.Equal(t0.Add(ms * time.Millisecond)) {
			t.Fatalf("attempt %d at %v, want +%dms", i+1, at.Sub(t0), ms)
		}
	}
}

func TestCriticalErrorIsNotRetried(t *testing.T) {
	h := newHost(log{})
	out := drive(t, h, func(c *logCtx) error {
		return c.Step("s", func(s *logStep) error {
			s.State.N++
			return workflow.Critical(codedErr{})
		})
	})
	se := failedWith[*workflow.StepError](t, out)
	var coder interface{ ErrorCode() string }
	if se.Kind != workflow.FailureCritical || se.Attempts != 1 || h.State().N != 1 || !errors.As(se, &coder) || coder.ErrorCode() != "card_declined" {
		t.Fatalf("step error %+v, n=%d", se, h.State().N)
	}
}

type codedErr struct{}

func (codedErr) Error() string     { return "card declined" }
func (codedErr) ErrorCode() string { return "card_declined" }

// waitOut advances the fake clock past the step's timeout from inside the
// body, then waits for the body's context to be cancelled.
func waitOut(h *workflowtest.Host[log], s *logStep, d time.Duration) error {
	s.State.N++
	h.Clock.Advance(d)
	<-s.Context().Done()
	return s.Context().Err()
}

func TestStepTimeout(t *testing.T) {
	t.Run("critical by default", func(t *testing.T) {
		h := newHost(log{})
		out := drive(t, h, func(c *logCtx) error {
			return c.Step("slow", func(s *logStep) error { return waitOut(h, s, workflow.DefaultStepTimeout) })
		})
		se := failedWith[*workflow.StepError](t, out)
		if se.Kind != workflow.FailureTimeout || se.Attempts != 1 || !errors.Is(se, workflow.ErrTimeout) || h.State().N != 1 {
			t.Fatalf("step error %+v", se)
		}
	})
	t.Run("retried with RetryOnTimeout", func(t *testing.T) {
		h := newHost(log{})
		out := drive(t, h, func(c *logCtx) error {
			return c.StepWith(workflow.StepOptions{Name: "slow", Timeout: 5 * time.Second, RetryOnTimeout: true}, func(s *logStep) error {
				return waitOut(h, s, 5*time.Second)
			})
		})
		se := failedWith[*workflow.StepError](t, out)
		if se.Kind != workflow.FailureExhausted || se.Attempts != 4 || h.State().N != 4 {
			t.Fatalf("step error %+v, n=%d", se, h.State().N)
		}
	})
	t.Run("NoTimeout", func(t *testing.T) {
		h := newHost(log{})
		out := drive(t, h, func(c *logCtx) error {
			return c.StepWith(workflow.StepOptions{Name: "long", Timeout: workflow.NoTimeout, MaxRetries: workflow.NoRetries}, func(s *logStep) error {
				h.Clock.Advance(24 * time.Hour)
				if s.Context().Err() != nil {
					return s.Context().Err()
				}
				return nil
			})
		})
		if out.Status != workflow.RunCompleted {
			t.Fatalf("outcome %+v", out)
		}
	})
}

func TestTryStepKinds(t *testing.T) {
	h := newHost(log{})
	var failures []*workflow.Failure
	out := drive(t, h, func(c *logCtx) error {
		for _, tc := range []struct {
			name string
			fn   func(s *logStep) (int, error)
		}{
			{"critical", func(*logStep) (int, error) { return 0, workflow.Critical(errors.New("bad input")) }},
			{"exhausted", func(*logStep) (int, error) { return 0, errors.New("flaky") }},
			{"timeout", func(s *logStep) (int, error) { return 0, waitOut(h, s, workflow.DefaultStepTimeout) }},
			{"ok", func(*logStep) (int, error) { return 7, nil }},
		} {
			v, f, err := workflow.TryStep(c, tc.name, tc.fn)
			if err != nil {
				return err
			}
			if tc.name == "ok" && (f != nil || v != 7) {
				t.Errorf("ok step: %v %+v", v, f)
			}
			if f != nil {
				failures = append(failures, f)
			}
		}
		_, f, err := workflow.TryStep(c, "rollback", func(*logStep) (int, error) { return 0, workflow.Rollback(errors.New("undo")) })
		if f != nil || err == nil {
			t.Errorf("a rollback failure was caught: %+v %v", f, err)
		}
		return err
	})
	se := failedWith[*workflow.StepError](t, out)
	if se.Kind != workflow.FailureRollback {
		t.Fatalf("final error %+v", se)
	}
	want := []struct {
		kind     workflow.FailureKind
		attempts int
	}{{workflow.FailureCritical, 1}, {workflow.FailureExhausted, 4}, {workflow.FailureTimeout, 1}}
	if len(failures) != len(want) {
		t.Fatalf("failures %+v", failures)
	}
	for i, w := range want {
		f := failures[i]
		if f.Source != workflow.SourceStep || f.Kind != w.kind || f.Attempts != w.attempts {
			t.Errorf("failure %d = %+v, want %+v", i, f, w)
		}
	}
}

// TryStep's catch list (rivet-semantics.md 1.3: "To catch rollback, list
// it in catch"): a kind listed is caught, one not listed is returned.
func TestTryStepCatchList(t *testing.T) {
	h := newHost(log{})
	var caught *workflow.Failure
	var uncaught error
	out := drive(t, h, func(c *logCtx) error {
		var err error
		_, caught, err = workflow.TryStepOpts(c, workflow.StepOptions{Name: "undo", Catch: []workflow.FailureKind{workflow.FailureRollback}},
			func(*logStep) (int, error) { return 0, workflow.Rollback(errors.New("undo")) })
		if err != nil {
			return err
		}
		_, f, err := workflow.TryStepOpts(c, workflow.StepOptions{Name: "flaky", MaxRetries: workflow.NoRetries, Catch: []workflow.FailureKind{workflow.FailureCritical}},
			func(*logStep) (int, error) { return 0, errors.New("flaky") })
		if f != nil {
			t.Errorf("an exhausted failure caught by a list of critical only: %+v", f)
		}
		uncaught = err
		return nil
	})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if caught == nil || caught.Kind != workflow.FailureRollback || caught.Name != "undo" || caught.Source != workflow.SourceStep {
		t.Fatalf("caught %+v", caught)
	}
	var se *workflow.StepError
	if !errors.As(uncaught, &se) || se.Kind != workflow.FailureExhausted {
		t.Fatalf("uncaught %v", uncaught)
	}
}

func TestCommittedStepIsNotRerunAfterCrash(t *testing.T) {
	for _, after := range []bool{false, true} {
		h := newHost(log{})
		var runs atomic.Int32
		wf := func(c *logCtx) error {
			if err := c.Step("a", func(s *logStep) error {
				runs.Add(1)
				s.State.Log = append(s.State.Log, "a")
				return nil
			}); err != nil {
				return err
			}
			return c.Step("b", func(s *logStep) error {
				s.State.Log = append(s.State.Log, "b")
				return nil
			})
		}
		h.CrashAt(1, after)
		out := drive(t, h, wf)
		if out.Status != workflow.RunCompleted {
			t.Fatalf("after=%v: outcome %+v", after, out)
		}
		wantRuns := int32(2)
		if after {
			wantRuns = 1
		}
		if runs.Load() != wantRuns || !reflect.DeepEqual(h.State().Log, []string{"a", "b"}) {
			t.Fatalf("after=%v: a ran %d times, log %v", after, runs.Load(), h.State().Log)
		}
	}
}

func TestEphemeralStepCommitsWithTheNext(t *testing.T) {
	h := newHost(log{})
	var runs atomic.Int32
	wf := func(c *logCtx) error {
		if err := c.StepWith(workflow.StepOptions{Name: "cheap", Ephemeral: true}, func(s *logStep) error {
			runs.Add(1)
			s.State.N++
			return nil
		}); err != nil {
			return err
		}
		return c.Step("durable", func(s *logStep) error { s.State.N += 10; return nil })
	}
	// The first commit is the durable step's, which carries the ephemeral
	// one: crashing it loses both, and both run again.
	h.CrashAt(1, false)
	out := drive(t, h, wf)
	if out.Status != workflow.RunCompleted || h.State().N != 11 || runs.Load() != 2 || h.Commits() != 2 {
		t.Fatalf("outcome %+v, n=%d, runs=%d, commits=%d", out, h.State().N, runs.Load(), h.Commits())
	}
	if e := entryAt(t, h.History(), "cheap"); e.Status != workflow.StatusCompleted {
		t.Fatalf("ephemeral entry %+v", e)
	}
}

type withHidden struct {
	Shown  int `json:"shown"`
	hidden int
}

func TestStepValueIsTheRecordedOne(t *testing.T) {
	h := newHost(log{})
	var live withHidden
	out := drive(t, h, func(c *logCtx) error {
		v, err := workflow.Step(c, "v", func(*logStep) (withHidden, error) { return withHidden{Shown: 1, hidden: 2}, nil })
		live = v
		return err
	})
	// The live run returns what a replay would: the JSON round trip.
	if out.Status != workflow.RunCompleted || live != (withHidden{Shown: 1}) {
		t.Fatalf("live value %+v", live)
	}
}

func TestPanics(t *testing.T) {
	h := newHost(log{})
	out := drive(t, h, func(c *logCtx) error {
		if err := c.StepWith(workflow.StepOptions{Name: "p", MaxRetries: 1}, func(s *logStep) error {
			if s.Attempt() == 1 {
				panic("step bug")
			}
			return nil
		}); err != nil {
			return err
		}
		panic("orchestration bug")
	})
	pe := failedWith[*workflow.PanicError](t, out)
	if pe.Value != "orchestration bug" {
		t.Fatalf("panic %v", pe.Value)
	}
	if e := entryAt(t, h.History(), "p"); e.Attempts != 2 || e.Status != workflow.StatusCompleted {
		t.Fatalf("a panicking attempt is a failed attempt: %+v", e)
	}
}

// A panic in the workflow's code outside steps fails the workflow as an
// error it returns does: the compensations of its completed steps run
// (rivet-semantics.md 1.9, "any unrecoverable error moves the workflow to
// rolling_back"; a panic is Go's thrown exception), in a join branch too.
func TestAPanicRollsBack(t *testing.T) {
	for _, inBranch := range []bool{false, true} {
		h := newHost(log{})
		out := drive(t, h, func(c *logCtx) error {
			if err := c.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "reserve"},
				func(s *logStep) (int, error) { s.State.Log = append(s.State.Log, "reserve"); return 1, nil },
				func(s *logStep, _ int) error { s.State.Log = append(s.State.Log, "undo reserve"); return nil }); err != nil {
				return err
			}
			if !inBranch {
				panic("orchestration bug")
			}
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
				"bug": func(*logCtx) (int, error) { panic("orchestration bug") },
			})
			return err
		})
		pe := failedWith[*workflow.PanicError](t, out)
		if pe.Value != "orchestration bug" {
			t.Fatalf("panic %v", pe.Value)
		}
		if got, want := h.State().Log, []string{"reserve", "undo reserve"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("in branch %v: log %v, want %v", inBranch, got, want)
		}
		if e := entryAt(t, h.History(), "reserve"); !e.RollbackDone {
			t.Fatalf("rollback not recorded: %+v", e)
		}
	}
	// A panic before the code reached what the history records: new code
	// (the old did not fail there). The panic is reported, and nothing is
	// compensated.
	var undone atomic.Bool
	v := func(bug bool) func(c *logCtx) error {
		return func(c *logCtx) error {
			if err := c.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "a"}, func(*logStep) (int, error) { return 1, nil },
				func(*logStep, int) error { undone.Store(true); return nil }); err != nil {
				return err
			}
			if bug {
				panic("new bug")
			}
			if err := note(c, "b"); err != nil {
				return err
			}
			return wait(c, "w")
		}
	}
	h := inFlight(t, v(false))
	if pe := failedWith[*workflow.PanicError](t, drive(t, h, v(true))); pe.Value != "new bug" || undone.Load() {
		t.Fatalf("panic %v, compensated %v", pe.Value, undone.Load())
	}
}

func TestMisuse(t *testing.T) {
	cases := map[string]struct {
		wf   func(c *logCtx) error
		want error
		// says is text the error must hold, to tell where the mistake is.
		says string
	}{
		"outer ctx inside a loop": {func(c *logCtx) error {
			return c.Loop("l", func(*logCtx) error { return c.Sleep("s", time.Second) })
		}, workflow.ErrEntryInProgress, `sleep "s" called while loop "l" runs`},
		"bad name": {func(c *logCtx) error { return c.Sleep("a/b", time.Second) }, workflow.ErrInvalid, ""},
		"no name in the options": {func(c *logCtx) error {
			return c.Loop("l", func(lc *logCtx) error {
				return lc.StepWith(workflow.StepOptions{}, func(*logStep) error { return nil })
			})
		}, workflow.ErrInvalid, `StepOptions.Name), in "l/~0"`},
		"reused name": {func(c *logCtx) error {
			if err := c.Step("x", func(*logStep) error { return nil }); err != nil {
				return err
			}
			return c.Sleep("x", 0)
		}, workflow.ErrDiverged, ""},
		"rollback without checkpoint": {func(c *logCtx) error {
			_, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "x"}, func(*logStep) (int, error) { return 1, nil }, func(*logStep, int) error { return nil })
			return err
		}, workflow.ErrRollbackCheckpoint, ""},
	}
	for name, tc := range cases {
		h := newHost(log{})
		out := drive(t, h, tc.wf)
		if out.Status != workflow.RunFailed || !errors.Is(out.Err, tc.want) {
			t.Errorf("%s: outcome %s %v, want %v", name, out.Status, out.Err, tc.want)
		}
		if name == "reused name" && !strings.Contains(out.Err.Error(), `"x"`) {
			t.Errorf("reused name error does not name the entry: %v", out.Err)
		}
		if out.Err != nil && !strings.Contains(out.Err.Error(), tc.says) {
			t.Errorf("%s: error %q does not say %q", name, out.Err, tc.says)
		}
	}
}

// undos counts the rollback handlers that ran.
func undos(l []string) []string {
	var out []string
	for _, s := range l {
		if strings.HasPrefix(s, "undo") {
			out = append(out, s)
		}
	}
	return out
}

// rollbackStep is a step that logs "do NAME" and whose rollback logs
// "undo NAME".
func rollbackStep(c *logCtx, name string) (int, error) {
	return workflow.StepWithRollback(c, workflow.StepOptions{Name: "s"}, func(s *logStep) (int, error) {
		s.State.Log = append(s.State.Log, "do "+name)
		return 1, nil
	}, func(s *logStep, v int) error {
		s.State.Log = append(s.State.Log, "undo "+name)
		return nil
	})
}

// After a restart, a replay re-enters settled joins and races (the
// winner's branch) while a rollback checkpoint is active, so a rollback
// knows the handlers of the steps inside them: crashed at any commit, the
// workflow undoes what the crash-free run undoes.
func TestRollbackAfterRestartReachesStepsInSettledJoinsAndRaces(t *testing.T) {
	wf := func(c *logCtx) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		br := workflow.Branches[log, int]{}
		for _, n := range []string{"a", "b"} {
			br[n] = func(c *logCtx) (int, error) { return rollbackStep(c, n) }
		}
		if _, err := workflow.Join(c, "j", br); err != nil {
			return err
		}
		if _, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
			{Name: "fast", Run: func(c *logCtx) (int, error) { return rollbackStep(c, "fast") }},
			{Name: "slow", Run: func(c *logCtx) (int, error) {
				if err := c.Sleep("z", time.Hour); err != nil {
					return 0, err
				}
				return rollbackStep(c, "slow")
			}},
		}); err != nil {
			return err
		}
		if err := c.Step("after", func(*logStep) error { return nil }); err != nil {
			return err
		}
		return errors.New("business failure")
	}
	// Every step ends at the same workflow time (workflowtest's clock
	// stands still): they are undone in the reverse of the code's order,
	// the join's branches, which ran side by side, by name (they went in
	// the order their goroutines had registered them, which varied from
	// run to run).
	want := []string{"undo fast", "undo b", "undo a"}
	for range 10 {
		h := newHost(log{})
		drive(t, h, wf)
		if got := undos(h.State().Log); !reflect.DeepEqual(got, want) {
			t.Fatalf("crash-free: undone %q, want %q", got, want)
		}
	}
	h := newHost(log{})
	drive(t, h, wf)
	for k := 1; k <= h.Commits()+1; k++ {
		for _, after := range []bool{false, true} {
			hk := newHost(log{})
			hk.CrashAt(k, after)
			out := drive(t, hk, wf)
			if got := undos(hk.State().Log); !reflect.DeepEqual(got, want) || out.Status != workflow.RunFailed {
				t.Errorf("crash at commit %d (after: %v): undone %q, want %q (outcome %v %v)", k, after, got, want, out.Status, out.Err)
			}
		}
	}
}

// Steps that complete at the same time (workflowtest's clock stands
// still) are undone in the reverse of the code's order, a step in a try
// block (which records no entry of its own) included, whether the run
// has every handler or, replayed after a crash, lacks those of a
// completed loop (it then stops, loudly, at the loop's step before
// undoing anything the code did before the loop). The try block's step
// used to be ordered by name against the others, and the rollback of a
// replay undid c and t/s before failing at the loop.
func TestRollbackOfStepsAtTheSameTimeFollowsTheCodesOrder(t *testing.T) {
	step := func(c *logCtx, name string) error {
		_, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: name}, func(s *logStep) (int, error) {
			s.State.Log = append(s.State.Log, "do "+name)
			return 1, nil
		}, func(s *logStep, v int) error {
			s.State.Log = append(s.State.Log, "undo "+name)
			return nil
		})
		return err
	}
	wf := func(c *logCtx) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		if _, err := c.Try("t", func(c *logCtx) error { return step(c, "tb") }); err != nil {
			return err
		}
		if err := step(c, "c"); err != nil {
			return err
		}
		if err := c.Loop("a", func(c *logCtx) error {
			if err := step(c, "la"); err != nil {
				return err
			}
			return workflow.Break
		}); err != nil {
			return err
		}
		return errors.New("business failure")
	}
	h := newHost(log{})
	drive(t, h, wf)
	if got, want := undos(h.State().Log), []string{"undo la", "undo c", "undo tb"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("crash-free: undone %q, want %q", got, want)
	}
	for k := 1; k <= h.Commits()+1; k++ {
		for _, after := range []bool{false, true} {
			hk := newHost(log{})
			hk.CrashAt(k, after)
			out := drive(t, hk, wf)
			got := undos(hk.State().Log)
			var rf *workflow.RollbackFailedError
			switch {
			case reflect.DeepEqual(got, []string{"undo la", "undo c", "undo tb"}):
			case len(got) == 0 && errors.As(out.Err, &rf) && rf.Path == "a/~0/la":
			default:
				t.Errorf("crash at commit %d (after: %v): undone %q, outcome %v %v; want all three in the code's reverse order, or none and a failure at a/~0/la", k, after, got, out.Status, out.Err)
			}
		}
	}
}

// A completed loop is not re-entered (its state before its last
// checkpoint is gone), so after a restart a rollback cannot know the
// handlers of the steps in it: it fails where the first of them comes in
// its order, naming it (ErrRollbackNotReplayed), instead of silently
// leaving them done. Crash-free, every step is undone.
func TestRollbackOfStepsInACompletedLoopFailsLoudlyAfterARestart(t *testing.T) {
	wf := func(c *logCtx) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		if _, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 2, HistorySize: 10}, func(c *logCtx, i int) (int, error) {
			if _, err := rollbackStep(c, fmt.Sprint(i)); err != nil {
				return i, err
			}
			if i == 3 {
				return i, workflow.Break
			}
			return i + 1, nil
		}); err != nil {
			return err
		}
		if err := c.Step("after", func(*logStep) error { return nil }); err != nil {
			return err
		}
		return errors.New("business failure")
	}
	h := newHost(log{})
	drive(t, h, wf)
	if got := undos(h.State().Log); len(got) != 4 {
		t.Fatalf("crash-free: undone %q, want 4", got)
	}
	loud := 0
	for k := 1; k <= h.Commits()+1; k++ {
		hk := newHost(log{})
		hk.CrashAt(k, true)
		out := drive(t, hk, wf)
		switch n := len(undos(hk.State().Log)); {
		case n == 4:
		case errors.Is(out.Err, workflow.ErrRollbackNotReplayed):
			loud++
			var rf *workflow.RollbackFailedError
			if !errors.As(out.Err, &rf) || !strings.HasPrefix(rf.Path, "l/") {
				t.Errorf("crash after commit %d: %v, want a RollbackFailedError naming a step of l", k, out.Err)
			}
		default:
			t.Errorf("crash after commit %d: %d of 4 undone, silently (outcome %v %v)", k, n, out.Status, out.Err)
		}
	}
	if loud == 0 {
		t.Fatal("no crash point left the loop unreplayed: the test shows nothing")
	}
}

// A settled join is replayed after a restart only to learn its steps'
// rollback handlers: code changed inside it since does not fail the
// workflow (before, a settled join was never re-entered at all).
func TestChangedCodeInASettledJoinDoesNotFailTheReplay(t *testing.T) {
	wf := func(extra bool) func(c *logCtx) error {
		return func(c *logCtx) error {
			if err := c.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.Join(c, "j", workflow.Branches[log, int]{
				"a": func(c *logCtx) (int, error) {
					if extra {
						if err := c.Step("new", func(*logStep) error { return nil }); err != nil {
							return 0, err
						}
					}
					return rollbackStep(c, "a")
				},
			}); err != nil {
				return err
			}
			// Commits the join's record with it.
			if err := c.Step("after", func(*logStep) error { return nil }); err != nil {
				return err
			}
			if _, err := workflow.Next[loopJob](c, "wait", workflow.NextOptions{Names: []string{"go"}}); err != nil {
				return err
			}
			return c.Step("end", func(s *logStep) error { s.State.Log = append(s.State.Log, "end"); return nil })
		}
	}
	h := newHost(log{})
	if out := drive(t, h, wf(false)); out.Status != workflow.RunYielded {
		t.Fatalf("old code: %+v", out)
	}
	h.Send("go", loopJob{1})
	if out := drive(t, h, wf(true)); out.Status != workflow.RunCompleted {
		t.Fatalf("new code after a restart: %v %v, want completed", out.Status, out.Err)
	}
}

// A run that ends with an ephemeral step commits it: the host records the
// run's end in a commit that takes the deferred step with it.
func TestAnEphemeralLastStepIsCommitted(t *testing.T) {
	h := newHost(log{})
	out := drive(t, h, func(c *logCtx) error {
		return c.StepWith(workflow.StepOptions{Name: "last", Ephemeral: true}, func(s *logStep) error { s.State.N = 42; return nil })
	})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if h.State().N != 42 || len(h.History()) != 1 {
		t.Fatalf("the run completed, but the committed state has n=%d and the history %d entries", h.State().N, len(h.History()))
	}
}

// A step retired with Removed takes its rollback handler with it: a later
// rollback fails naming the step and saying so (ErrRollbackRemoved), not
// that its scope was not replayed, which sends a reader looking at loops
// and restarts.
func TestRollbackOfARemovedStepSaysItWasRemoved(t *testing.T) {
	v1 := func(c *logCtx) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		if _, err := rollbackStep(c, "a"); err != nil {
			return err
		}
		return wait(c, "w")
	}
	v2 := func(c *logCtx) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		if err := c.Removed("s", workflow.KindStep); err != nil {
			return err
		}
		if err := wait(c, "w"); err != nil {
			return err
		}
		return errors.New("business failure")
	}
	h := inFlight(t, v1)
	h.Send("q", job{1})
	out := drive(t, h, v2)
	var rf *workflow.RollbackFailedError
	if !errors.As(out.Err, &rf) || rf.Path != "s" || !errors.Is(out.Err, workflow.ErrRollbackRemoved) {
		t.Fatalf("rollback of the removed step: %v %v, want a RollbackFailedError naming s, ErrRollbackRemoved", out.Status, out.Err)
	}
	if errors.Is(out.Err, workflow.ErrRollbackNotReplayed) {
		t.Errorf("the error also says the scope was not replayed: %v", out.Err)
	}
}
