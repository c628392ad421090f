package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
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

	registerLegacyNode(t, ctx, n)

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
