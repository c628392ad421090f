package node

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A node asked for the sleeping workflows of an older node (one from
// before WaitingWorkflows) names it as one to upgrade, with its build,
// rather than passing on gRPC's "unknown method"; asked for its own, it
// answers with the partitions it serves.
func TestWaitingWorkflowsOfAnOlderNodeThroughAnother(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, ClusterConfigForTest(t, "new", etcdtest.Start(t), "/waiting-old/", 8, nil), reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	old := grpc.NewServer()
	rivetv1.RegisterAdminServiceServer(old, legacyAdmin{})
	served := make(chan struct{})
	go func() { defer close(served); _ = old.Serve(lis) }()
	defer func() { old.Stop(); <-served }()
	rec, _ := json.Marshal(runtime.NodeRecord{NodeID: "old", GRPCAddr: lis.Addr().String(), Build: "rivet v0.9.0"})
	if err := n.store.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(storage.NodeKey("old"), rec)}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the old node's record in the view", func() bool { _, ok := n.view.record("old"); return ok })

	_, err = c.WaitingWorkflows(ctx, "old", client.WaitQuery{Limit: 10})
	var re *rivet.Error
	if !errors.As(err, &re) || re.Kind != rivet.ErrFailedPrecondition || re.Group != "node" || re.Code != "unsupported" ||
		re.Message != "node old does not list sleeping or waiting workflows (it runs rivet v0.9.0); upgrade it" {
		t.Errorf("the sleeping workflows of an older node through another: %#v; want FAILED_PRECONDITION node.unsupported naming it", err)
	}
	waitUntil(t, "the node serving all 8 partitions", func() bool { return n.own.Owned() == 8 })
	l, err := c.WaitingWorkflows(ctx, "new", client.WaitQuery{Limit: 10})
	if err != nil || l.NodeID != "new" || len(l.Partitions) != 8 || l.PartitionCount != 8 || len(l.Workflows) != 0 {
		t.Errorf("the node's own: %+v, %v; want no workflows, 8 of 8 partitions listed", l, err)
	}
}
