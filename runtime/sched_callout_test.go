package runtime_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

var relayRuns, relayOnce atomic.Int64

// sulky cannot wake: calls into it fail.
var sulky = rivet.Actor[alarmState]{
	Name:   "sulky",
	OnWake: func(c *rivet.ActionCtx[alarmState]) error { return errors.New("its database is down") },
	Actions: rivet.Actions[alarmState]{
		"ping": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) { return 0, nil }),
	},
}

// relay's scheduled calls call sulky, and fail as it does.
var relay = rivet.Actor[alarmState]{
	Name: "relay",
	Actions: rivet.Actions[alarmState]{
		"start": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			if _, err := c.Schedule().After(0, "relay", true); err != nil {
				return 0, err
			}
			_, err := c.Schedule().Every("r", time.Second, "relay", false)
			return 0, err
		}),
		"relay": rivet.Action(func(c *rivet.ActionCtx[alarmState], once bool) (int, error) {
			relayRuns.Add(1)
			if once {
				relayOnce.Add(1)
			}
			c.State.Count++ // discarded: the call fails
			_, err := c.Client().GetOrCreate("sulky", "s").Call(c.Context(), "ping")
			return 0, err
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (alarmState, error) { return *c.State, nil }),
	},
}

// A scheduled call whose action fails because another actor it calls is
// unavailable is used up, as any failed call: run once, not retried, its
// state change discarded; a recurring one keeps its next run, which
// records the failure.
func TestAScheduledCallFailingOnAnUnavailableCalleeIsUsedUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, relay, sulky), nil)
	relayRuns.Store(0)
	relayOnce.Store(0)
	if _, err := call(t, e.host, "relay", "a", "start", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two recurring runs", 30*time.Second, func() bool { return relayRuns.Load() >= 3 })
	if n := relayOnce.Load(); n != 1 {
		t.Fatalf("the one-off call ran %d times, want 1", n)
	}
	ins := inspect(t, e.host, "relay", "a")
	if len(ins.Schedules) != 1 || ins.Schedules[0].ID != "every:r" {
		t.Fatalf("stored calls %+v, want every:r alone", ins.Schedules)
	}
	if s := ins.Schedules[0]; s.LastRun.IsZero() || !strings.Contains(s.LastError, "OnWake of sulky") {
		t.Fatalf("every:r's last run %v %q, want sulky's failure", s.LastRun, s.LastError)
	}
	raw, err := call(t, e.host, "relay", "a", "get", false)
	if err != nil || !strings.Contains(string(raw), `"count":0`) {
		t.Fatalf("relay's state %s %v, want its failed runs' changes discarded", raw, err)
	}
	waitFor(t, "the failed runs to be counted", 10*time.Second, func() bool { return e.host.Stats().SchedulesFailed >= 2 })
	if s := e.host.Stats(); s.SchedulesFailed < 2 || s.SchedulesFired != 0 {
		t.Fatalf("stats fired %d failed %d, want 0 and at least 2", s.SchedulesFired, s.SchedulesFailed)
	}
}
