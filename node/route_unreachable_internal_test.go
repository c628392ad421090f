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
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// cutOwner starts nodes a and b, with a's connection to b one whose dials
// are refused from now on (restore gives a one that works again), and
// returns an actor b owns. Their lease TTLs are ttlA and ttlB. b itself is fine: it is registered, alive in
// gossip and renews its lease, as it would behind a network fault between
// the two, or for a moment after it crashed.
func cutOwner(t *testing.T, ctx context.Context, prefix string, ttlA, ttlB time.Duration) (a *Node, ref runtime.Ref, restore func()) {
	t.Helper()
	const parts = 8
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	config := func(id string, join []string, ttl time.Duration) Config {
		c := ClusterConfigForTest(t, id, endpoints, prefix, parts, join)
		c.LeaseTTL = ttl
		return c
	}
	a = StartForTest(t, ctx, config("a", nil, ttlA), reg)
	b := StartForTest(t, ctx, config("b", []string{a.GossipAddr()}, ttlB), reg)
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	ref, _ = ownedRef(t, b, "counter", "c")

	addr := b.GRPCAddr()
	refuse := func(context.Context, string) (net.Conn, error) {
		return nil, errors.New("refused by the test: a network fault")
	}
	swap := func(opts ...grpc.DialOption) {
		c, err := grpc.NewClient(addr, append(append([]grpc.DialOption(nil), a.view.dial...), opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		a.view.mu.Lock()
		old, oldPeers := a.view.conns[addr], a.view.peers[addr]
		a.view.conns[addr] = c
		delete(a.view.peers, addr)
		a.view.mu.Unlock()
		for _, p := range oldPeers {
			p.Close()
		}
		if old != nil {
			old.Close()
		}
		c.Connect()
	}
	swap(grpc.WithContextDialer(refuse))
	return a, ref, func() { swap() }
}

// A call through a node for an actor whose owner that node has not
// reached for longer than a dead node's lease lasts (the owner alive in
// gossip and still registered, so its lease is being renewed, its
// partitions its own: a network fault between the two) fails UNAVAILABLE at once, for its client to
// retry through another node, rather than wait for the table to name a
// new owner, which a network fault never makes: each try held its caller
// for routeWait (3 s), and a call retried until its deadline made its
// last try so near the deadline that its answer came too late on a
// loaded machine (DEADLINE_EXCEEDED, its outcome unknown, although
// nothing was sent).
func TestAForwardToAnOwnerMarkedUnreachableFailsAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, ref, _ := cutOwner(t, ctx, "/route-unreachable-test/", 3*time.Second, 3*time.Second)
	awaitCond(t, ctx, "a to mark b unreachable for longer than a dead node's lease lasts", func() bool { return a.view.faultOutlivesLease("b", time.Now()) })

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

// A call through a node for an actor whose owner crashed a moment ago is
// held for the failover, not failed, although the node already marks the
// owner unreachable (3 s of failed connection): the owner is still
// registered, its lease outliving it by up to its TTL (more if its etcd
// member led), and alive to gossip (a suspect until ProfileLAN calls it
// dead after ~6 s). Failing such calls at once gave clients errors, not
// the latency promised through a failover. Here the crash is simulated
// (a's dials to b refused while b is fine, with a lease TTL long enough
// to keep the test inside the window), and the failover's end is the
// owner being reachable again: the held call then goes through.
func TestAForwardToAnOwnerThatCrashedAMomentAgoIsHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttl = 10 * time.Second
	a, ref, restore := cutOwner(t, ctx, "/route-crashed-test/", ttl, ttl)
	awaitCond(t, ctx, "a to mark b unreachable", func() bool { return a.view.unreachable(time.Now())["b"] })
	if a.view.faultOutlivesLease("b", time.Now()) {
		t.Fatalf("b's fault outlives its lease of %v already", ttl)
	}
	cl, err := client.New(a.GRPCAddr(), client.WithRetry(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	done := make(chan error, 1)
	t0 := time.Now()
	go func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := cl.GetOrCreate(ref.Name, ref.Key...).Call(cctx, "increment", 1)
		done <- err
	}()
	// Held: not answered within a good part of routeWait.
	select {
	case err := <-done:
		t.Fatalf("increment through a of an actor of b, which crashed a moment ago: %v after %v; want it held for the failover", err, time.Since(t0).Round(time.Millisecond))
	case <-time.After(routeWait / 3):
	}
	restore()
	if err := <-done; err != nil {
		t.Fatalf("held increment, once b's actor could be reached: %v after %v", err, time.Since(t0).Round(time.Millisecond))
	}
	t.Logf("held increment went through after %v", time.Since(t0).Round(time.Millisecond))
}

// A node takes a failing connection to an owner for a network fault, and
// fails forwards to it at once, only once the fault has outlived the
// owner's lease, by the owner's TTL, not its own: TTLs are set node by
// node (--lease-ttl), and a node with a shorter one failed the forwards
// that a crashed owner's failover would have served. An owner whose record
// does not say (an older build) is taken to have the longer of the node's
// TTL and unknownLeaseTTL.
func TestAnOwnerWithALongerLeaseIsHeldForItsOwnTTL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ttlA, ttlB = 3 * time.Second, 8 * time.Second
	a, _, _ := cutOwner(t, ctx, "/route-owner-ttl-test/", ttlA, ttlB)
	awaitCond(t, ctx, "a to see b's connection fail", func() bool {
		a.view.mu.Lock()
		defer a.view.mu.Unlock()
		return a.view.faults["b"] != nil
	})
	a.view.mu.Lock()
	since := a.view.faults["b"].since
	a.view.mu.Unlock()
	rec, ok := a.view.record("b")
	if !ok || rec.LeaseTTLMillis != ttlB.Milliseconds() {
		t.Fatalf("b's record (found %v) gives a lease TTL of %d ms, want %d", ok, rec.LeaseTTLMillis, ttlB.Milliseconds())
	}
	holdUntil := since.Add(ttlB + leaseExpirySlack)
	if a.view.faultOutlivesLease("b", holdUntil.Add(-time.Millisecond)) {
		t.Fatalf("b's fault outlives its lease of %v %v after it began: by a's TTL (%v), not b's", ttlB, holdUntil.Add(-time.Millisecond).Sub(since), ttlA)
	}
	if !a.view.faultOutlivesLease("b", holdUntil) {
		t.Fatalf("b's fault does not outlive its lease of %v %v after it began", ttlB, holdUntil.Sub(since))
	}
	old := rec
	old.LeaseTTLMillis = 0
	if got := a.view.peerLeaseTTL(old); got != unknownLeaseTTL {
		t.Fatalf("lease TTL of a node of an older build: %v, want %v", got, unknownLeaseTTL)
	}
}
