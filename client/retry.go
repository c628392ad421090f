package client

import (
	"context"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/internal/rpcerr"
)

// retryPolicy says how long to retry UNAVAILABLE.
type retryPolicy struct {
	// initial is the first backoff; it doubles up to maxBackoff.
	initial time.Duration
	// budget bounds the time from the first attempt to the last retry;
	// 0 means no retries.
	budget time.Duration
	// until, if set, is the caller's deadline for a context that does not
	// carry it (a subscription's, which must outlive it): retries stop
	// before it as they do before a context's own.
	until time.Time
}

// maxBackoff caps one wait, so that a partition that comes back is used
// within a second.
const maxBackoff = time.Second

func defaultRetry() retryPolicy {
	return retryPolicy{initial: 50 * time.Millisecond, budget: 5 * time.Second}
}

// retryClass says which UNAVAILABLE failures of an RPC may be retried.
type retryClass int

const (
	// idempotent RPCs (reads, getOrCreate) are retried on any UNAVAILABLE,
	// including a connection that broke mid-call.
	idempotent retryClass = iota
	// sideEffects RPCs (Call, Send, Create, Destroy) are retried only when
	// the node itself answered UNAVAILABLE (the status carries an
	// ActorError), or the request never left (a dial refused): then it did
	// not run. A connection that broke mid-call may have run it, and
	// running an action twice is worse than an error the caller can see.
	sideEffects
)

// retryable says whether a failed attempt may be retried.
func (rc retryClass) retryable(st *status.Status) bool {
	if st.Code() != codes.Unavailable {
		return false
	}
	// A dial refused, or a stream a node refused as it opened, sent
	// nothing (rpcerr.NotSent): safe for any call, as a node's own answer.
	if rc == idempotent || rpcerr.NotSent(st) {
		return true
	}
	return rpcerr.HasActorError(st)
}

// invoke runs one RPC, retrying UNAVAILABLE as the client's policy and the
// RPC's class allow, and converts a final failure into a *rivet.Error.
func invoke[Req, Resp any](ctx context.Context, c *Client, class retryClass,
	rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
) (Resp, error) {
	return invokeWith(ctx, c.retry, class, rpc, req)
}

// invokeWith is invoke with a retry policy of its own.
func invokeWith[Req, Resp any](ctx context.Context, policy retryPolicy, class retryClass,
	rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
) (Resp, error) {
	resp, _, err := invokeRetried(ctx, policy, class, rpc, req)
	return resp, err
}

// invokeRetried is invokeWith that also says, with ranBefore, whether an
// attempt before the one that answered may have run the request: its
// connection broke once the request could have reached a node. A retried
// request that changes something (a cancel) may then find its own change
// already made, and must not report that as someone else's.
func invokeRetried[Req, Resp any](ctx context.Context, policy retryPolicy, class retryClass,
	rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req,
) (_ Resp, ranBefore bool, _ error) {
	var zero Resp
	giveUp := time.Now().Add(policy.budget)
	backoff := policy.initial
	if backoff <= 0 {
		backoff = defaultRetry().initial
	}
	var unreached *status.Status // the last attempt that did not reach a node
	for {
		resp, err := rpc(ctx, req)
		if err == nil {
			return resp, ranBefore, nil
		}
		st := status.Convert(err)
		if !class.retryable(st) {
			err := fromStatus(ctx, st)
			if unreached != nil && (st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled) {
				// Still the deadline (this attempt may have run), with why
				// the one before could not reach the node: a node that is
				// down, or one that wants TLS, which the deadline alone
				// would hide.
				err = &retriedError{err: err, before: rpcerr.FromStatus(unreached)}
			}
			return zero, ranBefore, err
		}
		// Neither refused before it was sent nor a node's own answer
		// (which says it did not run): the request may have run.
		if !rpcerr.NotSent(st) && !rpcerr.HasActorError(st) {
			ranBefore = true
		}
		if len(st.Details()) == 0 {
			// No node said it: the transport's failure.
			unreached = st
		}
		// Half fixed, half random: clients that failed together (a
		// partition moved under all of them) do not retry in lockstep.
		wait := backoff/2 + rand.N(backoff/2+1)
		wake := time.Now().Add(wait)
		if wake.After(giveUp) {
			return zero, ranBefore, fromStatus(ctx, st)
		}
		if d, ok := ctx.Deadline(); ok && wake.After(d) {
			return zero, ranBefore, fromStatus(ctx, st)
		}
		if !policy.until.IsZero() && wake.After(policy.until) {
			return zero, ranBefore, fromStatus(ctx, st)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, ranBefore, withCause(fromStatus(ctx, st), ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
