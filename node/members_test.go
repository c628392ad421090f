package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/cluster"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/internal/buildinfo"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A member alive in gossip that holds no lease in etcd (here a bare gossip
// member; in life a node starting, one cut off from etcd, or one killed
// whose record went with its lease before gossip declared it dead) is
// listed as unregistered, and once gossip declares it dead, as dead.
// Left out, a killed node vanished from rivetctl members for seconds
// before it came back dead.
func TestAGossipMemberWithoutALeaseIsListedUnregistered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	na := startNode(t, ctx, clusterConfig(t, "a", etcdtest.Start(t), "/members/", 8, nil), reg)
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID = "bare"
	cfg.Join = []string{na.GossipAddr()}
	cfg.Meta = cluster.Meta{GRPCAddr: "127.0.0.1:1"}
	bare, err := cluster.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Stop()
	c, err := client.New(na.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// waitFor waits until the members list says what ok wants of it.
	waitFor := func(what string, ok func(map[string]client.Member) bool) map[string]client.Member {
		t.Helper()
		for {
			ms, err := c.Members(ctx)
			if err != nil {
				t.Fatal(err)
			}
			byID := map[string]client.Member{}
			for _, m := range ms {
				byID[m.NodeID] = m
			}
			if ok(byID) {
				return byID
			}
			if ctx.Err() != nil {
				t.Fatalf("members never %s: %+v", what, ms)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ms := waitFor("listed bare", func(ms map[string]client.Member) bool { _, ok := ms["bare"]; return ok })
	b, a := ms["bare"], ms["a"]
	if b.State != "unregistered" || b.PartitionsOwned != 0 || !b.StartedAt.IsZero() || b.GRPCAddr != "127.0.0.1:1" {
		t.Errorf("bare = %+v, want unregistered, no partitions, no start time, its gossiped address", b)
	}
	if a.State != "alive" || a.PartitionsOwned != 8 || a.StartedAt.IsZero() {
		t.Errorf("a = %+v, want alive with every partition and its start time", a)
	}
	// Which build each node runs, from its registration (an upgrade
	// trial could not tell); the bare member registered none.
	if a.Build != buildinfo.String() || b.Build != "" {
		t.Errorf("builds a %q, bare %q; want a's %q, none for bare", a.Build, b.Build, buildinfo.String())
	}

	bare.Stop()
	waitFor("bare dead", func(ms map[string]client.Member) bool { return ms["bare"].State == "dead" })
}
