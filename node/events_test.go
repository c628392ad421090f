package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/examples/counter"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/node/nodetest"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// nextCount waits for the subscription's next event and returns it as a
// newCount value, or -1 for a gap.
func nextCount(t *testing.T, sub *client.Subscription) int {
	t.Helper()
	name, n := nextEvent(t, sub)
	switch name {
	case "gap":
		return -1
	case "newCount":
		return n
	}
	t.Fatalf("event %s, want newCount", name)
	return 0
}

// TestEventsFollowTheActorAcrossNodes subscribes through a node that does
// not own the actor (the subscription is relayed from the owner), moves the
// actor to that node by draining its owner, and stops the relaying node
// under an open stream.
func TestEventsFollowTheActorAcrossNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodes(t, ctx)
	key := counterOn(na, "ev")
	cb, err := client.New(nb.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	h := cb.Actor("counter", key)
	if _, err := h.Call(ctx, "increment", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Subscribe(ctx, "noSuchEvent"); err == nil || !errors.Is(err, rivet.ErrUnknownEvent) {
		t.Fatalf("subscribe to an undeclared event: %v", err)
	}
	sub, err := h.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for want := 2; want <= 4; want++ {
		if _, err := h.Call(ctx, "increment", 1); err != nil {
			t.Fatal(err)
		}
		if got := nextCount(t, sub); got != want {
			t.Fatalf("event %d, want %d", got, want)
		}
	}

	// Drain a: the counter moves to b, the stream from a ends, and the
	// subscription is made again on b: a gap, then the events go on.
	if _, err := cb.Drain(ctx, "a", false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a owns nothing", time.Minute, func() bool { return na.Ownership().Owned() == 0 })
	if got := nextCount(t, sub); got != -1 {
		t.Fatalf("after the move: event %d, want a gap", got)
	}
	for want := 5; want <= 6; want++ {
		if _, err := h.Call(ctx, "increment", 1); err != nil {
			t.Fatal(err)
		}
		if got := nextCount(t, sub); got != want {
			t.Fatalf("after the move: event %d, want %d", got, want)
		}
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); !errors.Is(err, client.ErrSubscriptionClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if _, err := cb.Drain(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a owns partitions again", time.Minute, func() bool { return na.Ownership().Owned() > 0 })

	// A stream that node a relays from b's actor does not hold up a's
	// stop: it ends UNAVAILABLE, for its subscriber to subscribe again.
	bKey := counterOn(nb, "evb")
	if _, err := cb.Actor("counter", bKey).Call(ctx, "increment", 1); err != nil {
		t.Fatal(err)
	}
	raw := relayedSubscription(t, ctx, na.GRPCAddr(), bKey)
	stopCtx, stopCancel := context.WithTimeout(ctx, 20*time.Second)
	defer stopCancel()
	if err := na.Stop(stopCtx); err != nil {
		t.Fatalf("stop with a relayed subscription open: %v", err)
	}
	if _, err := raw.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the relayed stream ended with %v, want UNAVAILABLE", err)
	}
}

type blasterState struct{}

// blaster broadcasts n events of 30 KB each.
var blaster = rivet.Actor[blasterState]{
	Name:   "blaster",
	Events: rivet.Events{"blob": rivet.EventOf[string]()},
	Actions: rivet.Actions[blasterState]{
		"blast": rivet.Action(func(c *rivet.ActionCtx[blasterState], n int) (int, error) {
			blob := strings.Repeat("x", 30_000)
			for range n {
				if err := c.Broadcast("blob", blob); err != nil {
					return 0, err
				}
			}
			return n, nil
		}),
	},
}

// A subscriber that stops reading blocks its stream's sends (HTTP/2 flow
// control); it must not hold up the node's stop until its deadline.
func TestAStuckSubscriberDoesNotHoldUpAStop(t *testing.T) {
	reg, err := rivet.Setup(blaster)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, ctx, clusterConfig(t, "solo", endpoints, "/stuck/", 16, nil), reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Actor("blaster", "a").Call(ctx, "blast", 0); err != nil {
		t.Fatal(err)
	}
	// A small window: the node can send it 64 KiB, then waits for reads
	// that never come.
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(65535), grpc.WithInitialConnWindowSize(65535))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, err := rivetv1.NewActorServiceClient(conn).Subscribe(ctx, &rivetv1.SubscribeRequest{Actor: &rivetv1.ActorRef{Name: "blaster", Key: []string{"a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Actor("blaster", "a").Call(ctx, "blast", 100); err != nil {
		t.Fatal(err)
	}
	const deadline = 20 * time.Second
	stopCtx, stopCancel := context.WithTimeout(ctx, deadline)
	defer stopCancel()
	t0 := time.Now()
	if err := n.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	// Its deadline is what a stuck stream would cost; the node closes
	// such streams a second after nothing else is left.
	if took := time.Since(t0); took > deadline/2 {
		t.Fatalf("the stop took %v with a stuck subscriber (deadline %v)", took, deadline)
	}
}

// A client given several nodes outlives one of them: when b stops, a
// subscription through it is made again through a (a gap, then the
// events), and the calls go to a.
func TestAClientOfSeveralNodesOutlivesOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodes(t, ctx)
	key := counterOn(na, "sev")
	// The client spreads its calls over both (round_robin): the
	// subscription goes to a, the owner, or to b, which relays a's stream.
	c, err := client.New(nb.GRPCAddr() + ", " + na.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := c.Actor("counter", key)
	sub, err := h.Subscribe(ctx, "newCount")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if n, err := rivet.Call[int](ctx, h, "increment", 1); err != nil || n != 1 {
		t.Fatalf("increment: %d, %v", n, err)
	}
	if got := nextCount(t, sub); got != 1 {
		t.Fatalf("event %d, want 1", got)
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, 30*time.Second)
	defer stopCancel()
	if err := nb.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	// Increments until one's event comes: a stream through b is made
	// again through a, a gap first, and an event broadcast before that is
	// missed (as the gap says).
	heard := 0
	for i := 2; heard == 0; i++ {
		n, err := rivet.Call[int](ctx, h, "increment", 1)
		if err != nil || n != i {
			t.Fatalf("increment after b stopped: %d, %v; want %d", n, err, i)
		}
		for heard == 0 {
			nctx, ncancel := context.WithTimeout(ctx, 3*time.Second)
			ev, err := sub.Next(nctx)
			ncancel()
			if err != nil {
				if i == 20 || ctx.Err() != nil {
					t.Fatalf("no event after %d increments since b stopped: %v", i-1, err)
				}
				break // increment again
			}
			if !ev.Gap {
				if err := ev.Decode(&heard); err != nil || heard < 2 || heard > i {
					t.Fatalf("event %s %s after b stopped: want a count from 2 to %d", ev.Name, ev.Data, i)
				}
			}
		}
	}
	if _, err := client.New(" , "); err == nil {
		t.Fatal("a list of no address was accepted")
	}
}

// eventParts is the partition count of the two-node clusters here.
const eventParts = 16

// twoNodes starts nodes a and b of one cluster with the examples, on an
// etcd of their own, and waits until they share its partitions.
func twoNodes(t *testing.T, ctx context.Context) (na, nb *node.Node) {
	t.Helper()
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	return twoNodesWith(t, ctx, reg, "/events/")
}

// twoNodesWith starts nodes a and b of one cluster (eventParts
// partitions, keys under prefix) with reg, on an etcd of their own, and
// waits until they share its partitions.
func twoNodesWith(t *testing.T, ctx context.Context, reg *rivet.Registry, prefix string) (na, nb *node.Node) {
	t.Helper()
	endpoints := etcdtest.Start(t)
	na = startNode(t, ctx, clusterConfig(t, "a", endpoints, prefix, eventParts, nil), reg)
	nb = startNode(t, ctx, clusterConfig(t, "b", endpoints, prefix, eventParts, []string{na.GossipAddr()}), reg)
	waitPlaced(t, time.Minute, eventParts, na, nb)
	return na, nb
}

// waitPlaced waits, up to within, until the join's rebalance is over on
// nodes (the whole cluster, none draining): every one of the parts
// partitions is served by the node the ring (rendezvous hashing over the
// nodes' IDs) gives it and held by no other (no handoff of it under way),
// and every node's balancer has settled (nothing left to claim or hand
// off, no handoff running). Only then does a partition a node owns stay
// there, as keysOn and counterOn take it. Each node owning some partitions
// and their counts adding up to parts is not enough: that also holds
// between two batches of handoffs (Config.Handoffs at a time), when the
// first node still owns partitions it is about to hand off.
func waitPlaced(t *testing.T, within time.Duration, parts uint32, nodes ...*node.Node) {
	t.Helper()
	byID := map[string]*node.Node{}
	ids := make([]string, 0, len(nodes))
	for _, n := range nodes {
		byID[n.ID()] = n
		ids = append(ids, n.ID())
	}
	want := placement.Table(parts, ids)
	waitUntil(t, "the partitions placed as the ring says", within, func() bool {
		for p, id := range want {
			for _, n := range nodes {
				if n == byID[id] && !n.Ownership().Owns(uint32(p)) || n != byID[id] && n.Ownership().Holds(uint32(p)) {
					return false
				}
			}
		}
		for _, n := range nodes {
			if !n.BalancerSettledForTest() {
				return false
			}
		}
		return true
	})
}

// counterOn returns a counter key, prefix-N, whose partition n owns.
func counterOn(n *node.Node, prefix string) string { return keysOn(n, "counter", prefix, 1)[0] }

// keysOn returns count keys, prefix-N, of actors of type name whose
// partitions n owns (of eventParts).
func keysOn(n *node.Node, name, prefix string, count int) []string {
	var keys []string
	// Bounded: a node that owns nothing would never yield enough.
	for i := 0; len(keys) < count; i++ {
		if i == 100_000 {
			panic(fmt.Sprintf("keysOn: node %s owns %d of the first %d %s keys, %d wanted", n.ID(), len(keys), i, name, count))
		}
		if k := fmt.Sprintf("%s-%d", prefix, i); n.Host().Owns(placement.Partition(name, storage.EncodeKey([]string{k}), eventParts)) {
			keys = append(keys, k)
		}
	}
	return keys
}

// A subscription the node refuses (an event the actor does not declare),
// made on a handle that creates its actor, creates nothing; one it takes
// creates the actor, as the handle promises.
func TestARefusedSubscriptionCreatesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := nodetest.Start(t, t.TempDir(), counter.Actor)
	if _, err := c.Actor("counter", "typo").Subscribe(ctx, "newCuont"); !errors.Is(err, rivet.ErrUnknownEvent) {
		t.Fatalf("subscribe to an undeclared event: %v, want ErrUnknownEvent", err)
	}
	if _, err := c.Actor("counter", "typo").NoCreate().Info(ctx); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("the refused subscription created the actor: Info = %v, want ErrNotFound", err)
	}
	sub, err := c.Actor("counter", "fresh").Subscribe(ctx, "newCount")
	if err != nil {
		t.Fatalf("subscribe to a new actor: %v", err)
	}
	defer sub.Close()
	if _, err := c.Actor("counter", "fresh").NoCreate().Info(ctx); err != nil {
		t.Fatalf("the subscription did not create its actor: %v", err)
	}
	if _, err := c.Actor("counter", "fresh").Call(ctx, "increment", 5); err != nil {
		t.Fatal(err)
	}
	if n := nextCount(t, sub); n != 5 {
		t.Fatalf("event %d, want 5", n)
	}
}

// relayedSubscription subscribes, on the gRPC API of the node at addr, to
// counter key, which node b owns: the stream's first message says b.
func relayedSubscription(t *testing.T, ctx context.Context, addr, key string) rivetv1.ActorService_SubscribeClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	raw, err := rivetv1.NewActorServiceClient(conn).Subscribe(ctx, &rivetv1.SubscribeRequest{Actor: &rivetv1.ActorRef{Name: "counter", Key: []string{key}}})
	if err != nil {
		t.Fatal(err)
	}
	first, err := raw.Recv()
	if err != nil || first.GetSubscribed().GetNodeId() != "b" {
		t.Fatalf("first message of a relayed stream: %v, %v (want subscribed on b)", first, err)
	}
	return raw
}

// dial returns a client of node n, closed when the test ends.
func dial(t *testing.T, n *node.Node) *client.Client {
	t.Helper()
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
