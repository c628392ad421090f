package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

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
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv := server.New(backend)
	srv.Register(gs)
	ps := server.NewPeerServer(srv)
	ps.Register(gs)
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
	return pc, ps
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
	errs := make(chan error, 50)
	for i := range 50 {
		go func() {
			args := fmt.Sprintf("[%d]", i)
			resp, err := cl.Call(ctx, &rivetv1.CallRequest{Actor: ref, Action: "echo", Args: []byte(args)})
			if err == nil && string(resp.GetResult()) != args {
				err = fmt.Errorf("call with %s got %s", args, resp.GetResult())
			}
			errs <- err
		}()
	}
	for range 50 {
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
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	// 3 MiB each way: under the default limits, and several of them over
	// a transport bound of 4 MiB per message had they been batched whole.
	large := `["` + strings.Repeat("x", 3<<20) + `"]`
	errs := make(chan error, 64)
	for i := range 64 {
		go func() {
			args := fmt.Sprintf("[%d]", i)
			if i%8 == 0 {
				args = large
			}
			resp, err := cl.Call(context.Background(), &rivetv1.CallRequest{Actor: ref, Action: "echo", Args: []byte(args)})
			if err == nil && string(resp.GetResult()) != args {
				err = fmt.Errorf("call %d got %d bytes back, want its %d", i, len(resp.GetResult()), len(args))
			}
			errs <- err
		}()
	}
	for range 64 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A node that does not serve ForwardBatches (a version from before
// batching, during a rolling upgrade) refuses the whole stream, so nothing
// forwarded to it ran: the caller is told the call was not sent, which
// the forwarder turns into a retryable UNAVAILABLE.
func TestPeerStreamToANodeWithoutBatchesIsNotSent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer() // no PeerService
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	pc := server.NewPeerConn(conn)
	defer func() {
		pc.Close()
		conn.Close()
		gs.Stop()
		<-done
	}()
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	for range 3 {
		_, err := cl.Call(ctx(t), &rivetv1.CallRequest{Actor: ref, Action: "increment", Args: []byte(`[1]`)})
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "not sent") {
			t.Fatalf("call to a node without ForwardBatches: %v, want UNAVAILABLE saying it was not sent", err)
		}
	}
}
