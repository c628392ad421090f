package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// orderActor is an actor type only one of the test's nodes registers.
var orderActor = rivet.Actor[counter.State]{
	Name: "order",
	Actions: rivet.Actions[counter.State]{
		"get": rivet.Query(func(c *rivet.ActionCtx[counter.State]) (int, error) { return c.State.Count, nil }),
	},
}

// startMixedNodes starts n1, registering counter, and n2, registering
// counter and order, on one etcd, and returns their addresses once both
// list both and the partitions are placed as the ring of the two says
// (the balancer done: no partition moves under the test).
func startMixedNodes(t *testing.T) (addr1, addr2 string) {
	t.Helper()
	reg1, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	reg2, err := rivet.Setup(counter.Actor, orderActor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	var nodes []*node.Node
	for _, id := range []string{"n1", "n2"} {
		reg := reg1
		if id == "n2" {
			reg = reg2
		}
		nodes = append(nodes, startLocalNode(t, reg, func(cfg *node.Config) {
			cfg.NodeID, cfg.EtcdEndpoints, cfg.EtcdPrefix = id, endpoints, "/"+t.Name()+"/"
		}))
	}
	waitPlacedNodes(t, nodes...)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var ms []client.Member
		r := rivetctl(t, nodes[0].GRPCAddr(), "members", "-o", "json")
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &ms) == nil && len(ms) == 2 && ms[0].PartitionsOwned > 0 && ms[1].PartitionsOwned > 0 {
			return nodes[0].GRPCAddr(), nodes[1].GRPCAddr()
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 never listed n1 and n2 owning partitions: %s %s", r.stdout, r.stderr)
		}
	}
}

// waitPlacedNodes waits until every partition is served by the node the
// ring of nodes places it on, held by no other, and every node's table
// (Partitions) says so.
func waitPlacedNodes(t *testing.T, nodes ...*node.Node) {
	t.Helper()
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients := make([]*client.Client, len(nodes))
	for i, n := range nodes {
		c, err := client.New(n.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	placed := func() (bool, string) {
		for _, c := range clients {
			tab, err := c.Partitions(ctx)
			if err != nil {
				return false, err.Error()
			}
			want := placement.Table(tab.Count, ids)
			if len(tab.Owners) != len(want) {
				return false, fmt.Sprintf("%d partitions owned of %d", len(tab.Owners), len(want))
			}
			for _, o := range tab.Owners {
				if o.Owner != want[o.Partition] {
					return false, fmt.Sprintf("partition %d owned by %s, placed on %s", o.Partition, o.Owner, want[o.Partition])
				}
				for _, n := range nodes {
					if n.ID() == o.Owner && !n.Ownership().Owns(o.Partition) || n.ID() != o.Owner && n.Ownership().Holds(o.Partition) {
						return false, fmt.Sprintf("partition %d not yet served by %s alone", o.Partition, o.Owner)
					}
				}
			}
		}
		return true, ""
	}
	for {
		ok, why := placed()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the partitions were never placed as the ring of %v says: %s", ids, why)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rivetctl members says, on stderr, after the table (which scripts read as
// before), which actor types the registered nodes register differently;
// -o json lists each node's types. rivetctl drain refuses to drain a node
// onto nodes that lack types it registers, unless --force; a drain the
// other way goes through.
func TestMembersAndDrainOfNodesThatRegisterDifferentTypes(t *testing.T) {
	addr1, _ := startMixedNodes(t)
	r := rivetctl(t, addr1, "members")
	note := `rivetctl: note: the nodes register different actor types: order on n2, not on n1; a call of one whose partition's owner does not register it fails`
	if r.code != 0 || !strings.HasPrefix(r.stdout, "NODE  ") || strings.Count(r.stdout, "\n") != 3 || !strings.HasPrefix(r.stderr, note) || !strings.Contains(r.stderr, "docs/deploy.md") {
		t.Errorf("members: exit %d, stdout:\n%s\nstderr: %s\nwant the table and the note %q", r.code, r.stdout, r.stderr, note)
	}
	r = rivetctl(t, addr1, "members", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"node_id":"n1"`) || !strings.Contains(r.stdout, `"actor_types":["counter"]`) || !strings.Contains(r.stdout, `"actor_types":["counter","order"]`) {
		t.Errorf("members -o json: exit %d, stdout %s; want each node's actor_types", r.code, r.stdout)
	}

	rivetctl(t, addr1, "drain", "n2").wantErrPrefix(t, 1, `rivetctl: refused to drain n2: the nodes that would take n2's partitions do not register every actor type it does (n1 lacks order): actors of order moved there would not run`)
	var ms []client.Member
	if r := rivetctl(t, addr1, "members", "-o", "json"); json.Unmarshal([]byte(r.stdout), &ms) != nil || len(ms) != 2 || ms[0].Draining || ms[1].Draining {
		t.Errorf("after a refused drain: %s; want nobody draining", r.stdout)
	}
	r = rivetctl(t, addr1, "drain", "n2", "--force", "--wait", "0")
	if r.code != 0 || r.stdout != "n2 is draining (owned "+strings.TrimPrefix(r.stdout, "n2 is draining (owned ") || !strings.Contains(r.stderr, "draining n2 all the same (--force)") {
		t.Errorf("drain --force: exit %d, stdout %q, stderr %q; want draining, with a note", r.code, r.stdout, r.stderr)
	}
	if r := rivetctl(t, addr1, "drain", "n2", "--undo"); r.code != 0 {
		t.Fatalf("undo: %d %s %s", r.code, r.stdout, r.stderr)
	}
	// n1 checks a drain of itself against its copy of the registrations:
	// until it has n2's undo, n2 is no node to drain to.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var ms []client.Member
		r := rivetctl(t, addr1, "members", "-o", "json")
		if json.Unmarshal([]byte(r.stdout), &ms) == nil && len(ms) == 2 && !ms[0].Draining && !ms[1].Draining {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 never saw n2's undo: %s %s", r.stdout, r.stderr)
		}
	}
	// n2 registers every type n1 does: no word.
	r = rivetctl(t, addr1, "drain", "n1", "--wait", "0")
	if r.code != 0 || r.stderr != "" {
		t.Errorf("drain n1 onto n2, which registers its types: exit %d, stdout %q, stderr %q; want it done, no note", r.code, r.stdout, r.stderr)
	}
	rivetctl(t, addr1, "drain", "n1", "--undo")
}

// The trial's case: an order actor created on n2, which registers order,
// and moved by a drain (--force) to n1, which does not. Its inspection
// says that another node registers its type, not that it is one to
// destroy; calls of it name the nodes that register order.
func TestInspectOfAnActorWhoseOwnerLacksItsTypeButAnotherHasIt(t *testing.T) {
	addr1, addr2 := startMixedNodes(t)
	key := ""
	for i := range 64 {
		r := rivetctl(t, addr2, "create", "order", fmt.Sprint("mix", i))
		if r.code == 0 {
			key = fmt.Sprint("mix", i)
			break
		}
		if !strings.Contains(r.stderr, "node n1, which owns partition") || !strings.Contains(r.stderr, "node n2 does: every node must register the same actor types") {
			t.Fatalf("create order mix%d through n2: exit %d, stderr %q; want success, or n1's error naming n2", i, r.code, r.stderr)
		}
	}
	if key == "" {
		t.Fatal("no order actor of 64 landed on n2's partitions")
	}
	if r := rivetctl(t, addr1, "drain", "n2", "--force", "--wait", "1m"); r.code != 0 {
		t.Fatalf("drain n2 --force: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	defer rivetctl(t, addr1, "drain", "n2", "--undo")
	r := rivetctl(t, addr1, "inspect", "order", key)
	if r.code != 0 || !strings.Contains(r.stdout, "not registered on its owner, but on n2: the nodes register different actor types") || strings.Contains(r.stdout, "destroy removes it") {
		t.Errorf("inspect order %s on n1: exit %d, stdout:\n%s\nstderr %s\nwant its type row naming n2", key, r.code, r.stdout, r.stderr)
	}
	r = rivetctl(t, addr2, "call", "order", key, "get")
	if r.code == 0 || !strings.Contains(r.stderr, "does not register actor type order; node n2 does") {
		t.Errorf("call order %s, owned by n1: exit %d, stderr %q; want n1's error naming n2", key, r.code, r.stderr)
	}
}
