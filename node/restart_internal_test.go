package node

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// crash stops n the way a killed process stops: no gossip leave, no
// resign, so its registration and claims stay on its lease.
func crash(ctx context.Context, n *Node) {
	n.stopBalancer()
	_ = n.host.Stop(ctx)
	n.hostStopped = true // closeAll must not resign
	n.closeAll()
}

// A node that crashes and comes back at once under its ID and gossip
// address (a process restarted by its supervisor) takes its partitions
// back itself: the other node, which never saw it leave gossip, claims
// none of them. It claimed them all, and handed them back one by one,
// because the restarted node revoked its previous run's lease, which held
// its registration too, before registering again.
func TestAQuickRestartUnderTheSameIDMovesNoPartitionTwice(t *testing.T) {
	const parts = 16
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	config := func(id string, join []string) Config {
		return ClusterConfigForTest(t, id, endpoints, "/restart-test/", parts, join)
	}
	start := func(cfg Config) *Node { return StartForTest(t, ctx, cfg, reg) }
	a := start(config("a", nil))
	bcfg := config("b", []string{a.GossipAddr()})
	b := start(bcfg)
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	claimed, handedOff := a.claimed.Load(), a.handedOff.Load()

	crash(ctx, b)
	bcfg.GossipAddr = b.GossipAddr()
	b2 := start(bcfg)
	awaitCond(t, ctx, "a and the restarted b to share the partitions", sharing(parts, a, b2))
	if got := a.claimed.Load() - claimed; got != 0 {
		t.Errorf("a claimed %d of b's partitions while b restarted, and handed off %d", got, a.handedOff.Load()-handedOff)
	}
}
