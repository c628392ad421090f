package runtime_test

import (
	"errors"
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
