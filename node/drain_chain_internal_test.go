package node

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
)

// b drains while an action of X (on b) is in progress; it calls Y on a,
// whose action calls Z, another actor of X's partition. b's handoff of the
// partition waits for X's turn, which waits for Z: b serves Z on the
// partition's claim rather than refuse it (a retried the refusal for
// remoteRetryWait while the handoff waited, then the client's call failed
// with its outcome unknown), and hands Z off after it.
func TestADrainLetsInTheCallChainItWaitsFor(t *testing.T) {
	type st struct{ N int }
	var zRuns atomic.Int64
	entered, release := make(chan struct{}, 4), make(chan struct{})
	x := rivet.Actor[st]{
		Name: "chainX",
		Actions: rivet.Actions[st]{
			"relay": rivet.Action2(func(c *rivet.ActionCtx[st], yKey, zKey string) (int, error) {
				entered <- struct{}{}
				select {
				case <-release:
				case <-c.Context().Done():
					return 0, c.Context().Err()
				}
				return rivet.Call[int](c.Context(), c.Client().GetOrCreate("chainY", yKey), "bounce", zKey)
			}),
		},
	}
	y := rivet.Actor[st]{
		Name: "chainY",
		Actions: rivet.Actions[st]{
			"bounce": rivet.Action(func(c *rivet.ActionCtx[st], zKey string) (int, error) {
				return rivet.Call[int](c.Context(), c.Client().GetOrCreate("chainZ", zKey), "incr")
			}),
		},
	}
	z := rivet.Actor[st]{
		Name: "chainZ",
		Actions: rivet.Actions[st]{
			"incr": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { zRuns.Add(1); c.State.N++; return c.State.N, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil }),
		},
	}
	reg, err := rivet.Setup(x, y, z)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const parts = 8
	start := clusterStarter(t, ctx, reg, "/drain-chain-test/", parts)
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	// find returns the first key of actor type name whose partition
	// satisfies ok.
	find := func(name string, ok func(p uint32) bool) string {
		for i := range 100_000 {
			k := fmt.Sprint("k", i)
			p, err := b.host.PartitionOf(runtime.Ref{Name: name, Key: []string{k}})
			if err != nil {
				t.Fatal(err)
			}
			if ok(p) {
				return k
			}
		}
		t.Fatalf("no key of %s fits", name)
		return ""
	}
	xKey := find("chainX", b.host.Owns)
	p, _ := b.host.PartitionOf(runtime.Ref{Name: "chainX", Key: []string{xKey}})
	yKey := find("chainY", a.host.Owns)
	zKey := find("chainZ", func(q uint32) bool { return q == p })

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
		n, err := rivet.Call[int](ctx, c.GetOrCreate("chainX", xKey), "relay", yKey, zKey)
		done <- answer{n, err}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the relay never started")
	}
	if _, err := (backend{b.host, b}).Drain(ctx, "", false); err != nil {
		t.Fatalf("drain b: %v", err)
	}
	awaitCond(t, ctx, "b to begin handing off X's partition", func() bool { _, releasing := b.own.Releasing(p); return releasing })
	close(release)
	// Refused, Z's call was retried for remoteRetryWait while the handoff
	// waited for X, and the relay failed with its outcome unknown.
	got := <-done
	if got.err != nil || got.n != 1 {
		t.Fatalf("relay = %d, %v; want 1", got.n, got.err)
	}
	if n := zRuns.Load(); n != 1 {
		t.Errorf("Z's action ran %d times, want once", n)
	}
	awaitCond(t, ctx, "b to hand off every partition", func() bool {
		return b.own.Owned() == 0 && !b.own.Holds(p)
	})
	if b.host.Owns(p) || b.host.Stats().ActiveActors != 0 {
		t.Errorf("b still serves %d actors after its drain", b.host.Stats().ActiveActors)
	}
	if n, err := rivet.Call[int](ctx, c.Get("chainZ", zKey), "get"); err != nil || n != 1 {
		t.Errorf("Z's count after the move = %d, %v; want 1", n, err)
	}
}
