package runtime_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

var rerunRuns atomic.Int64

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
			if _, ok := c.Fired(); !ok {
				return 0, nil
			}
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
	e := newEnv(t, counterReg(t, rerun), nil)
	rerunRuns.Store(0)
	callString(t, e.host, "rerun", "b", "start", true, "every")
	waitFor(t, "a run", 10*time.Second, func() bool { return rerunRuns.Load() >= 1 })
	time.Sleep(300 * time.Millisecond)
	if n := rerunRuns.Load(); n != 1 {
		t.Fatalf("the run ran %d times in 300ms, want 1", n)
	}
	s := inspect(t, e.host, "rerun", "b").Schedules
	if len(s) != 1 || !s[0].At.After(time.Now()) {
		t.Fatalf("stored %v: want one next run, in the future", s)
	}
}
