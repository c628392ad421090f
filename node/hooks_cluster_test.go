package node_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

type saverState struct {
	Sleeps int `json:"sleeps"`
	Saves  int `json:"saves"`
}

// A drain runs OnSleep on the draining node for each actor it moves, and a
// call from OnSleep back into its own actor is served there (the node still
// holds the claim until the release), not forwarded to the partition's
// owner on record, which is the same node and would not serve it until the
// drain it holds up has ended.
func TestOnSleepCallsItsOwnActorDuringADrain(t *testing.T) {
	var (
		mu        sync.Mutex
		sleepErrs []error
	)
	saver := rivet.Actor[saverState]{
		Name: "saver",
		OnSleep: func(c *rivet.ActionCtx[saverState]) error {
			c.State.Sleeps++
			_, err := c.Client().Get("saver", c.Key()...).Call(c.Context(), "save")
			if err != nil {
				mu.Lock()
				sleepErrs = append(sleepErrs, err)
				mu.Unlock()
			}
			return nil
		},
		Actions: rivet.Actions[saverState]{
			"save": rivet.Action0(func(c *rivet.ActionCtx[saverState]) (int, error) { c.State.Saves++; return c.State.Saves, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[saverState]) (saverState, error) { return *c.State, nil }),
		},
	}
	reg, err := rivet.Setup(saver)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/saver/")
	c, err := client.New(nb.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Actors on node a.
	keys := keysOn(na, "saver", "s", 4)
	for _, k := range keys {
		if _, err := rivet.Call[saverState](ctx, c.GetOrCreate("saver", k), "get"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Drain(ctx, "a", false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "node a to hand off every partition", time.Minute, func() bool { return na.Ownership().Owned() == 0 })
	for _, k := range keys {
		var s saverState
		waitUntil(t, "actor "+k+" served on node b", 30*time.Second, func() bool {
			s, err = rivet.Call[saverState](ctx, c.Get("saver", k), "get")
			return err == nil
		})
		if s.Sleeps != 1 || s.Saves != 1 {
			t.Errorf("actor %s after the drain: %+v, want one OnSleep whose call back into the actor was served", k, s)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sleepErrs) > 0 {
		t.Errorf("OnSleep's calls into their own actors failed: %v", sleepErrs)
	}
}
