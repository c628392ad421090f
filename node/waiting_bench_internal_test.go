package node

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// BenchmarkWaitingWorkflows1024Partitions times one node's listing of its
// sleeping workflows in a cluster of 1,024 partitions, all of them its:
// 3,000 sleeping workflows of its own, and 6,000 records under partition
// numbers past the cluster's (as two other nodes' partitions would be),
// which a listing that reads only its partitions does not touch.
func BenchmarkWaitingWorkflows1024Partitions(b *testing.B) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := StartForTest(b, ctx, ClusterConfigForTest(b, "n1", etcdtest.Start(b), "/waiting-bench/", 1024, nil), reg)
	for deadline := time.Now().Add(2 * time.Minute); n.own.Owned() != 1024; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the node serves %d of 1,024 partitions after 2 minutes", n.own.Owned())
		}
	}
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	now := time.Now()
	var ops []storage.Op
	flush := func() {
		if err := n.store.Commit(ctx, storage.Txn{Ops: ops}); err != nil {
			b.Fatal(err)
		}
		ops = ops[:0]
	}
	for i := range 9000 {
		p := uint32(i % 1024)
		if i >= 3000 {
			p = 1024 + uint32(i%2048)
		}
		rec, _ := json.Marshal(map[string]any{"at": now.Add(time.Duration(i) * time.Second).UnixMilli(), "why": "sleep"})
		ops = append(ops, storage.Put(storage.WakeupKey(p, "nap", storage.EncodeKey([]string{fmt.Sprint("k", i)})), rec))
		if len(ops) == 100 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
	b.ResetTimer()
	for b.Loop() {
		l, err := c.WaitingWorkflows(ctx, "n1", client.WaitQuery{Limit: 100})
		if err != nil || len(l.Workflows) != 100 || l.Omitted != 2900 {
			b.Fatalf("listing: %d workflows, %d left out, %v; want 100 and 2,900", len(l.Workflows), l.Omitted, err)
		}
	}
}
