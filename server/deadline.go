package server

import (
	"context"
	"time"

	"google.golang.org/grpc"
)

// deadlineSlack is how close to a call's deadline a cancellation of its
// context is taken for the deadline itself (see deadlineFirst).
const deadlineSlack = 50 * time.Millisecond

// deadlineFirst makes a unary call whose client gives up at its deadline
// end on that deadline, as the client meant: its context ends with
// context.DeadlineExceeded, not context.Canceled.
//
// A gRPC client resets its stream when its deadline passes, and the node
// cancels the call's context when the reset arrives, a moment before its
// own timer would fire: its deadline starts when it reads the request's
// headers, after the client started its own. So a call that ran out of
// time ended cancelled (29 times in 30 on loopback): an action waiting on
// its context saw context.Canceled, and rivet_calls_total counted the call
// "canceled", not "actor.timed_out", as it did the same call made through
// another node (whose request to the owner carries the deadline, and
// whose own cancel is not sent for a call that ran out of time, so that
// the owner's timer ends it). A cancellation
// within deadlineSlack of the deadline is left to the deadline's timer,
// which ends the call within that time; an earlier one (a client that
// gives up, a stream or connection that breaks) ends it at once, as
// before. A call without a deadline is served as it came.
func deadlineFirst(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	d, ok := ctx.Deadline()
	if !ok {
		return handler(ctx, req)
	}
	dctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), d)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if time.Until(d) > deadlineSlack {
			cancel()
		}
	})
	defer stop()
	return handler(dctx, req)
}
