package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

type bellState struct{ N int }

// bell broadcasts "rang" with its count on each ring, "woke" as it wakes
// and "slept" as it sleeps; ringFail rings and then fails.
var bell = rivet.Actor[bellState]{
	Name:    "bell",
	Options: rivet.Options{IdleTimeout: 300 * time.Millisecond},
	Events:  rivet.Events{"rang": rivet.EventOf[int](), "woke": rivet.EventOf[int](), "slept": rivet.EventOf[int]()},
	OnWake: func(c *rivet.ActionCtx[bellState]) error {
		return c.Broadcast("woke", c.State.N)
	},
	OnSleep: func(c *rivet.ActionCtx[bellState]) error {
		return c.Broadcast("slept", c.State.N)
	},
	Actions: rivet.Actions[bellState]{
		"ring": rivet.Action0(func(c *rivet.ActionCtx[bellState]) (int, error) {
			c.State.N++
			return c.State.N, c.Broadcast("rang", c.State.N)
		}),
		"ringFail": rivet.Action0(func(c *rivet.ActionCtx[bellState]) (int, error) {
			c.State.N += 100
			if err := c.Broadcast("rang", c.State.N); err != nil {
				return 0, err
			}
			return 0, rivet.UserError("bell", "cracked", nil)
		}),
	},
}

// nextEvent waits for the subscription's next event: its name and count,
// or "gap".
func nextEvent(t *testing.T, sub *client.Subscription) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("next event: %v", err)
	}
	if ev.Gap {
		return "gap", 0
	}
	var n int
	if err := ev.Decode(&n); err != nil {
		t.Fatalf("event %s %s: %v", ev.Name, ev.Data, err)
	}
	return ev.Name, n
}

// A subscription relayed from the actor's owner follows it while it sleeps
// and wakes (it hears its hooks' events, and no gap: nothing moved), does
// not hear the events of a turn that failed, and ends NOT_FOUND when the
// actor is destroyed, even if it is created again at once.
func TestASubscriptionFollowsSleepWakeFailureAndDestroy(t *testing.T) {
	reg, err := rivet.Setup(bell)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/bell/")
	ca := dial(t, na)
	h := ca.Actor("bell", keysOn(nb, "bell", "b", 1)[0])
	if _, err := h.Call(ctx, "ring"); err != nil {
		t.Fatal(err)
	}
	sub, err := h.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	want := func(name string, n int) {
		t.Helper()
		if gn, gc := nextEvent(t, sub); gn != name || gc != n {
			t.Fatalf("event %s %d, want %s %d", gn, gc, name, n)
		}
	}
	if _, err := h.Call(ctx, "ringFail"); err == nil {
		t.Fatal("ringFail succeeded")
	}
	if _, err := h.Call(ctx, "ring"); err != nil {
		t.Fatal(err)
	}
	want("rang", 2) // not 101: that turn failed
	for round := range 2 {
		waitUntil(t, "the bell sleeps", time.Minute, func() bool {
			in, err := h.NoCreate().Inspect(ctx)
			return err == nil && !in.Active
		})
		want("slept", 2+round)
		if _, err := h.Call(ctx, "ring"); err != nil {
			t.Fatal(err)
		}
		want("woke", 2+round)
		want("rang", 3+round)
	}
	if err := h.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Call(ctx, "ring"); err != nil { // created again
		t.Fatal(err)
	}
	nctx, ncancel := context.WithTimeout(ctx, 20*time.Second)
	defer ncancel()
	for {
		ev, err := sub.Next(nctx)
		if err != nil {
			if !errors.Is(err, rivet.ErrNotFound) {
				t.Fatalf("after the destroy: %v, want NOT_FOUND", err)
			}
			break
		}
		var n int
		_ = ev.Decode(&n)
		if ev.Gap || ev.Name == "woke" || ev.Name == "rang" {
			// The re-created actor's events: the subscription outlived
			// the actor it was made for.
			t.Fatalf("after the destroy: event %+v (%d), want the subscription ended NOT_FOUND", ev, n)
		}
	}
}
