package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A call through a node for an actor whose owner on record cannot be
// dialed (its connection in transient failure: a node crashed, or cut off
// by the network, whose lease still runs) fails UNAVAILABLE before the
// caller's deadline, when that deadline comes before the end of the
// forwarder's wait for the table to name a new owner (routeWait, 3 s): the
// wait ended with the caller's context, and the call with
// DEADLINE_EXCEEDED, its outcome unknown to the client although it was
// never sent.
func TestAForwardToAnUndialableOwnerEndsBeforeTheCallersDeadline(t *testing.T) {
	const parts = 8
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	config := func(id string, join []string) Config {
		cfg := ClusterConfigForTest(t, id, endpoints, "/route-deadline-test/", parts, join)
		// b's partitions stay on record as b's for the whole test.
		cfg.LeaseTTL = 30 * time.Second
		return cfg
	}
	a := StartForTest(t, ctx, config("a", nil), reg)
	b := StartForTest(t, ctx, config("b", []string{a.GossipAddr()}), reg)
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	ref, _ := ownedRef(t, b, "counter", "c")

	// No retries: the client reports the forwarder's own answer.
	cl, err := client.New(a.GRPCAddr(), client.WithRetry(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	increment := func(within time.Duration) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		t0 := time.Now()
		_, err := cl.GetOrCreate(ref.Name, ref.Key...).Call(cctx, "increment", 1)
		return time.Since(t0), err
	}
	if _, err := increment(10 * time.Second); err != nil {
		t.Fatalf("increment through a: %v", err)
	}

	crash(ctx, b)
	conn, err := a.view.conn(b.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	// A closed connection goes idle until asked to connect again.
	awaitCond(t, ctx, "a's connection to b to fail", func() bool {
		conn.Connect()
		return conn.GetState() == connectivity.TransientFailure
	})
	// Not a deadline near the margin's 50 ms floor (server.AnswerBy): a
	// machine under load wakes the forwarder's give-up that much late (a
	// 300 ms one failed so beside other tests' load, as in server's
	// TestPeerCallToAnUnreachablePeerFailsRetryablyBeforeItsDeadline).
	for _, within := range []time.Duration{2 * time.Second, time.Second} {
		took, err := increment(within)
		if !errors.Is(err, rivet.ErrUnavailable) || took >= within {
			t.Fatalf("increment through a, with a %v deadline, of an actor of crashed b: %v after %v; want UNAVAILABLE before the deadline", within, err, took.Round(time.Millisecond))
		}
		t.Logf("%v deadline: UNAVAILABLE after %v", within, took.Round(time.Millisecond))
	}
}
