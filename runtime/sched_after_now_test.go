package runtime_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

type lateState struct {
	Pings int `json:"pings"`
}

// late schedules its calls at the end of an action that took a while.
var late = rivet.Actor[lateState]{
	Name: "late",
	Actions: rivet.Actions[lateState]{
		// workThenSchedule works for workMs, then schedules ping with
		// After(afterMs), or with Every (every true), and returns how long
		// after the Scheduler's call the first run is due, in ms.
		"workThenSchedule": rivet.Action(func(c *rivet.ActionCtx[lateState], args struct {
			WorkMs, AfterMs int
			Every           bool
		}) (int64, error) {
			time.Sleep(time.Duration(args.WorkMs) * time.Millisecond) // the action's work: a slow call, say
			before := time.Now()
			d := time.Duration(args.AfterMs) * time.Millisecond
			var id string
			var err error
			if args.Every {
				id, err = c.Schedule().Every("p", d, "ping")
			} else {
				id, err = c.Schedule().After(d, "ping")
			}
			if err != nil {
				return 0, err
			}
			s, _ := c.Schedule().Get(id)
			return s.At.Sub(before).Milliseconds(), nil
		}),
		"ping": rivet.Action0(func(c *rivet.ActionCtx[lateState]) (int, error) { c.State.Pings++; return c.State.Pings, nil }),
	},
}

// After(d) and Every(d) are d from when they are called, as the Scheduler
// says ("d from now", "one interval from now") and Rivet's schedule.after
// does, not from when the action's turn began: a call scheduled at the end
// of an action that worked for a second and a half came due that much
// early (a session's expiry, its ttl cut short).
func TestAfterAndEveryCountFromTheirCallNotTheTurnsStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, late), nil)
	for _, every := range []bool{false, true} {
		raw, err := call(t, e.host, "late", "l", "workThenSchedule", true, map[string]any{"WorkMs": 1500, "AfterMs": 2000, "Every": every})
		if err != nil {
			t.Fatal(err)
		}
		var ms int64
		if err := json.Unmarshal(raw, &ms); err != nil {
			t.Fatal(err)
		}
		// Times are stored to the millisecond: up to 1 ms early.
		if ms < 1999 {
			t.Errorf("every %v: the call is due %d ms after the Scheduler was called, want 2000", every, ms)
		}
	}
}
