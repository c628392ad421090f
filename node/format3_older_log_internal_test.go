package node

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A node that starts where the cluster has recorded format 3 and a node
// of format 2 is registered never writes values apart itself, yet the
// cluster may hold some: it names the older node as one to stop, as a
// node that wrote them does (a review's: it said nothing).
func TestANodeNamesAFormat2NodeInAClusterThatRecordedFormat3(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoints := etcdtest.Start(t)
	const prefix = "/format3-older/"
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for f := 2; f <= 3; f++ {
		if _, err := cli.Put(ctx, prefix+storage.FormatKey(f), `{"node_id":"gone"}`); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(map[string]any{"node_id": "format2", "grpc_addr": "127.0.0.1:1", "started_at": time.Now().UTC(), "lease": lease.ID, "draining": true, "storage_format": 2})
	if _, err := cli.Put(ctx, prefix+storage.NodeKey("format2"), string(rec), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}

	reg, err := rivet.Setup(tally)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.ErrorLevel)
	cfg := ClusterConfigForTest(t, "new", endpoints, prefix, 4, nil)
	cfg.Logger = zap.New(core)
	n := StartForTest(t, ctx, cfg, reg)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		found := false
		for _, e := range logs.All() {
			for _, f := range e.Context {
				if f.Key == "older_nodes" {
					found = true
				}
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no error naming the format 2 node within 30 s; errors: %v", logs.All())
		}
	}
	if n.Host().JoinOutputsApart() {
		t.Error("with a node of format 2 registered, this node writes join values apart")
	}
}
