package node

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// Two nodes of a two-node cluster told to drain at the same moment, each
// seeing the other eligible: one drains, the other is refused as if it
// had been told second, so that a node stays eligible and partitions can
// still move. First interleaved by a hook, the way the check-then-write
// went wrong (A passes its check, B drains in full, A writes), then with
// the two drains sent at once to the nodes' AdminServices, a few times.
func TestConcurrentDrainsOfTwoNodesLeaveOneEligible(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := clusterStarter(t, ctx, reg, "/drain-test/", 8)
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	nodes := []*Node{a, b}

	// eligibleEverywhere waits until both nodes' views count exactly ids
	// eligible.
	eligibleEverywhere := func(ids ...string) {
		t.Helper()
		awaitCond(t, ctx, "both views to count "+strings.Join(ids, ", ")+" eligible", func() bool {
			for _, n := range nodes {
				if !slices.Equal(n.view.eligible(), ids) {
					return false
				}
			}
			return true
		})
	}
	// draining reads from etcd which nodes are registered draining.
	draining := func() map[string]bool {
		t.Helper()
		kvs, err := a.store.List(ctx, storage.NodesPrefix, storage.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, kv := range kvs {
			var rec runtime.NodeRecord
			if err := json.Unmarshal(kv.Value, &rec); err != nil {
				t.Fatal(err)
			}
			out[rec.NodeID] = rec.Draining
		}
		return out
	}
	refused := func(err error) bool {
		return errors.Is(err, rivet.ErrFailedPrecondition) && strings.Contains(err.Error(), "no other node")
	}
	eligibleEverywhere("a", "b")

	// A's drain stops between its check (B eligible) and its write; B's
	// drain runs meanwhile (A eligible, as A has written nothing).
	checked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a.drainChecked = func() { once.Do(func() { close(checked); <-release }) }
	aDone := make(chan error, 1)
	go func() {
		_, err := backend{a.host, a}.Drain(ctx, "", false)
		aDone <- err
	}()
	select {
	case <-checked:
	case <-ctx.Done():
		t.Fatal("a's drain never reached its write")
	}
	if _, err := (backend{b.host, b}).Drain(ctx, "", false); err != nil {
		t.Fatalf("b's drain, while a's waits to write: %v", err)
	}
	close(release)
	errA := <-aDone
	a.drainChecked = nil
	if got := draining(); got["a"] || !got["b"] {
		t.Fatalf("draining in etcd after both drains: %v (a's drain: %v); want b alone", got, errA)
	}
	if !refused(errA) {
		t.Fatalf("a's drain after b drained = %v, want FAILED_PRECONDITION saying no other node can take its partitions", errA)
	}
	if a.own.Record().Draining {
		t.Fatal("a's own record says draining after its drain was refused")
	}
	eligibleEverywhere("a")
	if _, err := (backend{b.host, b}).Drain(ctx, "", true); err != nil {
		t.Fatalf("undrain b: %v", err)
	}
	eligibleEverywhere("a", "b")

	// The same race through the AdminService, as two rivetctl drains
	// would run it: exactly one wins each round.
	var clients []*client.Client
	for _, n := range nodes {
		c, err := client.New(n.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	for round := range 5 {
		var (
			wg   sync.WaitGroup
			fire = make(chan struct{})
			errs = make([]error, len(nodes))
		)
		for i, n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-fire
				_, errs[i] = clients[i].Drain(ctx, n.ID(), false)
			}()
		}
		close(fire)
		wg.Wait()
		got := draining()
		won := -1
		for i, n := range nodes {
			switch {
			case errs[i] == nil && won < 0:
				won = i
			case errs[i] == nil:
				t.Fatalf("round %d: both drains succeeded; draining in etcd: %v", round, got)
			case !refused(errs[i]):
				t.Fatalf("round %d: drain of %s = %v, want success or INVALID_ARGUMENT saying no other node can take its partitions", round, n.ID(), errs[i])
			}
		}
		if won < 0 {
			t.Fatalf("round %d: both drains refused (%v, %v); draining in etcd: %v", round, errs[0], errs[1], got)
		}
		winner, loser := nodes[won], nodes[1-won]
		if !got[winner.ID()] || got[loser.ID()] {
			t.Fatalf("round %d: %s's drain won, but draining in etcd: %v", round, winner.ID(), got)
		}
		eligibleEverywhere(loser.ID())
		if _, err := clients[won].Drain(ctx, winner.ID(), true); err != nil {
			t.Fatalf("round %d: undrain %s: %v", round, winner.ID(), err)
		}
		eligibleEverywhere("a", "b")
	}
}

// awaitCond polls cond until it holds, failing the test if ctx ends first.
func awaitCond(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// A node drained while another took its partitions, and then left alone
// (the other node stopped), serves again: with no eligible node, the ring
// falls back to the draining ones, rather than leaving every partition
// unowned until someone undoes the drain. It stays draining: a node that
// joins later takes the partitions off it again.
func TestADrainedNodeLeftAloneServesUntilAnotherJoins(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const parts = 8
	start := clusterStarter(t, ctx, reg, "/drain-alone-test/", parts)
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	awaitCond(t, ctx, "both nodes eligible in a's view", func() bool { return slices.Equal(a.view.eligible(), []string{"a", "b"}) })

	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := (backend{a.host, a}).Drain(ctx, "", false); err != nil {
		t.Fatalf("drain a: %v", err)
	}
	awaitCond(t, ctx, "a to hand off every partition", func() bool { return a.own.Owned() == 0 && b.own.Owned() == parts })
	if n, err := rivet.Call[int](ctx, c.GetOrCreate("counter", "k"), "increment", 1); err != nil || n != 1 {
		t.Fatalf("increment through drained a = %d, %v; want 1", n, err)
	}

	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	err = b.Stop(sctx)
	scancel()
	if err != nil {
		t.Fatalf("stop b: %v", err)
	}
	awaitCond(t, ctx, "a, draining and alone, to claim every partition", func() bool { return a.own.Owned() == parts })
	if !a.own.Record().Draining {
		t.Fatal("a's record no longer says draining")
	}
	// The state b held is there: the counter goes on from 1.
	if n, err := rivet.Call[int](ctx, c.GetOrCreate("counter", "k"), "increment", 1); err != nil || n != 2 {
		t.Fatalf("increment on a alone = %d, %v; want 2", n, err)
	}

	d := start("d", []string{a.GossipAddr()})
	awaitCond(t, ctx, "d, eligible, to take every partition off draining a", func() bool { return a.own.Owned() == 0 && d.own.Owned() == parts })
	if n, err := rivet.Call[int](ctx, c.GetOrCreate("counter", "k"), "increment", 1); err != nil || n != 3 {
		t.Fatalf("increment through a, served by d = %d, %v; want 3", n, err)
	}
}

// A node stopped gracefully while its drain hands off a partition whose
// actor is in a turn lets that handoff finish: the turn ends and commits
// where it began, and the actor's OnSleep runs once, as a stop without
// the drain would have had it. The stop used to cancel the handoffs under
// way with the balancer: the actor was evicted, OnSleep never ran, and
// the turn's writes were refused, so its caller (told UNAVAILABLE) ran the
// action again on the partition's next owner.
func TestAStopDuringADrainLetsItsHandoffsFinish(t *testing.T) {
	type st struct{ N int }
	var sleeps, runs atomic.Int64
	entered, release := make(chan struct{}, 4), make(chan struct{})
	holder := rivet.Actor[st]{
		Name:    "holder",
		OnSleep: func(*rivet.ActionCtx[st]) error { sleeps.Add(1); return nil },
		Actions: rivet.Actions[st]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				runs.Add(1)
				entered <- struct{}{}
				select {
				case <-release:
				case <-c.Context().Done():
					return 0, c.Context().Err()
				}
				c.State.N++
				return c.State.N, nil
			}),
		},
	}
	reg, err := rivet.Setup(holder)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const parts = 8
	start := clusterStarter(t, ctx, reg, "/stop-drain-test/", parts)
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	ref, p := ownedRef(t, b, "holder", "h")
	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type answer struct {
		n   int
		err error
	}
	done := make(chan answer, 1)
	go func() {
		n, err := rivet.Call[int](ctx, c.GetOrCreate(ref.Name, ref.Key...), "hold")
		done <- answer{n, err}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the hold never started")
	}
	// b drains: the handoff of p waits for the hold's turn.
	if _, err := (backend{b.host, b}).Drain(ctx, "", false); err != nil {
		t.Fatalf("drain b: %v", err)
	}
	awaitCond(t, ctx, "b to begin handing off the holder's partition", func() bool { _, releasing := b.own.Releasing(p); return releasing })
	stopped := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		stopped <- b.Stop(sctx)
	}()
	awaitCond(t, ctx, "b's stop to begin", func() bool {
		res, err := b.health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && res.Status == healthpb.HealthCheckResponse_NOT_SERVING
	})
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("stop b: %v", err)
	}
	got := <-done
	if got.err != nil || got.n != 1 {
		t.Errorf("hold = %d, %v; want 1", got.n, got.err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the hold ran %d times, want once", n)
	}
	if n := sleeps.Load(); n != 1 {
		t.Errorf("OnSleep ran %d times on the stopping, draining node, want once", n)
	}
}

// sharing returns a condition that holds once the nodes own the parts
// partitions between them, each some, and their balancers have settled.
func sharing(parts uint32, nodes ...*Node) func() bool {
	return func() bool {
		var sum uint32
		for _, n := range nodes {
			o := n.own.Owned()
			if o == 0 || !n.balancer.Settled() {
				return false
			}
			sum += uint32(o)
		}
		return sum == parts
	}
}

// clusterStarter starts an etcd for the test and returns a function that
// starts node id on it (under prefix, with parts partitions), joining the
// gossip addresses join; each node stops with the test.
func clusterStarter(t *testing.T, ctx context.Context, reg *rivet.Registry, prefix string, parts uint32) func(id string, join []string) *Node {
	endpoints := etcdtest.Start(t)
	return func(id string, join []string) *Node {
		return StartForTest(t, ctx, ClusterConfigForTest(t, id, endpoints, prefix, parts, join), reg)
	}
}

// A drain lasts until it is undone or the drained node's process ends: the
// node started again under the same ID registers undrained and takes its
// share of the partitions back, which is what an upgrade (drain, stop,
// start the new binary) relies on; rivetctl drain --help says so.
func TestARestartEndsADrain(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const parts = 8
	start := clusterStarter(t, ctx, reg, "/drain-restart-test/", parts)
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	awaitCond(t, ctx, "both nodes eligible in a's view", func() bool { return slices.Equal(a.view.eligible(), []string{"a", "b"}) })
	if _, err := (backend{b.host, b}).Drain(ctx, "", false); err != nil {
		t.Fatalf("drain b: %v", err)
	}
	awaitCond(t, ctx, "b to hand off every partition", func() bool { return b.own.Owned() == 0 && a.own.Owned() == parts })

	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	err = b.Stop(sctx)
	scancel()
	if err != nil {
		t.Fatalf("stop b: %v", err)
	}
	b = start("b", []string{a.GossipAddr()})
	if b.own.Record().Draining {
		t.Fatal("b, started again, registered as draining")
	}
	awaitCond(t, ctx, "b, started again, to take partitions back", func() bool { return b.own.Owned() > 0 && a.own.Owned()+b.own.Owned() == parts })
}
