package server

import (
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"

	"github.com/rivet-go/rivet/internal/sizes"
	"github.com/rivet-go/rivet/runtime"
)

// Sizes, for readability of the defaults.
const (
	kib = 1 << 10
	mib = 1 << 20
)

// Limits bound the payloads a node accepts. Every limit counts the bytes of
// the JSON as sent; zero or negative means the default.
type Limits struct {
	// MaxArgsBytes bounds an action's arguments (the JSON array). Default
	// 4 MiB, the original engine's input limit. Larger arguments cost the
	// owner memory for the whole turn and make state commits slow.
	MaxArgsBytes int
	// MaxResultBytes bounds an action's result. Default 4 MiB.
	MaxResultBytes int
	// MaxMessageBytes bounds a queue message body. Default 64 KiB, as in
	// the original engine: messages are stored in etcd one key each, and
	// a queue of them is read in one batch.
	MaxMessageBytes int
	// MaxInputBytes bounds an actor's create input. Default 4 MiB.
	MaxInputBytes int
}

// DefaultLimits returns the limits a node runs with unless configured.
func DefaultLimits() Limits {
	return Limits{
		MaxArgsBytes:    4 * mib,
		MaxResultBytes:  4 * mib,
		MaxMessageBytes: 64 * kib,
		MaxInputBytes:   4 * mib,
	}
}

// withDefaults fills zero and negative fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	fill := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	fill(&l.MaxArgsBytes, d.MaxArgsBytes)
	fill(&l.MaxResultBytes, d.MaxResultBytes)
	fill(&l.MaxMessageBytes, d.MaxMessageBytes)
	fill(&l.MaxInputBytes, d.MaxInputBytes)
	return l
}

// largest is the largest single payload a request or response may carry.
func (l Limits) largest() int {
	return max(l.MaxArgsBytes, l.MaxResultBytes, l.MaxMessageBytes, l.MaxInputBytes)
}

// ServerOptions returns the grpc.ServerOptions a node needs for limits: the
// message size bounds of the transport itself.
//
// gRPC refuses messages over 4 MiB by default, with its own message that
// names no field and no rivet limit, before the request reaches the
// service. So the transport's receive bound is set well above our limits:
// twice the largest limit plus 1 MiB for the envelope (a Call may carry
// args and input together). A request up to that size gets our
// RESOURCE_EXHAUSTED naming the field, its size and the limit; beyond it,
// gRPC's own RESOURCE_EXHAUSTED still protects the node's memory.
//
// They also bound a connection's streams (MaxConcurrentStreams), set
// static HTTP/2 flow-control windows (see streamWindow), and
// bound the status of every error a call ends with to fit a client's
// header list (rpcerr.Bound: a message cut to about 1 KiB, large metadata
// left out), as the first interceptors of the chain (a node puts only its
// logging and its token check before them): a status travels in HTTP/2
// trailers, and one over a client's bound (8 KiB for grpc-java) reaches it
// as a bare RST_STREAM, its code and detail lost.
func ServerOptions(limits Limits) []grpc.ServerOption {
	l := limits.withDefaults()
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(disarmUnary, boundErrors, deadlineFirst),
		grpc.ChainStreamInterceptor(disarmStream, boundStreamErrors),
		grpc.MaxRecvMsgSize(l.recvBound()),
		// Requests that do not decode are the client's error (decode.go).
		grpc.ForceServerCodecV2(newRequestCodec()),
		grpc.MaxSendMsgSize(l.sendBound()),
		// A request's headers are read before its token is checked
		// (AuthTapHandle): gRPC's default takes in 16 MiB of them.
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		// Peers and clients ping idle connections (PeerKeepalive): the
		// server must not take those for abuse (its default allows one
		// ping every 5 minutes).
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// The server pings its callers too (serverKeepalive), so that one
		// gone without a word does not hold its streams for ever.
		grpc.KeepaliveParams(serverKeepalive),
		// Stop waits for the handlers to return (they all end with their
		// context), so that what a handler started (a peer stream's
		// receive loop, PeerServer.Wait) is counted before Stop returns.
		grpc.WaitForHandlers(true),
		// Each call's handler runs on a goroutine gRPC keeps, rather than
		// one started for the call: a new goroutine grows its stack
		// through the handler's frames on every call (about a tenth of
		// the CPU of a read-only call, and of the forwarding node's share
		// of a forwarded one). Beyond streamWorkers calls at once, gRPC
		// starts goroutines as before.
		grpc.NumStreamWorkers(streamWorkers),
	}
}

// MaxConcurrentStreams bounds the streams one connection may have open on
// a node at once: calls in flight, Subscribe streams and peers' forwarding
// streams. gRPC's default is no bound, so one connection could make the
// node run any number of handlers (each a goroutine and a stream's state),
// and a client opening and resetting streams at once (HTTP/2 rapid reset)
// would meet no limit. The node advertises it in its SETTINGS; a client
// that keeps to it (any gRPC client) waits for one of its streams to end
// before it opens another, a unary call included (its deadline bounds the
// wait), and one that does not has its stream refused.
//
// The bound is not lower because one connection may legitimately carry
// every subscription the node can hold (runtime.MaxSubscribers): a
// node's one connection to a peer carries a stream for each subscriber it
// relays to that peer, and the Go client has one connection per node.
// Subscriptions never end by themselves, so a bound at or below them
// would leave such a connection with no room for calls: 16,384 are left
// for calls in flight beside them (a Go client of 64 callers uses 64).
const MaxConcurrentStreams = runtime.MaxSubscribers + 16_384

// streamWorkers is how many handler goroutines a node's server keeps: a
// call in flight holds one for its whole length (a durable call waits for
// its commit), so about as many as the calls a node has at once.
const streamWorkers = 64

// PeerKeepalive is how a node's connections to its peers (and the Go
// client's to nodes, while it has calls on them) find a peer gone without
// a word (a cut network, a frozen host): a ping after 10 s without
// traffic, which must be answered
// within 5 s, or the connection fails and the calls on it fail
// (UNAVAILABLE) rather than wait for their deadline, or for ever for a
// call without one. TCP alone takes minutes to hours.
var PeerKeepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}

// serverKeepalive is how a node's server finds a caller gone without a
// word (a cut network, a frozen host, a client killed with its host): a
// ping after 30 s without a frame from it, which must be answered within
// 20 s, or the connection is closed and the calls and streams on it end
// (their handlers return: a Subscribe stream holds a subscription on the
// actor's owner, and a peer's forwarding stream its receive loop). gRPC's
// default pings after 2 hours, and TCP alone takes minutes to hours, or
// for ever for a stream that sends nothing. The timeout is gRPC's
// default, which it also sets as the socket's TCP_USER_TIMEOUT (how long
// data sent may stay unacknowledged), as before. A caller that sends
// anything within 30 s is not pinged: peers ping every 10 s
// (PeerKeepalive). A peer or client has no policy against pings it is
// sent, so this breaks none of theirs.
//
// No MaxConnectionIdle: an idle connection to a live caller costs little,
// and closing it would make each client or peer that calls now and then
// dial again first.
//
// A variable for tests.
var serverKeepalive = keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}

// Static HTTP/2 flow-control windows, for a node's server and its
// connections to peers. With gRPC's default the windows start at 64 KiB
// and grow by estimating the bandwidth-delay product with pings: on a busy
// connection about one ping and its ack per round trip, each a write
// system call at one end and a read at the other, which on a forwarding
// stream came to a fifth of the hop's writes (docs/benchmarks.md). Setting
// the windows turns the estimator off. 4 MiB per stream lets a payload of
// the default limits go in one window; it allows 40 MB/s per stream even
// at a 100 ms round trip.
const (
	streamWindow = 4 * mib
	connWindow   = 16 * mib
)

// PeerDialOptions are the transport options for a node's connections to
// other nodes of the same limits: the same static windows as its server's,
// and message bounds that let through whatever the peer's server accepts
// and sends.
func PeerDialOptions(limits Limits) []grpc.DialOption {
	l := limits.withDefaults()
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(l.recvBound()), grpc.MaxCallRecvMsgSize(l.recvBound())),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithKeepaliveParams(PeerKeepalive),
		// A peer down for a while (a restart, a cut network) is reached
		// again within about a second of being back: gRPC's default backoff
		// grows to two minutes between attempts, and forwarding to a node
		// that holds its partitions again would fail all that time. An
		// attempt whose packets a cut network drops gets no answer, and
		// the kernel resends its first packet ever more rarely (after 1,
		// 2, 4, 8, 16 s): it is given up after 5 s and made again, not
		// after gRPC's default 20 s, during which the peer, back, was not
		// reached (TestPeerConnReconnectsSoonAfterADialLostInACut). 5 s is
		// still far more than a connection and its TLS handshake take.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
}

// recvBound is the transport's bound on a message a node receives: twice
// the largest limit plus 1 MiB (see ServerOptions).
func (l Limits) recvBound() int { return satAdd(satMul2(l.largest()), mib) }

// sendBound is the transport's bound on a message a node sends.
func (l Limits) sendBound() int { return satAdd(l.largest(), mib) }

// forwardEnvelope is room for what a forwarded request carries beside the
// client's request: its id, method, call chain and deadline.
const forwardEnvelope = 4 * kib

// MaxForwardedBytes is the largest request, as marshalled, that a node of
// these limits forwards: what the owner's transport accepts, less the
// forwarding envelope. A client's request just under the owner's bound
// would otherwise pass the forwarding node's transport and then, in the
// envelope, break the stream to the owner for every call on it.
func (l Limits) MaxForwardedBytes() int {
	return l.withDefaults().recvBound() - forwardEnvelope
}

// MaxForwardedResponseBytes is the largest response, as marshalled, that
// a node of these limits sends back on a peer stream: what its transport
// sends, less the envelope. A larger one would break the stream, and fail
// every call in flight on it, so it fails alone (PeerServer.LimitResponses).
func (l Limits) MaxForwardedResponseBytes() int {
	return l.withDefaults().sendBound() - forwardEnvelope
}

func satMul2(n int) int {
	if n > math.MaxInt/2 {
		return math.MaxInt
	}
	return 2 * n
}

func satAdd(a, b int) int {
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// checkSize returns ErrTooLarge if a payload is over its limit, with a
// message that says which payload, its size and the limit (sizes.Check:
// the runtime words an actor's own calls' payloads the same).
func checkSize(what string, n, limit int) error { return sizes.Check(what, n, limit) }

// maxHeaderListBytes bounds the headers (metadata) of a request a node
// takes in: far more than any client sends (grpc-java's own bound is 8
// KiB), and a caller without the token, whose request the node refuses
// only once it has read them, cannot make it hold more per stream.
const maxHeaderListBytes = 64 * kib
