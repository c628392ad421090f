package server_test

import (
	"context"
	"encoding/json"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/stats"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// connCounter is a stats.Handler that counts the connections the server
// has closed.
type connCounter struct{ ended atomic.Int64 }

func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c *connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c *connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnEnd); ok {
		c.ended.Add(1)
	}
}

// A client that goes silent (no reset: a frozen host, a cut network)
// with a subscription open, and that does not ping, is dropped by the
// server's own keepalive within its time and timeout: the connection
// closes and the Subscribe handler returns, closing the subscription it
// held, rather than both staying until TCP notices, if ever.
func TestSilentClientIsDroppedByServerKeepalive(t *testing.T) {
	kp := keepalive.ServerParameters{Time: 300 * time.Millisecond, Timeout: 300 * time.Millisecond}
	server.SetServerKeepalive(t, kp)
	f := servertest.NewFake()
	subs := make(chan *servertest.Events, 1)
	f.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		ev := servertest.NewEvents(nil, rivet.Event{Name: "e", Data: json.RawMessage("1")})
		subs <- ev
		return ev, nil
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := new(connCounter)
	lim := server.DefaultLimits()
	gs := grpc.NewServer(append(server.ServerOptions(lim), grpc.StatsHandler(conns))...)
	srv := server.New(f, server.WithLimits(lim))
	srv.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { srv.Shutdown(); gs.Stop(); <-done })
	freeze := make(chan struct{})
	addr := freezingProxy(t, lis.Addr().String(), freeze)
	// No keepalive of its own: only the server can find it gone.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	sctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := rivetv1.NewActorServiceClient(conn).Subscribe(sctx, &rivetv1.SubscribeRequest{Actor: ref("counter", "k")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	sub := <-subs
	close(freeze)
	frozen := time.Now()
	limit := kp.Time + kp.Timeout + 15*time.Second
	select {
	case <-sub.Done():
	case <-time.After(limit):
		t.Fatalf("the subscription of a silent client is still open %v later", limit)
	}
	for conns.ended.Load() == 0 {
		if time.Since(frozen) > limit {
			t.Fatalf("the connection of a silent client is still open %v later", limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("dropped %v after the freeze", time.Since(frozen))
}
