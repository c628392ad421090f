package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/server"
)

// A node serves gRPC before it has read the cluster's tables. Its Members
// and Partitions answer UNAVAILABLE until then (a read, which clients
// retry) instead of every member unregistered and no partition owned,
// which a client routing directly took for every owner gone.
func TestMembersAndPartitionsWaitForTheTablesFirstRead(t *testing.T) {
	n := &Node{cfg: Config{NodeID: "n1"}}
	n.view = newView("n1", 8, nil, nil, nil, server.Limits{}) // never run: not read yet
	b := backend{nil, n}
	_, err := b.Members(context.Background())
	if !errors.Is(err, rivet.ErrUnavailable) || !strings.Contains(err.Error(), "n1 is starting") {
		t.Fatalf("Members before the first read: %v, want UNAVAILABLE saying the node is starting", err)
	}
	if _, _, err := b.Partitions(context.Background()); !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("Partitions before the first read: %v, want UNAVAILABLE", err)
	}
}
