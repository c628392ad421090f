package node

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/workflow"
)

type tallyState struct {
	N int `json:"n"`
}

// tally adds each message of its queue to N, in a step.
var tally = rivet.Actor[tallyState]{
	Name:   "tally",
	Queues: rivet.Queues{"add": rivet.QueueOf[int]()},
	Actions: rivet.Actions[tallyState]{
		"get": rivet.Query(func(c *rivet.ActionCtx[tallyState]) (int, error) { return c.State.N, nil }),
	},
	Run: func(ctx *workflow.Ctx[tallyState]) error {
		return ctx.Loop("adds", func(lc *workflow.Ctx[tallyState]) error {
			m, err := workflow.Next[int](lc, "next")
			if err != nil {
				return err
			}
			return lc.Step("add", func(s *workflow.StepCtx[tallyState]) error {
				s.State.N += m.Body
				return nil
			})
		})
	},
}

// While a node of a build that does not read states in history entries
// is registered (a rolling upgrade), steps write the state key, which such
// a node reads; once it is gone, steps write one key, their entry.
func TestStepsWriteTheStateKeyWhileAnOlderNodeIsRegistered(t *testing.T) {
	reg, err := rivet.Setup(tally)
	if err != nil {
		t.Fatal(err)
	}
	// Format 3's waits, shortened (not t.Parallel: package variables).
	// Restored after the node stops (cleanups run last-registered first).
	settle, grace := formatSettle, olderNodeGrace
	t.Cleanup(func() { formatSettle, olderNodeGrace = settle, grace })
	formatSettle, olderNodeGrace = time.Second, 3*time.Second
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.Partitions = 4
	cfg.HTTPAddr = "-"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitGate := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); (n.Host().WriteFormat() >= 2) != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("state in history %v, want %v", !want, want)
			}
		}
	}
	waitGate(true)
	waitJoinGate := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); (n.Host().WriteFormat() >= 3) != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("join outputs apart %v, want %v", !want, want)
			}
		}
	}

	waitJoinGate(true)
	// Written before the gates opened: a build that does not read a
	// format refuses this cluster from now on. (This node created the
	// cluster: format 3's gate did not wait formatSettle, which
	// TestFormat3WaitsAfterItsRecordInAClusterAnOlderBuildCreated tests.)
	r3, err := n.etcd.Get(ctx, "/rivet/"+storage.FormatKey(3))
	if err != nil || len(r3.Kvs) != 1 {
		t.Fatalf("format 3's record: %v, %v", r3, err)
	}
	var rec3 struct {
		RecordedAt int64 `json:"recorded_at"`
	}
	if err := json.Unmarshal(r3.Kvs[0].Value, &rec3); err != nil || rec3.RecordedAt == 0 {
		t.Fatalf("format 3's record %s has no recorded_at (%v)", r3.Kvs[0].Value, err)
	}
	for f := 2; f <= runtime.StorageFormat; f++ {
		if r, err := n.etcd.Get(ctx, "/rivet/"+storage.FormatKey(f)); err != nil || len(r.Kvs) != 1 {
			t.Fatalf("with the node writing format %d, the cluster's record of format %d: %v, %v", runtime.StorageFormat, f, r, err)
		}
	}

	// A node of format 2 (it reads states in history entries, not a
	// join's values apart): format 3's gate closes, format 2's stays open.
	lease2, err := n.etcd.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := json.Marshal(map[string]any{"node_id": "format2", "grpc_addr": "127.0.0.1:1", "started_at": time.Now().UTC(), "lease": lease2.ID, "draining": true, "storage_format": 2})
	if _, err := n.etcd.Put(ctx, "/rivet/"+storage.NodeKey("format2"), string(v2), clientv3.WithLease(lease2.ID)); err != nil {
		t.Fatal(err)
	}
	waitJoinGate(false)
	if n.Host().WriteFormat() < 2 {
		t.Fatal("with a node of format 2 registered, steps stopped storing the state in history entries")
	}
	// Registered longer than the grace, in a quiet cluster (the node
	// looks again only when something changes): the grace counts from
	// when it is seen gone, not from when it was last looked at. Time
	// itself is what this waits for.
	time.Sleep(olderNodeGrace + 500*time.Millisecond)
	if _, err := n.etcd.Revoke(ctx, lease2.ID); err != nil {
		t.Fatal(err)
	}
	// Gone, it may only have lost its lease, and register again without
	// reading the formats: the gate stays closed for olderNodeGrace.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := n.view.records()["format2"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the format 2 node's record stayed in the node's view")
		}
	}
	gone := time.Now()
	waitJoinGate(true)
	if waited := time.Since(gone); waited < olderNodeGrace-time.Second {
		t.Fatalf("format 3's gate opened %v after the older node's record went, want about olderNodeGrace (%v)", waited, olderNodeGrace)
	}

	// A node of an older build: its record has no storage_format. It
	// drains, so that the ring gives it nothing.
	lease, err := n.etcd.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(map[string]any{"node_id": "older", "grpc_addr": "127.0.0.1:1", "started_at": time.Now().UTC(), "lease": lease.ID, "draining": true})
	oldKey := "/rivet/" + storage.NodeKey("older")
	if _, err := n.etcd.Put(ctx, oldKey, string(old), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	waitGate(false)

	a := c.GetOrCreate("tally", "t")
	stateKey := func() string {
		t.Helper()
		r, err := n.etcd.Get(ctx, "/rivet/"+storage.ActorsPrefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range r.Kvs {
			if k := string(kv.Key); strings.Contains(k, "/tally/") && strings.HasSuffix(k, "/"+storage.StateSuffix) {
				return string(kv.Value)
			}
		}
		t.Fatal("no state key")
		return ""
	}
	add := func(v, want int) {
		t.Helper()
		if err := a.Send(ctx, "add", v); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got, err := rivet.Call[int](ctx, a, "get")
			if err != nil {
				t.Fatal(err)
			}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("N = %d, want %d", got, want)
			}
		}
	}
	add(3, 3)
	if got := stateKey(); got != `{"n":3}` {
		t.Fatalf("with an older node registered, the state key holds %s after a step, want {\"n\":3}", got)
	}

	if _, err := n.etcd.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	waitGate(true)
	add(4, 7)
	if got := stateKey(); got != `{"n":3}` {
		t.Fatalf("with every node on format %d, the state key holds %s after a step, want it left at {\"n\":3} (the step's entry holds the state)", runtime.StorageFormat, got)
	}
}

// A build that does not read a storage format the cluster has written
// does not start on it (it would load the newer build's data as its own
// format and write over it), and says why.
func TestANodeDoesNotStartOnANewerStorageFormat(t *testing.T) {
	reg, err := rivet.Setup(tally)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, endpoints)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const prefix = "/newer-format/"
	if _, err := cli.Put(ctx, prefix+storage.FormatKey(runtime.StorageFormat+1), "{}"); err != nil {
		t.Fatal(err)
	}
	n, err := Start(ctx, ClusterConfigForTest(t, "a", endpoints, prefix, 4, nil), reg)
	if err == nil {
		_ = n.Stop(context.Background())
		t.Fatal("a node started on a cluster whose data is in a storage format newer than its build reads")
	}
	if want := fmt.Sprintf("storage format %d", runtime.StorageFormat+1); !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to name %q", err, want)
	}
	// It did not join: no registration, no claim.
	r, err := cli.Get(ctx, prefix+storage.NodesPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || r.Count != 0 {
		t.Fatalf("node records after the refused start: %v, %v", r, err)
	}

	// Formats it reads do not stop it.
	if _, err := cli.Delete(ctx, prefix+storage.FormatKey(runtime.StorageFormat+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, prefix+storage.FormatKey(runtime.StorageFormat), "{}"); err != nil {
		t.Fatal(err)
	}
	StartForTest(t, ctx, ClusterConfigForTest(t, "a", endpoints, prefix, 4, nil), reg)
}
