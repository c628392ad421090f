package server

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// tagPeer serves ForwardBatches streams: it records the Action of every
// request it reads (the tests' tag) and answers each at once with an
// empty CallResponse. While slow is set it reads at about bytesPerSec,
// so that flow control holds up what is sent to it.
type tagPeer struct {
	rivetv1.UnimplementedPeerServiceServer
	slow    atomic.Bool
	streams atomic.Int32 // opened

	mu   sync.Mutex
	seen map[string]bool
}

const tagPeerBytesPerSec = 6 << 20

func newTagPeer() *tagPeer { return &tagPeer{seen: map[string]bool{}} }

func (p *tagPeer) received(tag string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[tag]
}

func (p *tagPeer) ForwardBatches(st grpc.BidiStreamingServer[rivetv1.ForwardBatchesRequest, rivetv1.ForwardBatchesResponse]) error {
	p.streams.Add(1)
	ok, err := proto.Marshal(&rivetv1.CallResponse{})
	if err != nil {
		return err
	}
	for {
		m, err := st.Recv()
		if err != nil {
			return nil
		}
		var (
			out   rivetv1.ForwardBatchesResponse
			bytes int
		)
		for _, r := range m.GetRequests() {
			if r.GetCancel() {
				continue
			}
			bytes += len(r.GetRequest())
			var req rivetv1.CallRequest
			if err := proto.Unmarshal(r.GetRequest(), &req); err != nil {
				return err
			}
			p.mu.Lock()
			p.seen[req.GetAction()] = true
			p.mu.Unlock()
			out.Responses = append(out.Responses, &rivetv1.ForwardResponse{Id: r.GetId(), Response: ok})
		}
		if len(out.Responses) > 0 {
			if err := st.Send(&out); err != nil {
				return nil
			}
		}
		if p.slow.Load() {
			// A slow reader, not a wait for anything: its pace.
			time.Sleep(time.Duration(bytes) * time.Second / tagPeerBytesPerSec)
		}
	}
}

// A call that fails UNAVAILABLE "never sent" was never received by the
// peer, however the stream's watch (peerStream.held), giving up queued
// calls behind a send that flow control holds up, races the sender
// handing calls to the stream: a call the sender has marked sending may
// run on the peer, and must keep its outcome unknown. Many callers with
// short deadlines, some with 1 MiB requests, on a peer that reads slowly.
func TestACallFailedNeverSentWasNeverReceivedByThePeer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits()
	gs := grpc.NewServer(ServerOptions(lim)...)
	peer := newTagPeer()
	peer.slow.Store(true)
	rivetv1.RegisterPeerServiceServer(gs, peer)
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

	const (
		callers = 12
		calls   = 15
		large   = 1 << 20
	)
	type outcome struct {
		tag string
		err error
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
	)
	stopBy := time.Now().Add(4 * time.Second)
	for c := range callers {
		wg.Go(func() {
			for i := range calls {
				if time.Now().After(stopBy) {
					return
				}
				tag := fmt.Sprintf("c%d-%d", c, i)
				var args []byte
				if (c+i)%2 == 0 {
					args = make([]byte, large)
				}
				// 400-650 ms: AnswerBy leaves each 200 ms or more in the
				// queue, so that every one may be given up.
				within := 400*time.Millisecond + time.Duration((c*calls+i)%6)*50*time.Millisecond
				ctx, cancel := context.WithTimeout(context.Background(), within)
				_, err := cl.Call(ctx, &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: tag, Args: args})
				cancel()
				mu.Lock()
				outcomes = append(outcomes, outcome{tag, err})
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	// What was handed to the stream reaches the peer, in order, before a
	// last call on the same stream: once that is answered, the peer has
	// read everything sent.
	peer.slow.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cl.Call(ctx, &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "last"}); err != nil {
		t.Fatalf("last call: %v", err)
	}
	if n := peer.streams.Load(); n != 1 {
		t.Fatalf("%d streams opened, want 1: the stream broke, and what was sent on it may be lost", n)
	}

	counts := map[string]int{}
	for _, o := range outcomes {
		st := status.Convert(o.err)
		switch {
		case o.err == nil:
			counts["ok"]++
		case st.Code() == codes.Unavailable && rpcerr.NotSent(st):
			counts["never sent"]++
			if peer.received(o.tag) {
				t.Errorf("call %s failed never sent (%v), but the peer received it", o.tag, o.err)
			}
		case st.Code() == codes.DeadlineExceeded:
			counts["deadline"]++
		default:
			counts[st.Code().String()]++
			t.Errorf("call %s: %v, want OK, DEADLINE_EXCEEDED or UNAVAILABLE never sent", o.tag, o.err)
		}
	}
	t.Logf("%d calls: %v", len(outcomes), counts)
	if counts["never sent"] == 0 {
		t.Errorf("no call was given up never sent: the test did not hold up the stream's sends")
	}
}
