package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/testactors"
	"github.com/rivet-go/rivet/workflow"
)

// A call chain keeps its path across nodes: a hub on node a calls two
// spokes on node b at once; each calls the hub back, and each of those
// re-entrant turns calls its spoke, which calls the hub again. The nested
// calls re-enter (on both nodes), and the two calls back into the hub take
// turns: neither deadlocks, and neither loses the other's change.
func TestSiblingCallsBackIntoAnActorTakeTurnsAcrossNodes(t *testing.T) {
	p := testactors.NewHubProbe()
	reg, err := rivet.Setup(testactors.Hub(p), testactors.Spoke())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/hub/")
	// The hub on node a, the spokes on node b.
	hubKey := keysOn(na, "hub", "hub", 1)[0]
	spokes := keysOn(nb, "spoke", "spoke", 2)
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
	case first = <-p.Entered:
	case r := <-done:
		t.Fatalf("fanOut ended before a bump entered: %d, %v", r.n, r.err)
	case <-ctx.Done():
		t.Fatal("no bump entered")
	}
	// Four calls reach the hub's node: the fan-out, both bumps and the
	// first one's nested peek. The second bump is then in, waiting.
	waitUntil(t, "the second bump to reach node a", 30*time.Second, func() bool { return na.Host().Stats().Calls >= calls0+4 })
	p.Release <- struct{}{}
	select {
	case second := <-p.Entered:
		if second == first {
			t.Fatalf("both bumps came from %s", first)
		}
	case r := <-done:
		t.Fatalf("fanOut ended with one bump: %d, %v", r.n, r.err)
	case <-ctx.Done():
		t.Fatal("the second bump never entered")
	}
	p.Release <- struct{}{}
	select {
	case r := <-done:
		if r.err != nil || r.n != 2 {
			t.Fatalf("fanOut = %d, %v; want 2", r.n, r.err)
		}
	case <-ctx.Done():
		t.Fatal("fanOut did not end")
	}
	if m := p.Most(); m != 1 {
		t.Fatalf("%d bumps ran in the hub at once, want 1", m)
	}
}

// An actor on one node waits for the workflow of an actor on another to
// complete its message (rivet.SendWait through the node's Remote); a wait
// on an actor whose turn its own call chain holds on the other node is
// refused there, not waited out.
func TestAnActorWaitsForACompletionOnAnotherNode(t *testing.T) {
	type st struct{}
	serve := func(queue string) func(ctx *workflow.Ctx[st]) error {
		return func(ctx *workflow.Ctx[st]) error {
			return ctx.Loop("serve", func(lc *workflow.Ctx[st]) error {
				msg, err := workflow.Next[int](lc, "wait-"+queue)
				if err != nil {
					return err
				}
				return msg.Complete(msg.Body * 2)
			})
		}
	}
	doubler := rivet.Actor[st]{
		Name:   "doubler",
		Queues: rivet.Queues{"ask": rivet.QueueOf[int]()},
		Actions: rivet.Actions[st]{
			// askBack waits on the asker whose turn called it.
			"askBack": rivet.Action(func(c *rivet.ActionCtx[st], key string) (rivet.SendResult, error) {
				return rivet.SendWait(c.Context(), c.Client().Get("asker", key), "self", 1, 5*time.Second)
			}),
		},
		Run: serve("ask"),
	}
	asker := rivet.Actor[st]{
		Name:   "asker",
		Queues: rivet.Queues{"self": rivet.QueueOf[int]()},
		Run:    serve("self"),
		Actions: rivet.Actions[st]{
			"viaPeer": rivet.Action(func(c *rivet.ActionCtx[st], key string) (rivet.SendResult, error) {
				return rivet.Call[rivet.SendResult](c.Context(), c.Client().GetOrCreate("doubler", key), "askBack", c.Key()[0])
			}),
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/ask/")
	c, err := client.New(na.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	args := map[string]any{"key": keysOn(na, "doubler", "d", 1)[0], "v": 21}
	res, err := rivet.Call[rivet.SendResult](ctx, c.GetOrCreate("asker", keysOn(nb, "asker", "a", 1)[0]), "ask", args)
	if err != nil || res.Status != rivet.SendCompleted || string(res.Response) != "42" {
		t.Fatalf("ask across nodes: %+v, %v; want completed with 42", res, err)
	}
	res, err = rivet.Call[rivet.SendResult](ctx, c.Get("asker", keysOn(nb, "asker", "a", 1)[0]), "viaPeer", args["key"])
	if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "call chain") {
		t.Fatalf("a wait on the asker from a turn its chain holds, across nodes: %+v, %v; want INVALID_ARGUMENT", res, err)
	}
}
