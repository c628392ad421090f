package node

import (
	"context"
	"encoding/json"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// Many distinct actors activated and deactivated (calls, scheduled calls,
// queue sends that complete their workflow), and many failed calls: the
// node's goroutines, fds and actors in memory come back to the baseline.
func TestChurnActorsLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, c := startChurnNode(t, ctx)
	round := func(i int) {
		h := c.Actor("churn", fmt.Sprint("a", i))
		if _, err := h.Call(ctx, "bump", 1); err != nil {
			t.Fatal(err)
		}
		if err := h.Send(ctx, "work", i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		round(i)
	}
	settleLeaks(t, n, "warm-up", leakSample{goruntime.NumGoroutine() + 1000, 1 << 20, 0}, 0, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	base := sampleLeaks(t, n)
	for i := 5; i < 205; i++ {
		round(i)
	}
	settleLeaks(t, n, "actor churn", base, 5, 10*time.Second)

	// Failed calls.
	for i := range 100 {
		h := c.Actor("churn", fmt.Sprint("f", i%5))
		switch i % 4 {
		case 0:
			_, err := c.Actor("nosuch", "x").Call(ctx, "bump", 1)
			if err == nil {
				t.Fatal("unknown actor type succeeded")
			}
		case 1:
			_, err := c.Actor("churn", "f").NoCreate().Call(ctx, "bump", 1)
			_ = err
			_, err = h.Call(ctx, "nosuch")
			if err == nil {
				t.Fatal("unknown action succeeded")
			}
		case 2:
			_, err := h.Call(ctx, "bump", json.RawMessage(`"x"`))
			if err == nil {
				t.Fatal("bad args succeeded")
			}
		case 3:
			dctx, dcancel := context.WithTimeout(ctx, 20*time.Millisecond)
			_, err := h.Call(dctx, "slow", 100)
			dcancel()
			_ = err
		}
	}
	settleLeaks(t, n, "failed calls", base, 5, 10*time.Second)
}

func (v *view) connCount() (conns, peers int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.conns), len(v.peers)
}

// A peer that joins, serves forwarded calls and leaves, again and again:
// the staying node forgets it (connections, streams, goroutines, fds).
func TestChurnPeerJoinsAndLeaves(t *testing.T) {
	reg, err := rivet.Setup(churnActor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfgA := ClusterConfigForTest(t, "a", endpoints, "/leak-peer/", 8, nil)
	cfgA.Runtime.IdleTimeout = 200 * time.Millisecond
	a := StartForTest(t, ctx, cfgA, reg)
	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cycle := func(i int) {
		cfg := ClusterConfigForTest(t, fmt.Sprint("b", i), endpoints, "/leak-peer/", 8, []string{a.GossipAddr()})
		cfg.Runtime.IdleTimeout = 200 * time.Millisecond
		b, err := Start(ctx, cfg, reg)
		if err != nil {
			t.Fatal(err)
		}
		// Calls through a until one is forwarded to b.
		awaitCond(t, ctx, "a call forwarded to b", func() bool {
			before := a.view.forwards.Load()
			for k := range 8 {
				if _, err := c.Actor("churn", fmt.Sprint("p", i, "-", k)).Call(ctx, "slow", 0); err != nil {
					return false
				}
			}
			return a.view.forwards.Load() > before
		})
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		if err := b.Stop(sctx); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			conns, peers := a.view.connCount()
			if conns == 0 && peers == 0 {
				break
			}
			if time.Now().After(deadline) {
				a.view.mu.Lock()
				var addrs []string
				for addr := range a.view.conns {
					addrs = append(addrs, addr)
				}
				a.view.mu.Unlock()
				t.Fatalf("cycle %d: a keeps connections to %v (b was %s); registered: %v", i, addrs, b.GRPCAddr(), a.view.records())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	cycle(0)
	awaitCond(t, ctx, "a's balancer settled", a.BalancerSettledForTest)
	time.Sleep(time.Second)
	goruntime.GC()
	settleLeaks(t, a, "warm-up", leakSample{1 << 20, 1 << 20, 0}, 0, 10*time.Second)
	base := leakSample{goruntime.NumGoroutine(), countFDs(t), 0}
	for i := 1; i < 6; i++ {
		cycle(i)
	}
	settleLeaks(t, a, "peer churn", base, 5, 10*time.Second)
}

// Calls forwarded from a to b that fail (unknown action, bad arguments, a
// deadline passing mid-call), and subscriptions relayed by a to b whose
// subscribers vanish: nothing stays on either node.
func TestChurnForwardedFailuresAndRelayedSubscriptions(t *testing.T) {
	reg, err := rivet.Setup(churnActor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	start := func(id string, join []string) *Node {
		cfg := ClusterConfigForTest(t, id, endpoints, "/leak-fwd/", 8, join)
		cfg.Runtime.IdleTimeout = 200 * time.Millisecond
		return StartForTest(t, ctx, cfg, reg)
	}
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Keys of actors b serves.
	var keys []string
	awaitCond(t, ctx, "b to serve some actors", func() bool {
		keys = keys[:0]
		for k := range 64 {
			key := fmt.Sprint("fwd", k)
			p, err := a.host.PartitionOf(runtime.Ref{Name: "churn", Key: []string{key}})
			if err == nil && b.host.Owns(p) {
				if owner, _ := a.view.ownerOf(p); owner == "b" {
					keys = append(keys, key)
				}
			}
		}
		return len(keys) >= 4
	})
	keys = keys[:4]
	round := func(i int) {
		h := c.Actor("churn", keys[i%len(keys)])
		if _, err := h.Call(ctx, "nosuch"); err == nil {
			t.Fatal("unknown action succeeded")
		}
		if _, err := h.Call(ctx, "bump", json.RawMessage(`"x"`)); err == nil {
			t.Fatal("bad arguments succeeded")
		}
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Millisecond)
		if _, err := h.Call(dctx, "slow", 150); err == nil {
			t.Fatal("a call past its deadline succeeded")
		}
		dcancel()
		vc, err := client.New(a.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := vc.Actor("churn", keys[i%len(keys)]).Subscribe(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Call(ctx, "bump", 0); err != nil {
			t.Fatal(err)
		}
		vc.Close()
	}
	round(0)
	// The baseline is taken once the join's handoffs are over: goroutines
	// they still ran would raise it, and hide as many leaked ones.
	awaitCond(t, ctx, "both balancers settled", func() bool { return a.BalancerSettledForTest() && b.BalancerSettledForTest() })
	time.Sleep(500 * time.Millisecond)
	settleLeaks(t, a, "warm-up", leakSample{1 << 20, 1 << 20, 0}, 0, 10*time.Second)
	base := leakSample{goruntime.NumGoroutine(), countFDs(t), 0}
	for i := 1; i < 41; i++ {
		round(i)
	}
	settleLeaks(t, b, "forwarded failures", base, 5, 10*time.Second)
	for _, n := range []*Node{a, b} {
		if subs, streams, active := n.host.Stats().EventSubscribers, n.srv.Streams(), n.peers.Active(); subs != 0 || streams != 0 || active != 0 {
			t.Fatalf("%s: %d subscriptions, %d streams, %d forwarded requests", n.ID(), subs, streams, active)
		}
	}
}
