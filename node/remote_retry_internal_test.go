package node

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A call from an actor of this node to one whose node has just died (a
// step's cross-node call in a failover) waits for the partition to move
// and then runs, rather than failing at once with "not sent" whenever the
// dead node's connection was idle or connecting: a step's few retries
// (about 0.7 s by default) ran out in one failover, and its workflow
// failed for good.
func TestACallToACrashedNodesActorWaitsForItsPartitionToMove(t *testing.T) {
	const parts = 8
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, a, b := twoNodesWithShortLeases(t, reg, "/remote-retry-test/", parts)

	// Counters whose partitions b serves, each incremented once through
	// a's Remote, so that a's connection to b is up.
	r := remote{a.view}
	var refs []runtime.Ref
	for i := 0; len(refs) < 3 && i < 1000; i++ {
		ref := runtime.Ref{Name: "counter", Key: []string{fmt.Sprint("c", i)}}
		p, err := a.host.PartitionOf(ref)
		if err != nil {
			t.Fatal(err)
		}
		if b.host.Owns(p) {
			refs = append(refs, ref)
		}
	}
	if len(refs) < 3 {
		t.Fatalf("found %d counters on b", len(refs))
	}
	increment := func(ref runtime.Ref) (json.RawMessage, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return r.Call(cctx, runtime.CallRequest{Ref: ref, Action: "increment", Args: json.RawMessage("[1]"), CreateIfMissing: true})
	}
	for _, ref := range refs {
		if got, err := increment(ref); err != nil || string(got) != "1" {
			t.Fatalf("increment %v on b: %s %v", ref.Key, got, err)
		}
	}

	crash(ctx, b)
	start := time.Now()
	// Once a's connection to b has seen b go (a request sent as the
	// stream broke has an unknown outcome, rightly), and before b's lease
	// has run out.
	conn, err := a.view.conn(b.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	awaitCond(t, ctx, "a's connection to b to leave READY", func() bool { return conn.GetState() != connectivity.Ready })
	t.Logf("connection %v %v after the crash", conn.GetState(), time.Since(start))
	for _, ref := range refs {
		got, err := increment(ref)
		if err != nil {
			t.Fatalf("increment %v %v after b crashed: %v", ref.Key, time.Since(start), err)
		}
		if string(got) != "2" {
			t.Fatalf("increment %v after b crashed = %s, want 2", ref.Key, got)
		}
	}
	t.Logf("the calls ran %v after the crash (lease TTL 2 s)", time.Since(start).Round(time.Millisecond))
}

// twoNodesWithShortLeases starts nodes a and b with the given registry on
// an etcd of their own, with 2 s leases (a crashed one's partitions move
// soon), and returns once they share the partitions, with a context that
// ends with the test (2 minutes at most).
func twoNodesWithShortLeases(t *testing.T, reg *rivet.Registry, prefix string, parts uint32) (context.Context, *Node, *Node) {
	t.Helper()
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	config := func(id string, join []string) Config {
		cfg := ClusterConfigForTest(t, id, endpoints, prefix, parts, join)
		cfg.LeaseTTL = 2 * time.Second
		return cfg
	}
	a := StartForTest(t, ctx, config("a", nil), reg)
	b := StartForTest(t, ctx, config("b", []string{a.GossipAddr()}), reg)
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	return ctx, a, b
}
