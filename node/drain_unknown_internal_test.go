package node

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
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

// A node registered at an address that another node now serves (replaced
// under a new ID while the old record's lease runs) is refused at once,
// by stats and by drain: each was sent on to the address, which sent it
// on again, to itself, until the caller's deadline (a review's find).
func TestStatsAndDrainOfANodeWhoseAddressAnotherServesEnd(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := StartForTest(t, ctx, ClusterConfigForTest(t, "solo", etcdtest.Start(t), "/stats-ghost/", 8, nil), reg)
	rec, _ := json.Marshal(runtime.NodeRecord{NodeID: "ghost", GRPCAddr: n.GRPCAddr()})
	if err := n.store.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(storage.NodeKey("ghost"), rec)}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := n.view.record("ghost"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the ghost's record never reached the node's view")
		}
	}
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for what, do := range map[string]func(context.Context) error{
		"stats": func(ctx context.Context) error { _, err := c.StatsOf(ctx, "ghost"); return err },
		"drain": func(ctx context.Context) error { _, err := c.Drain(ctx, "ghost", false); return err },
	} {
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		err := do(cctx)
		ccancel()
		if !errors.Is(err, rivet.ErrFailedPrecondition) || !strings.Contains(err.Error(), "solo") {
			t.Errorf("%s of ghost, whose address node solo serves: %v; want FAILED_PRECONDITION naming solo", what, err)
		}
	}
}
