package client

import (
	"context"
	"math/rand/v2"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// retryPolicy says how long to retry UNAVAILABLE.
type retryPolicy struct {
	// initial is the first backoff; it doubles up to maxBackoff.
	initial time.Duration
	// budget bounds the time from the first failed attempt's end to the
	// last retry; 0 means no retries. From the first failure, not the
	// call's start: a long call (a SendWait, a slow action) that breaks
	// as its node dies has the whole budget to ride out the failover.
	budget time.Duration
	// until, if set, is the caller's deadline for a context that does not
	// carry it (a subscription's, which must outlive it): retries stop
	// before it as they do before a context's own.
	until time.Time
	// closed, if set, ends with the client's Close: a call that fails
	// Canceled while the caller's context has not ended was cut off by
	// it, or made after it (clientClosed).
	closed context.Context
	// nodes is how many node addresses the client has. With more than
	// one, a refusal of the node reached because it stops (node.stopping)
	// is retried at once, up to nodes times in a call: round_robin sends
	// the retry to another address, which serves it. The stopping node's
	// connection gets no GOAWAY until its turns in flight end, so
	// round_robin kept picking it, and each call it got waited a backoff
	// (25-50 ms, where calls took 1 ms: about a twelfth as many calls in
	// a trial). With one address, or past the bound (the whole cluster
	// stops), the backoff stays.
	nodes int
}

// maxBackoff caps one wait, so that a partition that comes back is used
// within a second.
const maxBackoff = time.Second

// defaultBudget is the retry budget of a client without WithRetry. It
// covers a node's failover with default settings with room to spare: an
// actor of a killed node serves again elsewhere within 3.3-5 s (lease TTL
// 3 s, a second more when the node's etcd member led; docs/benchmarks.md,
// "Failover"), so that a call made as the node dies rides it out, where
// 5 s ran out about as the actor came back. A caller's context deadline
// still ends the retries first.
const defaultBudget = 15 * time.Second

func defaultRetry() retryPolicy {
	return retryPolicy{initial: 50 * time.Millisecond, budget: defaultBudget}
}

// retryLeast returns the least time before the caller's deadline that a
// retry is made with, for a call that had total before its deadline: a
// quarter of it, at most 250 ms. An attempt made with less left ends by
// the deadline on the client's side more often than its answer arrives:
// DEADLINE_EXCEEDED, whose outcome the caller cannot know, where the
// failure before it (UNAVAILABLE, and for most retried failures, not
// sent) was a known one. A node that cannot serve the call (an owner it
// cannot reach) answers at once, so a call retried until its deadline
// made its last attempt at a random time before it, and that attempt
// raced the deadline. It is more than the margin a forwarding node keeps
// for its answer (server.AnswerBy) before a call's deadline.
func retryLeast(total time.Duration) time.Duration {
	return min(total/4, 250*time.Millisecond)
}

// retryClass says which UNAVAILABLE failures of an RPC may be retried.
type retryClass int

const (
	// idempotent RPCs (reads, getOrCreate) are retried on any UNAVAILABLE,
	// including a connection that broke mid-call.
	idempotent retryClass = iota
	// sideEffects RPCs (Call, Send, Create, Destroy; a keyed Send or
	// Create is idempotent, a keyed Call readOnlyCall) are retried only when
	// the node itself answered UNAVAILABLE (the status carries an
	// ActorError), or the request never left (a dial refused): then it did
	// not run. A connection that broke mid-call may have run it, and
	// running an action twice is worse than an error the caller can see.
	sideEffects
	// readOnlyCall RPCs (a read-only Call, which the owner refuses for an
	// action that is not read-only) are retried as idempotent ones, but for
	// an UNAVAILABLE the node answered with the outcome-unknown mark: the
	// query ran and passed on what a call of its own got, and that call's
	// effect on another actor stands; running the query again would make
	// it again.
	readOnlyCall
)

// retryable says whether a failed attempt may be retried; reached says
// whether it got as far as a connection to a node (see attempt).
func (rc retryClass) retryable(st *status.Status, reached bool) bool {
	if st.Code() != codes.Unavailable {
		return false
	}
	// An attempt that never had a connection, a dial refused, or a stream
	// a node refused as it opened, sent nothing (rpcerr.NotSent): safe for
	// any call, as a node's own answer.
	if rc == idempotent || !reached || rpcerr.NotSent(st) {
		return true
	}
	if rc == readOnlyCall {
		return !rpcerr.MarkedOutcomeUnknown(st)
	}
	return rpcerr.HasActorError(st)
}

// attempt runs one attempt of rpc and reports whether it reached a node:
// whether gRPC gave it a stream on a connection, which it does only on a
// connection that is ready (its server's preface read). gRPC's Peer option
// is filled in only then, so an attempt without a peer was never sent,
// whatever its error says: a dial refused, a TLS handshake or a server
// preface that failed, a connection closed as it was made, a deadline that
// ran out while connecting. (gRPC's own transparent retries go only after
// attempts that sent nothing, or that the node did not process.)
func attempt[Req, Resp any](ctx context.Context, rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, bool, error) {
	p := peer.Peer{Addr: noPeer}
	resp, err := rpc(ctx, req, grpc.Peer(&p))
	if err != nil && p.Addr != noPeer {
		err = brokeAt(err, p.Addr)
	}
	return resp, err == nil || p.Addr != noPeer, err
}

// brokeAt words a bare UNAVAILABLE after the request was sent (the
// transport's "error reading from server: EOF", which names no node and
// does not say the call may have run, or a node's own word without the
// detail, such as a forwarding hop that broke) with the address of the
// node the call went to, and that it may have run. The words stay, for
// what looks at them (rpcerr.NotSent). A directly routed call's failure
// names its node already (use.failure).
func brokeAt(err error, addr net.Addr) error {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable || len(st.Proto().GetDetails()) > 0 || rpcerr.NotSent(st) ||
		strings.HasPrefix(st.Message(), "node ") || strings.Contains(st.Message(), mayHaveRun) {
		return err
	}
	at := "the node"
	if addr != nil {
		at += " at " + addr.String()
	}
	return status.Errorf(codes.Unavailable, "the call to %s %s: %s", at, mayHaveRun, st.Message())
}

// mayHaveRun is how a call's error says that its connection broke once
// the request was sent, whether through a node that forwards it (brokeAt)
// or straight to the owner (use.callFailure).
const mayHaveRun = "failed after it was sent, and may have run (its outcome is unknown)"

// clientClosed is the error of a call that the client's Close cut off
// (sent) or that was made after it: gRPC's Canceled ("grpc: the client
// connection is closing") named neither the client nor Close, and read as
// the caller's own context cancelled. Its kind stays context.Canceled, as
// Close says.
func clientClosed(sent bool) error {
	if sent {
		return &rivet.Error{Kind: context.Canceled, Message: "the rivet client was closed (Client.Close) during the call, which may have run (its outcome is unknown)"}
	}
	return &rivet.Error{Kind: context.Canceled, Message: "the rivet client is closed (Client.Close): the call was not sent"}
}

// closedInBackoff is the error of a call whose wait to be retried the
// client's Close cut off: of unknown outcome if an attempt before may have
// run (ranBefore); else every attempt failed before it ran (not sent, or a
// node's refusal), and neither did the call. Its kind is context.Canceled,
// as clientClosed's.
func closedInBackoff(ranBefore bool) error {
	if ranBefore {
		return clientClosed(true)
	}
	return &rivet.Error{Kind: context.Canceled, Message: "the rivet client was closed (Client.Close) while the call waited to be retried: it did not run"}
}

// noPeer marks a Peer gRPC has not filled in: a connection of a custom
// dialer may have no remote address (nil), which is still a connection.
var noPeer net.Addr = &net.UnixAddr{Name: "rivet: no peer"}

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
	start := time.Now()
	var giveUp time.Time // set by the first failure
	backoff := policy.initial
	if backoff <= 0 {
		backoff = defaultRetry().initial
	}
	var unreached *status.Status // the last attempt that did not reach a node
	sent := false                // an attempt reached a node
	atOnce := 0                  // the retries made without a backoff
	var closing <-chan struct{}  // nil, which never ends, without policy.closed
	if policy.closed != nil {
		closing = policy.closed.Done()
	}
	for {
		resp, reached, err := attempt(ctx, rpc, req)
		if err == nil {
			return resp, ranBefore, nil
		}
		sent = sent || reached
		st := status.Convert(err)
		if !class.retryable(st, reached) {
			err := fromStatus(ctx, st)
			if uerr := unencodable(st, req); uerr != nil {
				err = uerr
			}
			if st.Code() == codes.Canceled && ctx.Err() == nil && policy.closed != nil && policy.closed.Err() != nil {
				err = clientClosed(sent)
			}
			if unreached != nil && (st.Code() == codes.DeadlineExceeded || st.Code() == codes.Canceled) {
				// Still the deadline (this attempt may have run), with why
				// the one before could not reach the node: a node that is
				// down, or one that wants TLS, which the deadline alone
				// would hide.
				err = &retriedError{err: err, before: rpcerr.FromStatus(unreached)}
			}
			// actor.busy: this attempt did not run, but the one before
			// may have (a retried read or keyed send whose connection
			// broke once it was sent).
			err = rpcerr.BusyRanBefore(ranBefore, err)
			return zero, ranBefore, notSentIf(!sent, err)
		}
		// Neither refused before it was sent nor a node's own answer
		// (which says it did not run): the request may have run.
		if reached && !rpcerr.NotSent(st) && !rpcerr.HasActorError(st) {
			ranBefore = true
		}
		if len(st.Details()) == 0 {
			// No node said it: the transport's failure.
			unreached = st
		}
		now := time.Now()
		if giveUp.IsZero() {
			giveUp = now.Add(policy.budget)
		}
		// A refusal of a node that is stopping was made before anything
		// ran (the node's interceptor answers it before any handler), so
		// whatever the class: another address serves the call now. It
		// keeps the margins below (the budget, the deadline's), and a
		// budget of 0 still means no retry.
		atOnceNow := policy.nodes > 1 && atOnce < policy.nodes && policy.budget > 0 && rpcerr.RefusedStopping(st)
		// Half fixed, half random: clients that failed together (a
		// partition moved under all of them) do not retry in lockstep.
		wait := backoff/2 + rand.N(backoff/2+1)
		if atOnceNow {
			wait = 0
		}
		wake := now.Add(wait)
		if wake.After(giveUp) {
			return zero, ranBefore, notSentIf(!sent, fromStatus(ctx, st))
		}
		if d, ok := ctx.Deadline(); ok && wake.After(d.Add(-retryLeast(d.Sub(start)))) {
			return zero, ranBefore, notSentIf(!sent, fromStatus(ctx, st))
		}
		// A subscription's deadline (until) ends its attempt, whose context
		// has none, as a call's ends its: the same margin, or the last
		// attempt was cut off by it, ending DEADLINE_EXCEEDED in place of
		// the failure before it.
		if !policy.until.IsZero() && wake.After(policy.until.Add(-retryLeast(policy.until.Sub(start)))) {
			return zero, ranBefore, notSentIf(!sent, fromStatus(ctx, st))
		}
		if atOnceNow {
			if ctx.Err() != nil {
				return zero, ranBefore, notSentIf(!sent, withCause(fromStatus(ctx, st), ctx.Err()))
			}
			atOnce++
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, ranBefore, notSentIf(!sent, withCause(fromStatus(ctx, st), ctx.Err()))
		case <-closing:
			// Close ends the wait at once: the caller, which may be
			// what Close's caller waits for (a server's handler in a
			// shutdown), held on until the backoff ended, up to a
			// second, only to be refused as closed then.
			t.Stop()
			return zero, ranBefore, notSentIf(!ranBefore, closedInBackoff(ranBefore))
		case <-t.C:
		}
		backoff = min(2*backoff, maxBackoff)
	}
}
