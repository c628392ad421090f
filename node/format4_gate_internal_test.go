package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type heldState struct{}

// heldJoin joins a branch whose step fails at once with one that waits
// for a message: a's failure is held while b goes on.
var heldJoin = rivet.Actor[heldState]{
	Name:   "heldjoin",
	Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[heldState]) error {
		_, err := workflow.Join(ctx, "j", workflow.Branches[heldState, int]{
			"a": func(c *workflow.Ctx[heldState]) (int, error) {
				return workflow.StepOpts(c, workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[heldState]) (int, error) {
					return 0, errors.New("a is down")
				})
			},
			"b": func(c *workflow.Ctx[heldState]) (int, error) {
				m, err := workflow.Next[int](c, "wait", workflow.NextOptions{Names: []string{"go"}})
				return m.Body, err
			},
		})
		return err
	},
}

// heldApart starts a heldjoin actor of key, waits until its join holds
// a's failure with b waiting, and says whether the failure went in an
// entry of its own (`j/~held/a`) rather than in the join's record (read
// from etcd through cli: a history shows no join's branches).
func heldApart(t *testing.T, ctx context.Context, c *client.Client, cli *clientv3.Client, prefix, key string) bool {
	t.Helper()
	if _, err := c.Actor("heldjoin", key).Info(ctx); err != nil {
		t.Fatal(err)
	}
	var last []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r, err := cli.Get(ctx, prefix+storage.ActorsPrefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		inRecord, apart := false, false
		last = last[:0]
		for _, kv := range r.Kvs {
			k := string(kv.Key)
			if !strings.Contains(k, "/heldjoin/") || !strings.Contains(k, "/"+key+"/") {
				continue
			}
			last = append(last, k)
			switch {
			case strings.HasSuffix(k, "/"+storage.WorkflowSuffix+"j"):
				var rec struct {
					Branches map[string]struct {
						Status string `json:"status"`
					} `json:"branches"`
				}
				inRecord = json.Unmarshal(kv.Value, &rec) == nil && rec.Branches["a"].Status == string(workflow.StatusFailed)
			case strings.HasSuffix(k, "/"+storage.WorkflowSuffix+"j/~held/a"):
				apart = true
			}
		}
		if inRecord || apart {
			if inRecord && apart {
				t.Fatalf("heldjoin %s: a's failure held both in the join's record and apart", key)
			}
			return apart
		}
		if time.Now().After(deadline) {
			t.Fatalf("heldjoin %s: a's failure not held within 30 s; keys %v", key, last)
		}
	}
}

// registerOlderNode registers, through cli, a draining node (the ring
// gives it nothing) that reads storage formats up to format, under the
// cluster's prefix, on a lease that the test revokes to make it go.
func registerOlderNode(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix, id string, format int) clientv3.LeaseID {
	t.Helper()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(map[string]any{"node_id": id, "grpc_addr": "127.0.0.1:1", "started_at": time.Now().UTC(), "lease": lease.ID, "draining": true, "storage_format": format})
	if _, err := cli.Put(ctx, prefix+storage.NodeKey(id), string(rec), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	return lease.ID
}

// waitHeldGate waits until n holds join branch failures apart, or not.
func waitHeldGate(t *testing.T, n *Node, want bool, within time.Duration) time.Time {
	t.Helper()
	for deadline := time.Now().Add(within); (n.Host().WriteFormat() >= 4) != want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("join branch failures held apart %v after %v, want %v", !want, within, want)
		}
	}
	return time.Now()
}

// A pending join's branch failures go in entries of their own (storage
// format 4) only once every registered node reads format 4, the cluster's
// record of it is written, and format 4's waits have passed: a node of
// format 3 would run the failed branches again on replay and fail the
// workflow on a divergence. Such a node registered again afterwards closes
// the gate and is logged as an error.
func TestFormat4HoldsBranchFailuresApartOnlyOnceEveryNodeReadsIt(t *testing.T) {
	// Settle longer than the grace: the wait after the record binds.
	shortFormatWaits(t, 3*time.Second, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const prefix = "/format4/"
	// Created by a build of format 3, which recorded formats 2 and 3 long
	// ago: format 3's gate opens at once, format 4's waits.
	long := time.Now().Add(-time.Hour).UnixMilli()
	endpoints := format3Cluster(t, ctx, prefix, map[string]string{
		storage.ClusterConfigKey: `{"partitions":4,"created_at":"2026-01-01T00:00:00Z","created_format":3}`,
		storage.FormatKey(2):     fmt.Sprintf(`{"node_id":"gone","recorded_at":%d}`, long),
		storage.FormatKey(3):     fmt.Sprintf(`{"node_id":"gone","recorded_at":%d}`, long),
	})
	// A node of format 3, registered before this one starts (the
	// upgrade goes on).
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	lease := registerOlderNode(t, ctx, cli, prefix, "format3", 3)
	reg, err := rivet.Setup(heldJoin)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.ErrorLevel)
	cfg := ClusterConfigForTest(t, "new", endpoints, prefix, 4, nil)
	cfg.Logger = zap.New(core)
	n := StartForTest(t, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	waitJoinGateOpen(t, n, 30*time.Second)
	if n.Host().WriteFormat() >= 4 {
		t.Fatal("with a node of format 3 registered, join branch failures are held apart")
	}
	if n.formatWritten(ctx, 4) {
		t.Fatal("with a node of format 3 registered, the cluster recorded format 4")
	}
	if heldApart(t, ctx, c, cli, prefix, "k3") {
		t.Fatal("with a node of format 3 registered, a join held a branch failure in an entry of its own (j/~held/a)")
	}

	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the format 3 node's record gone from the view", func() bool { _, ok := n.view.record("format3"); return !ok })
	opened := waitHeldGate(t, n, true, 30*time.Second)
	kv, err := n.store.Get(ctx, storage.FormatKey(4))
	if err != nil {
		t.Fatalf("format 4's gate opened without its record: %v", err)
	}
	var rec formatRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.RecordedAt == 0 || rec.OlderSeenAt == 0 {
		t.Fatalf("format 4's record %s: no recorded_at or older_seen_at (%v)", kv.Value, err)
	}
	if waited := opened.Sub(time.UnixMilli(rec.RecordedAt)); waited < formatSettle {
		t.Fatalf("format 4's gate opened %v after its record, before formatSettle (%v)", waited, formatSettle)
	}
	// Measured from when the gate last saw the format 3 node (the record
	// says, to the millisecond below the node's own time), not from when
	// this test noticed it gone: a test descheduled for a while would see
	// the gate open sooner than it did.
	if waited := opened.Sub(time.UnixMilli(rec.OlderSeenAt)); waited < olderNodeGrace {
		t.Fatalf("format 4's gate opened %v after the format 3 node was last seen, within olderNodeGrace (%v)", waited, olderNodeGrace)
	}
	if !heldApart(t, ctx, c, cli, prefix, "k4") {
		t.Fatal("with every node on format 4, a join held a branch failure in its record, not in j/~held/a")
	}
	// Held in its record before: still so, as every build reads it.
	if heldApart(t, ctx, c, cli, prefix, "k3") {
		t.Fatal("a join that held a failure in its record before format 4 opened now has j/~held/a")
	}

	// Back, it would misread k4's join: the node says so, and writes
	// format 3 again (format 3's gate stays open).
	registerOlderNode(t, ctx, cli, prefix, "format3", 3)
	waitHeldGate(t, n, false, 30*time.Second)
	if n.Host().WriteFormat() < 3 {
		t.Fatal("with a node of format 3 registered, join values stopped going apart")
	}
	waitUntil(t, "an error naming the format 3 node", func() bool {
		for _, e := range logs.All() {
			if !strings.Contains(e.Message, "storage format 4") {
				continue
			}
			for _, f := range e.Context {
				if f.Key == "older_nodes" && fmt.Sprint(f.Interface) == "[format3]" {
					return true
				}
			}
		}
		return false
	})
}

// A node of format 3 registered holds the cluster at format 3, and format
// 4 is written only once recorded too, as formats 2 and 3 are.
func TestFormat4IsWrittenOnlyOnceReadByAllAndRecorded(t *testing.T) {
	v4 := runtime.NodeRecord{NodeID: "a", StorageFormat: 4}
	v3 := runtime.NodeRecord{NodeID: "b", StorageFormat: 3}
	for _, c := range []struct {
		recs     map[string]runtime.NodeRecord
		recorded int
		want     int
	}{
		{map[string]runtime.NodeRecord{"a": v4}, 4, 4},
		{map[string]runtime.NodeRecord{"a": v4}, 3, 3},
		{map[string]runtime.NodeRecord{"a": v4, "b": v3}, 4, 3},
	} {
		if got := writableFormat(clusterFormat(c.recs), c.recorded); got != c.want {
			t.Errorf("%v, recorded %d: writes format %d, want %d", c.recs, c.recorded, got, c.want)
		}
	}
	if got := olderNodes(map[string]runtime.NodeRecord{"a": v4, "b": v3}, 4); strings.Join(got, ",") != "b" {
		t.Errorf("nodes older than format 4: %v, want [b]", got)
	}
}

// A node that starts after another recorded format 4 having just seen a
// format-3 node (older_seen_at) holds branch failures in the join's record
// until the grace has passed, though it never saw that node: the grace,
// not the settle, binds here (longer than it, and the record is old).
func TestFormat4WaitsForAnOlderNodeTheRecorderSaw(t *testing.T) {
	shortFormatWaits(t, time.Second, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const prefix = "/format4-seen/"
	seen := time.Now()
	long := seen.Add(-time.Hour).UnixMilli()
	endpoints := format3Cluster(t, ctx, prefix, map[string]string{
		storage.ClusterConfigKey: `{"partitions":4,"created_at":"2026-01-01T00:00:00Z","created_format":3}`,
		storage.FormatKey(2):     fmt.Sprintf(`{"node_id":"a","recorded_at":%d}`, long),
		storage.FormatKey(3):     fmt.Sprintf(`{"node_id":"a","recorded_at":%d}`, long),
		storage.FormatKey(4):     fmt.Sprintf(`{"node_id":"a","recorded_at":%d,"older_seen_at":%d}`, long, seen.UnixMilli()),
	})
	reg, err := rivet.Setup(tally)
	if err != nil {
		t.Fatal(err)
	}
	n := StartForTest(t, ctx, ClusterConfigForTest(t, "new", endpoints, prefix, 4, nil), reg)
	if waited := waitHeldGate(t, n, true, 30*time.Second).Sub(seen); waited < olderNodeGrace {
		t.Fatalf("format 4's gate opened %v after the recorder last saw a format-3 node, within olderNodeGrace (%v)", waited, olderNodeGrace)
	}
}
