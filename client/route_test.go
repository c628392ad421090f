package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/certs"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// countingFake answers every action with its name and counts the calls.
func countingFake(name string, n *atomic.Int64) *servertest.Fake {
	f := servertest.NewFake()
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		n.Add(1)
		return json.RawMessage(`"` + name + `"`), nil
	}
	return f
}

// With direct routing, actor calls go to the owner named by the partition
// table, not to the node the client was made with; an owner address the
// client cannot dial falls back to that node.
func TestDirectRoutingSendsCallsToTheOwner(t *testing.T) {
	var atA, atB atomic.Int64
	a := countingFake("a", &atA)
	aAddr := servertest.Start(t, a, servertest.Config{})
	b := countingFake("b", &atB)
	// A port nothing listens on, for the unreachable owner.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	b.MemberList = []runtime.Member{
		{NodeID: "a", GRPCAddr: aAddr, State: "alive"},
		{NodeID: "b", GRPCAddr: "unused", State: "alive"},
		{NodeID: "c", GRPCAddr: dead, State: "alive"},
	}
	b.PartitionCount = 2
	b.PartitionTable = []runtime.PartitionOwner{{Partition: 0, Owner: "a"}, {Partition: 1, Owner: "c"}}
	bAddr := servertest.Start(t, b, servertest.Config{})

	c := newClient(t, bAddr, client.WithDirectRouting(50*time.Millisecond))
	ctx := context.Background()
	// Keys by partition (2 partitions): find one of each.
	keyOn := map[uint32]string{}
	for i := 0; len(keyOn) < 2 && i < 100; i++ {
		k := string(rune('a' + i))
		keyOn[client.PartitionOf("counter", k, 2)] = k
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := c.GetOrCreate("counter", keyOn[0]).Call(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		if string(out) == `"a"` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls on partition 0 still served by %s, want a (the owner)", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The owner of partition 1 cannot be dialed: the call still succeeds,
	// through b.
	out, err := c.GetOrCreate("counter", keyOn[1]).Call(ctx, "x")
	if err != nil || string(out) != `"b"` {
		t.Fatalf("call whose owner is unreachable: %s, %v; want it served through b", out, err)
	}
	if atA.Load() == 0 {
		t.Fatal("a served nothing")
	}
}

// An owner the client reaches but cannot complete a TLS handshake with
// (its certificate names localhost, it advertises 127.0.0.1) is never
// called directly: the seed forwards every call, and none fails.
func TestDirectRoutingFallsBackWhenTheOwnersHandshakeFails(t *testing.T) {
	t.Setenv(client.TokenEnv, "")
	dir := t.TempDir()
	if err := certs.Generate(dir, []string{"localhost"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	f := func(n string) string { return filepath.Join(dir, n) }
	cfg, err := certs.ServerConfig(f(certs.NodeFile), f(certs.NodeKeyFile), f(certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{grpc.Creds(credentials.NewTLS(cfg)),
		grpc.ChainUnaryInterceptor(server.AuthUnaryInterceptor("t0k")),
		grpc.ChainStreamInterceptor(server.AuthStreamInterceptor("t0k"))}
	var atA, atB atomic.Int64
	aAddr := servertest.Start(t, countingFake("a", &atA), servertest.Config{GRPCOptions: opts})
	b := countingFake("b", &atB)
	b.MemberList = []runtime.Member{{NodeID: "a", GRPCAddr: aAddr, State: "alive"}} // 127.0.0.1:port
	b.PartitionCount = 1
	b.PartitionTable = []runtime.PartitionOwner{{Partition: 0, Owner: "a"}}
	bAddr := servertest.Start(t, b, servertest.Config{GRPCOptions: opts})
	_, port, _ := net.SplitHostPort(bAddr)
	c := newClient(t, "localhost:"+port, client.WithDirectRouting(20*time.Millisecond), client.WithToken("t0k"),
		client.WithTLS(f(certs.CAFile), f(certs.ClientFile), f(certs.ClientKeyFile)))
	// Calls while the client learns the table and tries the owner.
	for i := range 40 {
		if _, err := c.GetOrCreate("counter", "k").Call(ctx(t), "x"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if atB.Load() != 40 || atA.Load() != 0 {
		t.Fatalf("served by the seed %d, by the owner %d; want all 40 by the seed", atB.Load(), atA.Load())
	}
}

// With direct routing, a subscription goes to the owner too (its events
// take no hop through the seed node). It stays there while the owner stops
// gracefully, and is cut off, and goes on elsewhere, once the owner leaves
// the member list.
func TestDirectRoutingSubscribesAtTheOwner(t *testing.T) {
	var subsA, subsB atomic.Int64
	subscribe := func(n *atomic.Int64, node string) func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		return func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
			n.Add(1)
			return servertest.NewEvents(nil, rivet.Event{Name: "newCount", Data: json.RawMessage(`"` + node + `"`)}), nil
		}
	}
	var calls atomic.Int64
	a := countingFake("a", &calls)
	a.SubscribeFunc = subscribe(&subsA, "a")
	aAddr := servertest.Start(t, a, servertest.Config{})
	b := countingFake("b", &calls)
	b.SubscribeFunc = subscribe(&subsB, "b")
	var aState atomic.Value // a's in the member list; "" leaves it out
	aState.Store("alive")
	b.MembersFunc = func(context.Context) ([]runtime.Member, error) {
		ms := []runtime.Member{{NodeID: "b", GRPCAddr: "unused", State: "alive", StartedAt: servertest.Created}}
		if st := aState.Load().(string); st != "" {
			ms = append(ms, runtime.Member{NodeID: "a", GRPCAddr: aAddr, State: st, StartedAt: servertest.Created})
		}
		return ms, nil
	}
	b.PartitionCount = 1
	b.PartitionTable = []runtime.PartitionOwner{{Partition: 0, Owner: "a"}}
	bAddr := servertest.Start(t, b, servertest.Config{})

	c := newClient(t, bAddr, client.WithDirectRouting(50*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Once calls reach the owner, the router knows the table and has a
	// connection to it.
	callsReach(ctx, t, c, `"a"`)
	sub, err := c.Actor("counter", "k").Subscribe(ctx, "newCount")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ev, err := sub.Next(ctx)
	if err != nil || string(ev.Data) != `"a"` || subsA.Load() != 1 || subsB.Load() != 0 {
		t.Fatalf("event %s (%v); subscriptions at a %d, at b %d; want one at a, the owner", ev.Data, err, subsA.Load(), subsB.Load())
	}
	// a leaves the gossip as it stops gracefully (still registered: it
	// finishes what it serves): calls go through b as soon as the table
	// says so, and none fails on the way; the stream at a goes on until
	// it ends by itself.
	aState.Store("left")
	callsReach(ctx, t, c, `"b"`)                                    // the table is refreshed as calls are made
	sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond) // refreshes every 50 ms
	defer scancel()
	if ev, err := sub.Next(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the subscription at a, as a left the gossip: %+v, %v; want it quiet, going on", ev, err)
	}
	// a leaves the member list (it would have stopped answering, or
	// finished its stop, which ends its streams): the stream at a is cut
	// off, and the subscription goes on through b.
	aState.Store("")
	for _, want := range []string{"gap", `"b"`} {
		got, err := nextEvent(ctx, sub)
		if err != nil || got != want {
			t.Fatalf("after a left the list: event %s (%v), want %s; subscriptions at a %d, at b %d", got, err, want, subsA.Load(), subsB.Load())
		}
	}
	if subsA.Load() != 1 || subsB.Load() != 1 {
		t.Fatalf("subscriptions at a %d, at b %d; want one each", subsA.Load(), subsB.Load())
	}
}

// A directly routed subscription that the actor's move ends subscribes
// again where the table says the actor is now, not at the node it left
// (which would relay the new stream for as long as it lasts).
func TestDirectRoutingResubscribesAtTheNewOwner(t *testing.T) {
	var subsA, subsB, calls atomic.Int64
	var moved atomic.Bool
	var mu sync.Mutex
	var atA []*servertest.Events
	a := countingFake("a", &calls)
	a.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		subsA.Add(1)
		ev := servertest.NewEvents(nil, rivet.Event{Name: "newCount", Data: json.RawMessage(`"a"`)})
		mu.Lock()
		atA = append(atA, ev)
		mu.Unlock()
		return ev, nil
	}
	aAddr := servertest.Start(t, a, servertest.Config{})
	b := countingFake("b", &calls)
	b.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		subsB.Add(1)
		return servertest.NewEvents(nil, rivet.Event{Name: "newCount", Data: json.RawMessage(`"b"`)}), nil
	}
	b.MembersFunc = func(context.Context) ([]runtime.Member, error) {
		return []runtime.Member{{NodeID: "a", GRPCAddr: aAddr, State: "alive"}, {NodeID: "b", GRPCAddr: "unused", State: "alive"}}, nil
	}
	b.PartitionsFunc = func(context.Context) (uint32, []runtime.PartitionOwner, error) {
		if moved.Load() {
			// A slow answer: both subscriptions broke while it runs, and
			// both must wait for it.
			time.Sleep(200 * time.Millisecond)
			return 1, []runtime.PartitionOwner{{Partition: 0, Owner: "b"}}, nil
		}
		return 1, []runtime.PartitionOwner{{Partition: 0, Owner: "a"}}, nil
	}
	bAddr := servertest.Start(t, b, servertest.Config{})
	// No periodic refresh in the test's time: only the breaks'.
	c := newClient(t, bAddr, client.WithDirectRouting(time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	callsReach(ctx, t, c, `"a"`) // the first table, and a connection to a
	var subs []*client.Subscription
	for range 2 {
		sub, err := c.Actor("counter", "k").Subscribe(ctx, "newCount")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs = append(subs, sub)
	}
	for i, sub := range subs {
		if ev, err := sub.Next(ctx); err != nil || string(ev.Data) != `"a"` {
			t.Fatalf("subscription %d: first event %s (%v), want a's", i, ev.Data, err)
		}
	}
	// The actor moves to b: both streams at a end at once.
	moved.Store(true)
	mu.Lock()
	for _, ev := range atA {
		ev.End(rivet.Errorf(rivet.ErrUnavailable, "the actor's partition left node a"))
	}
	mu.Unlock()
	for i, sub := range subs {
		for _, want := range []string{"gap", `"b"`} {
			got, err := nextEvent(ctx, sub)
			if err != nil || got != want {
				t.Fatalf("subscription %d: event %s (%v), want %s; subscriptions at a %d, at b %d", i, got, err, want, subsA.Load(), subsB.Load())
			}
		}
	}
	if subsA.Load() != 2 || subsB.Load() != 2 {
		t.Fatalf("subscriptions at a %d, at b %d; want two each (none relayed by a after the move)", subsA.Load(), subsB.Load())
	}
}

// callsReach calls counter k until the answer is want (the node that
// served it: the router's table and connections caught up), failing the
// test on any error.
// nextEvent is the subscription's next event as "gap" for a gap, else its
// data.
func nextEvent(ctx context.Context, sub *client.Subscription) (string, error) {
	ev, err := sub.Next(ctx)
	if ev.Gap {
		return "gap", err
	}
	return string(ev.Data), err
}

func callsReach(ctx context.Context, t *testing.T, c *client.Client, want string) {
	t.Helper()
	for {
		out, err := c.GetOrCreate("counter", "k").Call(ctx, "x")
		if err != nil {
			t.Fatalf("a call while waiting for %s to serve: %v", want, err)
		}
		if string(out) == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A side-effecting call whose dial is refused sent nothing: the client
// retries it, as it does a node's own UNAVAILABLE, so that a client of one
// node rides through the node's restart.
func TestACallWhoseDialIsRefusedIsRetried(t *testing.T) {
	// A port below the kernel's range for outgoing connections, so that
	// none takes it while the node is down.
	var addr string
	for p := 20000 + rand.IntN(10000); addr == "" && p < 32000; p++ {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			addr = l.Addr().String()
			l.Close() // the node is down
		}
	}
	if addr == "" {
		t.Fatal("no free port below 32000")
	}
	var n atomic.Int64
	gs := grpc.NewServer()
	server.New(countingFake("ok", &n)).Register(gs)
	done := make(chan struct{})
	go func() { // the node comes back
		defer close(done)
		time.Sleep(300 * time.Millisecond) // the restart's length
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		_ = gs.Serve(l)
	}()
	t.Cleanup(func() { gs.Stop(); <-done })
	c := newClient(t, addr, client.WithRetry(20*time.Millisecond, 10*time.Second))
	if _, err := c.Actor("counter", "k").Call(ctx(t), "increment", 1); err != nil {
		t.Fatalf("a call made while the node restarted: %v (outcome unknown %v)", err, rivet.OutcomeUnknown(err))
	}
	if n.Load() != 1 {
		t.Fatalf("the action ran %d times, want once", n.Load())
	}
}

// Close does not wait out a refresh of the partition table against a node
// that does not answer.
func TestCloseDoesNotWaitForATableRefresh(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
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
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		l.Close()
		<-accepted
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	c, err := client.New(l.Addr().String(), client.WithDirectRouting(0))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Actor("counter", "k").Call(cctx, "getCount"); err == nil {
		t.Fatal("a call to a node that does not answer succeeded")
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second): // the refresh's own bound is 5 s
		t.Fatal("Close waited for the table refresh")
	}
}
