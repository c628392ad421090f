package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/answerby"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/internal/textcut"
	"github.com/rivet-go/rivet/internal/tracing"
	"github.com/rivet-go/rivet/runtime"
)

// PeerServer serves PeerService: it runs the requests other nodes forward
// on their streams through the ActorService handlers of srv, as if they had
// arrived as unary calls with one hop.
type PeerServer struct {
	rivetv1.UnimplementedPeerServiceServer
	srv     rivetv1.ActorServiceServer
	methods map[string]grpc.MethodHandler
	// log is the Server's logger (a nop one for another srv): each
	// request served is logged as UnaryInterceptor logs a client's call,
	// which the forwarding node counts on (it does not log the owner's
	// INTERNAL again).
	log *zap.Logger
	// maxResponse bounds a response sent on a stream (0: no bound).
	maxResponse int
	// tracer, if set (Trace), starts a span for each request served.
	tracer   trace.Tracer
	stopping chan struct{}
	stopOnce sync.Once
	// active counts the requests taken on every stream and not yet
	// answered (sent, or given up with their stream).
	active atomic.Int64
	// receivers are the streams' receive loops. On the stopping path a
	// stream's handler returns while its loop still waits in Recv, which
	// only the stream's end (after the handler returns) ends: Wait, after
	// the gRPC server has stopped, is their owner.
	receivers sync.WaitGroup
}

// NewPeerServer returns a PeerServer over srv.
func NewPeerServer(srv rivetv1.ActorServiceServer) *PeerServer {
	p := &PeerServer{srv: srv, methods: map[string]grpc.MethodHandler{}, stopping: make(chan struct{}), log: zap.NewNop()}
	if s, ok := srv.(*Server); ok {
		p.log = s.log
	}
	d := rivetv1.ActorService_ServiceDesc
	for _, m := range d.Methods {
		p.methods["/"+d.ServiceName+"/"+m.MethodName] = m.Handler
	}
	return p
}

// Shutdown ends every stream once its requests in flight are answered,
// and refuses new requests meanwhile, so that a gRPC GracefulStop is not
// held up by peers' streams, which never end by themselves.
func (p *PeerServer) Shutdown() { p.stopOnce.Do(func() { close(p.stopping) }) }

// LimitResponses makes p answer a request whose response would be larger
// than n bytes marshalled (Limits' MaxForwardedResponseBytes) with
// RESOURCE_EXHAUSTED instead: a message over the transport's bound would
// break the stream, and fail every call in flight on it. Call it before p
// serves; it returns p.
func (p *PeerServer) LimitResponses(n int) *PeerServer {
	p.maxResponse = n
	return p
}

// Trace makes p start a server span for each request it serves, a child
// of the span of the forwarding node's that the request carries (its
// client's call, or an actor's call to another node's actor), with tp's
// tracer (nil: no spans). Call it before p serves; it returns p.
func (p *PeerServer) Trace(tp trace.TracerProvider) *PeerServer {
	p.tracer = nil
	if tp != nil {
		p.tracer = tp.Tracer(tracing.ScopeName)
	}
	return p
}

func (p *PeerServer) shuttingDown() bool {
	select {
	case <-p.stopping:
		return true
	default:
		return false
	}
}

// Active is the forwarded requests taken and not yet answered.
func (p *PeerServer) Active() int64 { return p.active.Load() }

// Wait waits for the receive loops of the streams served so far to end:
// call it once the gRPC server has stopped (which ends every stream).
func (p *PeerServer) Wait() { p.receivers.Wait() }

// Register adds the PeerService to gs.
func (p *PeerServer) Register(gs *grpc.Server) { rivetv1.RegisterPeerServiceServer(gs, p) }

// ForwardBatches implements rivetv1.PeerServiceServer.
func (p *PeerServer) ForwardBatches(stream rivetv1.PeerService_ForwardBatchesServer) error {
	var msg rivetv1.ForwardBatchesResponse
	return p.forward(stream.Context(),
		func() ([]*rivetv1.ForwardRequest, error) {
			m, err := stream.Recv()
			return m.GetRequests(), err
		},
		func(batch []*rivetv1.ForwardResponse) error {
			msg.Responses = batch
			return stream.Send(&msg)
		})
}

// Forward implements rivetv1.PeerServiceServer: the stream of nodes of the
// version before ForwardBatches, one request or response per message,
// served so that a cluster can be upgraded one node at a time.
func (p *PeerServer) Forward(stream rivetv1.PeerService_ForwardServer) error {
	return p.forward(stream.Context(), recvOne(stream.Recv), sendEach(stream.Send))
}

// recvOne and sendEach carry batches over a Forward stream, one request
// or response per message.
func recvOne[M any](recv func() (M, error)) func() ([]M, error) {
	return func() ([]M, error) {
		m, err := recv()
		if err != nil {
			return nil, err
		}
		return []M{m}, nil
	}
}

func sendEach[M any](send func(M) error) func([]M) error {
	return func(batch []M) error {
		for _, m := range batch {
			if err := send(m); err != nil {
				return err
			}
		}
		return nil
	}
}

// forward serves one peer stream, whose messages recv and send carry.
func (p *PeerServer) forward(sctx context.Context, recv func() ([]*rivetv1.ForwardRequest, error), send func([]*rivetv1.ForwardResponse) error) error {
	ctx, cancel := context.WithCancel(sctx)
	cut := make(chan struct{})
	f := &forwardStream{
		p: p, recv: recv, sendBatch: send, ctx: runtime.WithWaitCut(ctx, cut), cancels: map[uint64]context.CancelFunc{}, work: make(chan forwardCall),
		out: newOutbox[*rivetv1.ForwardResponse](), sendDone: make(chan struct{}), cut: cut,
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		f.send()
	}()
	defer func() {
		cancel() // the requests in flight and idle workers end first
		f.workers.Wait()
		// The sender stops last, with whatever the workers queued: it
		// must not touch the stream once this handler has returned.
		close(f.sendDone)
		<-sent
	}()
	// Recv runs apart, so that Shutdown can end the stream while it waits.
	// It hands each request straight to a worker: a request costs one
	// switch of goroutine on this side of the stream, not two.
	received := make(chan struct{})
	p.receivers.Add(1)
	go func() {
		defer p.receivers.Done()
		defer close(received)
		f.receive()
	}()
	select {
	case <-received:
		f.stop()
		return nil
	case <-p.stopping:
		// Every request taken is answered before the stream ends, so
		// whatever the peer still waits for was never run.
		f.stop()
		f.inflight.Wait()
		return status.Error(codes.Unavailable, "peer: node stopping: "+notSentMark)
	}
}

// maxIdleWorkers bounds the goroutines a stream keeps waiting for its next
// request. Reusing a worker saves starting a goroutine and growing its
// stack again through the handlers (a measurable part of a forwarded
// read-only call); more than this stay only while their requests run.
const maxIdleWorkers = 16

// forwardStream is the owner's side of one PeerService stream.
type forwardStream struct {
	p *PeerServer
	// recv and sendBatch carry the stream's messages.
	recv      func() ([]*rivetv1.ForwardRequest, error)
	sendBatch func([]*rivetv1.ForwardResponse) error
	ctx       context.Context // ends with the stream

	// out queues the workers' responses for the sender, which stops
	// when sendDone closes.
	out      *outbox[*rivetv1.ForwardResponse]
	sendDone chan struct{}

	mu      sync.Mutex
	stopped bool                          // no new requests, no new workers
	cancels map[uint64]context.CancelFunc // of the requests in flight
	// inflight counts the requests taken and not yet answered: a request
	// is done once its response was sent (or could not be).
	inflight sync.WaitGroup
	workers  sync.WaitGroup

	// cut closes (once, under mu) when the node at the other end says
	// it stops (a cancel of request 0, see PeerConn.Stopping): the
	// waiting sends that came on the stream stop waiting.
	cut chan struct{}

	// work hands a request to an idle worker; idle counts them.
	work chan forwardCall
	idle atomic.Int32
}

// answered marks one request taken as answered.
func (f *forwardStream) answered() {
	f.p.active.Add(-1)
	f.inflight.Done()
}

// stop refuses every request from now on; after it, workers only end.
func (f *forwardStream) stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
}

// receive takes the stream's requests until it ends or is stopped.
func (f *forwardStream) receive() {
	for {
		reqs, err := f.recv()
		if err != nil {
			return
		}
		for _, req := range reqs {
			if req.GetCancel() {
				f.mu.Lock()
				if req.GetId() == stoppingID {
					select {
					case <-f.cut:
					default:
						close(f.cut)
					}
				} else if c := f.cancels[req.GetId()]; c != nil {
					c()
				}
				f.mu.Unlock()
				continue
			}
			// Once the stream is stopped, requests are dropped, never
			// run (the stream's status will say so), but the loop reads
			// on: the cancels of the requests in flight must still
			// arrive, or a call without a deadline would hold up the
			// stop for ever.
			f.start(req)
		}
	}
}

// send sends the workers' responses, as many to a message as are queued,
// until sendDone closes.
func (f *forwardStream) send() {
	var (
		batch []*rivetv1.ForwardResponse
		ok    bool
	)
	for {
		batch, ok = f.out.take(f.sendDone, batch, responseSize)
		if !ok {
			break
		}
		_ = f.sendBatch(batch) // a broken stream ends Recv too
		for i, r := range batch {
			putForwardResponse(r)
			batch[i] = nil
			f.answered()
		}
	}
	for _, r := range f.out.close() {
		putForwardResponse(r)
		f.answered()
	}
}

func responseSize(r *rivetv1.ForwardResponse) int {
	return len(r.GetResponse()) + len(r.GetStatus()) + 16
}

// start runs req on an idle worker, or a new one; nothing once stopped.
func (f *forwardStream) start(req *rivetv1.ForwardRequest) {
	f.mu.Lock()
	if f.stopped || f.p.shuttingDown() {
		// Refused from the moment Shutdown returns, not from when this
		// stream's handler notices: the stream's status will say that
		// what was not answered was not sent.
		f.mu.Unlock()
		return
	}
	// Registered here, not in the worker, so that a cancel that follows
	// at once on the stream finds it.
	rctx := context.WithValue(f.ctx, peerKey{}, req.GetChain())
	var rcancel context.CancelFunc
	if ms := req.GetTimeoutMs(); ms > 0 {
		rctx, rcancel = context.WithTimeout(rctx, time.Duration(ms)*time.Millisecond)
	} else {
		rctx, rcancel = context.WithCancel(rctx)
	}
	f.cancels[req.GetId()] = rcancel
	f.inflight.Add(1)
	f.p.active.Add(1)
	c := forwardCall{ctx: rctx, cancel: rcancel, req: req}
	select {
	case f.work <- c: // an idle worker took it
	default:
		f.workers.Add(1) // under mu, with stopped false: before any Wait
		go f.worker(c)
	}
	f.mu.Unlock()
}

// forwardCall is one request taken, with the context it runs in.
type forwardCall struct {
	ctx    context.Context
	cancel context.CancelFunc
	req    *rivetv1.ForwardRequest
}

// worker serves c, then waits for more while fewer than maxIdleWorkers
// others do, until the stream ends.
func (f *forwardStream) worker(c forwardCall) {
	defer f.workers.Done()
	// The decoder the handler calls, made once per worker rather than
	// per request.
	var (
		req *rivetv1.ForwardRequest
		dec = func(m any) error { return proto.Unmarshal(req.GetRequest(), m.(proto.Message)) }
	)
	for {
		req = c.req
		resp := forwardResponses.Get().(*rivetv1.ForwardResponse)
		f.p.serve(c.ctx, req, dec, resp)
		f.mu.Lock()
		delete(f.cancels, req.GetId())
		f.mu.Unlock()
		c.cancel()
		if !f.out.put(resp) { // the sender has stopped: the stream is gone
			putForwardResponse(resp)
			f.answered()
		}
		if f.idle.Add(1) > maxIdleWorkers {
			f.idle.Add(-1)
			return
		}
		select {
		case c = <-f.work:
			f.idle.Add(-1)
		case <-f.ctx.Done():
			f.idle.Add(-1)
			return
		}
	}
}

// serve runs one forwarded request, whose body dec decodes, and sets out
// to its response (reusing out's buffer).
func (p *PeerServer) serve(ctx context.Context, req *rivetv1.ForwardRequest, dec func(any) error, out *rivetv1.ForwardResponse) {
	*out = rivetv1.ForwardResponse{Id: req.GetId(), Response: out.Response[:0]}
	h, ok := p.methods[req.GetMethod()]
	if !ok {
		out.Status = statusBytes(status.New(codes.Unimplemented, "peer: no forwardable method "+req.GetMethod()))
		return
	}
	if p.tracer == nil {
		p.answer(ctx, req, h, dec, out)
		return
	}
	// Named as the forwarding node's server span is (otelgrpc's), and
	// ended with the status its would have, so that one call's spans
	// agree.
	// With otelgrpc's RPC attributes too, so that a query or a view by
	// rpc.method or rpc.response.status_code finds the owner's span of a
	// forwarded call beside the forwarding node's.
	method := strings.TrimPrefix(req.GetMethod(), "/")
	ctx, span := p.tracer.Start(tracing.Extract(ctx, req.GetTraceContext()), method,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(tracing.Forwarded.Bool(true),
			tracing.RPCSystem.String("grpc"), tracing.RPCMethod.String(method)))
	var err error
	defer func() {
		span.SetAttributes(tracing.RPCStatusCode.String(rpcStatusCode(status.Code(err))))
		tracing.EndServer(span, err)
	}()
	err = p.answer(ctx, req, h, dec, out)
}

// rpcStatusCode is c as otelgrpc spells it in rpc.response.status_code,
// gRPC's canonical name: rpcerr.CodeName's but for CANCELLED, which
// CodeName spells as Go does (CANCELED), and a search by the value on
// the forwarding node's span would miss the owner's.
func rpcStatusCode(c codes.Code) string {
	if c == codes.Canceled {
		return "CANCELLED"
	}
	return rpcerr.CodeName(c)
}

// answer runs a forwarded request with h and sets out to its response;
// it returns the error out answers, nil for a response.
func (p *PeerServer) answer(ctx context.Context, req *rivetv1.ForwardRequest, h grpc.MethodHandler, dec func(any) error, out *rivetv1.ForwardResponse) error {
	start := time.Now()
	// The request, for the debug line's actor and key: kept only when
	// that line is logged, as keeping it costs the call an allocation.
	// In a box made in the branch, never reassigned: a variable the
	// closure assigned would move to the heap on every call, debug or not.
	var kept *any
	d := dec
	if p.log.Core().Enabled(zapcore.DebugLevel) {
		box := new(any)
		kept = box
		d = func(m any) error { *box = m; return dec(m) }
	}
	resp, err := h(p.srv, ctx, d, nil)
	var msg any
	if kept != nil {
		msg = *kept
	}
	// No gRPC interceptor runs here: without this, an INTERNAL error of a
	// forwarded request that nothing on the way logged (an action's
	// result that does not marshal, say) was logged on no node.
	logCall(p.log, req.GetMethod(), msg, true, start, err)
	if err != nil {
		// Bounded as the status a client gets (rpcerr.Bound): an
		// actor's error with megabytes of message goes cut, its kind
		// and code intact, and so stays far within the stream's bound
		// too (over it, it would break the stream, and every call on
		// it).
		st := rpcerr.Bound(status.Convert(err))
		out.Status = statusBytes(st)
		return st.Err()
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(out.Response, resp.(proto.Message))
	if err != nil {
		out.Response = nil
		st := status.New(codes.Internal, "peer: marshal response: "+err.Error())
		out.Status = statusBytes(st)
		return st.Err()
	}
	if p.maxResponse > 0 && len(b) > p.maxResponse {
		out.Response = b[:0]
		st, _ := rpcerr.ToStatus(checkSize("response", len(b), p.maxResponse))
		out.Status = statusBytes(st)
		return st.Err()
	}
	out.Response = b
	return nil
}

// statusBytes marshals st for the peer stream. A message that is not
// UTF-8, which a proto string must be, goes with its bad bytes as U+FFFD,
// as gRPC's trailers carry it to a client: as it was, the peer could not
// decode the status at all. (rpcerr.ToStatus makes every status of the
// node's own so already; this is for any other.)
func statusBytes(st *status.Status) []byte {
	p := st.Proto()
	p.Message = textcut.Valid(p.Message)
	b, _ := proto.Marshal(p)
	return b
}

// PeerConn carries unary ActorService calls to one node over one
// PeerService stream, opened on first use and again after it breaks. It
// implements grpc.ClientConnInterface for unary calls, so generated
// clients and the forwarding interceptor use it as they would a
// connection. Outgoing metadata is not sent, except the call chain.
type PeerConn struct {
	conn       *grpc.ClientConn
	maxRequest int // 0: no bound
	// traced: requests carry their callers' trace context
	// (CarryTraceContext).
	traced bool

	mu     sync.Mutex
	stream *peerStream
	// opening is the stream being opened, if any, and opener its
	// peerStream, which Close cancels (see current).
	opening *streamOpen
	opener  *peerStream
	closed  bool
	// stopping is set by Stopping: a stream opened after it says so
	// first, or a call forwarded on it then (one still being routed as
	// the stop began, or after its stream broke) would hold its wait.
	stopping bool
	// legacy is set while the peer is a version without ForwardBatches:
	// its streams are Forward streams, one call per message.
	legacy  bool
	streams sync.WaitGroup // receive and send loops

	// attemptMu guards the connection's state as watchAttempts last saw
	// it (attemptState) and since when (attemptSince): a CONNECTING one is
	// the connection attempt that forwards wait for.
	attemptMu    sync.Mutex
	attemptState connectivity.State
	attemptSince time.Time
	// notConnectingAt is when a forward last found the connection in a
	// state other than CONNECTING (IDLE, before its Connect, say): the
	// attempt it then finds CONNECTING began after that, whatever the
	// watcher, which wakes on the same change as the forward and may not
	// have run yet, still holds from an earlier attempt.
	notConnectingAt time.Time
	watchStop       context.CancelFunc // nil until watchAttempts starts
	watchDone       chan struct{}
	watchDisabled   bool // by Close
}

// PeerConnectWait bounds how long a forward waits for the connection to
// its peer to come up, counted from when the connection attempt it waits
// for began (not from the forward's start, nor from the first forward to
// wait): a dial whose packets a cut network drops neither succeeds nor
// fails until its connect timeout (5 s, PeerDialOptions), and forwards
// made while such a dial goes on fail with UNAVAILABLE marked as never
// sent (which clients retry, through another node if they have one),
// rather than each waiting until shortly before its caller's deadline: a
// call retried that way spent its whole deadline in waits, and the last of
// them ended so near the deadline that its answer came too late on a
// loaded machine, DEADLINE_EXCEEDED, its outcome unknown to its client
// although nothing was sent. 3 s rides out two lost SYNs (Linux resends
// the first after 1 s, the second 2 s later), a busy peer's accept queue
// after a restart, or a TLS handshake on a CPU-starved peer: a dial that
// slow to a peer that is there succeeds, and so do the forwards waiting
// for it. A variable for tests.
var PeerConnectWait = 3 * time.Second

// NewPeerConn returns a PeerConn over conn (which it does not own).
func NewPeerConn(conn *grpc.ClientConn) *PeerConn { return &PeerConn{conn: conn} }

// LimitRequests makes c refuse, with RESOURCE_EXHAUSTED and without
// sending it, a request larger than n bytes marshalled (Limits'
// MaxForwardedBytes): a message over the peer's bound would break the
// stream, and with it every call in flight to that peer. Call it before
// c is used; it returns c.
func (c *PeerConn) LimitRequests(n int) *PeerConn {
	c.maxRequest = n
	return c
}

// CarryTraceContext makes each request c sends carry its caller's trace
// context (bounded: tracing.Inject), for the owner's spans to join the
// caller's trace; without it, c looks for none, at no cost to a call.
// Call it before c is used; it returns c.
func (c *PeerConn) CarryTraceContext() *PeerConn {
	c.traced = true
	return c
}

// errPeerClosed is returned by calls on a closed PeerConn.
var errPeerClosed = status.Error(codes.Unavailable, "peer connection closed")

type peerStream struct {
	// sendBatch and recv carry the stream's messages.
	sendBatch func([]*rivetv1.ForwardRequest) error
	recv      func() ([]*rivetv1.ForwardResponse, error)
	legacy    bool            // a Forward stream
	ctx       context.Context // ends with the stream
	cancel    context.CancelFunc
	// out queues the callers' requests (and cancels) for the sender,
	// which owns each request from then on.
	out *outbox[*rivetv1.ForwardRequest]

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*peerCall
	err     error // set when the stream broke
	refused bool  // by the peer, before it ran anything
	// inSend is set (under mu) while the sender is in a send, which began
	// at sendStart, and watch runs held while a send lasts: see held.
	inSend    bool
	sendStart time.Time
	watch     *time.Timer
}

// heldAfter is how long a send lasts before the stream's watch looks for
// queued calls to give up (held): far longer than a send takes while the
// stream's flow-control window has room.
const heldAfter = 100 * time.Millisecond

// held runs on the stream's watch while the sender is held up in a send
// that flow control blocks (a peer that reads nothing, or a connection in a
// cut that keepalive has not yet found dead, once the stream's window is
// spent): the calls queued behind it whose giveUp has come are forgotten,
// so that the sender skips them, and fail as never sent, in time for
// their callers to hear that they may retry, rather than at their
// deadlines, outcome unknown (they waited so, and ended
// DEADLINE_EXCEEDED). What the sender has handed to the stream may run on
// the peer: it waits for its answer, as before. The watch looks again at
// the next giveUp while the send lasts.
func (s *peerStream) held() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inSend {
		return
	}
	now := time.Now()
	// A run that fired as the last send ended, and waited for mu while
	// the sender began the next: this send is younger than heldAfter.
	if young := s.sendStart.Add(heldAfter).Sub(now); young > 0 {
		s.watch.Reset(young)
		return
	}
	var next time.Time
	for id, call := range s.pending {
		if call.sending || call.giveUp.IsZero() {
			continue
		}
		if !call.giveUp.After(now) {
			delete(s.pending, id)
			call.ch <- unsentResponse // buffered, and sent on once
			continue
		}
		if next.IsZero() || call.giveUp.Before(next) {
			next = call.giveUp
		}
	}
	// Again at the next giveUp, and meanwhile every heldAfter for the
	// calls queued since.
	wait := heldAfter
	if !next.IsZero() {
		wait = min(wait, next.Sub(now))
	}
	s.watch.Reset(wait)
}

// peerCall is one call waiting for its response.
type peerCall struct {
	// ch gets the response; it is closed if the stream breaks first.
	ch chan *rivetv1.ForwardResponse
	// sending (under the stream's mu) is set once the sender has handed
	// the request to the stream, from when the peer may run it; a call
	// whose stream breaks before that was never sent.
	sending bool
	// deadline is the caller's, if it has one: the sender turns it into
	// the request's timeout as it sends, so that the time the request
	// waited in the outbox (behind a large message, say) is not given to
	// the owner again.
	deadline time.Time
	// giveUp is when the call, still queued (not sending) while the
	// sender is held up in a send, is given up as never sent (see
	// peerStream.held); zero: never.
	giveUp time.Time
}

// unsentResponse is what a call given up unsent (peerStream.held) gets on
// its channel.
var unsentResponse = new(rivetv1.ForwardResponse)

// stoppingID is the request ID of PeerConn.Stopping's cancel, which no
// request has (they count from 1): a node of an earlier version finds no
// request of that ID to cancel, and ignores it.
const stoppingID = 0

// Stopping tells the peer, on the stream if one is open and first on
// any stream opened after, that this node stops: the calls it forwarded
// that wait for a message's completion end their wait at once and answer
// that the message is queued (runtime.WithWaitCut), so that the stop
// neither waits for them (up to a wait's 30 s by default) nor breaks
// their callers' calls, whose messages are queued, when it runs out of
// time.
func (c *PeerConn) Stopping() {
	c.mu.Lock()
	c.stopping = true
	s := c.stream
	c.mu.Unlock()
	if s != nil {
		s.out.put(&rivetv1.ForwardRequest{Id: stoppingID, Cancel: true})
	}
}

// Close ends the stream; calls in flight fail with UNAVAILABLE.
func (c *PeerConn) Close() {
	c.mu.Lock()
	c.closed = true
	s, o := c.stream, c.opener
	c.stream = nil
	c.mu.Unlock()
	if s != nil {
		s.cancel()
	}
	if o != nil {
		o.cancel()
	}
	c.streams.Wait()
	c.attemptMu.Lock()
	c.watchDisabled = true
	stop, done := c.watchStop, c.watchDone
	c.attemptMu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Conn is the underlying connection.
func (c *PeerConn) Conn() *grpc.ClientConn { return c.conn }

// ready waits, within ctx, until the connection is up, so that opening a
// stream (under c.mu, with no deadline of its own) does not wait on a
// peer that is still being dialed. A connection in transient failure
// fails at once: the peer is down, and the caller should not wait for it.
// Nor does a caller wait for a connection attempt that began
// PeerConnectWait ago: the peer cannot be reached.
//
// A caller with a deadline waits only until shortly before it (AnswerBy)
// if that comes first, in time for its caller to hear that the call was
// never sent (UNAVAILABLE, which clients retry).
func (c *PeerConn) ready(ctx context.Context) error {
	if c.conn.GetState() == connectivity.Ready {
		return nil
	}
	c.watchAttempts()
	for {
		st := c.conn.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("connection to %s: %s", c.conn.Target(), st)
		case connectivity.Idle:
			c.sawNotConnecting()
			c.conn.Connect()
		}
		// Again after each change: a new attempt (the connection went
		// IDLE or READY, and is CONNECTING again) gets its own wait.
		since := c.attemptStart(st)
		until := since.Add(PeerConnectWait)
		if by, ok := AnswerBy(ctx); ok && by.Before(until) {
			until = by
		}
		wait, cancel := context.WithDeadline(ctx, until)
		changed := c.conn.WaitForStateChange(wait, st)
		cancel()
		if !changed {
			if err := ctx.Err(); err != nil {
				return err
			}
			if waited := time.Since(since); waited >= PeerConnectWait {
				return fmt.Errorf("connection to %s: still %s %v after its attempt began: the peer cannot be reached", c.conn.Target(), st, waited.Round(time.Millisecond))
			}
			return fmt.Errorf("connection to %s: still %s as the call's deadline nears", c.conn.Target(), st)
		}
	}
}

// attemptStart returns when the connection attempt that a caller who
// found the connection in st waits for began: when watchAttempts saw the
// connection become CONNECTING, or now if it has not seen that yet (the
// attempt has only just begun: the caller's Connect of an IDLE
// connection, say). Never before a forward last found the connection in
// another state: the watcher's CONNECTING may be an earlier attempt's
// that ended (in IDLE) and was followed by this one before the watcher
// woke to see it.
func (c *PeerConn) attemptStart(st connectivity.State) time.Time {
	c.attemptMu.Lock()
	defer c.attemptMu.Unlock()
	if st == connectivity.Connecting && c.attemptState == connectivity.Connecting && c.watchStop != nil {
		if c.notConnectingAt.After(c.attemptSince) {
			return c.notConnectingAt
		}
		return c.attemptSince
	}
	return time.Now()
}

// sawNotConnecting records that a forward has just found the connection
// in a state other than CONNECTING (notConnectingAt).
func (c *PeerConn) sawNotConnecting() {
	c.attemptMu.Lock()
	c.notConnectingAt = time.Now()
	c.attemptMu.Unlock()
}

// watchAttempts starts, once, following the connection's state, so that
// a forward knows when the attempt it waits for began, whether or not a
// forward was waiting as it began: forwards alone saw only the states
// they waited through, and a connection that went READY and back to IDLE
// with no forward to see it left the next attempt's wait counted from an
// earlier one. It stops when c closes or the connection shuts down.
func (c *PeerConn) watchAttempts() {
	c.attemptMu.Lock()
	defer c.attemptMu.Unlock()
	if c.watchStop != nil || c.watchDisabled {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.watchStop, c.watchDone = stop, done
	st := c.conn.GetState()
	// An attempt already under way is counted from now: when it began is
	// not known.
	c.attemptState, c.attemptSince = st, time.Now()
	go func() {
		defer close(done)
		for st != connectivity.Shutdown && c.conn.WaitForStateChange(ctx, st) {
			// A change back to the same state is a new attempt too
			// (CONNECTING, then READY or IDLE, then CONNECTING again).
			st = c.conn.GetState()
			c.attemptMu.Lock()
			c.attemptState, c.attemptSince = st, time.Now()
			c.attemptMu.Unlock()
		}
	}()
}

// forwardTimeoutMs is the timeout a forwarded request carries to the
// owner for a call due by deadline: the time left, rounded up to the
// millisecond, as gRPC rounds a deadline up to its unit, so that the
// owner's deadline is never before the caller's. Rounded down, it was up
// to a millisecond before: the owner's timeout answer then reached the
// client a moment before the client's own deadline, and the call's error,
// rivet.ErrTimeout, did not match context.DeadlineExceeded (4 forwarded
// calls in 40 that ran out of time, a user trial), as the same call on its
// owner's node did.
func forwardTimeoutMs(deadline time.Time) int64 {
	return max((time.Until(deadline) + time.Millisecond - 1).Milliseconds(), 1)
}

// AnswerBy returns when a request that has not been sent on by then should
// give up, so that its caller, whose deadline ctx carries, hears why
// before the deadline (answerby.By).
func AnswerBy(ctx context.Context) (by time.Time, ok bool) { return answerby.By(ctx) }

// answerMargin is the margin AnswerBy leaves an answer to reach its
// caller, of a call with at least twice that left.
const answerMargin = answerby.Margin

// current returns the stream to the peer, opening one if there is none.
// Opening it waits for the connection (gRPC's stream creation blocks
// while the connection is not READY, and while the peer's stream limit is
// reached), which ready has just found up, but which may have failed since:
// a connection whose keepalive gives up in a cut goes IDLE as its stream
// breaks, and a forward that saw it READY a moment before opened the next
// stream on a new dial into the cut, which neither connects nor fails
// for its connect timeout (5 s). It did so under c.mu, with no deadline,
// so that it and every forward to the peer behind it waited out that dial
// whatever their deadlines, and ended DEADLINE_EXCEEDED, outcome unknown,
// although nothing had been sent. The stream is opened on a goroutine of
// its own, and a caller waits for it at most PeerStreamWait from when
// that opening began, and not past AnswerBy(ctx): it then fails, its
// request never sent. A stream opened later is kept for later calls.
func (c *PeerConn) current(ctx context.Context) (*peerStream, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errPeerClosed
	}
	if c.stream != nil {
		s := c.stream
		c.mu.Unlock()
		return s, nil
	}
	o := c.opening
	if o == nil {
		o = c.open()
	}
	c.mu.Unlock()
	until := o.began.Add(PeerStreamWait)
	// Not past AnswerBy, unless that has passed already (a call with a
	// few milliseconds left): such a call waits for its deadline, as a
	// stream on a connection that is up opens in a moment.
	if by, ok := AnswerBy(ctx); ok && by.Before(until) && time.Until(by) > 0 {
		until = by
	}
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-o.done:
		if o.err != nil {
			return nil, o.err
		}
		return o.s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		// Opened meanwhile, perhaps: that is as good.
		select {
		case <-o.done:
			if o.err != nil {
				return nil, o.err
			}
			return o.s, nil
		default:
		}
		if waited := time.Since(o.began); waited >= PeerStreamWait {
			return nil, fmt.Errorf("stream to %s not opened %v after it was begun (connection %s): the peer cannot be reached", c.conn.Target(), waited.Round(time.Millisecond), c.conn.GetState())
		}
		return nil, fmt.Errorf("stream to %s not opened as the call's deadline nears (connection %s)", c.conn.Target(), c.conn.GetState())
	}
}

// PeerStreamWait bounds how long a forward waits for the stream to its
// peer to open, counted from when the opening began (see current): as
// PeerConnectWait, for a connection that failed after ready found it up.
// A variable for tests.
var PeerStreamWait = 3 * time.Second

// streamOpen is a stream being opened: s and err are set before done is
// closed.
type streamOpen struct {
	began time.Time
	done  chan struct{}
	s     *peerStream
	err   error
}

// open begins opening a stream, under c.mu: c.opening until it is open
// (then c.stream) or has failed.
func (c *PeerConn) open() *streamOpen {
	// The stream outlives every call: its context is the PeerConn's.
	ctx, cancel := context.WithCancel(context.Background())
	s := &peerStream{legacy: c.legacy, ctx: ctx, cancel: cancel, out: newOutbox[*rivetv1.ForwardRequest](), pending: map[uint64]*peerCall{}}
	s.watch = time.AfterFunc(time.Hour, s.held)
	s.watch.Stop()
	o := &streamOpen{began: time.Now(), done: make(chan struct{})}
	c.opening = o
	c.opener = s
	c.streams.Add(1)
	go func() {
		defer c.streams.Done()
		err := c.openStream(s)
		c.mu.Lock()
		c.opening, c.opener = nil, nil
		switch {
		case c.closed:
			// First: Close cancels a stream still opening, whose error
			// (context canceled) would read as the caller's own.
			cancel()
			o.err = errPeerClosed
		case err != nil:
			cancel()
			o.err = err
		default:
			c.stream = s
			if c.stopping {
				// Ahead of the request that opened the stream (see Stopping).
				s.out.put(&rivetv1.ForwardRequest{Id: stoppingID, Cancel: true})
			}
			c.streams.Add(2)
			go c.receive(s)
			go c.send(s)
			o.s = s
		}
		c.mu.Unlock()
		close(o.done)
	}()
	return o
}

// openStream opens s's gRPC stream and sets its send and receive.
func (c *PeerConn) openStream(s *peerStream) error {
	cl := rivetv1.NewPeerServiceClient(c.conn)
	if s.legacy {
		st, err := cl.Forward(s.ctx)
		if err != nil {
			return err
		}
		s.sendBatch, s.recv = sendEach(st.Send), recvOne(st.Recv)
		return nil
	}
	st, err := cl.ForwardBatches(s.ctx)
	if err != nil {
		return err
	}
	var msg rivetv1.ForwardBatchesRequest
	s.sendBatch = func(batch []*rivetv1.ForwardRequest) error {
		msg.Requests = batch
		return st.Send(&msg)
	}
	s.recv = func() ([]*rivetv1.ForwardResponse, error) {
		m, err := st.Recv()
		return m.GetResponses(), err
	}
	return nil
}

// send sends the callers' requests, as many to a message as are queued,
// until the stream ends.
func (c *PeerConn) send(s *peerStream) {
	defer c.streams.Done()
	var (
		batch, live []*rivetv1.ForwardRequest
		ok          bool
	)
	for {
		batch, ok = s.out.take(s.ctx.Done(), batch, requestSize)
		if !ok {
			break
		}
		// Marked under mu, against the receive loop's failing of every
		// call when the stream breaks: a call is either marked before
		// (and may have run), or never sent at all. A closed stream's
		// context ends before its receive loop learns of it, and a
		// Send after that may still reach the peer: nothing is sent.
		s.mu.Lock()
		broken := s.err != nil || s.ctx.Err() != nil
		live = live[:0]
		if !broken {
			for _, r := range batch {
				if r.GetCancel() {
					live = append(live, r)
				} else if call := s.pending[r.GetId()]; call != nil {
					call.sending = true
					if !call.deadline.IsZero() {
						r.TimeoutMs = forwardTimeoutMs(call.deadline)
					}
					live = append(live, r)
				}
				// Otherwise its caller gave up before it was sent: the
				// owner need not start it (the cancel that follows
				// finds nothing to cancel).
			}
		}
		if len(live) > 0 {
			s.inSend, s.sendStart = true, time.Now()
			s.watch.Reset(heldAfter)
		}
		s.mu.Unlock()
		if len(live) > 0 {
			// Send marshals the batch before it returns. A failed Send
			// ends the stream (gRPC aborts it, or it had ended), and the
			// receive loop then fails every call with the stream's status.
			_ = s.sendBatch(live)
			clear(live)
			s.mu.Lock()
			s.inSend = false
			s.watch.Stop()
			s.mu.Unlock()
		}
		for i, r := range batch {
			putForwardRequest(r)
			batch[i] = nil
		}
	}
	for _, r := range s.out.close() {
		putForwardRequest(r)
	}
}

func requestSize(r *rivetv1.ForwardRequest) int {
	return len(r.GetRequest()) + len(r.GetMethod()) + len(r.GetChain()) + tracing.Size(r.GetTraceContext()) + 32
}

// receive delivers responses until the stream breaks, then fails every
// call still waiting and forgets the stream.
func (c *PeerConn) receive(s *peerStream) {
	defer c.streams.Done()
	received := false // a message
	for {
		resps, err := s.recv()
		if err != nil {
			// The peer refused the stream as it opened, so that no
			// request on it ran: its token is not this node's, or it
			// does not serve this kind of stream. (Once a message has
			// come back, these codes mean something else.)
			code := status.Code(err)
			refused := !received && (code == codes.Unauthenticated || code == codes.Unimplemented)
			tryLegacy := refusedBatches(s.legacy, refused, err)
			// The stream is forgotten before its calls fail, so that
			// a call that tries again gets a new one.
			c.mu.Lock()
			if c.stream == s {
				c.stream = nil
				// A peer without ForwardBatches gets Forward streams
				// from now on; when one of those ends, the peer may
				// have been upgraded meanwhile, so the next stream
				// tries again.
				c.legacy = tryLegacy
			}
			c.mu.Unlock()
			s.mu.Lock()
			s.err, s.refused = err, refused
			for id, call := range s.pending {
				close(call.ch)
				delete(s.pending, id)
			}
			s.mu.Unlock()
			s.cancel()
			return
		}
		received = true
		s.mu.Lock()
		for _, resp := range resps {
			if call := s.pending[resp.GetId()]; call != nil {
				delete(s.pending, resp.GetId())
				call.ch <- resp // buffered, and sent on once
			}
		}
		s.mu.Unlock()
	}
}

// Invoke implements grpc.ClientConnInterface.
func (c *PeerConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	again, err := c.invoke(ctx, method, args, reply)
	if again {
		// The peer refused ForwardBatches, so nothing ran: once more,
		// on a Forward stream.
		_, err = c.invoke(ctx, method, args, reply)
	}
	return err
}

// invoke makes one attempt at a call; again says that it was not sent
// because the peer does not serve the kind of stream it was queued on.
func (c *PeerConn) invoke(ctx context.Context, method string, args, reply any) (again bool, err error) {
	// req is the sender's once queued: it goes back to its pool after
	// the Send that marshals it.
	req := forwardRequests.Get().(*rivetv1.ForwardRequest)
	b, merr := proto.MarshalOptions{}.MarshalAppend(req.Request[:0], args.(proto.Message))
	if merr != nil {
		putForwardRequest(req)
		return false, status.Error(codes.Internal, "peer: marshal request: "+merr.Error())
	}
	// The stream's own metadata is the stream's: each request carries its
	// caller's trace context, for the owner's spans to join its trace.
	// Counted with the request, against the owner's bound, as bounded as
	// it is (tracing.MaxCarried).
	var tc map[string]string
	if c.traced {
		tc = tracing.Inject(ctx)
	}
	if n := len(b) + tracing.Size(tc); c.maxRequest > 0 && n > c.maxRequest {
		putForwardRequest(req)
		err := checkSize("request to forward", n, c.maxRequest)
		st, _ := rpcerr.ToStatus(err)
		return false, tooLargeToForward{st}
	}
	req.Method, req.Request, req.TraceContext = method, b, tc
	if err := c.ready(ctx); err != nil {
		putForwardRequest(req)
		return false, notSentErr(err)
	}
	s, err := c.current(ctx)
	if err != nil {
		putForwardRequest(req)
		return false, notSentErr(err)
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		if v := md.Get(ChainKey); len(v) > 0 {
			req.Chain = v[0]
		}
	}
	call := peerCalls.Get().(*peerCall)
	call.sending = false
	call.deadline, _ = ctx.Deadline()
	call.giveUp = time.Time{}
	// Only a request left answerMargin or more in the queue so: a call
	// with less time than that waits for its deadline, as before, since a
	// stream whose sends flow takes what is queued within a moment.
	if by, ok := AnswerBy(ctx); ok && time.Until(by) >= answerMargin {
		call.giveUp = by
	}
	s.mu.Lock()
	if s.err != nil {
		serr, again := s.err, s.tryLegacy()
		s.mu.Unlock()
		peerCalls.Put(call) // never shared
		putForwardRequest(req)
		return again, notSentErr(refused(serr))
	}
	s.nextID++
	id := s.nextID
	req.Id = id
	s.pending[id] = call
	s.mu.Unlock()
	if !s.out.put(req) {
		// The sender has stopped (the stream broke or was closed), so
		// the request never left.
		putForwardRequest(req)
		s.mu.Lock()
		delete(s.pending, id)
		serr, again := s.err, s.tryLegacy()
		s.mu.Unlock()
		if serr == nil {
			serr = errPeerClosed
		}
		return again, notSentErr(refused(serr))
	}
	select {
	case resp, ok := <-call.ch:
		if ok && resp == unsentResponse {
			// Given up by the stream's watch, still queued (held): no
			// one else holds it now.
			peerCalls.Put(call)
			return false, notSentErr(fmt.Errorf("request to %s still queued for the peer stream as the call's deadline nears: the stream's sends are held up", c.conn.Target()))
		}
		if !ok {
			s.mu.Lock()
			serr, sending, refusedAll, again := s.err, call.sending, s.refused, s.tryLegacy()
			s.mu.Unlock()
			st := status.Convert(serr)
			if msg := st.Message(); strings.Contains(msg, notSentMark) {
				return false, status.Error(codes.Unavailable, msg)
			}
			if refusedAll || !sending {
				return again, notSentErr(refused(serr))
			}
			// Plain UNAVAILABLE (no ActorError): the call may have run,
			// and clients retry it only if it has no side effects (and
			// say so: rivet.OutcomeUnknown). It said "peer stream broke
			// during the call", naming no node.
			return false, status.Errorf(codes.Unavailable, "the stream to the actor's owner at %s broke during the forwarded call", c.conn.Target())
		}
		// The receive loop forgot the call as it sent on ch: no one else
		// holds it now. A closed ch, or one a cancelled call left behind
		// (which a late response may have filled), is never reused.
		peerCalls.Put(call)
		if len(resp.GetStatus()) > 0 {
			var sp spb.Status
			if err := proto.Unmarshal(resp.GetStatus(), &sp); err != nil {
				return false, status.Error(codes.Internal, "peer: bad status: "+err.Error())
			}
			return false, status.FromProto(&sp).Err()
		}
		if err := proto.Unmarshal(resp.GetResponse(), reply.(proto.Message)); err != nil {
			return false, status.Error(codes.Internal, "peer: unmarshal response: "+err.Error())
		}
		return false, nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
		// A call that ran out of time was sent with its deadline (a
		// request still queued is not sent at all now), and ends on the
		// peer by it: a cancel that came first (as it did, now and then)
		// ended the call there as cancelled, not as timed out.
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || call.deadline.IsZero() {
			s.out.put(&rivetv1.ForwardRequest{Id: id, Cancel: true}) // behind the request, if it is still queued
		}
		return false, status.FromContextError(ctx.Err()).Err()
	}
}

// tryLegacy says, under s.mu, whether s is a ForwardBatches stream the
// peer refused because it does not serve it, so that a call on it may
// go again on a Forward stream.
func (s *peerStream) tryLegacy() bool { return refusedBatches(s.legacy, s.refused, s.err) }

// refusedBatches says whether a stream that ended with err (refused: before
// any answer) was a ForwardBatches stream the peer does not serve.
func refusedBatches(legacy, refused bool, err error) bool {
	return refused && !legacy && status.Code(err) == codes.Unimplemented
}

// Pools of what every forwarded call needs and no one keeps once it is
// answered: allocation is the largest cost the forwarding node's own code
// adds to a call, and each of these would be one per call.
var (
	forwardRequests  = sync.Pool{New: func() any { return new(rivetv1.ForwardRequest) }}
	forwardResponses = sync.Pool{New: func() any { return new(rivetv1.ForwardResponse) }}
	peerCalls        = sync.Pool{New: func() any { return &peerCall{ch: make(chan *rivetv1.ForwardResponse, 1)} }}
)

// maxPooledRequest is the largest request or response buffer kept for
// reuse, so that one large call does not keep its buffer for ever.
const maxPooledRequest = 64 << 10

func putForwardRequest(r *rivetv1.ForwardRequest) {
	if cap(r.Request) > maxPooledRequest {
		return
	}
	*r = rivetv1.ForwardRequest{Request: r.Request[:0]}
	forwardRequests.Put(r)
}

func putForwardResponse(r *rivetv1.ForwardResponse) {
	if cap(r.Response) > maxPooledRequest {
		return
	}
	*r = rivetv1.ForwardResponse{Response: r.Response[:0]}
	forwardResponses.Put(r)
}

// NewStream implements grpc.ClientConnInterface: streams are not forwarded.
func (c *PeerConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "peer: streams are not forwarded")
}

// notSentMark is in the message of failures that happened before the
// request left this node, which the forwarder may therefore call retryable.
const notSentMark = rpcerr.NotSentMark

// refused explains a stream the peer refused as it opened, before any
// request on it ran: UNAUTHENTICATED, because its token is not this
// node's, or UNIMPLEMENTED, because it is a version without
// ForwardBatches.
func refused(err error) error {
	switch st := status.Convert(err); st.Code() {
	case codes.Unauthenticated:
		return fmt.Errorf("the peer refused this node's stream: %s", st.Message())
	case codes.Unimplemented:
		return fmt.Errorf("the peer does not serve ForwardBatches (a different version?): %s", st.Message())
	}
	return err
}

func notSentErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("peer: %s: %v", notSentMark, status.Convert(err).Message()))
}
