package node_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

type burstState struct {
	N int `json:"n"`
}

// burstActor's hold takes the actor's turn until release closes (or its
// context ends); bump counts the calls that ran.
func burstActor(held chan<- struct{}, release <-chan struct{}) rivet.Actor[burstState] {
	return rivet.Actor[burstState]{
		Name: "burst",
		Actions: rivet.Actions[burstState]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[burstState]) (int, error) {
				held <- struct{}{}
				select {
				case <-release:
				case <-c.Context().Done():
				}
				return c.State.N, nil
			}),
			"bump": rivet.Action0(func(c *rivet.ActionCtx[burstState]) (int, error) {
				c.State.N++
				return c.State.N, nil
			}),
		},
	}
}

// A burst of calls to one actor beyond --max-waiting-calls: the node
// refuses the calls past the limit (UNAVAILABLE actor.overloaded, counted
// in /metrics) and the Go client retries them with backoff, so that every
// call of the burst runs, once.
func TestABurstPastMaxWaitingCallsRunsEveryCallOnceThroughTheClientsRetries(t *testing.T) {
	held, release := make(chan struct{}, 1), make(chan struct{})
	burst := burstActor(held, release)
	reg, err := rivet.Setup(burst)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.Logger = zap.NewNop()
	cfg.Runtime.MaxWaitingCalls = 2
	n := startNode(t, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := c.GetOrCreate("burst", "b")
	if _, err := rivet.Call[int](ctx, h, "bump"); err != nil {
		t.Fatal(err)
	}
	holding := make(chan error, 1)
	go func() { _, err := rivet.Call[int](ctx, h, "hold"); holding <- err }()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("hold did not start")
	}
	const calls = 8
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			_, err := rivet.Call[int](ctx, h, "bump")
			errs <- err
		})
	}
	// Until the node has refused some (the calls past the first two).
	deadline := time.Now().Add(time.Minute)
	for n.Host().Stats().CallsShed < calls-2 {
		if time.Now().After(deadline) {
			t.Fatalf("the node refused %d calls, want at least %d", n.Host().Stats().CallsShed, calls-2)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if err := <-holding; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call of the burst failed: %v (the client should have retried it)", err)
		}
	}
	if got, err := rivet.Call[int](ctx, h, "bump"); err != nil || got != 1+calls+1 {
		t.Fatalf("n = %d, %v after 1 + %d + 1 bumps: each ran once", got, err, calls)
	}
	_, metrics := get(t, "http://"+n.HTTPAddr()+"/metrics")
	if !strings.Contains(metrics, "rivet_calls_shed_total ") || strings.Contains(metrics, "rivet_calls_shed_total 0\n") {
		t.Errorf("/metrics counts no refused call:\n%s", grepLines(metrics, "shed"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// In a cluster, a client's call forwarded to the owner of an actor with
// --max-waiting-calls turns waiting is refused there (counted on the
// owner), while calls actors make to it from another node (an action's,
// a KeepAwake task's: they carry a chain across the hop) wait for their
// turn and run.
func TestOnlyAClientsCallIsRefusedAsOverloadedAcrossNodes(t *testing.T) {
	held, release := make(chan struct{}, 1), make(chan struct{})
	taskErr := make(chan error, 1)
	burst := burstActor(held, release)
	relay := rivet.Actor[burstState]{
		Name: "relay",
		Actions: rivet.Actions[burstState]{
			// An action's call to burst (on the other node).
			"bump": rivet.Action(func(c *rivet.ActionCtx[burstState], key string) (int, error) {
				return rivet.Call[int](c.Context(), c.Client().Get("burst", key), "bump")
			}),
			// A KeepAwake task's call to burst, whose error goes to taskErr.
			"bumpLater": rivet.Action(func(c *rivet.ActionCtx[burstState], key string) (bool, error) {
				return true, c.KeepAwake(func(ctx context.Context, cl rivet.Client) {
					_, err := rivet.Call[int](ctx, cl.Get("burst", key), "bump")
					taskErr <- err
				})
			}),
		},
	}
	reg, err := rivet.Setup(burst, relay)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	endpoints := etcdtest.Start(t)
	const prefix = "/overload/"
	cfgA := clusterConfig(t, "a", endpoints, prefix, eventParts, nil)
	cfgA.Runtime.MaxWaitingCalls = 2
	na := startNode(t, ctx, cfgA, reg)
	cfgB := clusterConfig(t, "b", endpoints, prefix, eventParts, []string{na.GossipAddr()})
	cfgB.Runtime.MaxWaitingCalls = 2
	nb := startNode(t, ctx, cfgB, reg)
	waitPlaced(t, time.Minute, eventParts, na, nb)
	key, relayKeys := keysOn(nb, "burst", "f", 1)[0], keysOn(na, "relay", "r", 3)
	ca, err := client.New(na.GRPCAddr()) // every call goes through a; burst is on b
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	h := ca.GetOrCreate("burst", key)
	if _, err := rivet.Call[int](ctx, h, "bump"); err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		for _, ha := range nb.Host().HotActors(10) {
			if ha.Ref.Name == "burst" {
				return ha.Waiting
			}
		}
		return -1
	}
	holding := make(chan error, 1)
	go func() { _, err := rivet.Call[int](ctx, h, "hold"); holding <- err }()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("hold did not start")
	}
	// An action's call and a client's wait: the limit of 2. Then a
	// KeepAwake task's call and an action's come past it, and wait too.
	relayed := make(chan error, 2)
	relayTo := func(k string) {
		go func() {
			_, err := rivet.Call[int](ctx, ca.GetOrCreate("relay", k), "bump", key)
			relayed <- err
		}()
	}
	relayTo(relayKeys[0])
	waitUntil(t, "the relayed call waiting on b", time.Minute, func() bool { return waiting() == 1 })
	clientWaiting := make(chan error, 1)
	go func() { _, err := rivet.Call[int](ctx, h, "bump"); clientWaiting <- err }()
	waitUntil(t, "the client's call waiting on b", time.Minute, func() bool { return waiting() == 2 })
	// Another relay: the first's turn waits for burst.
	if _, err := rivet.Call[bool](ctx, ca.GetOrCreate("relay", relayKeys[1]), "bumpLater", key); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the task's call waiting on b", time.Minute, func() bool {
		select {
		case err := <-taskErr:
			t.Fatalf("the task's call ended before hold did: %v", err)
		default:
		}
		return waiting() == 3
	})
	relayTo(relayKeys[2])
	waitUntil(t, "a second relayed call waiting on b", time.Minute, func() bool { return waiting() == 4 })

	// The next client call, through a, is refused by b (a client without
	// retries, to see the refusal itself).
	nc, err := client.New(na.GRPCAddr(), client.WithRetry(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, err = rivet.Call[int](ctx, nc.Get("burst", key), "bump")
	var rerr *rivet.Error
	if !errors.Is(err, rivet.ErrUnavailable) || !errors.As(err, &rerr) || rerr.Code != "overloaded" {
		t.Fatalf("a client's call behind 4 waiting turns on b: %v; want UNAVAILABLE actor.overloaded", err)
	}
	if a, b := na.Host().Stats().CallsShed, nb.Host().Stats().CallsShed; a != 0 || b != 1 {
		t.Fatalf("refusals counted on a %d, on b %d; want 0 and 1 (the owner's)", a, b)
	}

	close(release)
	for _, w := range []struct {
		what string
		ch   chan error
	}{{"hold", holding}, {"a relayed call", relayed}, {"a relayed call", relayed}, {"the task's call", taskErr}, {"the waiting client call", clientWaiting}} {
		select {
		case err := <-w.ch:
			if err != nil {
				t.Fatalf("%s: %v", w.what, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s did not end", w.what)
		}
	}
	if got, err := rivet.Call[int](ctx, h, "bump"); err != nil || got != 6 {
		t.Fatalf("n = %d, %v; want 6: the first bump, the four that waited and this one", got, err)
	}
}
