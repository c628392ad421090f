package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
)

// Tests that share these do not run in parallel with each other (see
// TestMain).
var (
	midRunStarted = make(chan struct{}, 4)
	midRunRelease = make(chan struct{})
	midRunStarts  atomic.Int64
)

// midrun's scheduled call blocks until released.
var midrun = rivet.Actor[alarmState]{
	Name: "midrun",
	Actions: rivet.Actions[alarmState]{
		"start": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (string, error) {
			return c.Schedule().After(0, "slow")
		}),
		"slow": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			midRunStarts.Add(1)
			midRunStarted <- struct{}{}
			<-midRunRelease
			c.State.Count++
			return c.State.Count, nil
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (alarmState, error) { return *c.State, nil }),
	},
}

// resetMidRun readies midrun for a test (-count=N).
func resetMidRun() {
	midRunRelease = make(chan struct{})
	midRunStarts.Store(0)
	for len(midRunStarted) > 0 {
		<-midRunStarted
	}
}

// A scheduled call that is running when its partition is handed off
// finishes there before the handoff ends, and runs once: not again on the
// next owner, its change kept.
func TestAScheduledCallRunningAtAHandoffRunsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, midrun), nil)
	h2, own2 := secondHost(t, e)
	resetMidRun()
	if _, err := call(t, e.host, "midrun", "m", "start", true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-midRunStarted:
	case <-time.After(30 * time.Second):
		t.Fatal("the scheduled call did not start")
	}
	p := placement.Partition("midrun", storage.EncodeKey([]string{"m"}), testPartitions)
	done := make(chan error, 1)
	go func() { done <- e.host.Handoff(ctx(t), p) }()
	waitFor(t, "the handoff to begin while the call runs", 10*time.Second, func() bool { _, ok := e.own.Releasing(p); return ok })
	close(midRunRelease)
	if err := <-done; err != nil {
		t.Fatalf("handoff: %v", err)
	}
	if got, err := own2.Claim(ctx(t), []uint32{p}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	get := func() alarmState { return alarmStateOf(t, h2, "midrun", "m") }
	if st := get(); st.Count != 1 {
		t.Fatalf("count %d on the next owner, want 1", st.Count)
	}
	time.Sleep(500 * time.Millisecond) // a run again on the next owner would be at once (absence: cannot flake)
	if n, st := midRunStarts.Load(), get(); n != 1 || st.Count != 1 {
		t.Fatalf("the call started %d times, count %d: want once", n, st.Count)
	}
	if kvs, err := e.store.List(ctx(t), storage.SchedulesPrefix, storage.ListOptions{}); err != nil || len(kvs) != 0 {
		t.Fatalf("stored calls: %v %v", kvs, err)
	}
}

// A handoff that gives up waiting for a running scheduled call releases
// the partition all the same: the call's run there does not commit, and
// the next owner runs the call, whose change is kept once.
func TestAScheduledCallOutlivingAHandoffRunsOnTheNextOwner(t *testing.T) {
	e := newEnv(t, counterReg(t, midrun), nil)
	h2, own2 := secondHost(t, e)
	resetMidRun()
	if _, err := call(t, e.host, "midrun", "o", "start", true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-midRunStarted:
	case <-time.After(30 * time.Second):
		t.Fatal("the scheduled call did not start")
	}
	p := placement.Partition("midrun", storage.EncodeKey([]string{"o"}), testPartitions)
	hctx, cancel := context.WithTimeout(ctx(t), 200*time.Millisecond)
	defer cancel()
	_ = e.host.Handoff(hctx, p) // gives up: the call holds the actor
	if got, err := own2.Claim(ctx(t), []uint32{p}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	close(midRunRelease) // the old run ends; the next owner's runs at once
	get := func() alarmState { return alarmStateOf(t, h2, "midrun", "o") }
	waitFor(t, "the call's change", 20*time.Second, func() bool { return get().Count >= 1 })
	waitFor(t, "no stored call", 20*time.Second, func() bool {
		kvs, err := e.store.List(ctx(t), storage.SchedulesPrefix, storage.ListOptions{})
		return err == nil && len(kvs) == 0
	})
	time.Sleep(500 * time.Millisecond) // absence: cannot flake
	if n, st := midRunStarts.Load(), get(); st.Count != 1 || n > 2 {
		t.Fatalf("the call started %d times, count %d: want its change once", n, st.Count)
	}
}
