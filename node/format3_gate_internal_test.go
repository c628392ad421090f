package node

import (
	"context"
	"encoding/json"
	"fmt"
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
	StartForTest(t, ctx, cfg, reg)
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
}

// format3Cluster starts an etcd with the cluster's records given (key
// under the cluster's prefix -> value), and returns its endpoints.
func format3Cluster(t *testing.T, ctx context.Context, prefix string, recs map[string]string) []string {
	t.Helper()
	endpoints := etcdtest.Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for k, v := range recs {
		if _, err := cli.Put(ctx, prefix+k, v); err != nil {
			t.Fatal(err)
		}
	}
	return endpoints
}

// shortFormatWaits sets formatWait's durations for one test, restored
// after its nodes stop (register before starting them).
func shortFormatWaits(t *testing.T, settle, grace time.Duration) {
	s, g := formatSettle, olderNodeGrace
	t.Cleanup(func() { formatSettle, olderNodeGrace = s, g })
	formatSettle, olderNodeGrace = settle, grace
}

// waitJoinGateOpen waits until n writes join values apart, and returns when.
func waitJoinGateOpen(t *testing.T, n *Node, within time.Duration) time.Time {
	t.Helper()
	for deadline := time.Now().Add(within); n.Host().WriteFormat() < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("join values not written apart within %v", within)
		}
	}
	return time.Now()
}

// In a cluster an older build created, format 3's gate opens only
// formatSettle after the node recorded format 3: a format-2 node that read
// the formats just before may still register.
func TestFormat3WaitsAfterItsRecordInAClusterAnOlderBuildCreated(t *testing.T) {
	shortFormatWaits(t, 2*time.Second, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const prefix = "/format3-settle/"
	endpoints := format3Cluster(t, ctx, prefix, map[string]string{
		storage.ClusterConfigKey: `{"partitions":4,"created_at":"2026-01-01T00:00:00Z"}`,
	})
	reg, err := rivet.Setup(tally)
	if err != nil {
		t.Fatal(err)
	}
	n := StartForTest(t, ctx, ClusterConfigForTest(t, "new", endpoints, prefix, 4, nil), reg)
	opened := waitJoinGateOpen(t, n, 30*time.Second)
	kv, err := n.store.Get(ctx, storage.FormatKey(3))
	if err != nil {
		t.Fatal(err)
	}
	var rec formatRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.RecordedAt == 0 {
		t.Fatalf("format 3's record %s: no recorded_at (%v)", kv.Value, err)
	}
	if waited := opened.Sub(time.UnixMilli(rec.RecordedAt)); waited < formatSettle {
		t.Fatalf("format 3's gate opened %v after its record, before formatSettle (%v)", waited, formatSettle)
	}
}

// A node that starts after another recorded format 3 having just seen a
// format-2 node (older_seen_at) waits out the grace too, though it never
// saw that node; and a record's times from a clock ahead of this one's are
// taken as now, not waited for.
func TestFormat3WaitsForAnOlderNodeTheRecorderSaw(t *testing.T) {
	shortFormatWaits(t, time.Second, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const prefix = "/format3-seen/"
	seen := time.Now()
	endpoints := format3Cluster(t, ctx, prefix, map[string]string{
		storage.ClusterConfigKey: `{"partitions":4,"created_at":"2026-01-01T00:00:00Z","created_format":3}`,
		storage.FormatKey(2):     `{"node_id":"a"}`,
		storage.FormatKey(3):     fmt.Sprintf(`{"node_id":"a","recorded_at":%d,"older_seen_at":%d}`, seen.Add(-time.Hour).UnixMilli(), seen.UnixMilli()),
	})
	reg, err := rivet.Setup(tally)
	if err != nil {
		t.Fatal(err)
	}
	n := StartForTest(t, ctx, ClusterConfigForTest(t, "new", endpoints, prefix, 4, nil), reg)
	if waited := waitJoinGateOpen(t, n, 30*time.Second).Sub(seen); waited < olderNodeGrace {
		t.Fatalf("format 3's gate opened %v after the recorder last saw a format-2 node, within olderNodeGrace (%v)", waited, olderNodeGrace)
	}

	const ahead = "/format3-ahead/"
	endpoints = format3Cluster(t, ctx, ahead, map[string]string{
		storage.ClusterConfigKey: `{"partitions":4,"created_at":"2026-01-01T00:00:00Z"}`,
		storage.FormatKey(2):     `{"node_id":"a"}`,
		storage.FormatKey(3):     fmt.Sprintf(`{"node_id":"a","recorded_at":%d}`, time.Now().Add(time.Hour).UnixMilli()),
	})
	m := StartForTest(t, ctx, ClusterConfigForTest(t, "new", endpoints, ahead, 4, nil), reg)
	waitJoinGateOpen(t, m, 30*time.Second) // not an hour
}

// A cluster this build created has had no node of an older format read
// its formats before formats 3 and 4 were recorded: joins write their
// values apart, and hold their branches' failures apart, at once, without
// formatSettle's wait (a review's: a new cluster's first 45 s of large
// joins failed).
func TestANewClusterWritesJoinValuesApartAtOnce(t *testing.T) {
	shortFormatWaits(t, time.Hour, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg, err := rivet.Setup(tally)
	if err != nil {
		t.Fatal(err)
	}
	n := StartForTest(t, ctx, ClusterConfigForTest(t, "new", etcdtest.Start(t), "/format3-new/", 4, nil), reg)
	waitJoinGateOpen(t, n, 30*time.Second) // not an hour
	waitHeldGate(t, n, true, 30*time.Second)
}
