package runtime_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

var (
	slowpokeStarted = make(chan struct{}, 1)
	slowpokeRelease = make(chan struct{})
	slowpokeTicks   atomic.Int64
)

// slowpoke's scheduled call blocks until released, then schedules more;
// a recurring call ticks meanwhile.
var slowpoke = rivet.Actor[alarmState]{
	Name: "slowpoke",
	Actions: rivet.Actions[alarmState]{
		"start": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			if _, err := c.Schedule().After(0, "slow"); err != nil {
				return 0, err
			}
			_, err := c.Schedule().Every("t", time.Second, "tick")
			return 0, err
		}),
		"slow": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			slowpokeStarted <- struct{}{}
			<-slowpokeRelease
			c.State.Count++
			_, err := c.Schedule().After(0, "tick")
			return c.State.Count, err
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (alarmState, error) { return *c.State, nil }),
		"tick": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			slowpokeTicks.Add(1)
			return 0, nil
		}),
	},
}

// An actor destroyed while one of its scheduled calls runs is destroyed
// once the call's turn ends: what the call scheduled, and its recurring
// calls, never run after the destroy, and nothing of it is left stored.
func TestDestroyWhileAScheduledCallRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, slowpoke), nil)
	ref := runtime.Ref{Name: "slowpoke", Key: []string{"a"}}
	slowpokeRelease = make(chan struct{}) // (-count=N)
	if _, err := call(t, e.host, "slowpoke", "a", "start", true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-slowpokeStarted:
	case <-time.After(30 * time.Second):
		t.Fatal("the scheduled call did not start")
	}
	done := make(chan error, 1)
	go func() { done <- e.host.Destroy(ctx(t), ref) }()
	waitFor(t, "the destroy to queue behind the running call", 10*time.Second, func() bool { return e.host.GateWaiters(ref) > 0 })
	close(slowpokeRelease)
	if err := <-done; err != nil {
		t.Fatalf("destroy: %v", err)
	}
	ticks := slowpokeTicks.Load()
	kvs, err := e.store.List(ctx(t), storage.SchedulesPrefix, storage.ListOptions{})
	if err != nil || len(kvs) != 0 {
		t.Fatalf("stored calls after destroy: %v %v", kvs, err)
	}
	time.Sleep(1500 * time.Millisecond) // past the recurring call's time (absence: cannot flake)
	if n := slowpokeTicks.Load(); n != ticks {
		t.Fatalf("%d ticks ran after the destroy", n-ticks)
	}
	if _, err := call(t, e.host, "slowpoke", "a", "get", false); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("after destroy: %v, want not found", err)
	}
	if kvs, err := e.store.List(ctx(t), storage.SchedulesPrefix, storage.ListOptions{}); err != nil || len(kvs) != 0 {
		t.Fatalf("stored calls after destroy and the calls' times: %v %v", kvs, err)
	}
}
