package node_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/workflow"
)

type hubState struct {
	N int `json:"n"`
}

// A call chain keeps its path across nodes: a hub on node a calls two
// spokes on node b at once; each calls the hub back, and each of those
// re-entrant turns calls its spoke, which calls the hub again. The nested
// calls re-enter (on both nodes), and the two calls back into the hub take
// turns: neither deadlocks, and neither loses the other's change.
func TestSiblingCallsBackIntoAnActorTakeTurnsAcrossNodes(t *testing.T) {
	var inside, most atomic.Int32
	entered := make(chan string, 2)
	release := make(chan struct{}, 2)
	hub := rivet.Actor[hubState]{
		Name: "hub",
		Actions: rivet.Actions[hubState]{
			"fanOut": rivet.Action(func(c *rivet.ActionCtx[hubState], spokes []string) (int, error) {
				var wg sync.WaitGroup
				errs := make([]error, len(spokes))
				for i, s := range spokes {
					wg.Go(func() {
						_, errs[i] = c.Client().Get("spoke", s).Call(c.Context(), "poke", c.Key()[0])
					})
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					return 0, err
				}
				return c.State.N, nil
			}),
			"bump": rivet.Action(func(c *rivet.ActionCtx[hubState], spoke string) (int, error) {
				n := inside.Add(1)
				defer inside.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				seen, err := rivet.Call[int](c.Context(), c.Client().Get("spoke", spoke), "echo", c.Key()[0])
				if err != nil {
					return 0, fmt.Errorf("nested call: %w", err)
				}
				entered <- spoke
				select {
				case <-release:
				case <-c.Context().Done():
					return 0, c.Context().Err()
				}
				c.State.N = seen + 1
				return c.State.N, nil
			}),
			"peek": rivet.Query(func(c *rivet.ActionCtx[hubState]) (int, error) { return c.State.N, nil }),
		},
	}
	spoke := rivet.Actor[hubState]{
		Name: "spoke",
		Actions: rivet.Actions[hubState]{
			"poke": rivet.Action(func(c *rivet.ActionCtx[hubState], hubKey string) (int, error) {
				return rivet.Call[int](c.Context(), c.Client().Get("hub", hubKey), "bump", c.Key()[0])
			}),
			"echo": rivet.Action(func(c *rivet.ActionCtx[hubState], hubKey string) (int, error) {
				return rivet.Call[int](c.Context(), c.Client().Get("hub", hubKey), "peek")
			}),
		},
	}
	reg, err := rivet.Setup(hub, spoke)
	if err != nil {
		t.Fatal(err)
	}
	const parts = 16
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	endpoints := etcdtest.Start(t)
	na := startNode(t, ctx, clusterConfig(t, "a", endpoints, "/hub/", parts, nil), reg)
	nb := startNode(t, ctx, clusterConfig(t, "b", endpoints, "/hub/", parts, []string{na.GossipAddr()}), reg)
	waitUntil(t, "both nodes own partitions", time.Minute, func() bool {
		oa, ob := na.Ownership().Owned(), nb.Ownership().Owned()
		return oa > 0 && ob > 0 && oa+ob == parts
	})
	// The hub on node a, the spokes on node b.
	keyOn := func(name string, owner interface{ Owns(uint32) bool }, n int) []string {
		var keys []string
		for i := 0; len(keys) < n; i++ {
			k := fmt.Sprintf("%s-%d", name, i)
			if owner.Owns(placement.Partition(name, storage.EncodeKey([]string{k}), parts)) {
				keys = append(keys, k)
			}
		}
		return keys
	}
	hubKey := keyOn("hub", na.Host(), 1)[0]
	spokes := keyOn("spoke", nb.Host(), 2)
	c, err := client.New(nb.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.GetOrCreate("hub", hubKey).Call(ctx, "peek"); err != nil {
		t.Fatal(err)
	}
	for _, s := range spokes {
		if _, err := c.GetOrCreate("spoke", s).Call(ctx, "echo", hubKey); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		n   int
		err error
	}
	calls0 := na.Host().Stats().Calls
	done := make(chan result, 1)
	go func() {
		n, err := rivet.Call[int](ctx, c.Get("hub", hubKey), "fanOut", spokes)
		done <- result{n, err}
	}()
	var first string
	select {
	case first = <-entered:
	case r := <-done:
		t.Fatalf("fanOut ended before a bump entered: %d, %v", r.n, r.err)
	case <-ctx.Done():
		t.Fatal("no bump entered")
	}
	// Four calls reach the hub's node: the fan-out, both bumps and the
	// first one's nested peek. The second bump is then in, waiting.
	waitUntil(t, "the second bump to reach node a", 30*time.Second, func() bool { return na.Host().Stats().Calls >= calls0+4 })
	release <- struct{}{}
	select {
	case second := <-entered:
		if second == first {
			t.Fatalf("both bumps came from %s", first)
		}
	case r := <-done:
		t.Fatalf("fanOut ended with one bump: %d, %v", r.n, r.err)
	case <-ctx.Done():
		t.Fatal("the second bump never entered")
	}
	release <- struct{}{}
	select {
	case r := <-done:
		if r.err != nil || r.n != 2 {
			t.Fatalf("fanOut = %d, %v; want 2", r.n, r.err)
		}
	case <-ctx.Done():
		t.Fatal("fanOut did not end")
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d bumps ran in the hub at once, want 1", m)
	}
}

// An actor on one node waits for the workflow of an actor on another to
// complete its message (rivet.SendWait through the node's Remote).
func TestAnActorWaitsForACompletionOnAnotherNode(t *testing.T) {
	type st struct{}
	doubler := rivet.Actor[st]{
		Name:   "doubler",
		Queues: rivet.Queues{"ask": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[st]) error {
			return ctx.Loop("serve", func(lc *workflow.Ctx[st]) error {
				msg, err := workflow.Next[int](lc, "wait-ask")
				if err != nil {
					return err
				}
				return msg.Complete(msg.Body * 2)
			})
		},
	}
	asker := rivet.Actor[st]{
		Name: "asker",
		Actions: rivet.Actions[st]{
			"ask": rivet.Action(func(c *rivet.ActionCtx[st], args struct {
				Key string `json:"key"`
				V   int    `json:"v"`
			}) (rivet.SendResult, error) {
				return rivet.SendWait(c.Context(), c.Client().GetOrCreate("doubler", args.Key), "ask", args.V, 20*time.Second)
			}),
		},
	}
	reg, err := rivet.Setup(doubler, asker)
	if err != nil {
		t.Fatal(err)
	}
	const parts = 16
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	endpoints := etcdtest.Start(t)
	na := startNode(t, ctx, clusterConfig(t, "a", endpoints, "/ask/", parts, nil), reg)
	nb := startNode(t, ctx, clusterConfig(t, "b", endpoints, "/ask/", parts, []string{na.GossipAddr()}), reg)
	waitUntil(t, "both nodes own partitions", time.Minute, func() bool {
		oa, ob := na.Ownership().Owned(), nb.Ownership().Owned()
		return oa > 0 && ob > 0 && oa+ob == parts
	})
	keyOn := func(name string, owner interface{ Owns(uint32) bool }) string {
		for i := 0; ; i++ {
			k := fmt.Sprintf("%s-%d", name, i)
			if owner.Owns(placement.Partition(name, storage.EncodeKey([]string{k}), parts)) {
				return k
			}
		}
	}
	c, err := client.New(na.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	args := map[string]any{"key": keyOn("doubler", na.Host()), "v": 21}
	res, err := rivet.Call[rivet.SendResult](ctx, c.GetOrCreate("asker", keyOn("asker", nb.Host())), "ask", args)
	if err != nil || res.Status != rivet.SendCompleted || string(res.Response) != "42" {
		t.Fatalf("ask across nodes: %+v, %v; want completed with 42", res, err)
	}
}
