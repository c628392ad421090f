package node_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A node that relays a subscription from the actor's owner closes its
// connection to the owner once the owner's registration is gone (its lease
// expired: a frozen or cut-off process). The relayed stream then ends
// UNAVAILABLE, for the subscriber to subscribe again and hear of a gap, not
// CANCELLED (the relay's own connection closing), which ends the
// subscriber's subscription for good.
func TestARelayedSubscriptionWhoseOwnerIsUnregisteredEndsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "/relaycut/"
	endpoints := etcdtest.Start(t)
	na := startNode(t, ctx, clusterConfig(t, "a", endpoints, prefix, eventParts, nil), reg)
	nb := startNode(t, ctx, clusterConfig(t, "b", endpoints, prefix, eventParts, []string{na.GossipAddr()}), reg)
	waitPlaced(t, time.Minute, eventParts, na, nb)

	key := counterOn(nb, "cut")
	ca := dial(t, na)
	if _, err := ca.Actor("counter", key).Call(ctx, "increment", 1); err != nil {
		t.Fatal(err)
	}
	raw := relayedSubscription(t, ctx, na.GRPCAddr(), key)

	// b's registration goes, as when its lease expires while it is frozen;
	// b itself still serves the stream.
	cli := etcdtest.NewClient(t, endpoints)
	if _, err := cli.Delete(ctx, prefix+storage.NodeKey("b")); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("the relayed stream ended with %v, want UNAVAILABLE", err)
	}
}
