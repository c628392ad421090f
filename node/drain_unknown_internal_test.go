package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A drain of a node that is not registered says which are; of a node's
// address (node1:6420), whose node it is (a trial took the NODE of
// rivetctl drain NODE for an address).
func TestADrainOfAnUnknownNodeSaysWhichAreRegistered(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, ClusterConfigForTest(t, "solo", etcdtest.Start(t), "/drain-unknown/", 8, nil), reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Drain(ctx, n.GRPCAddr(), false)
	if !errors.Is(err, rivet.ErrNotFound) || !strings.Contains(err.Error(), "is an address of node solo; give the node's ID") {
		t.Errorf("drain of the node's address: %v; want NOT_FOUND naming its node", err)
	}
	_, err = c.Drain(ctx, "nope", false)
	if !errors.Is(err, rivet.ErrNotFound) || !strings.Contains(err.Error(), "the registered nodes are solo") {
		t.Errorf("drain of an unknown node: %v; want NOT_FOUND listing the registered nodes", err)
	}
}

// Stats of a named node: this one's own; of one not registered, NOT_FOUND
// listing those that are, as a drain's.
func TestStatsOfANamedNode(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, ClusterConfigForTest(t, "solo", etcdtest.Start(t), "/stats-named/", 8, nil), reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if st, err := c.StatsOf(ctx, "solo"); err != nil || st.NodeID != "solo" || st.PartitionsOwned != 8 {
		t.Errorf("stats of node solo from itself: %+v, %v; want its own, 8 partitions", st, err)
	}
	if _, err := c.StatsOf(ctx, "nope"); !errors.Is(err, rivet.ErrNotFound) || !strings.Contains(err.Error(), "the registered nodes are solo") {
		t.Errorf("stats of an unknown node: %v; want NOT_FOUND listing the registered nodes", err)
	}
}
