package server

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// deafPeer serves ForwardBatches streams and reads nothing from them, so
// that flow control stops what is sent on them once the stream's window
// is full, as a peer behind a cut network (not yet found dead) does.
type deafPeer struct {
	rivetv1.UnimplementedPeerServiceServer
}

func (deafPeer) ForwardBatches(st grpc.BidiStreamingServer[rivetv1.ForwardBatchesRequest, rivetv1.ForwardBatchesResponse]) error {
	<-st.Context().Done()
	return st.Context().Err()
}

// A forward whose request is still queued for the peer stream as its
// deadline nears, behind a send that flow control holds up (a peer that
// reads nothing), fails UNAVAILABLE marked never sent, in time for its
// caller to retry it: it waited until its deadline, and ended
// DEADLINE_EXCEEDED, its outcome unknown, though it never left the node.
// The requests sent before it keep their outcome unknown: they may run.
func TestAForwardStillQueuedBehindABlockedSendFailsNeverSent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits()
	gs := grpc.NewServer(ServerOptions(lim)...)
	rivetv1.RegisterPeerServiceServer(gs, deafPeer{})
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	defer func() { gs.Stop(); <-served }()
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, PeerDialOptions(lim)...)
	conn, err := grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pc := NewPeerConn(conn)
	defer pc.Close()
	cl := rivetv1.NewActorServiceClient(pc)
	req := func(args int) *rivetv1.CallRequest {
		return &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "increment", Args: make([]byte, args)}
	}

	// A request larger than the stream's window (4 MiB) is handed over in
	// one send, of which flow control lets through only the window, so
	// that the next send, of a small request, is held up.
	bctx, bcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	sentErrs := make(chan error, 2)
	sending := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			pc.mu.Lock()
			s := pc.stream
			pc.mu.Unlock()
			got := 0
			if s != nil {
				s.mu.Lock()
				for _, c := range s.pending {
					if c.sending {
						got++
					}
				}
				s.mu.Unlock()
			}
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d requests handed to the stream 10 s on, want %d", got, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i, size := range []int{streamWindow + 1<<20, 10} {
		wg.Go(func() {
			_, err := cl.Call(bctx, req(size))
			sentErrs <- err
		})
		sending(i + 1)
	}
	defer func() { bcancel(); wg.Wait() }()

	// The call's context reports a deadline within 2 s but ends only with
	// the test: the give-up seen is AnswerBy's (1.8 s), not the
	// deadline's 200 ms later, which a loaded machine may run at the same
	// moment.
	const within = 2 * time.Second
	ctx := newLaterDone(t, within)
	start := time.Now()
	res := make(chan error, 1)
	go func() {
		_, err := cl.Call(ctx, req(10))
		res <- err
	}()
	select {
	case err = <-res:
	case <-time.After(within + 10*time.Second):
		// Its context ends with the test, and the call then.
		t.Fatalf("forward queued behind a blocked send still waits %v on", within+10*time.Second)
	}
	took := time.Since(start)
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !rpcerr.NotSent(st) || took > 3500*time.Millisecond {
		t.Fatalf("forward queued behind a blocked send: %v after %v (deadline %v); want UNAVAILABLE marked never sent by AnswerBy", err, took.Round(time.Millisecond), within)
	}
	if !strings.Contains(st.Message(), "queued") {
		t.Errorf("forward queued behind a blocked send: %q, want it to say it was still queued", st.Message())
	}
	t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)

	// Those sent keep their outcome unknown: they end with their context.
	bcancel()
	wg.Wait()
	close(sentErrs)
	for err := range sentErrs {
		if st := status.Convert(err); st.Code() != codes.Canceled {
			t.Errorf("request sent, then cancelled: %v, want CANCELED", err)
		}
	}
}

// A run of the stream's watch that fired as one send ended, and got the
// stream's lock only as the next began, does not give up calls behind a
// send younger than heldAfter: it looks again when the send is that old.
func TestAStaleWatchRunDoesNotGiveUpCallsBehindAYoungSend(t *testing.T) {
	s := &peerStream{pending: map[uint64]*peerCall{}}
	fired := make(chan struct{}, 1)
	s.watch = time.AfterFunc(time.Hour, func() { fired <- struct{}{} })
	s.watch.Stop()
	defer s.watch.Stop()
	call := &peerCall{ch: make(chan *rivetv1.ForwardResponse, 1), giveUp: time.Now().Add(-time.Second)}
	s.pending[1] = call
	s.inSend, s.sendStart = true, time.Now()
	s.held()
	if len(call.ch) > 0 || s.pending[1] == nil {
		t.Fatalf("a call queued behind a send begun a moment ago was given up")
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch not run again 10 s on")
	}
	s.held()
	if len(call.ch) == 0 || s.pending[1] != nil {
		t.Fatalf("a call queued behind a send held up for heldAfter was not given up")
	}
}
