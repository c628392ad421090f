package runtime_test

import (
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// quitter's recurring run cancels its own call, then fails.
var quitter = rivet.Actor[alarmState]{
	Name: "quitter",
	Actions: rivet.Actions[alarmState]{
		"start": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (string, error) {
			return c.Schedule().Every("poll", time.Second, "poll")
		}),
		"poll": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			c.State.Ticks++ // discarded: the action fails
			if f, ok := c.Fired(); ok {
				if _, err := c.Schedule().Cancel(f.ID); err != nil {
					return 0, err
				}
			}
			return 0, rivet.UserError("gone", "what it polls is gone for good", nil)
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (alarmState, error) { return *c.State, nil }),
	},
}

// A recurring run that cancels its own call and then fails stops the
// call: the failure discards the action's other changes, and writes the
// next run the runtime adds whatever the action does, but not one the
// action said it does not want. Kept, it would run (and fail) for ever.
func TestARecurringRunThatCancelsItsCallAndFailsStopsIt(t *testing.T) {
	e := newEnv(t, counterReg(t, quitter), nil)
	callString(t, e.host, "quitter", "q", "start", true)
	// Counted once durable.
	waitFor(t, "the failed run", 10*time.Second, func() bool { return e.host.Stats().SchedulesFailed >= 1 })
	if ins := inspect(t, e.host, "quitter", "q"); len(ins.Schedules) != 0 {
		t.Fatalf("the run cancelled its call, yet it is stored: %+v", ins.Schedules)
	}
	if st := alarmStateOf(t, e.host, "quitter", "q"); st.Ticks != 0 {
		t.Fatalf("ticks %d: the failed run's change to the state was kept", st.Ticks)
	}
}
