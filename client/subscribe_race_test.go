package client_test

import (
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
)

// badFirst is a node whose subscriptions begin with an event, not with
// "subscribed".
type badFirst struct {
	rivetv1.UnimplementedActorServiceServer
}

func (badFirst) Subscribe(_ *rivetv1.SubscribeRequest, s grpc.ServerStreamingServer[rivetv1.SubscribeResponse]) error {
	if err := s.Send(&rivetv1.SubscribeResponse{Kind: &rivetv1.SubscribeResponse_Event{Event: &rivetv1.Event{Name: "x"}}}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// A subscription refused for a first message that is not "subscribed"
// fails with INTERNAL, and nothing of the stream it gave up is left to
// race with it (go test -race).
func TestASubscriptionWhoseFirstMessageIsWrongFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rivetv1.RegisterActorServiceServer(srv, badFirst{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(l) })
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	c := newClient(t, l.Addr().String())
	for range 20 {
		_, err := c.Actor("counter", "k").Subscribe(ctx(t), "x")
		if err == nil || !strings.Contains(err.Error(), "not 'subscribed'") {
			t.Fatalf("subscribe: %v, want the first message's error", err)
		}
	}
}
