package node_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// No two writers: node A is cut off from etcd. It stops serving every
// partition it owned before node B can claim one, B takes them all over
// once A's lease has expired, and a write A still has in hand (fenced with
// its old claim) is refused by etcd after the network heals.
func TestCutOffNodeStopsBeforeAnotherClaimsAndItsLateWritesAreFenced(t *testing.T) {
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	proxy := newFaultProxy(t, endpoints[0][len("http://"):])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	start := func(name string, etcd []string, join []string) *node.Node {
		cfg := node.DefaultLocalConfig(t.TempDir())
		cfg.NodeID = name
		cfg.EtcdEndpoints = etcd
		cfg.EtcdPrefix = "/fence-test/"
		cfg.Partitions = 16
		cfg.LeaseTTL = 2 * time.Second
		cfg.HTTPAddr = "-"
		cfg.Join = join
		cfg.Logger = zap.NewNop()
		n, err := node.Start(ctx, cfg, reg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, c := context.WithTimeout(context.Background(), 20*time.Second)
			defer c()
			_ = n.Stop(sctx)
		})
		return n
	}
	b := start("b", endpoints, nil)
	// A gossips with B all along: only etcd is cut, and A's registration
	// vanishing with its lease is what takes it out of B's ring.
	a := start("a", []string{"http://" + proxy.addr()}, []string{b.GossipAddr()})
	// Placed, not only shared: the actor below stays on A, and no handoff
	// of B's is under way when etcd is cut.
	waitPlaced(t, 30*time.Second, 16, a, b)

	// An actor on A, with state.
	key := ""
	for i := range 1000 {
		k := fmt.Sprintf("k%d", i)
		if a.Host().Owns(placement.Partition("counter", storage.EncodeKey([]string{k}), 16)) {
			key = k
			break
		}
	}
	part := placement.Partition("counter", storage.EncodeKey([]string{key}), 16)
	token, _ := a.Ownership().Token(part)
	ca, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	if n, err := rivet.Call[int](ctx, ca.GetOrCreate("counter", key), "increment", 1); err != nil || n != 1 {
		t.Fatalf("increment on A: %d, %v", n, err)
	}

	// Timestamps of A's loss and of B's first claim after the cut.
	var mu sync.Mutex
	var lostAt, claimedAt time.Time
	a.Ownership().OnLost(func() {
		mu.Lock()
		if lostAt.IsZero() {
			lostAt = time.Now()
		}
		mu.Unlock()
	})
	b.Ownership().OnClaimed(func(context.Context, []uint32) {
		mu.Lock()
		if claimedAt.IsZero() {
			claimedAt = time.Now()
		}
		mu.Unlock()
	})
	cutAt := time.Now()
	proxy.setDown(true)

	waitUntil(t, "A serves nothing", 30*time.Second, func() bool { return a.Ownership().Owned() == 0 })
	// The claims are dropped before the lease-loss callbacks run (the
	// health status among them): wait for it, within the lease's time.
	waitUntil(t, "A's health NOT_SERVING after losing its lease", 10*time.Second, func() bool {
		ok, err := ca.Healthy(ctx)
		return err == nil && !ok
	})
	waitUntil(t, "B owns every partition", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return b.Ownership().Owned() == 16 && !claimedAt.IsZero()
	})
	mu.Lock()
	lost, claimed := lostAt.Sub(cutAt), claimedAt.Sub(cutAt)
	mu.Unlock()
	t.Logf("after the cut: A stopped serving at +%v, B claimed at +%v (lease TTL 2s)", lost.Round(time.Millisecond), claimed.Round(time.Millisecond))
	if !(lost > 0 && lost < claimed) {
		t.Fatalf("A stopped serving at +%v, not before B claimed at +%v", lost, claimed)
	}

	// B serves the actor from what was committed.
	cb, err := client.New(b.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	if n, err := rivet.Call[int](ctx, cb.GetOrCreate("counter", key), "increment", 1); err != nil || n != 2 {
		t.Fatalf("increment on B: %d, %v", n, err)
	}

	// The network heals; a write A held, fenced with its old claim,
	// reaches etcd now and is refused.
	proxy.setDown(false)
	cli := etcdtest.NewClient(t, []string{"http://" + proxy.addr()})
	st, err := etcdstore.New(cli, "/fence-test/")
	if err != nil {
		t.Fatal(err)
	}
	prefix := storage.ActorPrefix(part, "counter", storage.EncodeKey([]string{key}))
	err = st.Commit(ctx, storage.Txn{Fence: storage.Fence{Partition: part, Token: token}, Ops: []storage.Op{storage.Put(prefix+storage.StateSuffix, []byte(`{"count":100}`))}})
	if !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("late write with A's old claim: %v, want ErrFenced", err)
	}
	if n, err := rivet.Call[int](ctx, cb.Get("counter", key), "getCount"); err != nil || n != 2 {
		t.Fatalf("count after the late write: %d, %v; want 2", n, err)
	}
	// A gets a lease again and says so.
	waitUntil(t, "A serving again after the network healed", 30*time.Second, func() bool {
		ok, err := ca.Healthy(ctx)
		return err == nil && ok
	})
}

func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
