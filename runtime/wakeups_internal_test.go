package runtime

import (
	"strings"
	"testing"
	"time"
)

// The timers hold wall-clock times only, whichever way a time came in: a
// heap of times from storage (wall clock) and from time.Now (monotonic
// too) would be compared by one clock or the other pair by pair, which,
// once the wall clock steps, orders nothing, and a due wakeup could wait
// behind a later one. (A step of the machine's clock cannot be made in a
// test; what can be checked is that no time in the heap carries a
// monotonic reading.)
func TestTimersHoldWallClockTimesOnly(t *testing.T) {
	tm := newTimers()
	now := time.Now()
	if !strings.Contains(now.String(), "m=") {
		t.Fatal("time.Now has no monotonic reading here: the test checks nothing")
	}
	tm.schedule(Ref{}, "a", now.Add(time.Second))
	tm.scheduleEarlier(Ref{}, "b", now.Add(2*time.Second))
	tm.scheduleEarlier(Ref{}, "b", now.Add(time.Second))
	tm.retry(&wakeItem{id: "c"}, now.Add(3*time.Second))
	tm.retryEarlier(&wakeItem{id: "a"}, now.Add(500*time.Millisecond))
	tm.retryEarlier(&wakeItem{id: "d"}, now.Add(4*time.Second))
	if len(tm.heap) != 4 {
		t.Fatalf("%d timers, want 4", len(tm.heap))
	}
	for _, it := range tm.heap {
		if s := it.at.String(); strings.Contains(s, "m=") {
			t.Errorf("timer %s at %s: a monotonic reading kept", it.id, s)
		}
	}
}

// A timer of scheduled calls is in a run from the moment the wake loop
// takes it (due), not from when the run's goroutine starts: the run may
// wait for a slot (wakeParallel) meanwhile, and a load of the actor then
// (a client's call) armed the timer again, for a second run beside the
// first whose failures counted from none, undoing the backoff.
func TestASchedTimerTakenToRunIsNotArmedAgainByALoad(t *testing.T) {
	tm := newTimers()
	id := schedTimer("a1")
	due := time.Now().Add(-time.Second)
	tm.schedule(Ref{}, id, due)
	items, _ := tm.due()
	if len(items) != 1 {
		t.Fatalf("%d timers due, want 1", len(items))
	}
	tm.armUnlessFiring(Ref{}, id, due) // the actor loads, its run not started yet
	if len(tm.heap) != 0 {
		t.Fatal("a load armed the timer again while the wake loop held it for a run")
	}
	tm.runEnded(id) // the run ends
	tm.armUnlessFiring(Ref{}, id, due)
	if len(tm.heap) != 1 {
		t.Fatalf("%d timers once the run ended, want 1", len(tm.heap))
	}
	if len(tm.firing) != 0 {
		t.Fatalf("runs still marked in progress: %v", tm.firing)
	}
}

// A load of an actor whose due call failed and waits out its backoff
// leaves that timer alone: moved to the call's time, its failures counted
// from none, so a client calling the actor (loaded again after each commit
// storage refused) ran the failing call at once each time, and its
// backoff never grew.
func TestALoadLeavesTheBackoffOfAFailedCallAlone(t *testing.T) {
	tm := newTimers()
	id := schedTimer("a1")
	now := time.Now()
	tm.retry(&wakeItem{id: id, fails: 3, storageFailed: true}, now.Add(4*time.Second))
	tm.armUnlessFiring(Ref{}, id, now.Add(-time.Second)) // the call's time
	it := tm.byID[id]
	if it == nil || it.fails != 3 || !it.at.Equal(now.Add(4*time.Second).Round(0)) {
		t.Fatalf("timer after a load: %+v, want at %v with 3 failures", it, now.Add(4*time.Second))
	}
	// After runs whose load failed (OnWake), a load that succeeds arms it
	// at once; so it does without a retry pending.
	for _, pending := range []*wakeItem{{id: id, fails: 3}, nil} {
		tm.cancel(id)
		if pending != nil {
			tm.retry(pending, now.Add(time.Minute))
		}
		tm.armUnlessFiring(Ref{}, id, now.Add(-time.Second))
		if it := tm.byID[id]; it == nil || !it.at.Equal(now.Add(-time.Second).Round(0)) {
			t.Fatalf("timer after a load (retry pending %v): %+v, want at the call's time", pending != nil, it)
		}
	}
}
