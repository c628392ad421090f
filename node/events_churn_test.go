package node_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// While a counter is incremented without pause and moves between two
// nodes (drains, a restart of its node), each of its subscribers (one
// through each node) hears its counts in order, each at most once, and
// between two gaps with none missing: a subscriber learns of every place
// where it may have missed some.
func TestSubscribersHearEveryCountOrAGapWhileTheActorMoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "/evchurn/"
	endpoints := etcdtest.Start(t)
	na := startNode(t, ctx, clusterConfig(t, "a", endpoints, prefix, eventParts, nil), reg)
	bcfg := clusterConfig(t, "b", endpoints, prefix, eventParts, []string{na.GossipAddr()})
	nb := startNode(t, ctx, bcfg, reg)
	waitPlaced(t, time.Minute, eventParts, na, nb)
	key := counterOn(nb, "churn")

	// Clients given both nodes, so that each goes on while one is down.
	cs := make([]*client.Client, 2)
	for i, addrs := range []string{na.GRPCAddr() + "," + nb.GRPCAddr(), nb.GRPCAddr() + "," + na.GRPCAddr()} {
		c, err := client.New(addrs)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	if _, err := cs[0].Actor("counter", key).Call(ctx, "increment", 1); err != nil {
		t.Fatal(err)
	}
	// What each subscriber heard, under mu: its last count since its last
	// gap (-1: none yet), its gaps, its events, the first wrong thing.
	type heard struct {
		last, gaps, events int
		err, end           error
	}
	var mu sync.Mutex
	results := make([]heard, len(cs))
	subs := make([]*client.Subscription, len(cs))
	for i, c := range cs {
		sub, err := c.Actor("counter", key).Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		subs[i] = sub
	}
	var readers sync.WaitGroup
	for i, sub := range subs {
		readers.Add(1)
		go func() {
			defer readers.Done()
			last := -1
			for {
				ev, err := sub.Next(ctx)
				mu.Lock()
				r := &results[i]
				switch {
				case err != nil:
					r.end = err
				case ev.Gap:
					r.gaps++
					last = -1
				default:
					var n int
					if err := ev.Decode(&n); err != nil {
						r.err = err
					} else if r.events++; last >= 0 && n != last+1 {
						r.err = fmt.Errorf("heard %d after %d with no gap between", n, last)
					}
					last = n
				}
				r.last = last
				done := r.err != nil || r.end != nil
				mu.Unlock()
				if done {
					return
				}
			}
		}()
	}

	// Increments without pause, through either node; count is the last
	// one's.
	stop := make(chan struct{})
	var caller sync.WaitGroup
	caller.Add(1)
	count := 1
	go func() {
		defer caller.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := rivet.Call[int](cctx, cs[i%2].Actor("counter", key), "increment", 1)
			ccancel()
			if err == nil {
				mu.Lock()
				count = n
				mu.Unlock()
			}
		}
	}()
	// live waits until each subscriber has heard a count made after now:
	// it is subscribed again after the last move.
	live := func(what string) {
		t.Helper()
		mu.Lock()
		now := count
		mu.Unlock()
		waitUntil(t, "the subscribers hear counts past "+what, time.Minute, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range results {
				if r.err != nil || r.end != nil {
					return true
				}
				if r.last <= now {
					return false
				}
			}
			return true
		})
	}

	live("the start")
	for range 2 {
		if _, err := cs[0].Drain(ctx, "b", false); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "b owns nothing", time.Minute, func() bool { return nb.Ownership().Owned() == 0 })
		live("a drain")
		if _, err := cs[0].Drain(ctx, "b", true); err != nil {
			t.Fatal(err)
		}
		waitPlaced(t, time.Minute, eventParts, na, nb)
		live("an undrain")
	}
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := nb.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	live("b's stop")
	nb = startNode(t, ctx, bcfg, reg)
	waitPlaced(t, time.Minute, eventParts, na, nb)
	live("b's restart")
	close(stop)
	caller.Wait()
	for _, sub := range subs {
		sub.Close()
	}
	readers.Wait()
	for i, r := range results {
		if r.err != nil {
			t.Errorf("subscriber %d: %v", i, r.err)
		}
		if !errors.Is(r.end, client.ErrSubscriptionClosed) {
			t.Errorf("subscriber %d ended with %v, before it was closed", i, r.end)
		}
		if r.gaps == 0 {
			t.Errorf("subscriber %d heard no gap, across its actor's moves", i)
		}
	}
}
