// Package defaults holds the defaults that a node's runtime and
// workflowtest's Host must share, so that a workflow unit-tested with
// workflowtest meets the limits and waits it meets on a node: an actor's
// limits (runtime.DefaultConfig's) and how long a waiting send waits.
package defaults

import (
	"context"
	"time"
)

// An actor's limits and idle timeout, as runtime.DefaultConfig has them
// (the original engine's).
const (
	IdleTimeout     = 30 * time.Second
	StateBytes      = 1 << 20
	StepOutputBytes = 1 << 20
	MessageBytes    = 64 << 10
	QueueDepth      = 1000
)

// SendWait is how long a send waits for its message's completion if its
// sender names no timeout.
const SendWait = 30 * time.Second

// SendWaitWithin is how long a send that waits for its completion waits:
// the timeout asked (SendWait if none), ended before ctx's deadline (an
// actor's step or action, a client's gRPC deadline) so that the caller
// hears "timed out" with the message's ID and state rather than a
// deadline error that says nothing of a message that is queued and
// durable (a caller that then sent it again would queue it twice); the
// margin carries the answer back. Never under a millisecond: the wire
// counts milliseconds, and 0 would be the default.
func SendWaitWithin(ctx context.Context, timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = SendWait
	}
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		timeout = max(min(timeout, left-min(left/10, 250*time.Millisecond)), time.Millisecond)
	}
	return timeout
}
