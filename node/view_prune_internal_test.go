package node

import (
	"context"
	"testing"
	"time"
)

// A connection pooled for a node after the prune that followed its
// leaving (its record read just before it went) is not kept: the view
// holds no connection to an address no node is registered at, and the
// dial fails rather than wait on a node that is gone.
func TestViewKeepsNoConnectionToANodeThatLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, _ := startChurnNode(t, ctx)
	const gone = "127.0.0.1:1" // a node's address, whose record has gone
	if _, err := n.view.peer(gone); err == nil {
		t.Error("a connection to a node that left was handed out")
	}
	if conns, peers := n.view.connCount(); conns != 0 || peers != 0 {
		t.Fatalf("the view keeps %d connections and %d streams to a node that left", conns, peers)
	}
	// A registered node is still dialed and kept: this one.
	if _, err := n.view.peer(n.GRPCAddr()); err != nil {
		t.Fatal(err)
	}
	if conns, peers := n.view.connCount(); conns != 1 || peers != 1 {
		t.Fatalf("%d connections and %d streams to a registered node, want 1 and 1", conns, peers)
	}
}
