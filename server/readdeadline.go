package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"
)

// requestReadTimeout bounds how long a node waits for the request of a
// call once its headers have come: a unary call's message, or the first
// message of a server-streaming one (Subscribe, Backup). gRPC reads a
// request before any handler or interceptor runs, with no bound of time,
// and lets the caller send up to the message length it declared (up to
// the transport's bound, 9 MiB by default) whatever the stream window.
// A caller that declares a large message, sends most of it and stops
// made the node hold those bytes for as long as it kept the connection
// alive: 600 such calls on one connection held 2.5 GB of a node, for
// ever. With the bound, each is dropped (CANCELLED) after it (by a
// sweeper's tick at most past it: 30-31 s), and its bytes with it. A
// legitimate 9 MiB request sent at 1 MB/s needs 9 s.
//
// A variable for tests.
var requestReadTimeout = 30 * time.Second

// errRequestReadTimeout is the cause of a stream dropped by
// requestReadTimeout.
var errRequestReadTimeout = errors.New("the request did not arrive whole within the node's request read timeout")

// readDeadlineKey holds, in a stream's context, the readCtx that drops
// the stream if its request does not come in time.
type readDeadlineKey struct{}

// A sweeper drops the streams of one tap handle whose request has not come
// within its timeout d. It replaces a timer per stream (with a context
// AfterFunc to stop it and a value context to find it: about 2 µs of CPU
// and 14 allocations per stream, on every call a node serves, where the
// sweeper adds 6, 5 of them the cancelable context gRPC's reads need;
// BenchmarkReadDeadline, docs/benchmarks.md, Session 63) by one list, in
// the order the streams came, and one timer, armed only while the list
// holds something, that sweeps it every tick. A stream is unlinked as its
// request is read (disarmRead), so a call that goes well holds the list
// for the time of its read only.
//
// The drop is coarser than a timer per stream: between d and d plus one
// tick (a tenth of d, at most maxSweepTick: 30 s becomes 30-31 s), never
// before d. A stream that ends before its request is read (a caller gone,
// a request too large, an unknown method, a stream the stop refuses) is
// never disarmed: each sweep forgets those, so the list holds such a
// stream's context, headers and all, for one tick at most, not the whole
// timeout, which a caller that opens and resets streams as fast as it can
// would turn into memory.
//
// There is no goroutine to stop with the server: the timer's function
// runs only for a sweep, and a sweep that leaves the list empty does not
// arm it again; a stopped server's streams all end, so the sweep after
// the stop (a tick at most) leaves nothing.
type sweeper struct {
	tick time.Duration
	// life is the sweep, counted from the last one before a stream came,
	// that drops it: the first comes after the stream, and d is over by
	// the life-1 ticks from there (between d and d plus a tick after the
	// stream came).
	life    uint64
	dropped func(net.Addr)

	mu         sync.Mutex
	sweeps     uint64 // sweeps so far
	head, tail *readCtx
	timer      *time.Timer // sweep; pending exactly when armed
	armed      bool
}

// maxSweepTick bounds a sweeper's tick: how late past its timeout a
// stream may be dropped, and how long the list may hold an ended stream.
const maxSweepTick = time.Second

// newSweeper returns the sweeper of a tap handle, or nil for d <= 0 (no
// bound). dropped, if not nil, is called with the caller's address for
// each stream the sweeper drops.
func newSweeper(d time.Duration, dropped func(net.Addr)) *sweeper {
	if d <= 0 {
		return nil
	}
	// A whole number of ticks, k, in d (rounded up): the last of them
	// passes d by a few nanoseconds at most. Rounded up by the remainder,
	// not by adding before dividing: d+maxSweepTick-1 overflows for a d
	// near math.MaxInt64 (a caller's "no bound"), which made the tick
	// negative and dropped every stream at once.
	k := max(10, ceilDiv(d, maxSweepTick))
	tick := ceilDiv(d, k)
	s := &sweeper{tick: tick, life: uint64(k) + 1, dropped: dropped}
	s.timer = time.AfterFunc(time.Hour, s.sweep)
	s.timer.Stop()
	return s
}

// ceilDiv is a/b rounded up, for a >= 0 and b > 0, without overflow.
func ceilDiv(a, b time.Duration) time.Duration {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// readCtx is the context of a stream a sweeper watches: the stream's,
// cancelable, which gRPC's reads of the request wait on, and the stream's
// place in the sweeper's list. Being the context itself (found by Value)
// spares a value context and its boxed value per stream. Never reused:
// the stream, and anything derived from its context, may hold it as long
// as it likes.
type readCtx struct {
	context.Context // from context.WithCancelCause
	cancel          context.CancelCauseFunc
	sw              *sweeper
	// Under sw.mu: the sweeps before it came, and its links in the list
	// while linked.
	born       uint64
	prev, next *readCtx
	linked     bool
}

// String names c as the context package names its own, and keeps fmt
// from printing the fields (read without the sweeper's lock).
func (c *readCtx) String() string {
	return fmt.Sprint(c.Context) + ".WithReadDeadline"
}

func (c *readCtx) Value(key any) any {
	if key == (readDeadlineKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// withReadDeadline returns a context for a new stream (from a tap handle,
// whose context becomes the stream's, which gRPC's reads of the request
// wait on) that is canceled after the sweeper's timeout unless disarmRead
// stops it first; ctx itself for a nil sweeper. Only a tap handle can do
// this: the context a stats handler or an interceptor gives is not the
// one the transport's reads wait on, and an interceptor runs only once
// the request is read.
func (s *sweeper) withReadDeadline(ctx context.Context) context.Context {
	if s == nil {
		return ctx
	}
	ctx, cancel := context.WithCancelCause(ctx)
	c := &readCtx{Context: ctx, cancel: cancel, sw: s}
	s.mu.Lock()
	c.born = s.sweeps
	c.linked = true
	if s.tail == nil {
		s.head = c
	} else {
		s.tail.next, c.prev = c, s.tail
	}
	s.tail = c
	if !s.armed {
		s.armed = true
		s.timer.Reset(s.tick)
	}
	s.mu.Unlock()
	return c
}

// unlink takes c out of the list, under s.mu.
func (s *sweeper) unlink(c *readCtx) {
	if c.prev == nil {
		s.head = c.next
	} else {
		c.prev.next = c.next
	}
	if c.next == nil {
		s.tail = c.prev
	} else {
		c.next.prev = c.prev
	}
	c.prev, c.next, c.linked = nil, nil, false
}

// sweep drops the streams past their time and forgets the ended ones.
// It runs on the timer's goroutine, once a tick while the list holds
// a stream; with the lock held, it reads each stream's Err: a caller that
// keeps many requests waiting makes each sweep that much longer (100,000
// waiting: 2-3 ms a sweep, once a second at the default timeout).
func (s *sweeper) sweep() {
	var late []*readCtx
	s.mu.Lock()
	s.sweeps++
	for c := s.head; c != nil; {
		next := c.next
		switch {
		case c.Err() != nil: // ended before its request came
			s.unlink(c)
		case s.sweeps-c.born >= s.life:
			s.unlink(c)
			late = append(late, c)
		}
		c = next
	}
	if s.head != nil {
		s.timer.Reset(s.tick)
	} else {
		s.armed = false
	}
	s.mu.Unlock()
	// Out of the lock: canceling wakes the stream's readers, and dropped
	// is the caller's. All are dropped before any is told, so that a
	// slow dropped delays no drop, as with a timer per stream.
	for _, c := range late {
		c.cancel(errRequestReadTimeout)
	}
	for _, c := range late {
		if s.dropped == nil || context.Cause(c) != errRequestReadTimeout {
			continue // or ended as it was dropped: nothing dropped
		}
		var addr net.Addr
		if p, ok := peer.FromContext(c); ok {
			addr = p.Addr
		}
		s.dropped(addr)
	}
}

// disarmRead stops the read deadline of the stream of ctx, if it has one:
// its request has been read.
func disarmRead(ctx context.Context) {
	if c, ok := ctx.Value(readDeadlineKey{}).(*readCtx); ok {
		s := c.sw
		s.mu.Lock()
		if c.linked {
			s.unlink(c)
		}
		s.mu.Unlock()
	}
}

// disarmUnary runs once gRPC has read a unary call's request: the call's
// own deadline (deadlineFirst) bounds it from here.
func disarmUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	disarmRead(ctx)
	return handler(ctx, req)
}

// disarmStream disarms a server-streaming call's read deadline once its
// one request has come, and a client- or bidirectional-streaming call's
// (the peers' forwarding streams, reflection) as it starts: those may
// rightly wait any time for their first message, so the bound does not
// cover them (each message they take is still bounded by the transport's
// size bound; only a caller with the token opens them).
func disarmStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.IsClientStream {
		disarmRead(ss.Context())
		return handler(srv, ss)
	}
	return handler(srv, &firstRecvDisarms{ServerStream: ss})
}

// firstRecvDisarms disarms its stream's read deadline once its first
// RecvMsg returns.
type firstRecvDisarms struct {
	grpc.ServerStream
	done bool
}

func (s *firstRecvDisarms) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if !s.done {
		s.done = true
		disarmRead(s.Context())
	}
	return err
}

// readDeadlineTap is the tap handle of a server without a token: only the
// read deadline, o.readTimeout.
func readDeadlineTap(o authOptions) tap.ServerInHandle {
	sw := newSweeper(o.readTimeout, o.onReadTimeout)
	return func(ctx context.Context, _ *tap.Info) (context.Context, error) {
		return sw.withReadDeadline(ctx), nil
	}
}

// AuthOption changes what AuthServerOptions and AuthTapHandle build; a
// nil one changes nothing.
type AuthOption func(*authOptions)

type authOptions struct {
	readTimeout   time.Duration
	onReadTimeout func(net.Addr)
}

func newAuthOptions(opts []AuthOption) authOptions {
	o := authOptions{readTimeout: requestReadTimeout}
	for _, opt := range opts {
		if opt != nil { // an optional hook its caller left unset
			opt(&o)
		}
	}
	return o
}

// OnRequestReadTimeout has f called for each call dropped because its
// request did not arrive within the request read timeout, with the
// caller's address (nil if gRPC did not give it), so that an operator
// sees the drops: the caller only gets CANCELLED, and nothing of the
// node ran. f runs on the goroutine of a sweep (see sweeper) and must not
// block.
func OnRequestReadTimeout(f func(peer net.Addr)) AuthOption {
	return func(o *authOptions) { o.onReadTimeout = f }
}

// RequestReadTimeout replaces the request read timeout, 30 s (see
// requestReadTimeout); 0 or less keeps it.
func RequestReadTimeout(d time.Duration) AuthOption {
	return func(o *authOptions) {
		if d > 0 {
			o.readTimeout = d
		}
	}
}
