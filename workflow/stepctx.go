package workflow

import (
	"context"
	"sync"
	"time"
)

// attemptCtx is a step attempt's context: its parent's, and cancelled at
// the attempt's deadline and when the attempt ends. Most step bodies never
// look at their context (they change the state, compute a value), so the
// cancellable context and the timer behind it are made only when the body
// first asks for them (Done, Err, Value): a context, a timer and their
// registrations per step were about a twentieth of a step's CPU. A body
// that never asked is timed out by the clock when it returns, as the timer
// would have said.
type attemptCtx struct {
	parent   context.Context
	deadline time.Time // zero: no timeout
	clk      Clock     // an afterFuncClock

	mu     sync.Mutex
	inner  context.Context // nil until armed
	cancel context.CancelFunc
	stop   func() bool   // the deadline's timer; nil if none
	fired  chan struct{} // closed once the timer's func has cancelled inner
	ended  bool          // the attempt ended: arm cancels at once
	timed  bool          // cancelled by the deadline (timer or clock)
}

// init readies c, zero, for an attempt: allocated by its caller, a step
// attempt's with the rest of the attempt's variables (cx.attempt).
func (c *attemptCtx) init(parent context.Context, timeout time.Duration, clk Clock) {
	c.parent, c.clk = parent, clk
	if timeout > 0 {
		c.deadline = clk.Now().Add(timeout)
	}
}

// arm makes the cancellable context on first use and returns it.
func (c *attemptCtx) arm() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner != nil {
		return c.inner
	}
	c.inner, c.cancel = context.WithCancel(c.parent)
	switch {
	case c.ended:
		c.cancel()
	case c.deadline.IsZero():
	case !c.clk.Now().Before(c.deadline):
		// Already past it: cancelled before the caller sees it, as the
		// timer would have done by now.
		c.timed = true
		c.cancel()
	default:
		c.fired = make(chan struct{})
		c.stop = c.clk.(afterFuncClock).AfterFunc(c.deadline, func() {
			c.mu.Lock()
			c.timed = true
			c.mu.Unlock()
			c.cancel()
			close(c.fired)
		})
	}
	return c.inner
}

// end ends the attempt and reports whether its deadline cancelled it
// first. Nothing of the timer runs after end returns.
func (c *attemptCtx) end() (timedOut bool) {
	c.mu.Lock()
	c.ended = true
	inner, stop, fired := c.inner, c.stop, c.fired
	c.mu.Unlock()
	if inner == nil {
		// Never armed: the clock says whether the body overran.
		return !c.deadline.IsZero() && !c.clk.Now().Before(c.deadline)
	}
	if stop != nil && !stop() {
		// Fired (or firing): let it finish, so that nothing of this step
		// runs after it returns.
		<-fired
	}
	c.cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deadline.IsZero() && !c.clk.Now().Before(c.deadline) {
		// Returned past the deadline before the timer ran: timed out, as
		// the timer would have said.
		c.timed = true
	}
	return c.timed
}

// Deadline is the step's timeout, or the parent's deadline if that comes
// first: what a body passes its context to plans by it (a send that waits
// for its completion ends in time to say it timed out, rather than the
// attempt failing as timed out; a call to another actor carries it).
func (c *attemptCtx) Deadline() (time.Time, bool) {
	d, ok := c.parent.Deadline()
	if !c.deadline.IsZero() && (!ok || c.deadline.Before(d)) {
		return c.deadline, true
	}
	return d, ok
}

func (c *attemptCtx) Done() <-chan struct{} { return c.arm().Done() }

func (c *attemptCtx) Err() error { return c.arm().Err() }

// Value arms too: context.Cause finds the cancelled context through it.
func (c *attemptCtx) Value(key any) any { return c.arm().Value(key) }

// String names the context without reading its fields, which its lock
// guards (fmt would print them).
func (c *attemptCtx) String() string { return "workflow step attempt context" }
