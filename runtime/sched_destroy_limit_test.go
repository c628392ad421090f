package runtime_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// filler fills its scheduled calls up to a count, then asks to be
// destroyed, and schedules after that in the same turn.
var filler = rivet.Actor[alarmState]{
	Name: "filler",
	Actions: rivet.Actions[alarmState]{
		"add": rivet.Action(func(c *rivet.ActionCtx[alarmState], n int) (int, error) { return n, nil }),
		"addMany": rivet.Action(func(c *rivet.ActionCtx[alarmState], n int) (int, error) {
			for i := range n {
				if _, err := c.Schedule().After(time.Hour, "add", i); err != nil {
					return i, err
				}
			}
			return n, nil
		}),
		"quitThenSchedule": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (string, error) {
			if err := c.Destroy(); err != nil {
				return "", err
			}
			return c.Schedule().After(time.Hour, "add", 1)
		}),
		"quit": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) { return 0, c.Destroy() }),
		"get":  rivet.Query(func(c *rivet.ActionCtx[alarmState]) (int, error) { return c.State.Count, nil }),
	},
}

func fill(t *testing.T, e *env, key string, n int) {
	t.Helper()
	for n > 0 {
		m := min(n, 50)
		if got := callInt(t, e.host, "filler", key, "addMany", true, m); got != m {
			t.Fatalf("addMany %d: %d", m, got)
		}
		n -= m
	}
}

// A destroy the actor asks for is the runtime's record, not one of the
// actor's rivet.MaxSchedules calls: an actor at the limit can still ask
// to be destroyed, and the destroy takes none of its slots, so a call
// its turn schedules after the request (with one slot left) is not
// refused as over the limit, which would fail the turn and the destroy.
func TestTheDestroyAnActorAsksForTakesNoneOfItsScheduledCallSlots(t *testing.T) {
	e := newEnv(t, counterReg(t, filler), nil)
	fill(t, e, "full", rivet.MaxSchedules)
	if _, err := call(t, e.host, "filler", "full", "quit", false); err != nil {
		t.Fatalf("Destroy of an actor at its limit of calls: %v", err)
	}
	fill(t, e, "one-left", rivet.MaxSchedules-1)
	if _, err := call(t, e.host, "filler", "one-left", "quitThenSchedule", false); err != nil {
		t.Fatalf("a call after Destroy, with one slot left: %v", err)
	}
	for _, key := range []string{"full", "one-left"} {
		waitFor(t, key+" destroyed", 20*time.Second, func() bool {
			_, err := call(t, e.host, "filler", key, "get", false)
			return errors.Is(err, rivet.ErrNotFound)
		})
	}
}
