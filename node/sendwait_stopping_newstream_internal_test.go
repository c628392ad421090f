package node

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A waiting send that a stopping node forwards on a stream it opens after
// it told its peers that it stops (no stream to the owner was open then:
// a call that was still being routed, or a stream that broke and came
// back) hears at once that its message is queued, as one forwarded on a
// stream open at the time does: the owner held it for the whole wait, and
// with it the forwarding node's stop.
func TestAWaitingSendForwardedOnAStreamOpenedAfterTheStopBeganIsCut(t *testing.T) {
	const parts = 8
	reg, err := rivet.Setup(qhWorker)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	config := func(id string, join []string) Config {
		return ClusterConfigForTest(t, id, endpoints, "/sendwait-newstream-test/", parts, join)
	}
	a := StartForTest(t, ctx, config("a", nil), reg)
	b := StartForTest(t, ctx, config("b", []string{a.GossipAddr()}), reg)
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	ref, _ := ownedRef(t, b, "qhworker", "w")

	// a has forwarded nothing to b yet: no stream to b is open when it
	// says that it stops.
	a.view.stopping()

	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The workflow never takes from "other": the wait could only end
	// with its timeout.
	res, err := c.Actor("qhworker", ref.Key...).SendWait(ctx, "other", 1, 20*time.Second)
	if err != nil || res.Status != client.SendEnqueued || res.MessageID == 0 {
		t.Fatalf("a waiting send forwarded by a stopping node: %+v, %v; want enqueued with its message's ID", res, err)
	}
}
