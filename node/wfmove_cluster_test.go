package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/testactors"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
)

const (
	shuttleA = 30
	shuttleB = 15
)

var shuttle = testactors.Shuttle("shuttle", shuttleA, shuttleB)

type shuttleState = testactors.ShuttleState

// A workflow in the middle of joins, races, timed receives, sleeps and
// retried steps, with a client sending it messages through both nodes
// (some senders waiting for their completion), moved between the nodes
// by drains and their undoing: every message is taken once, every
// committed step's effect is there once per iteration, every waiting
// sender hears of its completion or that its message is queued, and the
// workflow ends.
func TestAWorkflowMovedByDrainsLosesNothing(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(shuttle)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/wfmove/")
	c, err := client.New(na.GRPCAddr() + "," + nb.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := keysOn(na, "shuttle", "w", 1)[0]
	p := placement.Partition("shuttle", storage.EncodeKey([]string{key}), eventParts)
	h := c.Actor("shuttle", key)
	get := func() (shuttleState, error) { return rivet.Call[shuttleState](ctx, h, "get") }
	if _, err := get(); err != nil {
		t.Fatal(err)
	}

	// send sends body to queue q, again (with its key) after an error.
	var odd sync.Map // errors other than success, by message
	send := func(q string, body int, wait bool) (rivet.SendResult, error) {
		var last error
		for range 200 {
			res, err := rivet.SendWith(ctx, h, q, body, rivet.SendOptions{IdempotencyKey: fmt.Sprintf("%s-%d", q, body), Wait: wait, Timeout: 30 * time.Second})
			if err == nil {
				return res, nil
			}
			odd.Store(fmt.Sprintf("%s-%d", q, body), err)
			last = err
			if ctx.Err() != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		return rivet.SendResult{}, fmt.Errorf("send %s %d: %v", q, body, last)
	}
	var wg sync.WaitGroup
	// Should a Fatalf end the test, the senders end first (deferred calls
	// run last-in first-out: cancel, then wait).
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, shuttleA+shuttleB)
	testactors.ShuttleTraffic(&wg, errs, shuttleA, shuttleB, send)

	// Drain a and undo it, again and again, each time once the workflow
	// made some progress where it is.
	progress := func(what string) {
		t.Helper()
		s0, err := get()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		waitUntil(t, what, 30*time.Second, func() bool {
			s, err := get()
			return err == nil && (s.Iters > s0.Iters || s.Work > s0.Work || len(s.GotA) > len(s0.GotA) || len(s.GotB) > len(s0.GotB) ||
				s.Iters > 0 && len(s.GotA) >= shuttleA && len(s.GotB) >= shuttleB)
		})
	}
	owns := func(n *node.Node) func() bool { return func() bool { return n.Host().Owns(p) } }
	for round := range 8 {
		progress(fmt.Sprintf("progress on a, round %d", round))
		if _, err := c.Drain(ctx, "a", false); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "b to own the workflow", 30*time.Second, owns(nb))
		progress(fmt.Sprintf("progress on b, round %d", round))
		if _, err := c.Drain(ctx, "a", true); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "a to own the workflow again", 30*time.Second, owns(na))
		if s, err := get(); err == nil {
			t.Logf("round %d done at iteration %d", round, s.Iters)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	odd.Range(func(k, v any) bool {
		t.Logf("send %s failed once: %v", k, v)
		return true
	})
	var s shuttleState
	waitUntil(t, "the workflow's end", 30*time.Second, func() bool {
		ins, err := h.NoCreate().Inspect(ctx)
		if err == nil && ins.WorkflowStatus == "failed" {
			t.Fatalf("workflow failed: %+v", ins)
		}
		return err == nil && ins.WorkflowStatus == "completed"
	})
	if s, err = get(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range s.Check(shuttleA, shuttleB) {
		t.Error(bad)
	}
	t.Logf("%d iterations", s.Iters)
}
