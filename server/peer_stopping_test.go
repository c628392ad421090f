package server_test

import (
	"testing"

	"google.golang.org/grpc"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
)

// recordingPeer is a PeerService that hands over each request it gets and
// answers the calls with an empty response.
type recordingPeer struct {
	rivetv1.UnimplementedPeerServiceServer
	got chan *rivetv1.ForwardRequest
}

func (p *recordingPeer) ForwardBatches(st grpc.BidiStreamingServer[rivetv1.ForwardBatchesRequest, rivetv1.ForwardBatchesResponse]) error {
	for {
		m, err := st.Recv()
		if err != nil {
			return nil
		}
		var out []*rivetv1.ForwardResponse
		for _, r := range m.GetRequests() {
			p.got <- r
			if !r.GetCancel() {
				out = append(out, &rivetv1.ForwardResponse{Id: r.GetId()})
			}
		}
		if len(out) > 0 {
			if err := st.Send(&rivetv1.ForwardBatchesResponse{Responses: out}); err != nil {
				return nil
			}
		}
	}
}

// A node that said it stops before it had a stream to a peer (or whose
// stream broke since) says so first on the stream it opens for a call it
// still forwards: the owner then ends that call's wait for a message's
// completion too, instead of holding the node's stop for it.
func TestAStreamOpenedAfterStoppingSaysSoFirst(t *testing.T) {
	peer := &recordingPeer{got: make(chan *rivetv1.ForwardRequest, 16)}
	pc := serveOn(t, func(gs *grpc.Server) { rivetv1.RegisterPeerServiceServer(gs, peer) })
	pc.Stopping()
	cl := rivetv1.NewActorServiceClient(pc)
	if _, err := cl.Call(ctx(t), &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}, Action: "get"}); err != nil {
		t.Fatal(err)
	}
	first := <-peer.got
	if !first.GetCancel() || first.GetId() != 0 {
		t.Fatalf("the first request on the stream: %v; want the cancel of request 0 that says the node stops", first)
	}
	if call := <-peer.got; call.GetCancel() || call.GetMethod() != rivetv1.ActorService_Call_FullMethodName {
		t.Fatalf("the second request on the stream: %v; want the call", call)
	}
}
