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
