package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/runtime"
)

// ClusterConfigForTest is the configuration of node id of a test cluster
// on etcd endpoints (keys under prefix): the fast local profile, quiet,
// without an HTTP port, joining the gossip addresses join. (Exported for
// the package's external tests too.)
func ClusterConfigForTest(t testing.TB, id string, endpoints []string, prefix string, partitions uint32, join []string) Config {
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.NodeID = id
	cfg.EtcdEndpoints = endpoints
	cfg.EtcdPrefix = prefix
	cfg.Partitions = partitions
	cfg.HTTPAddr = "-"
	cfg.Join = join
	cfg.Logger = zap.NewNop()
	return cfg
}

// watchedCounterNode is the registry and configuration of a one-node
// test whose node serves counters on 4 partitions and logs its warnings
// (and worse) to logs, for a test to find the one it gives.
func watchedCounterNode(t testing.TB) (*rivet.Registry, Config, *observer.ObservedLogs) {
	t.Helper()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.Partitions = 4
	core, logs := observer.New(zap.WarnLevel)
	cfg.Logger = zap.New(core)
	return reg, cfg, logs
}

// StartForTest starts a node of cfg for a test or a benchmark and stops it
// at cleanup. Cleanups run last-registered first, so nodes stop before
// the etcd that a test started for them.
func StartForTest(t testing.TB, ctx context.Context, cfg Config, reg *rivet.Registry) *Node {
	t.Helper()
	n, err := Start(ctx, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Stop(sctx); err != nil {
			t.Errorf("stop %s: %v", n.ID(), err)
		}
	})
	return n
}

// started is what a Start run by startInBackground returned.
type started struct {
	n   *Node
	err error
}

// startInBackground runs Start(ctx, cfg, reg) in a goroutine, for a test
// of a start that waits (or should not): the channel delivers what Start
// returned, once it has.
func startInBackground(ctx context.Context, cfg Config, reg *rivet.Registry) <-chan started {
	done := make(chan started, 1)
	go func() {
		n, err := Start(ctx, cfg, reg)
		done <- started{n, err}
	}()
	return done
}

// counterCall calls action on counter key through a client of n's gRPC
// port of its own, which it closes, and returns the count.
func counterCall(ctx context.Context, n *Node, key, action string, args ...any) (int, error) {
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return rivet.Call[int](ctx, c.GetOrCreate("counter", key), action, args...)
}

// BalancerSettledForTest reports whether the node's balancer settled: its
// last look under the current lease found nothing to claim or hand off,
// and no handoff of its runs. (Exported for the package's external tests.)
func (n *Node) BalancerSettledForTest() bool { return n.balancer.Settled() }

// BalancerIdleHandoffsForTest is n's balancer's IdleHandoffs.
func (n *Node) BalancerIdleHandoffsForTest() int64 { return n.balancer.IdleHandoffs() }

// ownedRef returns an actor of type name, key prefix-N, whose partition n
// owns, and that partition.
func ownedRef(t testing.TB, n *Node, name, prefix string) (runtime.Ref, uint32) {
	t.Helper()
	for i := range 100_000 {
		ref := runtime.Ref{Name: name, Key: []string{fmt.Sprint(prefix, i)}}
		p, err := n.host.PartitionOf(ref)
		if err != nil {
			t.Fatal(err)
		}
		if n.host.Owns(p) {
			return ref, p
		}
	}
	t.Fatalf("node %s owns none of the first 100,000 %s keys", n.ID(), name)
	return runtime.Ref{}, 0
}
