// Package answerby says when a node that cannot serve a call yet should
// give up on it, so that its answer, which says the call did not run,
// reaches the caller before the caller's own deadline ends the call with
// an unknown outcome. The server (a forward not sent on) and the runtime
// (a wait for an actor's turn) both use it, so that the two keep one
// margin.
package answerby

import (
	"context"
	"time"
)

// By returns when a request that has not started by then should give up,
// so that its caller, whose deadline ctx carries, hears why before the
// deadline, for the answer to travel back: a tenth of the time left before
// the deadline, at most 1 s, and at least half of it up to Margin, and at
// least 50 ms. ok is false if ctx has no deadline.
func By(ctx context.Context) (by time.Time, ok bool) {
	dl, ok := ctx.Deadline()
	if !ok {
		return time.Time{}, false
	}
	left := time.Until(dl)
	margin := min(max(left/10, min(left/2, Margin), 50*time.Millisecond), time.Second)
	return dl.Add(-margin), true
}

// Margin is the margin By leaves an answer to reach its caller, of a call
// with at least twice that left. It was 50 ms, which a loaded machine (a
// 2-core CI runner with a cluster on it) overran now and then: the
// caller's deadline passed as the answer travelled, and the call ended
// DEADLINE_EXCEEDED, its outcome unknown, although it was never sent. A
// call with less time left keeps half of it to wait in (for a new
// connection to a peer, or its actor's turn), with a margin of 50 ms at
// least. It covers a forwarded call's way back too: a forwarding node
// gives the owner the caller's own deadline, so the owner's answer has the
// same margin for both hops.
const Margin = 200 * time.Millisecond

// Wait is By for a wait whose end refuses the call (an actor's turn, which
// may come within the margin): not before halfway to the deadline. By
// leaves a call with 50 ms or less no wait at all (the margin's floor), so
// that such a call found its actor busy with a turn of a millisecond
// refused at once, where it waited for it before; and up to 100 ms, less
// than half. ok is false if ctx has no deadline.
func Wait(ctx context.Context) (by time.Time, ok bool) {
	by, ok = By(ctx)
	if !ok {
		return by, false
	}
	dl, _ := ctx.Deadline()
	now := time.Now()
	if half := now.Add(dl.Sub(now) / 2); by.Before(half) {
		by = half
	}
	return by, true
}
