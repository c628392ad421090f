package runtime_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// Tests that share it do not run in parallel with each other (see
// TestMain).
var rerunRuns atomic.Int64

// rerunDue holds the due time of every run of rerun's fire (a run of a
// recurring call is the one due at its time: run twice, it shows twice).
var (
	rerunMu  sync.Mutex
	rerunDue []time.Time
)

// rerun's fired action makes a re-entrant call into its own actor that
// fails, and goes on (a best-effort call, a probe).
var rerun = rivet.Actor[revState]{
	Name: "rerun",
	Actions: rivet.Actions[revState]{
		"start": rivet.Action(func(c *rivet.ActionCtx[revState], how string) (string, error) {
			if how == "every" {
				return c.Schedule().Every("r", time.Second, "fire")
			}
			return c.Schedule().After(0, "fire")
		}),
		"fire": rivet.Action0(func(c *rivet.ActionCtx[revState]) (int, error) {
			call, ok := c.Fired()
			if !ok {
				return 0, nil
			}
			rerunMu.Lock()
			rerunDue = append(rerunDue, call.At)
			rerunMu.Unlock()
			rerunRuns.Add(1)
			_, _ = c.Client().Get("rerun", c.Key()...).Call(c.Context(), "fail")
			return 0, nil
		}),
		"fail": rivet.Action0(func(c *rivet.ActionCtx[revState]) (int, error) {
			return 0, rivet.UserError("no", "refused", nil)
		}),
	},
}

// A call whose action ran to the end is not run again, even when the
// action made a re-entrant call that failed.
func TestAFiredCallWhoseReentrantCallFailsRunsOnce(t *testing.T) {
	e := newEnv(t, counterReg(t, rerun), nil)
	rerunRuns.Store(0)
	callString(t, e.host, "rerun", "a", "start", true, "once")
	waitFor(t, "a run", 10*time.Second, func() bool { return rerunRuns.Load() >= 1 })
	time.Sleep(500 * time.Millisecond)
	if n := rerunRuns.Load(); n != 1 {
		t.Fatalf("the call ran %d times, want 1 (fired %d); stored %v", n, e.host.Stats().SchedulesFired, inspect(t, e.host, "rerun", "a").Schedules)
	}
	if s := inspect(t, e.host, "rerun", "a").Schedules; len(s) != 0 {
		t.Fatalf("stored %v after the call ran", s)
	}
}

// The same for a recurring call: one run, and its next run stored.
func TestARecurringRunWhoseReentrantCallFailsRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, rerun), nil)
	rerunRuns.Store(0)
	rerunMu.Lock()
	rerunDue = nil
	rerunMu.Unlock()
	callString(t, e.host, "rerun", "b", "start", true, "every")
	waitFor(t, "a run", 10*time.Second, func() bool { return rerunRuns.Load() >= 1 })
	time.Sleep(300 * time.Millisecond) // room for a run again at once
	// The next run (a second later) may come within the wait if the first
	// came late on a busy machine: a run due at the same time twice may not.
	rerunMu.Lock()
	due := slices.Clone(rerunDue)
	rerunMu.Unlock()
	for i := 1; i < len(due); i++ {
		if !due[i].After(due[i-1]) {
			t.Fatalf("runs due at %v: the run due at %v ran again", due, due[i])
		}
	}
	s := inspect(t, e.host, "rerun", "b").Schedules
	if len(s) != 1 || !s[0].At.After(due[len(due)-1]) {
		t.Fatalf("stored %v after runs due at %v: want one next run, after the last", s, due)
	}
}
