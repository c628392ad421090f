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

// b stops while an action of X (on b) is in progress; it calls Y on a,
// whose action calls back into X. b's stop waits for X's turn, which waits
// for Y, which waits for its call back: b serves its peers' streams until
// no request is in progress on its host, so Y's call back reaches b, which
// lets it in as a call that a turn in flight waits for. b shut its peer
// streams and its gRPC server at once: a retried forwarding the call until
// it gave up (about 11 s), the stop waited that long, and the client's
// call failed (a trial of a Dapr-style A -> B -> A at a SIGTERM). Nothing
// else gets in meanwhile: a client's call through b is refused, not
// forwarded. The client calls X through a, which forwards it to b, so that
// a has a stream to b open as b stops; or through b, so that Y's call back
// opens a's first stream to b during b's stop.
func TestAStopLetsInACallBackThroughAnotherNode(t *testing.T) {
	for _, through := range []string{"a", "b"} {
		t.Run("through "+through, func(t *testing.T) { testAStopLetsInACallBack(t, through) })
	}
}

func testAStopLetsInACallBack(t *testing.T, through string) {
	type st struct{ N int }
	// hold is how long Y's action takes before it calls back: the
	// chain's own time, which the stop waits for.
	const hold = 500 * time.Millisecond
	entered, release := make(chan struct{}, 4), make(chan struct{})
	x := rivet.Actor[st]{
		Name: "stopX",
		Actions: rivet.Actions[st]{
			"relay": rivet.Action(func(c *rivet.ActionCtx[st], yKey string) (int, error) {
				entered <- struct{}{}
				select {
				case <-release:
				case <-c.Context().Done():
					return 0, c.Context().Err()
				}
				n, err := rivet.Call[int](c.Context(), c.Client().GetOrCreate("stopY", yKey), "bounce", c.Key()[0])
				if err != nil {
					return 0, err
				}
				c.State.N += n
				return c.State.N, nil
			}),
			"back": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N += 10; return 10, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil }),
		},
	}
	y := rivet.Actor[st]{
		Name: "stopY",
		Actions: rivet.Actions[st]{
			"bounce": rivet.Action(func(c *rivet.ActionCtx[st], xKey string) (int, error) {
				select {
				case <-time.After(hold):
				case <-c.Context().Done():
					return 0, c.Context().Err()
				}
				n, err := rivet.Call[int](c.Context(), c.Client().GetOrCreate("stopX", xKey), "back")
				return n + 1, err
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil }),
		},
	}
	reg, err := rivet.Setup(x, y)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const parts = 8
	start := clusterStarter(t, ctx, reg, "/stop-chain-test/", parts)
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	find := func(name string, n *Node, prefix string) string {
		for i := range 100_000 {
			k := fmt.Sprint(prefix, i)
			p, err := n.host.PartitionOf(runtime.Ref{Name: name, Key: []string{k}})
			if err != nil {
				t.Fatal(err)
			}
			if n.host.Owns(p) {
				return k
			}
		}
		t.Fatalf("no key of %s on %s", name, n.ID())
		return ""
	}
	xKey, yKey := find("stopX", b, "k"), find("stopY", a, "k")
	// An actor of b that does not exist: NOT_FOUND, until b refuses
	// requests (UNAVAILABLE).
	probe := runtime.Ref{Name: "stopX", Key: []string{find("stopX", b, "probe")}}
	// An actor of a that no one has made: b must not forward its create
	// while it stops.
	fresh := find("stopY", a, "fresh")

	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cb, err := client.New(b.GRPCAddr(), client.WithRetry(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	type answer struct {
		n   int
		err error
		at  time.Time
	}
	done := make(chan answer, 1)
	relayVia := c
	if through == "b" {
		relayVia = cb
	}
	go func() {
		cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
		defer ccancel()
		n, err := rivet.Call[int](cctx, relayVia.GetOrCreate("stopX", xKey), "relay", yKey)
		done <- answer{n, err, time.Now()}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the relay never started")
	}
	a.view.mu.Lock()
	_, streamToB := a.view.peers[b.GRPCAddr()]
	a.view.mu.Unlock()
	if want := through == "a"; streamToB != want {
		t.Fatalf("a forwards to b: %v, want %v", streamToB, want)
	}
	type stopped struct {
		err error
		at  time.Time
	}
	stop := make(chan stopped, 1)
	began := time.Now()
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		err := b.Stop(sctx)
		stop <- stopped{err, time.Now()}
	}()
	awaitCond(t, ctx, "b to begin its stop", func() bool {
		_, err := b.host.Get(ctx, probe)
		return errors.Is(err, rivet.ErrUnavailable)
	})
	// b still serves its peers, and so its clients' connections, while
	// the relay lasts: a call through it is refused, not forwarded to a.
	if _, err := rivet.Call[int](ctx, cb.GetOrCreate("stopY", fresh), "get"); !errors.Is(err, rivet.ErrUnavailable) {
		t.Errorf("a call through b as it stops = %v; want it refused as unavailable", err)
	}
	released := time.Now()
	close(release)
	got := <-done
	if got.err != nil || got.n != 21 {
		t.Fatalf("relay = %d, %v; want 21", got.n, got.err)
	}
	s := <-stop
	if s.err != nil {
		t.Fatalf("stop b: %v", s.err)
	}
	// The stop waits for the chain, not for a forwarding that retries in
	// vain (about 11 s). A bound for a hang, not a speed target.
	chain, took := got.at.Sub(began), s.at.Sub(began)
	t.Logf("b's stop took %v, the chain %v into it (released %v into it)", took, chain, released.Sub(began))
	if took > released.Sub(began)+hold+5*time.Second {
		t.Errorf("b's stop took %v, the chain %v (released %v into the stop)", took, chain, released.Sub(began))
	}
	if n, err := rivet.Call[int](ctx, c.Get("stopX", xKey), "get"); err != nil || n != 21 {
		t.Errorf("X after the stop = %d, %v; want 21", n, err)
	}
	if _, err := rivet.Call[int](ctx, c.Get("stopY", fresh), "get"); !errors.Is(err, rivet.ErrNotFound) {
		t.Errorf("the actor called through b as it stopped: %v; want it never made (not found)", err)
	}
}
