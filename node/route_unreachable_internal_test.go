package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/internal/metricstest"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// cutOwner starts nodes a and b, with a's connection to b one whose dials
// are refused from now on (restore gives a one that works again), and
// returns an actor b owns. Their lease TTLs are ttlA and ttlB. b itself is fine: it is registered, alive in
// gossip and renews its lease, as it would behind a network fault between
// the two, or for a moment after it crashed.
// Each of tweakA changes a's configuration.
func cutOwner(t *testing.T, ctx context.Context, prefix string, ttlA, ttlB time.Duration, tweakA ...func(*Config)) (a *Node, ref runtime.Ref, restore func()) {
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
	cfgA := config("a", nil, ttlA)
	for _, f := range tweakA {
		f(&cfgA)
	}
	a = StartForTest(t, ctx, cfgA, reg)
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

// A call that fails because the node it reached could not reach the
// actor's owner is counted on that node, by how it failed, and warned of
// (once a minute, naming the actor): the owner never saw it, so the
// owner's rivet_calls_total does not count it, and this node logged it at
// debug alone. After a kill -9 of a node, the calls its peers forwarded
// to it that failed were on no metric and in no log line at info.
func TestAForwardThatFailsOnTheWayIsCountedAndWarnedOf(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	core, logs := observer.New(zap.WarnLevel)
	a, ref, _ := cutOwner(t, ctx, "/forward-failures-test/", 3*time.Second, 3*time.Second, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.Logger = zap.New(core)
	})
	awaitCond(t, ctx, "a to mark b unreachable for longer than a dead node's lease lasts", func() bool { return a.view.faultOutlivesLease("b", time.Now()) })
	cl, err := client.New(a.GRPCAddr(), client.WithRetry(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const calls = 3
	for range calls {
		if _, err := cl.GetOrCreate(ref.Name, ref.Key...).Call(ctx, "increment", 1); !errors.Is(err, rivet.ErrUnavailable) {
			t.Fatalf("increment through a of an actor of b, which a cannot reach: %v, want UNAVAILABLE", err)
		}
	}
	series, _, err := metricstest.Scrape("http://" + a.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := series[`rivet_forward_failures_total{result="not_sent"}`]; got != calls {
		t.Errorf(`rivet_forward_failures_total{result="not_sent"} %v after %d calls a could not send to their owner, want %d`, got, calls, calls)
	}
	if got, ok := series[`rivet_forward_failures_total{result="broken"}`]; !ok || got != 0 {
		t.Errorf(`rivet_forward_failures_total{result="broken"} %v (exported %v), want 0`, got, ok)
	}
	warned := logs.FilterMessageSnippet("forwarded to its actor's owner failed").All()
	if len(warned) != 1 {
		t.Fatalf("%d warnings of the failed forwards, want 1 (at most one a minute)", len(warned))
	}
	f := warned[0].ContextMap()
	if f["actor"] != ref.Name || fmt.Sprint(f["key"]) != fmt.Sprint(ref.Key) || f["result"] != "not_sent" {
		t.Errorf("the warning's fields %v, want the actor %s, its key %v and result not_sent", f, ref.Name, ref.Key)
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
