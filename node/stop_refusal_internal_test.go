package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
)

// While a node's stop is held open by a turn in flight, its connections
// get no GOAWAY, and a client of several addresses (round_robin) keeps
// sending it calls, which it refuses (node.stopping). The client retries
// them at once on another address: it waited a backoff (25-50 ms) for each
// instead, which slowed its calls about twelvefold for as long as the turn
// lasted. The clients' first backoff here is past their retry budget, so
// that a refusal retried only after a backoff fails the call. A client of
// the stopping node alone gets the refusal (its backoff stays).
func TestAClientOfSeveralNodesRetriesAStoppingNodesRefusalAtOnce(t *testing.T) {
	type st struct{ N int }
	entered, release := make(chan struct{}, 1), make(chan struct{})
	w := rivet.Actor[st]{Name: "stopW", Actions: rivet.Actions[st]{
		"hold": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-c.Context().Done():
			}
			return 0, nil
		}),
		"inc": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N++; return c.State.N, nil }),
	}}
	reg, err := rivet.Setup(w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const parts = 8
	start := clusterStarter(t, ctx, reg, "/stop-refusal-test/", parts)
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	keys := func(n *Node, prefix string, want int) []string {
		var out []string
		for i := 0; len(out) < want && i < 100_000; i++ {
			k := fmt.Sprint(prefix, i)
			p, err := n.host.PartitionOf(runtime.Ref{Name: "stopW", Key: []string{k}})
			if err != nil {
				t.Fatal(err)
			}
			if n.host.Owns(p) {
				out = append(out, k)
			}
		}
		if len(out) < want {
			t.Fatalf("%d keys of %s, want %d", len(out), n.ID(), want)
		}
		return out
	}
	onA, onB := keys(a, "a", 8), keys(b, "b", 1)
	noBackoff := client.WithRetry(time.Hour, time.Minute)
	c, err := client.New(a.GRPCAddr()+","+b.GRPCAddr(), noBackoff)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cb, err := client.New(b.GRPCAddr(), noBackoff)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	for _, k := range onA {
		if _, err := rivet.Call[int](ctx, c.GetOrCreate("stopW", k), "inc"); err != nil {
			t.Fatal(err)
		}
	}
	held := make(chan error, 1)
	go func() {
		_, err := rivet.Call[int](ctx, cb.GetOrCreate("stopW", onB[0]), "hold")
		held <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the holding turn never started")
	}
	stopped := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		stopped <- b.Stop(sctx)
	}()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	awaitCond(t, ctx, "b to refuse new calls", b.closing.Load)
	// Half of these go to b (round_robin), whose every refusal a backoff
	// would turn into a failure.
	const calls = 40
	for i := range calls {
		if _, err := rivet.Call[int](ctx, c.GetOrCreate("stopW", onA[i%len(onA)]), "inc"); err != nil {
			t.Fatalf("call %d while b's stop is held open: %v", i, err)
		}
	}
	var rerr *rivet.Error
	if _, err := rivet.Call[int](ctx, cb.GetOrCreate("stopW", onA[0]), "inc"); !errors.Is(err, rivet.ErrUnavailable) || !errors.As(err, &rerr) || rerr.Group != "node" || rerr.Code != "stopping" {
		t.Errorf("a call to b alone as it stops = %v; want it refused UNAVAILABLE node.stopping", err)
	}
	close(release)
	if err := <-held; err != nil {
		t.Errorf("the holding turn: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("stop b: %v", err)
	}
}
