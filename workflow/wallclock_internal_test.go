package workflow

import (
	"sync/atomic"
	"testing"
	"time"
)

// A workflow's deadline read back from history (a wall-clock time) is
// reached when the wall clock steps past it, not only when a countdown
// computed before the step runs out; a step's timeout (a time from Now,
// with its monotonic reading) stays a duration.
func TestSystemClockTimersFollowTheWallClockForRecordedDeadlines(t *testing.T) {
	var offset atomic.Int64
	oldNow, oldRecheck := wallNow, wallRecheck
	wallNow = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	wallRecheck = 5 * time.Millisecond
	defer func() { wallNow, wallRecheck = oldNow, oldRecheck }()

	recorded := time.Now().Add(time.Hour).Round(0) // as history holds it
	c, stopTimer := SystemClock{}.Timer(recorded)
	defer stopTimer()
	fired := make(chan struct{})
	stopFunc := SystemClock{}.AfterFunc(recorded, func() { close(fired) })
	var durationFired atomic.Bool
	stopDuration := SystemClock{}.AfterFunc(time.Now().Add(time.Hour), func() { durationFired.Store(true) })
	// A stopped one never fires.
	var stoppedFired atomic.Bool
	stopStopped := SystemClock{}.AfterFunc(recorded, func() { stoppedFired.Store(true) })
	if !stopStopped() {
		t.Fatal("stopping a pending timer reported it had fired")
	}

	offset.Store(int64(time.Hour)) // the wall clock steps past the deadline
	for _, w := range []struct {
		name string
		c    <-chan struct{}
	}{{"AfterFunc", fired}, {"Timer", chanOf(c)}} {
		select {
		case <-w.c:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: not fired 20 s after the wall clock stepped past its deadline", w.name)
		}
	}
	if stopFunc() {
		t.Fatal("stopping a fired timer reported it stopped it")
	}
	if durationFired.Load() || !stopDuration() {
		t.Fatal("a timeout from Now (a duration) ended with the wall clock's step")
	}
	if stoppedFired.Load() {
		t.Fatal("a stopped timer fired")
	}
}

func chanOf(c <-chan time.Time) <-chan struct{} {
	out := make(chan struct{})
	go func() { <-c; close(out) }()
	return out
}
