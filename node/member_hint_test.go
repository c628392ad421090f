package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/node"
)

// A node whose ID is none of the members its --etcd-initial-cluster names
// fails to start saying which flag to set, not only etcd's "couldn't find
// local name" (a cluster trial: the docs' compose file sets --node-id, a
// node started by hand without it gets a random ID).
func TestANodeMissingFromTheInitialClusterSaysToSetItsID(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup()
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.Logger = zap.NewNop()
	cfg.NodeID = "node-7"
	cfg.EtcdInitialCluster = "node1=http://127.0.0.1:1,node2=http://127.0.0.1:2"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, cfg, reg)
	if err == nil {
		n.Stop(context.Background())
		t.Fatal("the node started")
	}
	if !strings.Contains(err.Error(), `"node-7", must be one of the member names in --etcd-initial-cluster: set --node-id`) {
		t.Fatalf("error: %v; want it to say to set --node-id", err)
	}
}
