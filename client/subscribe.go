package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// Event is one event an actor broadcast, or a gap.
type Event struct {
	// Name and Data are the event's name and JSON payload.
	Name string
	Data json.RawMessage
	// Gap marks the place where the subscription was made again (the
	// actor moved to another node, its node stopped, or this subscriber
	// fell behind): events broadcast in between may be missing. A Gap
	// has no Name; a subscriber that keeps a view of the actor reads it
	// afresh.
	Gap bool
}

// Decode unmarshals the event's data into v.
func (e Event) Decode(v any) error { return json.Unmarshal(e.Data, v) }

// ErrSubscriptionClosed is what Next returns after Close.
var ErrSubscriptionClosed = errors.New("client: subscription closed")

// Subscription is a stream of one actor's events (ActorHandle.Subscribe).
// It lasts until Close, or until it cannot be made again: it follows the
// actor across moves and node stops by subscribing again, and marks each
// such place with a Gap. Next must be called from one goroutine at a time.
type Subscription struct {
	cancel context.CancelFunc
	ch     chan Event
	done   chan struct{}
	err    error // set before done closes
	once   sync.Once
	closed atomic.Bool
	// onBreak is SubscribeOptions.OnBreak.
	onBreak func(err error)
}

// Subscribe subscribes to the actor's events (those named, or all) and
// returns once the subscription is in place: every event the actor
// broadcasts after that is delivered by Next, in order, once the turn that
// broadcast it is durable. ctx bounds the subscribing; the subscription
// lasts until Close. A getOrCreate handle (Client.Actor) creates the actor
// if it does not exist; a NoCreate handle fails with rivet.ErrNotFound. An
// event the actor does not declare (or any event, of an actor that declares
// none) is rivet.ErrUnknownEvent, and creates nothing.
//
// Events are not stored: the subscription hears what is broadcast while it
// is in place. When its stream breaks (the actor moved, its node stopped,
// the subscriber fell behind) it subscribes again, through the client's
// node (another of them, if New was given several and that one went; with
// WithDirectRouting, at the owner its table names), for
// at least 30 s (the client's retry budget if
// longer; none with WithRetry(_, 0)), and Next returns a Gap event there.
func (h *ActorHandle) Subscribe(ctx context.Context, events ...string) (*Subscription, error) {
	return h.SubscribeWith(ctx, SubscribeOptions{Events: events})
}

// SubscribeOptions tune a subscription.
type SubscribeOptions struct {
	// Events names the events to receive; empty: all of the actor's.
	Events []string
	// OnBreak, if set, is called with the cause when the subscription's
	// stream breaks and it starts subscribing again (a Gap event follows
	// once it has): a subscriber that shows a live view can say it is
	// behind meanwhile. It runs on the subscription's goroutine: return
	// quickly.
	OnBreak func(err error)
}

// SubscribeWith is Subscribe with options.
func (h *ActorHandle) SubscribeWith(ctx context.Context, opts SubscribeOptions) (*Subscription, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	// The client's Close ends it too; unregistered when it ends, so that a
	// long-lived client does not keep one per subscription ever made.
	unclose := context.AfterFunc(h.c.closed, cancel)
	req := &rivetv1.SubscribeRequest{Actor: h.ref(), Events: opts.Events}
	// sctx has no deadline (the stream outlives ctx's): without ctx's in
	// the policy, a node that is not there was retried until the deadline
	// cancelled sctx, and the error matched context.Canceled.
	policy := h.c.retry
	if d, ok := ctx.Deadline(); ok {
		policy.until = d
	}
	stream, err := h.subscribe(sctx, req, policy)
	if h.create && errors.Is(err, rivet.ErrNotFound) {
		// Rivet's getOrCreate().connect(): the handle promises the actor
		// exists once it is used. Created only once the node has taken
		// the subscription's event names (a name the actor does not
		// declare is refused first): a refused subscription creates
		// nothing.
		// Its retries too stop before ctx's deadline (sctx has none).
		if _, err = h.info(sctx, policy); err == nil {
			stream, err = h.subscribe(sctx, req, policy)
		}
	}
	if !stop() {
		cancel()
		if err == nil {
			err = ctx.Err()
		}
	}
	if err != nil {
		cancel()
		unclose()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && errors.Is(err, context.Canceled) {
			// sctx has no deadline: ctx's end cancelled the attempt in
			// flight (a node slow to answer). That is the deadline, as a
			// call would end, not a cancel by the caller.
			err = fromStatus(ctx, status.New(codes.DeadlineExceeded, context.DeadlineExceeded.Error()))
		}
		if ctx.Err() == nil && h.c.closed.Err() != nil && errors.Is(err, context.Canceled) {
			// The client's Close cancelled sctx (unclose), which raced the
			// attempt: invokeRetried, seeing sctx ended, took the Canceled
			// for the caller's and kept gRPC's "the client connection is
			// closing" (about 1 in 200 after Close). Said as a call's is, sent
			// or not as it was.
			unknown := rivet.OutcomeUnknown(err)
			err = notSentIf(!unknown, clientClosed(unknown))
		}
		return nil, withCause(err, ctx.Err())
	}
	s := &Subscription{cancel: cancel, ch: make(chan Event), done: make(chan struct{}), onBreak: opts.OnBreak}
	go func() {
		defer unclose()
		s.run(sctx, h, req, stream)
	}()
	return s, nil
}

// subscribe opens a stream and waits for its first message, retrying
// UNAVAILABLE as policy allows.
func (h *ActorHandle) subscribe(ctx context.Context, req *rivetv1.SubscribeRequest, policy retryPolicy) (grpc.ServerStreamingClient[rivetv1.SubscribeResponse], error) {
	open := func(ctx context.Context, req *rivetv1.SubscribeRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[rivetv1.SubscribeResponse], error) {
		if r := h.c.router; r != nil {
			// Straight to the owner, as calls go: the events then take
			// no hop through a forwarding node.
			if u := r.pick(ctx, req); u != nil {
				stream, err := openStream(u.ctx, rivetv1.NewActorServiceClient(u.conn), req, opts...)
				if err != nil {
					r.release(u)
					// Cut off as it opened: UNAVAILABLE, retried.
					err = u.failure(ctx, err)
				} else {
					// In use until the stream ends (its context ends
					// with it, however it ends); cut off by a refresh
					// that finds the owner gone, its Recv says so.
					context.AfterFunc(stream.Context(), func() { r.release(u) })
					stream = &cutStream{ServerStreamingClient: stream, u: u, ctx: ctx}
				}
				// By the error alone, as before the Peer option: a
				// subscription is idempotent, so an owner that never
				// connected costs at most a retry, not a call run twice.
				if !r.unreached(u.addr, err, true) {
					return stream, err
				}
			}
		}
		return openStream(ctx, h.c.actors, req, opts...)
	}
	return invokeWith(ctx, policy, idempotent, open, req)
}

// maxDrained bounds the messages read from a stream given up, which its
// cancel ends after those already received.
const maxDrained = 1 << 16

// openStream opens a Subscribe stream on actors and waits for its first
// message.
func openStream(ctx context.Context, actors rivetv1.ActorServiceClient, req *rivetv1.SubscribeRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[rivetv1.SubscribeResponse], error) {
	// A stream of its own context, so that one given up here ends now,
	// not with the subscription.
	ctx, cancel := context.WithCancel(ctx)
	stream, err := actors.Subscribe(ctx, req, opts...)
	if err != nil {
		cancel()
		return nil, err
	}
	m, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "the node ended the subscription before it began")
	}
	if err == nil && m.GetSubscribed() == nil {
		// Given up while it is open: read it to its end, which the
		// cancel brings, so that gRPC has finished it (and filled in the
		// caller's grpc.Peer, which attempt reads) before we return.
		cancel()
		for range maxDrained {
			if _, rerr := stream.Recv(); rerr != nil {
				break
			}
		}
		err = status.Error(codes.Internal, "client: a subscription's first message is not 'subscribed'")
	}
	if err != nil {
		cancel()
		return nil, err
	}
	context.AfterFunc(stream.Context(), cancel) // ends with the stream
	return stream, nil
}

// resubscribeBudget is the least time a subscription keeps trying to
// subscribe again: an actor whose node died is served again once its
// lease has expired and its partition moved (3.3-5 s with default
// settings, longer on a loaded cluster), and a subscription, which no
// caller waits on, may give a slow failover more time than a call does,
// or than a client with a short WithRetry budget allows.
const resubscribeBudget = 30 * time.Second

// resubscribe is the retry policy of subscribing: the client's, with at
// least resubscribeBudget to spend (none, if the client retries nothing).
func (c *Client) resubscribe() retryPolicy {
	p := c.retry
	if p.budget > 0 {
		p.budget = max(p.budget, resubscribeBudget)
	}
	return p
}

// run reads the stream into ch, subscribing again when it breaks, until
// ctx ends or a stream cannot be made again. It owns done.
func (s *Subscription) run(ctx context.Context, h *ActorHandle, req *rivetv1.SubscribeRequest, stream grpc.ServerStreamingClient[rivetv1.SubscribeResponse]) {
	defer close(s.done)
	// A stream that breaks soon after it was made is made again only
	// after a wait, growing while they keep breaking: each subscribing
	// has a fresh retry budget, which alone would not pace them.
	made, pause := time.Now(), time.Duration(0)
	for {
		m, err := stream.Recv()
		if err == nil {
			if ev := m.GetEvent(); ev != nil && !s.deliver(ctx, Event{Name: ev.GetName(), Data: ev.GetData()}) {
				s.err = ErrSubscriptionClosed
				return
			}
			continue
		}
		if ctx.Err() != nil {
			s.err = ErrSubscriptionClosed
			return
		}
		if !resumable(err) {
			s.err = fromStatus(ctx, status.Convert(err))
			return
		}
		if s.onBreak != nil {
			cause := err
			if !errors.Is(err, io.EOF) {
				cause = fromStatus(ctx, status.Convert(err))
			}
			s.onBreak(cause)
		}
		if time.Since(made) < time.Second {
			pause = min(max(2*pause, 50*time.Millisecond), time.Second)
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				s.err = ErrSubscriptionClosed
				return
			}
		} else {
			pause = 0
		}
		if r := h.c.router; r != nil && status.Code(err) == codes.Unavailable {
			// The actor may have moved: the next stream goes where the
			// table says now, not to the node that just let it go (which
			// would relay it, for as long as the stream lasts).
			r.refreshNow(ctx)
		}
		if stream, err = h.subscribe(ctx, req, h.c.resubscribe()); err != nil {
			if ctx.Err() != nil {
				err = ErrSubscriptionClosed
			}
			s.err = err
			return
		}
		made = time.Now()
		if !s.deliver(ctx, Event{Gap: true}) {
			s.err = ErrSubscriptionClosed
			return
		}
	}
}

// resumable says whether a broken stream is worth subscribing again: the
// actor moved or its node stopped (UNAVAILABLE), the connection broke, or
// this subscriber fell behind.
func resumable(err error) bool {
	if errors.Is(err, io.EOF) {
		return true
	}
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable:
		return true
	case codes.ResourceExhausted:
		e := rpcerr.FromStatus(st)
		return e.Group == "event" && e.Code == "overflow"
	}
	return false
}

func (s *Subscription) deliver(ctx context.Context, ev Event) bool {
	select {
	case s.ch <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// Next waits for the next event (or Gap). It returns an error when ctx
// ends (matching ctx.Err() with errors.Is, and rivet.ErrTimeout for a
// deadline, as a call's; the subscription goes on), after Close
// (ErrSubscriptionClosed), or once the subscription has
// ended for good: the actor was destroyed (rivet.ErrNotFound), or it could
// not be made again within the retry budget (rivet.ErrUnavailable).
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	if s.closed.Load() {
		return Event{}, ErrSubscriptionClosed
	}
	select {
	case ev := <-s.ch:
		return ev, nil
	case <-s.done:
		return Event{}, s.err
	case <-ctx.Done():
		return Event{}, waitEnded(ctx)
	}
}

// waitEnded is Next's error when its ctx ends: the wait ended, not the
// subscription, which a later Next goes on with. A bare "context deadline
// exceeded" said neither. Matched as a call's whose ctx ends (fromStatus):
// errors.Is holds for ctx.Err(), and for rivet.ErrTimeout if it was the
// deadline.
func waitEnded(ctx context.Context) error {
	cause := ctx.Err()
	kind := cause
	if cause == context.DeadlineExceeded {
		kind = rivet.ErrTimeout
	}
	return withCause(&rivet.Error{Kind: kind, Message: "the wait for the subscription's next event ended (" + cause.Error() + "); the subscription goes on"}, cause)
}

// Done is closed when the subscription has ended (Err says why): for a
// select beside Next's.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err says why the subscription ended, once Done is closed (nil before):
// as Next's error.
func (s *Subscription) Err() error {
	select {
	case <-s.done:
		if s.closed.Load() {
			return ErrSubscriptionClosed
		}
		return s.err
	default:
		return nil
	}
}

// Close ends the subscription and waits for its stream to end.
func (s *Subscription) Close() error {
	select {
	case <-s.done: // it had ended: Next and Err keep saying why
	default:
		s.closed.Store(true)
	}
	s.once.Do(s.cancel)
	<-s.done
	return nil
}
