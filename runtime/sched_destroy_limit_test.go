package runtime_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
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
		// Asks to be destroyed, then cancels every call it lists (one
		// id Get must find too): the calls it had, not the destroy.
		"quitThenCancelAll": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			if err := c.Destroy(); err != nil {
				return 0, err
			}
			calls := c.Schedule().List()
			for _, sc := range calls {
				if _, ok := c.Schedule().Get(sc.ID); !ok {
					return 0, fmt.Errorf("Get %s: not found, List has it", sc.ID)
				}
				if ok, err := c.Schedule().Cancel(sc.ID); !ok || err != nil {
					return 0, fmt.Errorf("Cancel %s: %v %v", sc.ID, ok, err)
				}
			}
			return len(calls), nil
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (int, error) { return c.State.Count, nil }),
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

// The actor's own Scheduler lists, gets and cancels its calls only, not
// the destroy it asked for: a turn that asks to be destroyed and then
// cancels every call it lists is destroyed (it cancelled its destroy, and
// lived on). An operator sees the pending destroy (inspect, schedule
// list) but cannot cancel it: callers were told NOT_FOUND from the
// request on.
func TestTheActorsSchedulerShowsItsOwnCallsNotItsDestroy(t *testing.T) {
	e := newEnv(t, counterReg(t, filler), nil)
	fill(t, e, "q", 2)
	// The destroy waits for the restart: this host's timers are an hour
	// behind.
	e.host.SetWakeClock(func() time.Time { return time.Now().Add(-time.Hour) })
	if n := callInt(t, e.host, "filler", "q", "quitThenCancelAll", false); n != 2 {
		t.Fatalf("the turn that asked to be destroyed listed %d calls, want its 2", n)
	}
	ins := inspect(t, e.host, "filler", "q")
	if len(ins.Schedules) != 1 || ins.Schedules[0].Action != "$destroy" {
		t.Fatalf("inspect after the request: %+v, want the pending destroy only", ins.Schedules)
	}
	ref := runtime.Ref{Name: "filler", Key: []string{"q"}}
	if ok, err := e.host.CancelScheduledCall(ctx(t), ref, ins.Schedules[0].ID); ok || !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("an operator's cancel of the destroy: %v %v, want ErrInvalidArgument", ok, err)
	}
	e.restart()
	waitFor(t, "the destroy to run after the restart", 20*time.Second, func() bool {
		_, err := call(t, e.host, "filler", "q", "get", false)
		return errors.Is(err, rivet.ErrNotFound)
	})
}
