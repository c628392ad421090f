package server

import (
	"context"
	"errors"
	"net"
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
// ever. With the bound, each is dropped (CANCELLED) after it, and its
// bytes with it. A legitimate 9 MiB request sent at 1 MB/s needs 9 s.
//
// A variable for tests.
var requestReadTimeout = 30 * time.Second

// errRequestReadTimeout is the cause of a stream dropped by
// requestReadTimeout.
var errRequestReadTimeout = errors.New("the request did not arrive whole within the node's request read timeout")

// readDeadlineKey holds, in a stream's context, the readDeadline that
// drops the stream if its request does not come in time.
type readDeadlineKey struct{}

// readDeadline is a stream's timer, and the stop of what stops it should
// the stream end first.
type readDeadline struct {
	timer  *time.Timer
	unhook func() bool
}

// withReadDeadline returns a context for a new stream (from a tap handle,
// whose context becomes the stream's, which gRPC's reads of the request
// wait on) that is canceled after d unless disarmRead stops it first.
// Only a tap handle can do this: the context a stats handler or an
// interceptor gives is not the one the transport's reads wait on, and an
// interceptor runs only once the request is read. dropped, if not nil,
// is called with the caller's address for a stream the deadline drops.
func withReadDeadline(ctx context.Context, d time.Duration, dropped func(net.Addr)) context.Context {
	if d <= 0 {
		return ctx
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(d, func() {
		if ctx.Err() != nil {
			return // ended as the timer fired: nothing dropped
		}
		cancel(errRequestReadTimeout)
		if dropped != nil {
			var addr net.Addr
			if p, ok := peer.FromContext(ctx); ok {
				addr = p.Addr
			}
			dropped(addr)
		}
	})
	// A stream that ends before its request is read (a caller gone, a
	// request too large, an unknown method, a stream the stop refuses) is
	// not disarmed: its timer would hold the stream's context, headers
	// and all, for the whole timeout, which a caller that opens and
	// resets streams as fast as it can turns into memory.
	unhook := context.AfterFunc(ctx, func() { t.Stop() })
	return context.WithValue(ctx, readDeadlineKey{}, readDeadline{t, unhook})
}

// disarmRead stops the read deadline of the stream of ctx, if it has one:
// its request has been read.
func disarmRead(ctx context.Context) {
	if r, ok := ctx.Value(readDeadlineKey{}).(readDeadline); ok {
		r.timer.Stop()
		// No goroutine to stop a stopped timer as the stream ends.
		r.unhook()
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
	return func(ctx context.Context, _ *tap.Info) (context.Context, error) {
		return withReadDeadline(ctx, o.readTimeout, o.onReadTimeout), nil
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
// node ran. f runs on a timer's goroutine and must not block.
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
