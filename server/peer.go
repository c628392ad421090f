package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// PeerServer serves PeerService: it runs the requests other nodes forward
// on their streams through the ActorService handlers of srv, as if they had
// arrived as unary calls with one hop.
type PeerServer struct {
	rivetv1.UnimplementedPeerServiceServer
	srv      rivetv1.ActorServiceServer
	methods  map[string]grpc.MethodHandler
	stopping chan struct{}
	stopOnce sync.Once
}

// NewPeerServer returns a PeerServer over srv.
func NewPeerServer(srv rivetv1.ActorServiceServer) *PeerServer {
	p := &PeerServer{srv: srv, methods: map[string]grpc.MethodHandler{}, stopping: make(chan struct{})}
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

// Register adds the PeerService to gs.
func (p *PeerServer) Register(gs *grpc.Server) { rivetv1.RegisterPeerServiceServer(gs, p) }

// Forward implements rivetv1.PeerServiceServer.
func (p *PeerServer) Forward(stream rivetv1.PeerService_ForwardServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	f := &forwardStream{p: p, stream: stream, ctx: ctx, cancels: map[uint64]context.CancelFunc{}, work: make(chan forwardCall)}
	defer f.workers.Wait()
	defer cancel() // before Wait: the requests in flight and idle workers end first
	// Recv runs apart, so that Shutdown can end the stream while it waits.
	// It hands each request straight to a worker: a request costs one
	// switch of goroutine on this side of the stream, not two.
	received := make(chan struct{})
	go func() {
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
	p      *PeerServer
	stream rivetv1.PeerService_ForwardServer
	ctx    context.Context // ends with the stream
	sendMu sync.Mutex

	mu       sync.Mutex
	stopped  bool                          // no new requests, no new workers
	cancels  map[uint64]context.CancelFunc // of the requests in flight
	inflight sync.WaitGroup
	workers  sync.WaitGroup

	// work hands a request to an idle worker; idle counts them.
	work chan forwardCall
	idle atomic.Int32
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
		req, err := f.stream.Recv()
		if err != nil {
			return
		}
		if req.GetCancel() {
			f.mu.Lock()
			if c := f.cancels[req.GetId()]; c != nil {
				c()
			}
			f.mu.Unlock()
			continue
		}
		if !f.start(req) {
			return
		}
	}
}

// start runs req on an idle worker, or a new one; false once stopped.
func (f *forwardStream) start(req *rivetv1.ForwardRequest) bool {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return false
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
	c := forwardCall{ctx: rctx, cancel: rcancel, req: req}
	select {
	case f.work <- c: // an idle worker took it
	default:
		f.workers.Add(1) // under mu, with stopped false: before any Wait
		go f.worker(c)
	}
	f.mu.Unlock()
	return true
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
	// What serving a request needs, made once per worker rather than per
	// request: the response (Send marshals it before it returns) and the
	// decoder the handler calls.
	var (
		req  *rivetv1.ForwardRequest
		resp rivetv1.ForwardResponse
		dec  = func(m any) error { return proto.Unmarshal(req.GetRequest(), m.(proto.Message)) }
	)
	for {
		req = c.req
		f.p.serve(c.ctx, req, dec, &resp)
		f.mu.Lock()
		delete(f.cancels, req.GetId())
		f.mu.Unlock()
		c.cancel()
		f.sendMu.Lock()
		_ = f.stream.Send(&resp) // a broken stream ends Recv too
		f.sendMu.Unlock()
		f.inflight.Done()
		if cap(resp.Response) > maxPooledRequest {
			resp.Response = nil
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
	resp, err := h(p.srv, ctx, dec, nil)
	if err != nil {
		out.Status = statusBytes(status.Convert(err))
		return
	}
	b, err := proto.MarshalOptions{}.MarshalAppend(out.Response, resp.(proto.Message))
	if err != nil {
		out.Response = nil
		out.Status = statusBytes(status.New(codes.Internal, "peer: marshal response: "+err.Error()))
		return
	}
	out.Response = b
}

func statusBytes(st *status.Status) []byte {
	b, _ := proto.Marshal(st.Proto())
	return b
}

// PeerConn carries unary ActorService calls to one node over one
// PeerService stream, opened on first use and again after it breaks. It
// implements grpc.ClientConnInterface for unary calls, so generated
// clients and the forwarding interceptor use it as they would a
// connection. Outgoing metadata is not sent, except the call chain.
type PeerConn struct {
	conn *grpc.ClientConn

	mu      sync.Mutex
	stream  *peerStream
	closed  bool
	streams sync.WaitGroup // receive loops
}

// NewPeerConn returns a PeerConn over conn (which it does not own).
func NewPeerConn(conn *grpc.ClientConn) *PeerConn { return &PeerConn{conn: conn} }

// errPeerClosed is returned by calls on a closed PeerConn.
var errPeerClosed = status.Error(codes.Unavailable, "peer connection closed")

type peerStream struct {
	stream  rivetv1.PeerService_ForwardClient
	cancel  context.CancelFunc
	sendMu  sync.Mutex
	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan *rivetv1.ForwardResponse
	err     error // set when the stream broke
}

// Close ends the stream; calls in flight fail with UNAVAILABLE.
func (c *PeerConn) Close() {
	c.mu.Lock()
	c.closed = true
	s := c.stream
	c.stream = nil
	c.mu.Unlock()
	if s != nil {
		s.cancel()
	}
	c.streams.Wait()
}

// Conn is the underlying connection.
func (c *PeerConn) Conn() *grpc.ClientConn { return c.conn }

// ready waits, within ctx, until the connection is up, so that opening a
// stream (under c.mu, with no deadline of its own) does not wait on a
// peer that is still being dialed. A connection in transient failure
// fails at once: the peer is down, and the caller should not wait for it.
func (c *PeerConn) ready(ctx context.Context) error {
	for {
		st := c.conn.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.TransientFailure, connectivity.Shutdown:
			return fmt.Errorf("connection to %s: %s", c.conn.Target(), st)
		case connectivity.Idle:
			c.conn.Connect()
		}
		if !c.conn.WaitForStateChange(ctx, st) {
			return ctx.Err()
		}
	}
}

func (c *PeerConn) current() (*peerStream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errPeerClosed
	}
	if c.stream != nil {
		return c.stream, nil
	}
	// The stream outlives every call: its context is the PeerConn's.
	ctx, cancel := context.WithCancel(context.Background())
	st, err := rivetv1.NewPeerServiceClient(c.conn).Forward(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &peerStream{stream: st, cancel: cancel, pending: map[uint64]chan *rivetv1.ForwardResponse{}}
	c.stream = s
	c.streams.Add(1)
	go c.receive(s)
	return s, nil
}

// receive delivers responses until the stream breaks, then fails every
// call still waiting and forgets the stream.
func (c *PeerConn) receive(s *peerStream) {
	defer c.streams.Done()
	for {
		resp, err := s.stream.Recv()
		if err != nil {
			s.mu.Lock()
			s.err = err
			for id, ch := range s.pending {
				close(ch)
				delete(s.pending, id)
			}
			s.mu.Unlock()
			c.mu.Lock()
			if c.stream == s {
				c.stream = nil
			}
			c.mu.Unlock()
			s.cancel()
			return
		}
		s.mu.Lock()
		ch := s.pending[resp.GetId()]
		delete(s.pending, resp.GetId())
		s.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
}

// Invoke implements grpc.ClientConnInterface.
func (c *PeerConn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	req := forwardRequests.Get().(*rivetv1.ForwardRequest)
	defer putForwardRequest(req)
	b, err := proto.MarshalOptions{}.MarshalAppend(req.Request[:0], args.(proto.Message))
	if err != nil {
		return status.Error(codes.Internal, "peer: marshal request: "+err.Error())
	}
	req.Method, req.Request = method, b
	if err := c.ready(ctx); err != nil {
		return notSentErr(err)
	}
	s, err := c.current()
	if err != nil {
		return notSentErr(err)
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		if v := md.Get(ChainKey); len(v) > 0 {
			req.Chain = v[0]
		}
	}
	if d, ok := ctx.Deadline(); ok {
		req.TimeoutMs = max(time.Until(d).Milliseconds(), 1)
	}
	ch := replyChans.Get().(chan *rivetv1.ForwardResponse)
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		replyChans.Put(ch) // never shared
		return notSentErr(s.err)
	}
	s.nextID++
	id := s.nextID
	req.Id = id
	s.pending[id] = ch
	s.mu.Unlock()
	s.sendMu.Lock()
	// Send marshals req before it returns (what gRPC keeps for a retry is
	// the encoding), so req goes back to its pool when Invoke returns.
	err = s.stream.Send(req)
	s.sendMu.Unlock()
	if err != nil {
		// A failed Send sent nothing (gRPC aborts the stream instead).
		if errors.Is(err, io.EOF) {
			// The stream had ended: its status, which the receive loop
			// gets (and then closes ch), says why.
			select {
			case <-ch:
			case <-ctx.Done():
			}
			s.mu.Lock()
			if s.err != nil {
				err = refused(s.err)
			}
			s.mu.Unlock()
		}
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
		return notSentErr(err)
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			s.mu.Lock()
			serr := s.err
			s.mu.Unlock()
			st := status.Convert(serr)
			if msg := st.Message(); strings.Contains(msg, notSentMark) {
				return status.Error(codes.Unavailable, msg)
			}
			if st.Code() == codes.Unauthenticated {
				return notSentErr(refused(serr))
			}
			return status.Error(codes.Unavailable, "peer stream broke during the call")
		}
		// The receive loop forgot ch as it sent on it: no one else holds
		// it now. A closed ch, or one a cancelled call left behind (which
		// a late response may still fill), is never reused.
		replyChans.Put(ch)
		if len(resp.GetStatus()) > 0 {
			var sp spb.Status
			if err := proto.Unmarshal(resp.GetStatus(), &sp); err != nil {
				return status.Error(codes.Internal, "peer: bad status: "+err.Error())
			}
			return status.FromProto(&sp).Err()
		}
		if err := proto.Unmarshal(resp.GetResponse(), reply.(proto.Message)); err != nil {
			return status.Error(codes.Internal, "peer: unmarshal response: "+err.Error())
		}
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
		s.sendMu.Lock()
		_ = s.stream.Send(&rivetv1.ForwardRequest{Id: id, Cancel: true})
		s.sendMu.Unlock()
		return status.FromContextError(ctx.Err()).Err()
	}
}

// Pools of what every forwarded call needs and no one keeps once it
// returns: allocation is the largest cost the forwarding node's own code
// adds to a call, and each of these would be one per call.
var (
	forwardRequests = sync.Pool{New: func() any { return new(rivetv1.ForwardRequest) }}
	replyChans      = sync.Pool{New: func() any { return make(chan *rivetv1.ForwardResponse, 1) }}
)

// maxPooledRequest is the largest request buffer kept for reuse, so that
// one large call does not keep its buffer for ever.
const maxPooledRequest = 64 << 10

func putForwardRequest(r *rivetv1.ForwardRequest) {
	if cap(r.Request) > maxPooledRequest {
		return
	}
	*r = rivetv1.ForwardRequest{Request: r.Request[:0]}
	forwardRequests.Put(r)
}

// NewStream implements grpc.ClientConnInterface: streams are not forwarded.
func (c *PeerConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unimplemented, "peer: streams are not forwarded")
}

// notSentMark is in the message of failures that happened before the
// request left this node, which the forwarder may therefore call retryable.
const notSentMark = rpcerr.NotSentMark

// refused explains a stream that ended UNAUTHENTICATED: the peer refused
// it as it opened, before any request on it ran, because its token is not
// this node's.
func refused(err error) error {
	if st := status.Convert(err); st.Code() == codes.Unauthenticated {
		return fmt.Errorf("the peer refused this node's stream: %s", st.Message())
	}
	return err
}

func notSentErr(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("peer: %s: %v", notSentMark, status.Convert(err).Message()))
}
