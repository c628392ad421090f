package runtime_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// An actor that asked to be destroyed runs none of its scheduled calls,
// not even one due before its request, also on a next owner whose clock is
// behind the clock of the node that took the request: there, the destroy
// (stamped with the requester's time) is not due yet when the earlier call
// is, and the call ran before the destroy.
func TestNoScheduledCallRunsAfterADestroyRequestOnALaggingNextOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	h2, own2 := secondHost(t, e)
	// The requester's timers have not got to the call yet when the
	// request comes (frozen here); the next owner's clock is 2 s behind.
	e.host.SetWakeClock(func() time.Time { return time.Now().Add(-time.Hour) })
	h2.SetWakeClock(func() time.Time { return time.Now().Add(-2 * time.Second) })
	callInt(t, e.host, "alarm", "s", "add", true, 1)
	// Due half a second before the request.
	callString(t, e.host, "alarm", "s", "addAt", false, time.Now().Add(-500*time.Millisecond).UnixMilli(), 10)
	if n := callInt(t, e.host, "alarm", "s", "quit", false, false); n != 1 {
		t.Fatalf("quit answered %d", n)
	}
	p := placement.Partition("alarm", storage.EncodeKey([]string{"s"}), testPartitions)
	if err := e.host.Handoff(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	if got, err := own2.Claim(ctx(t), []uint32{p}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	waitFor(t, "the actor to be destroyed on the next owner", 20*time.Second, func() bool {
		// (A call is refused as soon as the destroy is asked for: the
		// inspection shows the actor until it is gone.)
		_, err := h2.Inspect(ctx(t), runtime.Ref{Name: "alarm", Key: []string{"s"}})
		return errors.Is(err, rivet.ErrNotFound)
	})
	if n := e.host.Stats().SchedulesFired + h2.Stats().SchedulesFired; n != 0 {
		t.Fatalf("%d scheduled call(s) ran after the actor asked to be destroyed", n)
	}
}

// waryFail makes wary's OnWake fail.
var waryFail atomic.Bool

// wary is alarm with an OnWake.
var wary = rivet.Actor[alarmState]{
	Name: "wary",
	OnWake: func(c *rivet.ActionCtx[alarmState]) error {
		if waryFail.Load() {
			return errors.New("cannot wake")
		}
		return nil
	},
	Actions: alarm.Actions,
}

// A destroy requested on a node ahead of the next owner's clock runs there
// without waiting for the actor to load, as any due destroy of an actor
// not in memory does (an OnWake that fails must not hold it up), also when
// a call due before the request is stored ahead of it: the destroy,
// stamped with the requester's time, was not due by the next owner's
// clock, so the actor was loaded first, and with an OnWake that fails the
// destroy waited, retried with backoff, until that clock caught up (here
// an hour).
func TestADestroyOnALaggingNextOwnerRunsWithoutLoadingTheActor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, wary), nil)
	h2, own2 := secondHost(t, e)
	e.host.SetWakeClock(func() time.Time { return time.Now().Add(-24 * time.Hour) })
	h2.SetWakeClock(func() time.Time { return time.Now().Add(-time.Hour) })
	waryFail.Store(false)
	t.Cleanup(func() { waryFail.Store(false) })
	callInt(t, e.host, "wary", "w", "add", true, 1)
	// Due before the request, and by the next owner's clock too.
	callString(t, e.host, "wary", "w", "addAt", false, time.Now().Add(-time.Hour-500*time.Millisecond).UnixMilli(), 10)
	if n := callInt(t, e.host, "wary", "w", "quit", false, false); n != 1 {
		t.Fatalf("quit answered %d", n)
	}
	p := placement.Partition("wary", storage.EncodeKey([]string{"w"}), testPartitions)
	if err := e.host.Handoff(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	waryFail.Store(true)
	if got, err := own2.Claim(ctx(t), []uint32{p}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	ref := runtime.Ref{Name: "wary", Key: []string{"w"}}
	waitFor(t, "the actor to be destroyed on the next owner", 20*time.Second, func() bool {
		_, err := h2.Inspect(ctx(t), ref)
		return errors.Is(err, rivet.ErrNotFound)
	})
	if n := e.host.Stats().SchedulesFired + h2.Stats().SchedulesFired; n != 0 {
		t.Fatalf("%d scheduled call(s) ran after the actor asked to be destroyed", n)
	}
}
