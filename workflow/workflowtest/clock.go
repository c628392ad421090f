package workflowtest

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is a fake workflow.Clock: time moves only when Set or Advance moves
// it, and timers fire then, so tests never wait on real time.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{} // closed (and replaced) when timers are added
}

type fakeTimer struct {
	at time.Time
	c  chan time.Time
}

// NewClock returns a clock at start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start.Round(0), changed: make(chan struct{})}
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Timer returns a channel that receives when the clock reaches at.
func (c *Clock) Timer(at time.Time) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: at, c: make(chan time.Time, 1)}
	if !at.After(c.now) {
		t.c <- c.now
		return t.c, func() {}
	}
	c.timers = append(c.timers, t)
	close(c.changed)
	c.changed = make(chan struct{})
	return t.c, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, o := range c.timers {
			if o == t {
				c.timers = append(c.timers[:i], c.timers[i+1:]...)
				break
			}
		}
	}
}

// Set moves the clock to t (never backwards) and fires the timers due.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.After(c.now) {
		return
	}
	c.now = t
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(t) {
			kept = append(kept, tm)
			continue
		}
		tm.c <- t
	}
	c.timers = kept
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Timers returns the deadlines of the pending timers, earliest first.
func (c *Clock) Timers() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, len(c.timers))
	for i, t := range c.timers {
		out[i] = t.at
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// WaitTimers blocks until at least n timers are pending (for a step body
// blocked until its timeout, which the run does not report as waiting), or
// ctx is done.
func (c *Clock) WaitTimers(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		ok, ch := len(c.timers) >= n, c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
