package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// orderActor is a second actor type, which only some of a test's nodes
// register: a rolling deploy that adds it, node by node.
var orderActor = rivet.Actor[counter.State]{
	Name: "order",
	Actions: rivet.Actions[counter.State]{
		"get": rivet.Query(func(c *rivet.ActionCtx[counter.State]) (int, error) { return c.State.Count, nil }),
	},
}

// mixedCluster starts node a, registering counter only, and node b,
// registering counter and order, on one etcd, and waits until both see
// both registrations and own a share of the partitions each.
func mixedCluster(t *testing.T, ctx context.Context, prefix string) (a, b *Node) {
	return mixedClusterLogged(t, ctx, prefix, nil)
}

// mixedClusterLogged is mixedCluster with node a logging to logA (nil:
// nowhere).
func mixedClusterLogged(t *testing.T, ctx context.Context, prefix string, logA *zap.Logger) (a, b *Node) {
	t.Helper()
	regA, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	regB, err := rivet.Setup(counter.Actor, orderActor)
	if err != nil {
		t.Fatal(err)
	}
	eps := etcdtest.Start(t)
	cfgA := ClusterConfigForTest(t, "a", eps, prefix, 16, nil)
	if logA != nil {
		cfgA.Logger = logA
	}
	a = StartForTest(t, ctx, cfgA, regA)
	b = StartForTest(t, ctx, ClusterConfigForTest(t, "b", eps, prefix, 16, []string{a.GossipAddr()}), regB)
	awaitCond(t, ctx, "both nodes own partitions and see both records", func() bool {
		for _, n := range []*Node{a, b} {
			if len(n.view.records()) != 2 || n.host.Stats().PartitionsOwned == 0 {
				return false
			}
		}
		return a.BalancerSettledForTest() && b.BalancerSettledForTest()
	})
	return a, b
}

func membersByID(t *testing.T, ctx context.Context, c *client.Client) map[string]client.Member {
	t.Helper()
	ms, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]client.Member{}
	for _, m := range ms {
		out[m.NodeID] = m
	}
	return out
}

// Each node publishes, in its registration, the actor types it registers,
// and rivetctl members (the Members call) lists them; a record of an older
// build, without the field, is listed as unknown, not as registering none.
func TestNodesPublishTheActorTypesTheyRegister(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := mixedCluster(t, ctx, "/types-publish/")
	for _, n := range []*Node{a, b} {
		recs := n.view.records()
		if got := recs["a"].ActorTypes; !slices.Equal(got, []string{"counter"}) {
			t.Errorf("%s's view of a's types: %q, want [counter]", n.ID(), got)
		}
		if got := recs["b"].ActorTypes; !slices.Equal(got, []string{"counter", "order"}) {
			t.Errorf("%s's view of b's types: %q, want [counter order]", n.ID(), got)
		}
	}
	// A build before the field: its record says nothing of types.
	old, _ := json.Marshal(map[string]any{"node_id": "old", "grpc_addr": "127.0.0.1:1"})
	if err := a.store.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(storage.NodeKey("old"), old)}}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, ctx, "old's record in a's and b's views", func() bool {
		_, inA := a.view.record("old")
		_, inB := b.view.record("old")
		return inA && inB
	})
	if rec, _ := b.view.record("old"); rec.KnownTypes() {
		t.Errorf("a record without actor_types reads as known: %q", rec.ActorTypes)
	}
	c, err := client.New(b.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ms := membersByID(t, ctx, c)
	if got := ms["a"].ActorTypes; !slices.Equal(got, []string{"counter"}) {
		t.Errorf("members: a's types %q, want [counter]", got)
	}
	if got := ms["b"].ActorTypes; !slices.Equal(got, []string{"counter", "order"}) {
		t.Errorf("members: b's types %q, want [counter order]", got)
	}
	if m := ms["old"]; m.TypesKnown() {
		t.Errorf("members: old's types %q, want unknown (nil)", m.ActorTypes)
	}
	j, _ := json.Marshal(ms["old"])
	if strings.Contains(string(j), "actor_types") {
		t.Errorf("old's member JSON has actor_types: %s", j)
	}
	// Left out of the comparison, and named as unknown where it matters.
	diffs, unknown := a.view.typeDifferences()
	if len(diffs) != 1 || diffs[0].Type != "order" || !slices.Equal(diffs[0].NotOn, []string{"a"}) || !slices.Equal(unknown, []string{"old"}) {
		t.Errorf("a's type differences %+v, unknown %q; want order not on a, old unknown", diffs, unknown)
	}
	ref, _ := ownedRef(t, a, "order", "old")
	_, err = c.Create(ctx, "order", ref.Key, nil)
	if !errors.Is(err, rivet.ErrUnknownActor) || !strings.Contains(err.Error(), "node b does: every node") || !strings.Contains(err.Error(), "(node old of a build that does not say which types it registers)") {
		t.Errorf("create order on a's partition with old registered: %v; want b named, old said unknown", err)
	}
}

// A record that registers no type is known to register none (not
// unknown), on its way through JSON.
func TestARecordRegisteringNoTypeIsKnown(t *testing.T) {
	b, _ := json.Marshal(runtime.NodeRecord{NodeID: "x", ActorTypes: []string{}})
	var rec runtime.NodeRecord
	if err := json.Unmarshal(b, &rec); err != nil || !rec.KnownTypes() {
		t.Errorf("record %s reads back unknown (%v)", b, err)
	}
	if reg, known := rec.Registers("order"); reg || !known {
		t.Errorf("Registers(order) = %v, %v; want false, true", reg, known)
	}
}

// A call of a type its partition's owner does not register, though another
// node does (a rolling deploy that adds the type, half done), says so:
// which node owns which partition of which actor, which nodes register the
// type, and that every node must; through either node, still NOT_FOUND
// actor.unknown_actor (docs/deploy.md says why not UNAVAILABLE). A type no
// node registers keeps its plain "no actor named" error.
func TestACallOfATypeItsOwnerDoesNotRegisterNamesTheNodesThatDo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := mixedCluster(t, ctx, "/types-error/")
	ref, p := ownedRef(t, a, "order", "mix")
	key, _ := json.Marshal(ref.Key)
	want := fmt.Sprintf(`node a, which owns partition %d of order %s, does not register actor type order; node b does: every node must register the same actor types`, p, key)
	for _, n := range []*Node{b, a} {
		c, err := client.New(n.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Create(ctx, "order", ref.Key, nil)
		c.Close()
		var re *rivet.Error
		if !errors.As(err, &re) || !errors.Is(err, rivet.ErrUnknownActor) || re.Group != "actor" || re.Code != "unknown_actor" || !strings.Contains(re.Message, want) || !strings.Contains(re.Message, "docs/deploy.md") {
			t.Errorf("create order %s through %s: %v; want actor.unknown_actor with %q", ref.Key, n.ID(), err, want)
		}
		if code := rpcerr.Code(err); code != codes.NotFound {
			t.Errorf("create through %s: code %v, want NOT_FOUND", n.ID(), code)
		}
	}
	// Served where its owner registers it.
	refB, _ := ownedRef(t, b, "order", "mix")
	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Create(ctx, "order", refB.Key, nil); err != nil {
		t.Errorf("create order %s, whose owner b registers order, through a: %v", refB.Key, err)
	}
	// No node registers it: a typo's error, as before.
	_, err = c.Create(ctx, "nosuch", ref.Key, nil)
	if !errors.Is(err, rivet.ErrUnknownActor) || !strings.Contains(err.Error(), `no actor named "nosuch" is registered`) {
		t.Errorf("create of a type no node registers: %v; want the plain unknown actor error", err)
	}
}

// A request that reaches a node that does not own its partition (routed by
// a stale table, or forwarded just as the partition moved) is refused as
// not owned, UNAVAILABLE, which the caller retries at the owner, whether
// or not this node registers the actor's type: only the owner says that
// the type is not registered (NOT_FOUND, which is not retried).
func TestARequestForAnotherNodesPartitionOfATypeItLacksIsNotOwned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := mixedCluster(t, ctx, "/types-stale/")
	for name, action := range map[string]string{"order": "get", "counter": "getCount"} {
		ref, p := ownedRef(t, b, name, "stale")
		if a.host.Owns(p) {
			t.Fatalf("a and b both own partition %d", p)
		}
		_, err := a.host.Call(ctx, runtime.CallRequest{Ref: ref, Action: action, CreateIfMissing: true})
		want := fmt.Sprintf("partition %d of actor %s is not owned by node a", p, name)
		if !errors.Is(err, rivet.ErrUnavailable) || errors.Is(err, rivet.ErrNotFound) || !strings.Contains(err.Error(), want) {
			t.Errorf("call of %s %s, b's partition %d, on a: %v; want UNAVAILABLE %q", name, ref.Key, p, err, want)
		}
	}
}

// The unknown-actor error names at most 8 of the nodes that register the
// type, and says how many more there are.
func TestTheNodesThatRegisterATypeAreCutAfterEight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := mixedCluster(t, ctx, "/types-cut/")
	// Registrations that no live node backs: they take no partition.
	for i := 1; i <= 9; i++ {
		id := fmt.Sprint("h", i)
		rec, _ := json.Marshal(runtime.NodeRecord{NodeID: id, GRPCAddr: "127.0.0.1:1", ActorTypes: []string{"counter", "order"}})
		if err := a.store.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(storage.NodeKey(id), rec)}}); err != nil {
			t.Fatal(err)
		}
	}
	awaitCond(t, ctx, "the records in a's view", func() bool { return len(a.view.records()) == 11 })
	ref, _ := ownedRef(t, a, "order", "cut")
	c, err := client.New(b.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Create(ctx, "order", ref.Key, nil)
	want := "nodes b, h1, h2, h3, h4, h5, h6, h7 and 2 more do: every node"
	if !errors.Is(err, rivet.ErrUnknownActor) || !strings.Contains(err.Error(), want) {
		t.Errorf("create order on a's partition: %v; want %q", err, want)
	}
}

// typeHolders, asked on every call of a type this node lacks, decodes the
// registrations once per change of them, not on every call; and sees a
// change.
func TestTypeHoldersDecodesTheRecordsOncePerRevision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, _ := mixedCluster(t, ctx, "/types-holders/")
	if holders, _ := a.view.typeHolders("order"); !slices.Equal(holders, []string{"b"}) {
		t.Fatalf("holders of order %q, want [b]", holders)
	}
	if allocs := testing.AllocsPerRun(100, func() { a.view.typeHolders("order") }); allocs > 5 {
		t.Errorf("typeHolders allocates %.0f times a call: it decodes the records every time", allocs)
	}
	rec, _ := json.Marshal(runtime.NodeRecord{NodeID: "c", GRPCAddr: "127.0.0.1:1", ActorTypes: []string{"order"}})
	if err := a.store.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(storage.NodeKey("c"), rec)}}); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, ctx, "c among the holders of order", func() bool {
		holders, _ := a.view.typeHolders("order")
		return slices.Equal(holders, []string{"b", "c"})
	})
}

// A node logs a warning once when the registered nodes register different
// actor types, naming the types and the nodes, not again while the
// difference stays the same (another node's registration rewritten by a
// drain and its undo), and once, at info, when it is gone (the node that
// registered the extra type stopped).
func TestANodeWarnsOnceWhenTheNodesRegisterDifferentTypes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	core, logs := observer.New(zapcore.InfoLevel)
	a, b := mixedClusterLogged(t, ctx, "/types-warn/", zap.New(core))
	const warn = "the registered nodes register different actor types"
	warnings := func() []observer.LoggedEntry {
		return logs.FilterMessageSnippet(warn).FilterLevelExact(zapcore.WarnLevel).AllUntimed()
	}
	awaitCond(t, ctx, "a's warning", func() bool { return len(warnings()) > 0 })
	w := warnings()[0].ContextMap()
	if w["differences"] != "order on b, not on a" || fmt.Sprint(w["types"]) != "[order]" {
		t.Errorf("warning's fields %v, want differences \"order on b, not on a\", types [order]", w)
	}
	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Drain(ctx, "b", false); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, ctx, "b draining in a's view", func() bool { r, _ := a.view.record("b"); return r.Draining })
	if _, err := c.Drain(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, ctx, "b undrained in a's view", func() bool { r, _ := a.view.record("b"); return !r.Draining })
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := b.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	// watchCluster checks each revision of the registrations in turn: by
	// the info, it has looked at the registrations the drain and the undo wrote.
	awaitCond(t, ctx, "a's info that the types are the same again", func() bool {
		return logs.FilterMessageSnippet("register the same actor types again").Len() > 0
	})
	if n := len(warnings()); n != 1 {
		t.Errorf("%d warnings, want 1 (once per change): %v", n, warnings())
	}
}
