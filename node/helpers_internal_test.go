package node

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
)

// localClusterConfig is the configuration of node id of a test cluster
// sharing etcd at endpoints under prefix: the fast local profile, no HTTP
// endpoint, no log.
func localClusterConfig(t *testing.T, id string, endpoints []string, prefix string, partitions uint32, join []string) Config {
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

// startInternal starts a node of cfg, stopped when the test ends.
func startInternal(t *testing.T, ctx context.Context, cfg Config, reg *rivet.Registry) *Node {
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
