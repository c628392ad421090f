package runtime_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// sleepProbe is what the OnSleep of napper reports to its test.
// Tests that share it do not run in parallel with each other (see
// TestMain).
var sleepProbe struct {
	owns          func() bool
	ran, unserved atomic.Int64
}

type napperState struct {
	N int `json:"n"`
}

// napper goes to sleep after 100 ms without a turn; its OnSleep says
// whether its node served the actor's partition as it ran.
var napper = rivet.Actor[napperState]{
	Name:    "napper",
	Options: rivet.Options{IdleTimeout: 100 * time.Millisecond},
	OnSleep: func(c *rivet.ActionCtx[napperState]) error {
		sleepProbe.ran.Add(1)
		if !sleepProbe.owns() {
			sleepProbe.unserved.Add(1)
		}
		return nil
	},
	Actions: rivet.Actions[napperState]{
		"set": rivet.Action(func(c *rivet.ActionCtx[napperState], n int) (int, error) {
			c.State.N = n
			return n, nil
		}),
	},
}

// Past the lease's local deadline (a stall: the watchdog has not run yet,
// and another node may serve the partition by now, its OnWake run) an
// idle actor is not put to sleep in an orderly way: its OnSleep would run
// on a node that no longer serves it, at once with the next owner's turns.
// The watchdog evicts it (no OnSleep), as for any lost claim.
func TestAnIdleActorPastTheLeaseDeadlineIsNotPutToSleep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, napper), nil)
	ref := runtime.Ref{Name: "napper", Key: []string{"n"}}
	p, err := e.host.PartitionOf(ref)
	if err != nil {
		t.Fatal(err)
	}
	sleepProbe.owns = func() bool { return e.host.Owns(p) }
	sleepProbe.ran.Store(0)
	sleepProbe.unserved.Store(0)
	_, lost := e.own.LeaseStats()
	e.store.muteRenewals.Store(true)
	t.Cleanup(func() { e.store.muteRenewals.Store(false) })
	if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "set", Args: []byte(`[1]`), CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	e.own.ExpireLocally()
	waitFor(t, "OnSleep to run, or the watchdog to drop the claims", 20*time.Second, func() bool {
		_, l := e.own.LeaseStats()
		return sleepProbe.ran.Load() > 0 || l > lost
	})
	if n := sleepProbe.unserved.Load(); n > 0 {
		t.Fatalf("OnSleep ran %d time(s) while its node did not serve the partition", n)
	}
	if e.host.Stats().ActiveActors != 0 {
		waitFor(t, "the actor to leave memory", 20*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	}
}

// drowsyProbe counts the OnSleep runs of drowsy.
var drowsyProbe atomic.Int64

// drowsy is an actor with an OnSleep that the reaper never runs in a test.
var drowsy = rivet.Actor[napperState]{
	Name:    "drowsy",
	Options: rivet.Options{IdleTimeout: time.Hour},
	OnSleep: func(c *rivet.ActionCtx[napperState]) error {
		drowsyProbe.Add(1)
		return nil
	},
	Actions: napper.Actions,
}

// Past the lease's local deadline (a stall: the watchdog has not run yet,
// and another node may serve the partition by now, its OnWake run) a
// handoff or a stop does not put the partition's actors to sleep in an
// orderly way either: their OnSleep would run at once with the next
// owner's turns. They leave memory without it.
func TestAHandoffOrStopPastTheLeaseDeadlineRunsNoOnSleep(t *testing.T) {
	for _, how := range []string{"handoff", "stop"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, counterReg(t, drowsy), nil)
			ref := runtime.Ref{Name: "drowsy", Key: []string{"d"}}
			p, err := e.host.PartitionOf(ref)
			if err != nil {
				t.Fatal(err)
			}
			drowsyProbe.Store(0)
			if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "set", Args: []byte(`[1]`), CreateIfMissing: true}); err != nil {
				t.Fatal(err)
			}
			e.store.muteRenewals.Store(true)
			t.Cleanup(func() { e.store.muteRenewals.Store(false) })
			e.own.ExpireLocally()
			if how == "handoff" {
				if err := e.host.Handoff(ctx(t), p); err != nil {
					t.Fatal(err)
				}
			} else {
				e.stop()
			}
			if n := drowsyProbe.Load(); n > 0 {
				t.Fatalf("OnSleep ran %d time(s) past the lease's local deadline", n)
			}
			if how == "handoff" && e.host.Stats().ActiveActors != 0 {
				t.Fatalf("%d actor(s) still in memory after the handoff", e.host.Stats().ActiveActors)
			}
		})
	}
}
