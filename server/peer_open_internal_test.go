package server

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// A forward that found its peer's connection READY, and then opens a
// stream on it after the connection failed (its keepalive gave up in a
// network cut: the stream breaks and the connection goes IDLE at once),
// fails in time for its caller to hear that nothing was sent, rather than
// wait out the new dial that opening the stream makes into the cut: the
// stream was opened under the PeerConn's lock with no deadline, and gRPC
// blocks a stream's creation while its connection is CONNECTING, so this
// forward, and every one to the peer behind it, waited the dial's connect
// timeout (5 s) whatever its deadline, and ended DEADLINE_EXCEEDED.
func TestAStreamOpenedOnAConnectionThatFailedSinceReadyEndsByTheCallersDeadline(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(ServerOptions(DefaultLimits())...)
	NewPeerServer(rivetv1.UnimplementedActorServiceServer{}).Register(gs)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	defer func() { gs.Stop(); <-served }()

	var (
		cut  atomic.Bool
		mu   sync.Mutex
		last net.Conn
	)
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		if cut.Load() {
			// The cut drops the dial's packets.
			<-ctx.Done()
			return nil, ctx.Err()
		}
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			mu.Lock()
			last = c
			mu.Unlock()
		}
		return c, err
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer)}, PeerDialOptions(DefaultLimits())...)
	conn, err := grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pc := NewPeerConn(conn)
	defer pc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pc.ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	// A call answered on the stream (here UNIMPLEMENTED, which is an
	// answer), as on a stream in use: gRPC would otherwise open a stream
	// that nothing came back on again, transparently, on the next dial.
	call := &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "get"}
	if _, err := rivetv1.NewActorServiceClient(pc).Call(ctx, call); status.Code(err) != codes.Unimplemented {
		t.Fatalf("call to a live peer: %v, want its UNIMPLEMENTED", err)
	}
	s, err := pc.current(ctx)
	if err != nil {
		t.Fatalf("stream to a live peer: %v", err)
	}
	// The cut, and the connection found dead: its stream breaks, and the
	// connection leaves READY.
	cut.Store(true)
	mu.Lock()
	last.Close()
	mu.Unlock()
	closed := time.Now()
	select {
	case <-s.ctx.Done():
	case <-ctx.Done():
		t.Fatal("stream not broken 10 s after its connection closed")
	}
	for st := conn.GetState(); st == connectivity.Ready; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			t.Fatal("connection still READY 10 s after it closed")
		}
	}

	// A forward that saw the connection READY a moment ago opens the next
	// stream: it must give up by AnswerBy, not the dial's 5 s. Its
	// context reports a deadline within 2 s but ends only with the test:
	// the give-up seen is AnswerBy's (1.8 s), not the deadline's 200 ms
	// later, which a loaded machine may run at the same moment.
	const within = 2 * time.Second
	fctx := newLaterDone(t, within)
	by, _ := AnswerBy(fctx)
	start := time.Now()
	t.Logf("forward %v after the connection closed, which is %v", start.Sub(closed).Round(time.Millisecond), conn.GetState())
	type result struct {
		s   *peerStream
		err error
	}
	res := make(chan result, 1)
	go func() {
		s, err := pc.current(fctx)
		res <- result{s, err}
	}()
	select {
	case r := <-res:
		took := time.Since(start)
		if r.err == nil {
			t.Fatalf("stream opened into a cut after %v", took)
		}
		err := notSentErr(r.err) // as invoke returns it
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || !rpcerr.NotSent(st) || !strings.Contains(st.Message(), "not opened") {
			t.Fatalf("opening a stream into a cut: %v after %v, want UNAVAILABLE never sent, the stream not opened", err, took.Round(time.Millisecond))
		}
		if took > 3500*time.Millisecond {
			t.Fatalf("opening a stream into a cut gave up after %v, want by AnswerBy (%v, the caller's deadline %v): %v", took.Round(time.Millisecond), by.Sub(start).Round(time.Millisecond), within, err)
		}
		t.Logf("gave up after %v: %v", took.Round(time.Millisecond), err)
	case <-time.After(within + 10*time.Second):
		t.Fatalf("opening a stream into a cut still waits %v later", within+10*time.Second)
	}
}

// laterDone is a context whose Deadline reports deadline, and which ends
// only when the test cancels it (its Context): a test of a give-up by
// AnswerBy (which counts from the deadline) then sees that give-up, not
// the deadline's, however late the machine runs its timers.
type laterDone struct {
	context.Context
	deadline time.Time
}

func (c laterDone) Deadline() (time.Time, bool) { return c.deadline, true }

// newLaterDone returns a laterDone whose deadline is within from now, and
// which ends when the test does.
func newLaterDone(t *testing.T, within time.Duration) laterDone {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return laterDone{ctx, time.Now().Add(within)}
}

// blockedOpen serves a tagPeer with MaxConcurrentStreams(1), of which a
// stream of its own (not pc's) takes the one slot: pc's stream cannot
// open until free is called. ready has found pc's connection READY.
func blockedOpen(t *testing.T) (pc *PeerConn, peer *tagPeer, free func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits()
	gs := grpc.NewServer(append(ServerOptions(lim), grpc.MaxConcurrentStreams(1))...)
	peer = newTagPeer()
	rivetv1.RegisterPeerServiceServer(gs, peer)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, PeerDialOptions(lim)...)
	conn, err := grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	pc = NewPeerConn(conn)
	t.Cleanup(pc.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pc.ready(ctx); err != nil {
		t.Fatalf("ready: %v", err)
	}
	octx, ocancel := context.WithCancel(context.Background())
	t.Cleanup(ocancel)
	if _, err := rivetv1.NewPeerServiceClient(conn).ForwardBatches(octx); err != nil {
		t.Fatalf("the stream taking the slot: %v", err)
	}
	for peer.streams.Load() < 1 {
		if ctx.Err() != nil {
			t.Fatal("the stream taking the slot not served 10 s on")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return pc, peer, ocancel
}

// setStreamWait sets PeerStreamWait to d for the test.
func setStreamWait(t *testing.T, d time.Duration) {
	old := PeerStreamWait
	PeerStreamWait = d
	t.Cleanup(func() { PeerStreamWait = old })
}

// opening is the stream pc is opening, once it is (10 s at most).
func opening(t *testing.T, pc *PeerConn) *streamOpen {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		pc.mu.Lock()
		o := pc.opening
		pc.mu.Unlock()
		if o != nil {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatal("no stream opening 10 s on")
		}
		time.Sleep(time.Millisecond)
	}
}

var testCall = &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "get"}

// A call whose stream cannot open fails UNAVAILABLE never sent, "not
// opened", PeerStreamWait after the opening began, though its deadline is
// far; a call that comes later waits only what is left of that wait.
func TestAStreamThatCannotOpenFailsItsCallsAfterTheStreamWait(t *testing.T) {
	const wait = time.Second
	setStreamWait(t, wait)
	pc, _, _ := blockedOpen(t)
	cl := rivetv1.NewActorServiceClient(pc)

	type result struct {
		err  error
		took time.Duration
	}
	call := func() chan result {
		res := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			_, err := cl.Call(ctx, testCall)
			res <- result{err, time.Since(start)}
		}()
		return res
	}
	check := func(who string, r result) {
		t.Helper()
		st := status.Convert(r.err)
		if st.Code() != codes.Unavailable || !rpcerr.NotSent(st) || !strings.Contains(st.Message(), "not opened") {
			t.Errorf("%s: %v after %v, want UNAVAILABLE never sent, the stream not opened", who, r.err, r.took.Round(time.Millisecond))
		}
	}
	first := call()
	o := opening(t, pc)
	// The second caller comes 70% into the first's wait.
	for time.Since(o.began) < wait*7/10 {
		time.Sleep(time.Millisecond)
	}
	second := call()
	r1, r2 := <-first, <-second
	t.Logf("first failed after %v, second after %v: %v", r1.took.Round(time.Millisecond), r2.took.Round(time.Millisecond), r2.err)
	check("first", r1)
	check("second", r2)
	if r1.took < wait-50*time.Millisecond || r1.took > wait+2*time.Second {
		t.Errorf("first call failed after %v, want about PeerStreamWait (%v)", r1.took.Round(time.Millisecond), wait)
	}
	// What was left of the wait is 300 ms; the whole wait again would be 1 s.
	if r2.took > wait*65/100 {
		t.Errorf("second call failed after %v, want what was left of the stream's wait (about %v), not the whole of it", r2.took.Round(time.Millisecond), wait*3/10)
	}
}

// A stream that opens after its callers gave up is kept, and the next call
// goes on it: no second stream is opened.
func TestAStreamOpenedLateIsKeptAndUsed(t *testing.T) {
	setStreamWait(t, 300*time.Millisecond)
	pc, peer, free := blockedOpen(t)
	cl := rivetv1.NewActorServiceClient(pc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := cl.Call(ctx, testCall)
	if st := status.Convert(err); st.Code() != codes.Unavailable || !rpcerr.NotSent(st) {
		t.Fatalf("call on a stream that cannot open: %v, want UNAVAILABLE never sent", err)
	}
	o := opening(t, pc)
	free()
	select {
	case <-o.done:
	case <-ctx.Done():
		t.Fatal("stream not opened 10 s after its slot was freed")
	}
	if o.err != nil {
		t.Fatalf("stream opened late: %v", o.err)
	}
	pc.mu.Lock()
	kept := pc.stream
	pc.mu.Unlock()
	if kept != o.s {
		t.Fatalf("stream opened late not kept")
	}
	if _, err := cl.Call(ctx, testCall); err != nil {
		t.Fatalf("call after the stream opened: %v", err)
	}
	pc.mu.Lock()
	now := pc.stream
	pc.mu.Unlock()
	if now != kept {
		t.Errorf("the call went on another stream than the one opened late")
	}
	if !peer.received("get") {
		t.Errorf("the peer did not get the call")
	}
	if n := peer.streams.Load(); n != 2 {
		t.Errorf("%d streams opened on the peer, want 2 (the one taking the slot, then pc's)", n)
	}
}

// Close while a stream is opening fails its callers "peer connection
// closed", not with the opening's own cancel ("context canceled", which
// reads as the caller's context).
func TestCloseWhileAStreamOpensFailsItsCallsAsClosed(t *testing.T) {
	setStreamWait(t, 10*time.Second)
	pc, _, _ := blockedOpen(t)
	cl := rivetv1.NewActorServiceClient(pc)
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err := cl.Call(ctx, testCall)
		res <- err
	}()
	opening(t, pc)
	pc.Close()
	var err error
	select {
	case err = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("call still waiting 10 s after Close")
	}
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "peer connection closed") || strings.Contains(st.Message(), "canceled") {
		t.Fatalf("call whose stream was opening as the PeerConn closed: %v, want UNAVAILABLE peer connection closed", err)
	}
}
