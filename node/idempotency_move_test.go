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
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// The same keyed send, from two clients through two nodes at once, is
// queued once; sent again after the actor moved (a drain) and after its
// node restarted, it is still a duplicate of the same message; and the key
// with another body is refused.
func TestAKeyedSendIsQueuedOnceAcrossNodesMovesAndRestarts(t *testing.T) {
	reg, err := rivet.Setup(inbox)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const prefix = "/keyedmove/"
	endpoints := etcdtest.Start(t)
	na := startNode(t, ctx, clusterConfig(t, "a", endpoints, prefix, eventParts, nil), reg)
	bcfg := clusterConfig(t, "b", endpoints, prefix, eventParts, []string{na.GossipAddr()})
	nb := startNode(t, ctx, bcfg, reg)
	waitPlaced(t, time.Minute, eventParts, na, nb)
	ca := dial(t, na)
	cb := dial(t, nb)
	to := keysOn(nb, "inbox", "i", 1)[0]

	const rounds = 20
	ids := map[string]uint64{}
	for i := range rounds {
		key := fmt.Sprintf("k%d", i)
		var wg sync.WaitGroup
		res := make([]client.SendResult, 2)
		errs := make([]error, 2)
		for j, c := range []*client.Client{ca, cb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[j], errs[j] = c.Actor("inbox", to).SendWith(ctx, "q", i, client.SendOptions{IdempotencyKey: key})
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: %v, %v", i, errs[0], errs[1])
		}
		if res[0].MessageID != res[1].MessageID || res[0].Duplicate == res[1].Duplicate {
			t.Fatalf("round %d: %+v and %+v, want one message and one duplicate of it", i, res[0], res[1])
		}
		ids[key] = res[0].MessageID
	}
	depth := func() uint64 {
		t.Helper()
		in, err := ca.Actor("inbox", to).NoCreate().Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range in.Queues {
			if q.Queue == "q" {
				return q.Depth
			}
		}
		return 0
	}
	again := func(when string, cs ...*client.Client) {
		t.Helper()
		for i := range rounds {
			key := fmt.Sprintf("k%d", i)
			for _, c := range cs {
				r, err := c.Actor("inbox", to).SendWith(ctx, "q", i, client.SendOptions{IdempotencyKey: key})
				if err != nil || !r.Duplicate || r.MessageID != ids[key] {
					t.Fatalf("%s: key %s again: %+v, %v; want the duplicate of message %d", when, key, r, err, ids[key])
				}
			}
		}
		if _, err := cs[len(cs)-1].Actor("inbox", to).SendWith(ctx, "q", 999, client.SendOptions{IdempotencyKey: "k0"}); !errors.Is(err, rivet.ErrInvalidArgument) {
			t.Fatalf("%s: key k0 with another body: %v, want INVALID_ARGUMENT", when, err)
		}
		if d := depth(); d != rounds {
			t.Fatalf("%s: queue q holds %d messages, want %d", when, d, rounds)
		}
	}
	again("before any move", ca, cb)

	if _, err := ca.Drain(ctx, "b", false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "b owns nothing", time.Minute, func() bool { return nb.Ownership().Owned() == 0 })
	again("after b was drained", ca, cb)
	if _, err := ca.Drain(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	waitPlaced(t, time.Minute, eventParts, na, nb)
	again("after b came back", ca, cb)

	// b stops and starts again under its ID: the actor moves to a and
	// back, through a node that holds no memory of the keys.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := nb.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	again("while b is stopped", ca)
	nb = startNode(t, ctx, bcfg, reg)
	waitPlaced(t, time.Minute, eventParts, na, nb)
	cb.Close()
	if cb, err = client.New(nb.GRPCAddr()); err != nil {
		t.Fatal(err)
	}
	again("after b restarted", ca, cb)
}
