package node

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A call through a node for an actor whose owner that node marks
// unreachable (the owner alive in gossip and registered, its partitions
// its own, but its gRPC not reached from here for a few seconds: a network
// fault between the two) fails UNAVAILABLE at once, for its client to
// retry through another node, rather than wait for the table to name a
// new owner, which a network fault never makes: each try held its caller
// for routeWait (3 s), and a call retried until its deadline made its
// last try so near the deadline that its answer came too late on a
// loaded machine (DEADLINE_EXCEEDED, its outcome unknown, although
// nothing was sent).
func TestAForwardToAnOwnerMarkedUnreachableFailsAtOnce(t *testing.T) {
	const parts = 8
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	config := func(id string, join []string) Config {
		return ClusterConfigForTest(t, id, endpoints, "/route-unreachable-test/", parts, join)
	}
	a := StartForTest(t, ctx, config("a", nil), reg)
	b := StartForTest(t, ctx, config("b", []string{a.GossipAddr()}), reg)
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	ref, _ := ownedRef(t, b, "counter", "c")

	// a's connection to b from now on is one whose dials are refused, as
	// a network fault between them would have it; b itself is fine.
	addr := b.GRPCAddr()
	refuse := func(context.Context, string) (net.Conn, error) {
		return nil, errors.New("refused by the test: a network fault")
	}
	cut, err := grpc.NewClient(addr, append(append([]grpc.DialOption(nil), a.view.dial...), grpc.WithContextDialer(refuse))...)
	if err != nil {
		t.Fatal(err)
	}
	a.view.mu.Lock()
	old, oldPeers := a.view.conns[addr], a.view.peers[addr]
	a.view.conns[addr] = cut
	delete(a.view.peers, addr)
	a.view.mu.Unlock()
	for _, p := range oldPeers {
		p.Close()
	}
	if old != nil {
		old.Close()
	}
	cut.Connect()
	awaitCond(t, ctx, "a to mark b unreachable", func() bool { return a.view.markedUnreachable("b", time.Now()) })

	// No retries: the client reports the forwarder's own answer.
	cl, err := client.New(a.GRPCAddr(), client.WithRetry(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for range 3 {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t0 := time.Now()
		_, err := cl.GetOrCreate(ref.Name, ref.Key...).Call(cctx, "increment", 1)
		took := time.Since(t0)
		cancel()
		// routeWait is what it held for; at once is far less.
		if !errors.Is(err, rivet.ErrUnavailable) || took >= routeWait/2 {
			t.Fatalf("increment through a of an actor of b, which a marks unreachable: %v after %v; want UNAVAILABLE at once", err, took.Round(time.Millisecond))
		}
		t.Logf("UNAVAILABLE after %v", took.Round(time.Millisecond))
	}
}
