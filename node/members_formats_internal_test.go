package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// Members says which storage format each node's build writes, from its
// registration, and which formats the cluster has recorded, read from etcd
// as a node records them: what an operator compares before a deploy that
// may rule a rollback out (an SRE's trial had only an etcdctl the node
// image lacks). A registration without a format, of a build before format
// 2, is format 1, as the format gate takes it, not 0.
func TestMembersSayEachNodesStorageFormatAndTheRecordedFormats(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const prefix = "/members-formats/"
	endpoints := format3Cluster(t, ctx, prefix, map[string]string{
		storage.FormatKey(2): `{"node_id":"gone"}`,
		storage.FormatKey(3): `{"node_id":"gone"}`,
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	// Draining: the ring leaves them out, and the node serves every
	// partition. The format 1 node's record has no storage_format.
	for id, format := range map[string]int{"format1": 0, "format3": 3} {
		rec := map[string]any{"node_id": id, "grpc_addr": "127.0.0.1:1", "started_at": time.Now().UTC(), "lease": lease.ID, "draining": true}
		if format > 0 {
			rec["storage_format"] = format
		}
		b, _ := json.Marshal(rec)
		if _, err := cli.Put(ctx, prefix+storage.NodeKey(id), string(b), clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	reg, err := rivet.Setup(tally)
	if err != nil {
		t.Fatal(err)
	}
	n := StartForTest(t, ctx, ClusterConfigForTest(t, "new", endpoints, prefix, 4, nil), reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var last string
	listed := func(formats map[string]int, recorded []int) func() bool {
		return func() bool {
			ml, err := c.MemberList(ctx)
			if err != nil {
				last = err.Error()
				return false
			}
			got := map[string]int{}
			for _, m := range ml.Members {
				got[m.NodeID] = m.StorageFormat
			}
			last = fmt.Sprintf("formats %v, recorded %v", got, ml.RecordedFormats)
			if ml.RecordedFormats == nil {
				last = fmt.Sprintf("formats %v, recorded unknown", got)
			}
			if len(got) != len(formats) || !slices.Equal(ml.RecordedFormats, recorded) {
				return false
			}
			for id, f := range formats {
				if got[id] != f {
					return false
				}
			}
			return true
		}
	}
	// With nodes of formats 1 and 3 registered, the node records no
	// newer format: the cluster's records stay 2 and 3.
	want := map[string]int{"new": runtime.StorageFormat, "format1": 1, "format3": 3}
	if !waitFor(ctx, listed(want, []int{2, 3})) {
		t.Fatalf("members: %s; want formats %v, recorded [2 3]", last, want)
	}
	// The older nodes gone, it records every format up to its own, which
	// a member list says as soon as they are.
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	var all []int
	for f := 2; f <= runtime.StorageFormat; f++ {
		all = append(all, f)
	}
	if !waitFor(ctx, listed(map[string]int{"new": runtime.StorageFormat}, all)) {
		t.Fatalf("members: %s; want node new alone, recorded %v", last, all)
	}
}

// waitFor polls cond until it holds (true) or ctx ends (false).
func waitFor(ctx context.Context, cond func() bool) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
