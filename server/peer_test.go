package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
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
	"google.golang.org/protobuf/proto"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// peerPair serves backend with a PeerServer and returns a PeerConn to it.
func peerPair(t testing.TB, backend server.Backend) (*server.PeerConn, *server.PeerServer) {
	t.Helper()
	srv := server.New(backend)
	ps := server.NewPeerServer(srv)
	return serveOn(t, func(gs *grpc.Server) {
		srv.Register(gs)
		ps.Register(gs)
	}), ps
}

// serveOn serves what register registers on a gRPC server on loopback,
// and returns a PeerConn to it; both end with the test.
func serveOn(t testing.TB, register func(*grpc.Server)) *server.PeerConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	pc := server.NewPeerConn(conn)
	t.Cleanup(func() {
		pc.Close()
		conn.Close()
		gs.Stop()
		<-done
	})
	return pc
}

// A forwarded call over the peer stream gets the owner's answer, its error
// with the ActorError detail, and the call chain; cancelling the caller
// cancels the owner's work.
func TestPeerStreamCarriesCallsErrorsChainsAndCancels(t *testing.T) {
	f := servertest.NewFake()
	var (
		mu       sync.Mutex
		sawChain string
	)
	started := make(chan struct{}, 1)
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		switch req.Action {
		case "echo":
			mu.Lock()
			if req.Chain.ID != "" {
				sawChain = req.Chain.ID
			}
			mu.Unlock()
			return req.Args, nil
		case "fail":
			return nil, rivet.UserError("insufficient_funds", "balance is 3", nil)
		case "block":
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return nil, rivet.Errorf(rivet.ErrUnknownAction, "no %s", req.Action)
	}
	pc, _ := peerPair(t, f)
	cl := rivetv1.NewActorServiceClient(pc)
	ctx := context.Background()
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}

	resp, err := cl.Call(server.WithChain(ctx, "chain-1"), &rivetv1.CallRequest{Actor: ref, Action: "echo", Args: []byte(`[1,2]`)})
	if err != nil || string(resp.GetResult()) != `[1,2]` {
		t.Fatalf("echo: %v, %v", resp, err)
	}
	mu.Lock()
	got := sawChain
	mu.Unlock()
	if got != "chain-1" {
		t.Fatalf("owner saw chain %q, want chain-1", got)
	}

	_, err = cl.Call(ctx, &rivetv1.CallRequest{Actor: ref, Action: "fail", Args: []byte(`[]`)})
	e := rpcerr.FromStatus(status.Convert(err))
	if status.Code(err) == codes.OK || e.Code != "insufficient_funds" || e.Message != "balance is 3" {
		t.Fatalf("fail: %v (%+v)", err, e)
	}

	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Call(cctx, &rivetv1.CallRequest{Actor: ref, Action: "block", Args: []byte(`[]`)})
		errc <- err
	}()
	<-started
	cancel()
	select {
	case err := <-errc:
		if status.Code(err) != codes.Canceled {
			t.Fatalf("cancelled call: %v, want CANCELED", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled call did not return")
	}

	// Many calls at once share the stream, each getting its own answer
	// (the stream reuses what calls leave behind, the cancelled one's too).
	echoMany(t, cl, 50, func(i int) string { return fmt.Sprintf("[%d]", i) })
}

// echoMany makes n echo calls at once through cl, the i-th with args(i),
// and fails t unless each gets its own args back.
func echoMany(t *testing.T, cl rivetv1.ActorServiceClient, n int, args func(i int) string) {
	t.Helper()
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	// A minute, not ctx's 10 s: under the race detector, a few calls of
	// megabytes take seconds (TestPeerStreamMixesLargeAndSmallCalls).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, n)
	for i := range n {
		go func() {
			a := args(i)
			resp, err := cl.Call(ctx, &rivetv1.CallRequest{Actor: ref, Action: "echo", Args: []byte(a)})
			if err == nil && string(resp.GetResult()) != a {
				err = fmt.Errorf("call %d got %d bytes back, want its %d (%.20s)", i, len(resp.GetResult()), len(a), a)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// Shutdown ends the peers' streams once their calls are answered, so a
// graceful stop of the owner is not held up; the next call opens a new
// stream.
func TestPeerServerShutdownEndsStreams(t *testing.T) {
	f := servertest.NewFake()
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		if req.Action == "slow" {
			started <- struct{}{}
			<-release
		}
		return []byte(`1`), nil
	}
	pc, ps := peerPair(t, f)
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Call(context.Background(), &rivetv1.CallRequest{Actor: ref, Action: "slow", Args: []byte(`[]`)})
		errc <- err
	}()
	<-started
	ps.Shutdown()
	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("the call in flight at Shutdown: %v, want its answer", err)
	}
	// The server is stopping: a call now is refused, and the error says
	// it was not sent, so the forwarder may let clients retry it.
	_, err := cl.Call(context.Background(), &rivetv1.CallRequest{Actor: ref, Action: "x", Args: []byte(`[]`)})
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "not sent") {
		t.Fatalf("call after Shutdown: %v, want UNAVAILABLE saying it was not sent", err)
	}
}

// The caller's deadline reaches the owner: its work sees the deadline and
// ends with it, and the caller gets DEADLINE_EXCEEDED. Workers the stream
// keeps for reuse serve each request in that request's own context.
func TestPeerStreamCarriesDeadlines(t *testing.T) {
	f := servertest.NewFake()
	ended := make(chan error, 1)
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		switch req.Action {
		case "deadline":
			d, ok := ctx.Deadline()
			if !ok {
				return json.RawMessage(`0`), nil
			}
			return json.Marshal(time.Until(d).Milliseconds())
		case "block":
			<-ctx.Done()
			ended <- ctx.Err()
			return nil, ctx.Err()
		}
		return nil, rivet.Errorf(rivet.ErrUnknownAction, "no %s", req.Action)
	}
	pc, _ := peerPair(t, f)
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	remaining := func(ctx context.Context) int64 {
		t.Helper()
		resp, err := cl.Call(ctx, &rivetv1.CallRequest{Actor: ref, Action: "deadline", Args: []byte(`[]`)})
		if err != nil {
			t.Fatal(err)
		}
		var ms int64
		if err := json.Unmarshal(resp.GetResult(), &ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	// Twice each way, so that a reused worker serves the second call.
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		ms := remaining(ctx)
		cancel()
		if ms <= 0 || ms > time.Minute.Milliseconds() {
			t.Fatalf("owner saw %d ms left, want (0, 60000]", ms)
		}
		if ms := remaining(context.Background()); ms != 0 {
			t.Fatalf("owner saw a deadline (%d ms left) on a call without one", ms)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := cl.Call(ctx, &rivetv1.CallRequest{Actor: ref, Action: "block", Args: []byte(`[]`)})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call past its deadline: %v, want DEADLINE_EXCEEDED", err)
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("owner's work ended without an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("owner's work did not end with the caller's deadline")
	}
}

// Calls queued together share stream messages, but a message never grows
// past what the transport accepts: large calls among many small ones
// each get their own answer, none refused for the size of the batch.
func TestPeerStreamMixesLargeAndSmallCalls(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(_ context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		return req.Args, nil
	}
	pc, _ := peerPair(t, f)
	// 2.1 MiB each way: under the default limits, and any two of them over
	// a transport bound of 4 MiB per message had they been batched whole.
	// Four of them, not more: under the race detector, the time this
	// takes grows faster than their number (1: 0.8 s, 2: 3.5 s, 4: 9 s).
	large := `["` + strings.Repeat("x", 2100<<10) + `"]`
	echoMany(t, rivetv1.NewActorServiceClient(pc), 64, func(i int) string {
		if i%16 == 0 {
			return large
		}
		return fmt.Sprintf("[%d]", i)
	})
}

// servePeer serves backend on a gRPC server with only the PeerService
// streams named (none: no PeerService at all), and returns a PeerConn to
// it: a node of an older version, or not a node.
func servePeer(t *testing.T, backend server.Backend, streams ...string) *server.PeerConn {
	t.Helper()
	return serveOn(t, func(gs *grpc.Server) {
		if len(streams) == 0 {
			return
		}
		desc := rivetv1.PeerService_ServiceDesc
		desc.Streams = slices.DeleteFunc(slices.Clone(desc.Streams), func(d grpc.StreamDesc) bool {
			return !slices.Contains(streams, d.StreamName)
		})
		gs.RegisterService(&desc, server.NewPeerServer(server.New(backend)))
	})
}

// A cluster is upgraded one node at a time, so a node forwards to a peer
// of the version before ForwardBatches over that version's Forward
// stream: the calls the refused stream carried were not run, and go
// again, once each.
func TestPeerConnForwardsToAnOlderPeer(t *testing.T) {
	f := servertest.NewFake()
	var runs sync.Map
	f.CallFunc = func(_ context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		if _, twice := runs.LoadOrStore(string(req.Args), true); twice {
			return nil, fmt.Errorf("call %s ran twice", req.Args)
		}
		return req.Args, nil
	}
	pc := servePeer(t, f, "Forward")
	echoMany(t, rivetv1.NewActorServiceClient(pc), 20, func(i int) string { return fmt.Sprintf("[%d]", i) })
}

// A peer that serves neither stream refuses the call as a whole, so the
// caller is told it was not sent, which the forwarder turns into a
// retryable UNAVAILABLE.
func TestPeerStreamToANodeWithoutPeerServiceIsNotSent(t *testing.T) {
	pc := servePeer(t, servertest.NewFake())
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	for range 3 {
		_, err := cl.Call(ctx(t), &rivetv1.CallRequest{Actor: ref, Action: "increment", Args: []byte(`[1]`)})
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "not sent") {
			t.Fatalf("call to a node without PeerService: %v, want UNAVAILABLE saying it was not sent", err)
		}
	}
}

// A node of the version before ForwardBatches forwards over Forward, one
// request per message; this version still serves it.
func TestOlderPeerForwardsToThisNode(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(_ context.Context, req runtime.CallRequest) (json.RawMessage, error) { return req.Args, nil }
	pc, _ := peerPair(t, f)
	stream, err := rivetv1.NewPeerServiceClient(pc.Conn()).Forward(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		body, err := proto.Marshal(&rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "echo", Args: []byte(fmt.Sprintf("[%d]", id))})
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&rivetv1.ForwardRequest{Id: id, Method: rivetv1.ActorService_Call_FullMethodName, Request: body}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var out rivetv1.CallResponse
		if resp.GetId() != id || len(resp.GetStatus()) > 0 || proto.Unmarshal(resp.GetResponse(), &out) != nil || string(out.GetResult()) != fmt.Sprintf("[%d]", id) {
			t.Fatalf("response %d: %v (result %s)", id, resp, out.GetResult())
		}
	}
}

// A stopping owner answers the requests in flight and runs no new ones,
// but still reads the stream: a cancel that arrives after a refused
// request reaches the request it cancels, or a call without a deadline
// would hold up the stop (and a GracefulStop) for ever.
func TestPeerServerStoppingStillTakesCancels(t *testing.T) {
	f := servertest.NewFake()
	started, ended := make(chan struct{}, 1), make(chan error, 1)
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		if req.Action == "block" {
			started <- struct{}{}
			<-ctx.Done()
			ended <- ctx.Err()
			return nil, ctx.Err()
		}
		return []byte(`1`), nil
	}
	pc, ps := peerPair(t, f)
	stream, err := rivetv1.NewPeerServiceClient(pc.Conn()).ForwardBatches(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	call := func(id uint64, action string) *rivetv1.ForwardRequest {
		body, err := proto.Marshal(&rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: action, Args: []byte(`[]`)})
		if err != nil {
			t.Fatal(err)
		}
		return &rivetv1.ForwardRequest{Id: id, Method: rivetv1.ActorService_Call_FullMethodName, Request: body}
	}
	// Request 1 has no deadline and runs until cancelled.
	if err := stream.Send(&rivetv1.ForwardBatchesRequest{Requests: []*rivetv1.ForwardRequest{call(1, "block")}}); err != nil {
		t.Fatal(err)
	}
	<-started
	ps.Shutdown()
	// Request 2 arrives while stopping (refused), and behind it in the
	// same message the cancel of request 1.
	if err := stream.Send(&rivetv1.ForwardBatchesRequest{Requests: []*rivetv1.ForwardRequest{call(2, "x"), {Id: 1, Cancel: true}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stopping owner never took the cancel of the request in flight")
	}
	// Request 1 is answered (with its cancellation), request 2 never
	// ran: the stream ends saying so.
	resp, err := stream.Recv()
	if err != nil || resp.GetResponses()[0].GetId() != 1 {
		t.Fatalf("first message after the cancel: %v, %v; want the answer to request 1", resp, err)
	}
	_, err = stream.Recv()
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "not sent") {
		t.Fatalf("the stream ended with %v, want UNAVAILABLE saying what is left was not sent", err)
	}
	// The stream's receive loop, left waiting in Recv when its handler
	// returned, ends with the stream: the node's stop waits for it.
	waited := make(chan struct{})
	go func() { ps.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("the receive loop of an ended stream is still running")
	}
}

// A request too large for the peer is refused on its own, unsent: had it
// gone out, the peer would have broken the stream, and every call on it.
func TestPeerConnRefusesARequestTooLargeForThePeer(t *testing.T) {
	f := servertest.NewFake()
	started, release := make(chan struct{}, 1), make(chan struct{})
	f.CallFunc = func(_ context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		if req.Action == "block" {
			started <- struct{}{}
			<-release
		}
		return []byte(`1`), nil
	}
	pc, _ := peerPair(t, f) // the peer's transport takes messages up to 4 MiB
	pc.LimitRequests(4<<20 - 4<<10)
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Call(ctx(t), &rivetv1.CallRequest{Actor: ref, Action: "block", Args: []byte(`[]`)})
		errc <- err
	}()
	<-started
	huge := []byte(`["` + strings.Repeat("x", 4<<20) + `"]`)
	_, err := cl.Call(ctx(t), &rivetv1.CallRequest{Actor: ref, Action: "echo", Args: huge})
	e := rpcerr.FromStatus(status.Convert(err))
	if status.Code(err) != codes.ResourceExhausted || !errors.Is(e, rivet.ErrTooLarge) || !strings.Contains(e.Message, "request to forward too large") {
		t.Fatalf("oversized forward: %v (%+v), want RESOURCE_EXHAUSTED, too large", err, e)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("the call in flight beside it: %v, want its answer", err)
	}
}

// Calls of many callers with short deadlines, over a stream whose owner
// restarts twice meanwhile: every call returns by its deadline (or soon
// after, for one the broken stream fails), with its own answer or an error
// a forwarder expects (deadline, UNAVAILABLE), and the stream carries calls
// again after each restart. Nothing hangs, panics or leaks (goleak).
func TestPeerStreamUnderChurn(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		select {
		case <-time.After(time.Duration(len(req.Args)%5) * time.Millisecond):
			return req.Args, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	serve := func(lis net.Listener) (stop func()) {
		gs := grpc.NewServer()
		server.NewPeerServer(server.New(f)).Register(gs)
		done := make(chan struct{})
		go func() { defer close(done); _ = gs.Serve(lis) }()
		return func() { gs.Stop(); <-done }
	}
	stop := serve(lis)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pc := server.NewPeerConn(conn)
	defer pc.Close()
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}

	var (
		mu   sync.Mutex
		ok   int
		bad  []string
		quit = make(chan struct{})
		wg   sync.WaitGroup
	)
	for w := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				default:
				}
				args := fmt.Sprintf("[%d,%d]", w, i)
				timeout := time.Duration(1+(w*7+i)%20) * time.Millisecond
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				start := time.Now()
				resp, err := cl.Call(ctx, &rivetv1.CallRequest{Actor: ref, Action: "echo", Args: []byte(args)})
				took := time.Since(start)
				cancel()
				mu.Lock()
				switch code := status.Code(err); {
				case took > timeout+5*time.Second:
					bad = append(bad, fmt.Sprintf("call %s took %v with a %v deadline", args, took, timeout))
				case err == nil && string(resp.GetResult()) != args:
					bad = append(bad, fmt.Sprintf("call %s got %s", args, resp.GetResult()))
				case err == nil:
					ok++
				case code != codes.DeadlineExceeded && code != codes.Unavailable && code != codes.Canceled:
					bad = append(bad, fmt.Sprintf("call %s: %v", args, err))
				}
				mu.Unlock()
			}
		})
	}
	succeeded := func(n int) {
		t.Helper()
		mu.Lock()
		base := ok
		mu.Unlock()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			got := ok - base
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				close(quit)
				wg.Wait()
				t.Fatalf("only %d calls answered in 30 s (want %d)", got, n)
			}
		}
	}
	succeeded(200)
	for range 2 {
		stop()
		var lerr error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if lis, lerr = net.Listen("tcp", addr); lerr == nil || time.Now().After(deadline) {
				break
			}
		}
		if lerr != nil {
			close(quit)
			wg.Wait()
			t.Fatalf("listen again on %s: %v", addr, lerr)
		}
		stop = serve(lis)
		succeeded(200)
	}
	close(quit)
	wg.Wait()
	stop()
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad[:min(len(bad), 10)] {
		t.Error(b)
	}
}

// A response larger than the owner's transport sends (a SendWait whose
// workflow completed the message with a response that escaped every
// limit, a long History) fails alone with RESOURCE_EXHAUSTED. Sent, it
// would have broken the peer stream, failing every other call in flight
// on it, although the owner ran them.
func TestAnOversizedForwardedResponseFailsAloneNotTheStream(t *testing.T) {
	f := servertest.NewFake()
	started, release := make(chan struct{}), make(chan struct{})
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		close(started)
		<-release
		return json.RawMessage(`1`), nil
	}
	big := json.RawMessage(`"` + strings.Repeat("x", 6<<20) + `"`)
	f.SendFunc = func(ctx context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
		return runtime.SendResult{MessageID: 7, Status: runtime.SendCompleted, Response: big}, nil
	}
	// Served and dialed as a node does: the transport sends at most 5 MiB.
	lim := server.DefaultLimits()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(server.ServerOptions(lim)...)
	srv := server.New(f, server.WithLimits(lim))
	srv.Register(gs)
	server.NewPeerServer(srv).LimitResponses(lim.MaxForwardedResponseBytes()).Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, server.PeerDialOptions(lim)...)
	conn, err := grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	pc := server.NewPeerConn(conn).LimitRequests(lim.MaxForwardedBytes())
	t.Cleanup(func() {
		pc.Close()
		conn.Close()
		gs.Stop()
		<-done
	})
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	incErr := make(chan error, 1)
	go func() {
		_, err := cl.Call(ctx(t), &rivetv1.CallRequest{Actor: ref, Action: "increment", Args: []byte(`[1]`)})
		incErr <- err
	}()
	<-started
	_, err = cl.Send(ctx(t), &rivetv1.SendRequest{Actor: ref, Queue: "q", Body: []byte(`1`), Wait: true})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(status.Convert(err).Message(), "response too large") {
		t.Fatalf("forwarded SendWait with a 6 MiB response = %v, want RESOURCE_EXHAUSTED saying the response is too large", err)
	}
	close(release)
	if err := <-incErr; err != nil {
		t.Fatalf("a call in flight on the same stream, which the owner ran, failed: %v", err)
	}
}

// freezingProxy relays TCP connections to target until freeze closes: then
// it stops relaying, and keeps the connections open, as a peer whose host
// froze or whose network was cut without a reset.
func freezingProxy(t *testing.T, target string, freeze <-chan struct{}) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	relay := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			select {
			case <-freeze:
				<-t.Context().Done() // hold the connection, silent
				return
			default:
			}
			if n > 0 {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			go relay(u, c)
			go relay(c, u)
		}
	}()
	return lis.Addr().String()
}

// A forwarded call, even one without a deadline, to an owner that goes
// silent (no reset: a frozen host, a cut network) fails once keepalive
// finds the connection dead, rather than waiting for ever.
func TestPeerCallToAFrozenOwnerFails(t *testing.T) {
	f := servertest.NewFake()
	started := make(chan struct{}, 1)
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := server.DefaultLimits()
	gs := grpc.NewServer(server.ServerOptions(lim)...)
	srv := server.New(f, server.WithLimits(lim))
	srv.Register(gs)
	server.NewPeerServer(srv).Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	freeze := make(chan struct{})
	addr := freezingProxy(t, lis.Addr().String(), freeze)
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, server.PeerDialOptions(lim)...)
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		t.Fatal(err)
	}
	pc := server.NewPeerConn(conn)
	t.Cleanup(func() { pc.Close(); conn.Close() })
	errc := make(chan error, 1)
	go func() {
		// No deadline: only the connection's failure can end it.
		_, err := rivetv1.NewActorServiceClient(pc).Call(context.Background(), &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "block", Args: []byte(`[]`)})
		errc <- err
	}()
	<-started
	close(freeze)
	limit := server.PeerKeepalive.Time + server.PeerKeepalive.Timeout + 30*time.Second
	select {
	case err := <-errc:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("call to a frozen owner = %v, want UNAVAILABLE", err)
		}
	case <-time.After(limit):
		t.Fatalf("a call to a frozen owner still waits %v later", limit)
	}
}

// An owner's error whose text is not UTF-8 (an actor's UserError built
// from bytes) reaches the forwarding node's caller as the owner's error:
// its status, whose message proto strings must hold as UTF-8, once did
// not decode there, and the caller got INTERNAL "peer: bad status", the
// actor's kind and code lost.
func TestAForwardedErrorWithTextNotUTF8IsStillAnError(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		return nil, rivet.UserError("bad_input", "no such item: \xff\xfe", nil)
	}
	pc, _ := peerPair(t, f)
	resp, err := rivetv1.NewActorServiceClient(pc).Call(ctx(t), &rivetv1.CallRequest{Actor: ref("counter", "a"), Action: "get"})
	if st := status.Convert(err); st.Code() != codes.Unknown || !strings.HasPrefix(st.Message(), "no such item: ") {
		t.Fatalf("forwarded call = %v, %v; want the owner's UNKNOWN, no such item", resp, err)
	}
	if e := rpcerr.FromStatus(status.Convert(err)); e.Group != "user" || e.Code != "bad_input" || e.Message != "no such item: \uFFFD\uFFFD" {
		t.Fatalf("forwarded call's error = %+v, want the user's bad_input, its bad bytes as U+FFFD", e)
	}
}

// A forwarded call to a peer whose connection does not come up (a cut
// network drops its packets, so the dial neither succeeds nor fails until
// gRPC's connect timeout of 20 s; here a listener that takes the
// connection and never answers) fails before the caller's deadline with
// UNAVAILABLE marked as never sent, which clients retry, rather than
// waiting for the dial until the deadline passes (DEADLINE_EXCEEDED, its
// outcome unknown to the client, although nothing was sent).
func TestPeerCallToAnUnreachablePeerFailsRetryablyBeforeItsDeadline(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for range 1000 {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-accepted
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, server.PeerDialOptions(server.DefaultLimits())...)
	conn, err := grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	pc := server.NewPeerConn(conn)
	t.Cleanup(func() { pc.Close(); conn.Close() })
	// Not a deadline near the margin's 50 ms floor: a machine under load
	// wakes the forwarder's give-up that much late (a 300 ms one failed
	// so beside other tests' load).
	for _, within := range []time.Duration{2 * time.Second, time.Second} {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		t0 := time.Now()
		_, err := rivetv1.NewActorServiceClient(pc).Call(ctx, &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "increment", Args: []byte(`[1]`)})
		took := time.Since(t0)
		deadlineErr := ctx.Err()
		cancel()
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || !rpcerr.NotSent(st) || deadlineErr != nil {
			t.Fatalf("call with a %v deadline to a peer that never answers its dial: %v after %v (deadline passed: %v), want UNAVAILABLE marked never sent, before the deadline", within, err, took.Round(time.Millisecond), deadlineErr != nil)
		}
	}
}

// A peer whose dial went unanswered while a network cut dropped its
// packets is reached again within a few seconds of the network coming
// back: a dial attempt that lost its packets waits out its connect timeout
// before gRPC makes a new one (the kernel's own retransmissions of the
// connection's first packet grow to 8 and 16 s apart), and that timeout
// was gRPC's default of 20 s, so that every call forwarded to the peer
// failed for up to 20 s after the cut healed.
func TestPeerConnReconnectsSoonAfterADialLostInACut(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) { return json.RawMessage("1"), nil }
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := server.DefaultLimits()
	gs := grpc.NewServer(server.ServerOptions(lim)...)
	srv := server.New(f, server.WithLimits(lim))
	srv.Register(gs)
	server.NewPeerServer(srv).Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })

	// While cut, a dial's packets are lost: it neither connects nor
	// fails until its attempt's deadline.
	var cut atomic.Bool
	cut.Store(true)
	dialing := make(chan struct{}, 1)
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		if cut.Load() {
			select {
			case dialing <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, server.PeerDialOptions(lim)...)
	conn, err := grpc.NewClient(lis.Addr().String(), append(dial, grpc.WithContextDialer(dialer))...)
	if err != nil {
		t.Fatal(err)
	}
	pc := server.NewPeerConn(conn)
	t.Cleanup(func() { pc.Close(); conn.Close() })
	conn.Connect()
	select {
	case <-dialing:
	case <-time.After(10 * time.Second):
		t.Fatal("no dial within 10 s")
	}
	cut.Store(false)
	healed := time.Now()
	const within = 8 * time.Second // the connect timeout, a backoff of 1 s, and room
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := rivetv1.NewActorServiceClient(pc).Call(ctx, &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "increment", Args: []byte(`[1]`)})
		cancel()
		if err == nil {
			t.Logf("reached %v after the cut healed", time.Since(healed).Round(time.Millisecond))
			return
		}
		if time.Since(healed) > within {
			t.Fatalf("peer not reached within %v of the cut healing: %v", within, err)
		}
	}
}

// Forwards to a peer whose dial neither connects nor fails (a cut network
// drops its packets, and the dial waits out its 5 s connect timeout) fail
// with UNAVAILABLE marked as never sent within PeerConnectWait of when
// the attempt began, and those made after that fail at once,
// whatever their deadlines: each waited until shortly before its deadline,
// and a call its client retried spent its whole deadline so, its last
// attempt's answer racing the deadline. A peer whose connection takes a
// moment to come up (one reconnecting) still gets its calls.
func TestForwardsToAPeerWhoseDialHangsFailWithinTheConnectWait(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) { return json.RawMessage("1"), nil }
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := server.DefaultLimits()
	gs := grpc.NewServer(server.ServerOptions(lim)...)
	srv := server.New(f, server.WithLimits(lim))
	srv.Register(gs)
	server.NewPeerServer(srv).Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })

	var (
		cut  atomic.Bool
		slow atomic.Bool // a dial that takes a moment, as to a peer that is there
	)
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		if cut.Load() {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		if slow.Load() {
			select {
			case <-time.After(server.PeerConnectWait / 4):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	dialOpts := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer)}, server.PeerDialOptions(lim)...)
	newPeer := func() *server.PeerConn {
		conn, err := grpc.NewClient(lis.Addr().String(), dialOpts...)
		if err != nil {
			t.Fatal(err)
		}
		pc := server.NewPeerConn(conn)
		t.Cleanup(func() { pc.Close(); conn.Close() })
		return pc
	}
	call := func(pc *server.PeerConn) (time.Duration, error) {
		// Far longer than the connect wait and the dial's connect
		// timeout.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		t0 := time.Now()
		_, err := rivetv1.NewActorServiceClient(pc).Call(ctx, &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "increment", Args: []byte(`[1]`)})
		return time.Since(t0), err
	}

	slow.Store(true)
	if took, err := call(newPeer()); err != nil {
		t.Fatalf("forward to a peer whose dial takes %v: %v after %v", server.PeerConnectWait/4, err, took)
	}
	slow.Store(false)

	cut.Store(true)
	pc := newPeer()
	// The dial's connect timeout is 5 s: the first bound is short of it
	// (the forward fails at the connect wait, 3 s, not when the dial
	// gives up), the second far below the connect wait.
	took, err := call(pc)
	if st := status.Convert(err); st.Code() != codes.Unavailable || !rpcerr.NotSent(st) || took > server.PeerConnectWait+1500*time.Millisecond {
		t.Fatalf("first forward to a peer whose dial hangs: %v after %v; want UNAVAILABLE marked never sent within about %v", err, took.Round(time.Millisecond), server.PeerConnectWait)
	}
	first := took
	took, err = call(pc)
	if st := status.Convert(err); st.Code() != codes.Unavailable || !rpcerr.NotSent(st) || took > server.PeerConnectWait/2 {
		t.Fatalf("forward once the connect wait has passed: %v after %v; want UNAVAILABLE marked never sent at once", err, took.Round(time.Millisecond))
	}
	t.Logf("first forward failed after %v, the next after %v", first.Round(time.Millisecond), took.Round(time.Millisecond))
}

// startPeerServer serves a fake node's ActorService and PeerService on a
// loopback port until the test ends.
func startPeerServer(t *testing.T) (addr string, lim server.Limits) {
	t.Helper()
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) { return json.RawMessage("1"), nil }
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim = server.DefaultLimits()
	gs := grpc.NewServer(server.ServerOptions(lim)...)
	srv := server.New(f, server.WithLimits(lim))
	srv.Register(gs)
	server.NewPeerServer(srv).Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String(), lim
}

func forwardOne(pc *server.PeerConn, within time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	t0 := time.Now()
	_, err := rivetv1.NewActorServiceClient(pc).Call(ctx, &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "increment", Args: []byte(`[1]`)})
	return time.Since(t0), err
}

// A dial to a peer that is there but slow to connect (1.1 s: one lost SYN,
// which Linux resends after 1 s) reaches it, and every forward waiting for
// it, the first and those made while it goes on, gets its call through:
// the connect wait was 1 s, counted from the first forward to wait, and
// all ten forwards failed at 1.003 s though the peer was reached at 1.1 s.
func TestForwardsWaitingForASlowDialToALivePeerAllSucceed(t *testing.T) {
	addr, lim := startPeerServer(t)
	const dialTakes = 1100 * time.Millisecond
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		select {
		case <-time.After(dialTakes):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer)}, server.PeerDialOptions(lim)...)
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		t.Fatal(err)
	}
	pc := server.NewPeerConn(conn)
	t.Cleanup(func() { pc.Close(); conn.Close() })

	const forwards = 10
	type result struct {
		took time.Duration
		err  error
	}
	results := make(chan result, forwards)
	var wg sync.WaitGroup
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := range forwards {
		if i > 0 {
			<-tick.C
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			took, err := forwardOne(pc, 10*time.Second)
			results <- result{took, err}
		}()
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil {
			t.Errorf("forward waiting for a %v dial to a live peer: %v after %v", dialTakes, r.err, r.took.Round(time.Millisecond))
		}
	}
}

// A new connection attempt gets a whole connect wait of its own, although
// forwards found the connection failing a moment before: the connection
// came up and went IDLE with no forward to see it, and the next attempt's
// wait was counted from the earlier failure, so that a forward starting it
// failed while its dial, which would have worked, went on.
func TestANewConnectionAttemptGetsItsOwnConnectWait(t *testing.T) {
	addr, lim := startPeerServer(t)
	var (
		dials atomic.Int32
		slow  atomic.Bool
		mu    sync.Mutex
		last  net.Conn
	)
	// 0.6 of a wait: an attempt counted from the failure, which ended
	// at least half a wait before the forward, leaves under half a wait
	// for it, and one counted from its own start still has 0.4 of a wait
	// (1.2 s) to spare for a loaded machine.
	slowFor := connectWaitShare(6, 10)
	dialer := func(ctx context.Context, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			return nil, errors.New("refused") // fails fast: TRANSIENT_FAILURE
		}
		if slow.Load() {
			select {
			case <-time.After(slowFor):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			mu.Lock()
			last = c
			mu.Unlock()
		}
		return c, err
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer)}, server.PeerDialOptions(lim)...)
	conn, err := grpc.NewClient(addr, dial...)
	if err != nil {
		t.Fatal(err)
	}
	pc := server.NewPeerConn(conn)
	t.Cleanup(func() { pc.Close(); conn.Close() })

	if took, err := forwardOne(pc, 10*time.Second); err == nil {
		t.Fatalf("forward over a dial that failed: succeeded after %v", took)
	}
	failed := time.Now()
	waitState := func(want connectivity.State) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for st := conn.GetState(); st != want; st = conn.GetState() {
			if !conn.WaitForStateChange(ctx, st) {
				t.Fatalf("connection still %v, want %v", st, want)
			}
		}
	}
	// gRPC's next attempt (after its backoff) connects, and the
	// connection breaks: IDLE, no forward having seen it READY.
	waitState(connectivity.Ready)
	slow.Store(true)
	mu.Lock()
	last.Close()
	mu.Unlock()
	waitState(connectivity.Idle)
	idle := time.Now()
	// A forward at least half a connect wait after the failure (at once
	// if the connection went IDLE later) starts the next attempt.
	select {
	case <-time.After(time.Until(failed.Add(server.PeerConnectWait / 2))):
	case <-t.Context().Done():
	}
	if took, err := forwardOne(pc, 10*time.Second); err != nil {
		t.Fatalf("forward starting a new attempt (dial of %v) %v after a failed one, %v after the connection went IDLE: %v after %v", slowFor,
			time.Since(failed).Round(time.Millisecond), time.Since(idle).Round(time.Millisecond), err, took.Round(time.Millisecond))
	}
}

// connectWaitShare is num/den of server.PeerConnectWait.
func connectWaitShare(num, den int64) time.Duration {
	return server.PeerConnectWait * time.Duration(num) / time.Duration(den)
}
