package runtime_test

import (
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// nest's outer action changes the state and schedules a call around a
// re-entrant call that fails: the failed inner turn's discard must not take
// the outer turn's changes with it (it did: the outer turn went on with a
// stale state, and its result disagreed with what was committed).
var nest = rivet.Actor[alarmState]{
	Name: "nest",
	Actions: rivet.Actions[alarmState]{
		"outer": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			c.State.Count++
			if _, err := c.Schedule().After(time.Hour, "get"); err != nil {
				return 0, err
			}
			_, _ = c.Client().Get("nest", c.Key()...).Call(c.Context(), "fail")
			c.State.Count += 10
			return c.State.Count, nil
		}),
		"fail": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			c.State.Count = -100
			if _, err := c.Schedule().After(time.Hour, "get"); err != nil {
				return 0, err
			}
			return 0, rivet.UserError("no", "refused", nil)
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (int, error) { return c.State.Count, nil }),
	},
}

func TestAFailedReentrantTurnKeepsTheOuterTurnsChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, nest), nil)
	if n := callInt(t, e.host, "nest", "a", "outer", true); n != 11 {
		t.Fatalf("outer returned %d, want 11", n)
	}
	if n := callInt(t, e.host, "nest", "a", "get", false); n != 11 {
		t.Fatalf("count %d after the outer turn, want 11", n)
	}
	if s := inspect(t, e.host, "nest", "a").Schedules; len(s) != 1 {
		t.Fatalf("stored calls %+v: want the outer turn's only", s)
	}
	e.restart()
	if n := callInt(t, e.host, "nest", "a", "get", false); n != 11 {
		t.Fatalf("count %d after a restart, want 11", n)
	}
}
