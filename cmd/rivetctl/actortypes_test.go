package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
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
	if r.code != 0 || !strings.HasPrefix(r.stdout, "NODE  ") || strings.Count(r.stdout, "\n") != 4 || !strings.HasPrefix(r.stderr, note) || !strings.Contains(r.stderr, "docs/deploy.md") {
		t.Errorf("members: exit %d, stdout:\n%s\nstderr: %s\nwant the table and the note %q", r.code, r.stdout, r.stderr, note)
	}
	r = rivetctl(t, addr1, "members", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"node_id":"n1"`) || !strings.Contains(r.stdout, `"actor_types":["counter"]`) || !strings.Contains(r.stdout, `"actor_types":["counter","order"]`) {
		t.Errorf("members -o json: exit %d, stdout %s; want each node's actor_types", r.code, r.stdout)
	}

	n2s := 0 // n2's partitions, all n1's once n2 drains
	for _, id := range placement.Table(8, []string{"n1", "n2"}) {
		if id == "n2" {
			n2s++
		}
	}
	rivetctl(t, addr1, "drain", "n2").wantErrPrefix(t, 1, fmt.Sprintf(`rivetctl: refused to drain n2: the nodes that would take n2's partitions do not register every actor type it does (n1 lacks order and would take %d of n2's %d partitions): actors of order moved there would not run`, n2s, n2s))
	var ms []client.Member
	if r := rivetctl(t, addr1, "members", "-o", "json"); json.Unmarshal([]byte(r.stdout), &ms) != nil || len(ms) != 2 || ms[0].Draining || ms[1].Draining {
		t.Errorf("after a refused drain: %s; want nobody draining", r.stdout)
	}
	r = rivetctl(t, addr1, "drain", "n2", "--force", "--wait", "0")
	if r.code != 0 || r.stdout != "n2 is draining (owned "+strings.TrimPrefix(r.stdout, "n2 is draining (owned ") || !strings.Contains(r.stderr, "draining n2 all the same (--force)") {
		t.Errorf("drain --force: exit %d, stdout %q, stderr %q; want draining, with a note", r.code, r.stdout, r.stderr)
	}
	// Run again to wait for the drain: n2 is draining already, not checked.
	if r := rivetctl(t, addr1, "drain", "n2", "--wait", "0"); r.code != 0 || r.stderr != "" {
		t.Errorf("drain of n2, draining already: exit %d, stdout %q, stderr %q; want it done, no word", r.code, r.stdout, r.stderr)
	}
	rivetctl(t, addr1, "drain", "n2", "--undo", "--force").wantErrPrefix(t, 2, "rivetctl: --force makes no sense with --undo")
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

// rivetctl drain checks only the nodes that would take NODE's partitions,
// as the ring places them (rendezvous hashing: each of NODE's partitions
// goes to its owner in the ring without NODE), not every node left: a
// node that lacks a type but would take none of NODE's partitions is no
// reason to refuse. The refusal says how many of NODE's partitions each
// lacking node would take.
func TestDrainChecksOnlyTheNodesThatWouldTakeThePartitions(t *testing.T) {
	// lacker registers counter only; b and c register order too. An ID
	// for it with which c's partitions all go to b, and some of b's to it.
	const parts = 8
	count := func(ring []string, of, to string) (moved, owned int) {
		rest := slices.DeleteFunc(slices.Clone(ring), func(id string) bool { return id == of })
		for p := range uint32(parts) {
			if placement.Owner(p, ring) == of {
				owned++
				if placement.Owner(p, rest) == to {
					moved++
				}
			}
		}
		return moved, owned
	}
	lacker := ""
	for i := range 1000 {
		id := fmt.Sprint("a", i)
		ring := []string{id, "b", "c"}
		toB, ofC := count(ring, "c", "b")
		toLacker, _ := count(ring, "b", id)
		if ofC > 0 && toB == ofC && toLacker > 0 {
			lacker = id
			break
		}
	}
	if lacker == "" {
		t.Fatal("no node ID of 1000 makes the ring give c's partitions to b alone")
	}
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
	for _, id := range []string{lacker, "b", "c"} {
		reg := reg2
		if id == lacker {
			reg = reg1
		}
		n := startLocalNode(t, reg, func(cfg *node.Config) {
			cfg.NodeID, cfg.EtcdEndpoints, cfg.EtcdPrefix = id, endpoints, "/"+t.Name()+"/"
			cfg.Partitions = parts
			if len(nodes) > 0 {
				cfg.Join = []string{nodes[0].GossipAddr()}
			}
		})
		nodes = append(nodes, n)
	}
	waitPlacedNodes(t, nodes...)
	addr := nodes[0].GRPCAddr()
	waitMembers(t, addr, func(ms []client.Member) bool {
		alive := 0
		for _, m := range ms {
			if m.State == "alive" && !m.StartedAt.IsZero() && !m.Draining {
				alive++
			}
		}
		return alive == 3
	})
	// c's partitions go to b, which registers order: no word, though
	// the lacker lacks order.
	r := rivetctl(t, addr, "drain", "c", "--wait", "0")
	if r.code != 0 || r.stderr != "" {
		t.Errorf("drain c, whose partitions all go to b: exit %d, stdout %q, stderr %q; want it done, no word", r.code, r.stdout, r.stderr)
	}
	if r := rivetctl(t, addr, "drain", "c", "--undo"); r.code != 0 {
		t.Fatalf("undo: %d %s %s", r.code, r.stdout, r.stderr)
	}
	waitMembers(t, addr, func(ms []client.Member) bool {
		for _, m := range ms {
			if m.Draining {
				return false
			}
		}
		return len(ms) == 3
	})
	// Some of b's go to the lacker: refused, saying how many.
	toLacker, ofB := count([]string{lacker, "b", "c"}, "b", lacker)
	rivetctl(t, addr, "drain", "b").wantErrPrefix(t, 1, fmt.Sprintf(`rivetctl: refused to drain b: the nodes that would take b's partitions do not register every actor type it does (%s lacks order and would take %d of b's %d partitions): actors of order moved there`, lacker, toLacker, ofB))
}

// A node whose registration does not say which actor types it registers
// (a build before it said) is drained without a check, and rivetctl says
// that it could not check.
func TestDrainOfANodeOfUnknownTypesSaysItIsNotChecked(t *testing.T) {
	endpoints := etcdtest.Start(t)
	reg1, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	reg2, err := rivet.Setup(counter.Actor, orderActor)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "/" + t.Name() + "/"
	var nodes []*node.Node
	for _, id := range []string{"n1", "n2"} {
		reg := reg1
		if id == "n2" {
			reg = reg2
		}
		nodes = append(nodes, startLocalNode(t, reg, func(cfg *node.Config) {
			cfg.NodeID, cfg.EtcdEndpoints, cfg.EtcdPrefix = id, endpoints, prefix
			if len(nodes) > 0 {
				cfg.Join = []string{nodes[0].GossipAddr()}
			}
		}))
	}
	waitPlacedNodes(t, nodes...)
	// n2's registration as a build before actor_types wrote it, under
	// its lease.
	cli := etcdtest.NewClient(t, endpoints)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := prefix + storage.NodeKey("n2")
	got, err := cli.Get(ctx, key)
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("n2's record at %s: %v %v", key, got, err)
	}
	var rec map[string]any
	if err := json.Unmarshal(got.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	delete(rec, "actor_types")
	old, _ := json.Marshal(rec)
	if _, err := cli.Put(ctx, key, string(old), clientv3.WithLease(clientv3.LeaseID(got.Kvs[0].Lease))); err != nil {
		t.Fatal(err)
	}
	addr := nodes[0].GRPCAddr()
	waitMembers(t, addr, func(ms []client.Member) bool {
		return len(ms) == 2 && !ms[1].TypesKnown() && ms[1].State == "alive"
	})
	r := rivetctl(t, addr, "drain", "n2", "--wait", "0")
	note := "rivetctl: note: cannot tell which actor types n2 registers (a build that does not say); not checked\n"
	if r.code != 0 || r.stderr != note || !strings.HasPrefix(r.stdout, "n2 is draining") {
		t.Errorf("drain n2, of unknown types: exit %d, stdout %q, stderr %q; want it done, with the note %q", r.code, r.stdout, r.stderr, note)
	}
	rivetctl(t, addr, "drain", "n2", "--undo")
}

// waitMembers waits until the member list of the node at addr satisfies ok.
func waitMembers(t *testing.T, addr string, ok func([]client.Member) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var ms []client.Member
		r := rivetctl(t, addr, "members", "-o", "json")
		if r.code == 0 && json.Unmarshal([]byte(r.stdout), &ms) == nil && ok(ms) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members never came as wanted: %s %s", r.stdout, r.stderr)
		}
	}
}
