package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

// A call that waits for its actor's turn, the actor busy with a long turn,
// until its deadline nears, is told by the node that it did not run: a
// timeout with reason actor.busy, its outcome known, which reaches the
// caller before the caller's own timer fires, on the actor's node and
// through another node that forwards it. It raced that timer, and mostly
// lost: the caller heard DEADLINE_EXCEEDED, its outcome unknown, though
// the node knew the call never ran (a user trial). The action did not run.
//
// On a loaded machine the margin (75 ms, of a 150 ms deadline) can run
// out as the answer travels, or before the client's goroutine reads it:
// a call answered past its deadline tests nothing of the above, and is
// not counted; the next call has twice the time (up to 3.2 s, whose
// margin is 320 ms). A node that waited out the deadline answers every
// call late, and fails.
func TestACallThatWaitedForABusyActorUntilItsDeadlineKnowsItDidNotRun(t *testing.T) {
	type st struct{ Bumps int }
	entered, release := make(chan struct{}, 1), make(chan struct{})
	hog := rivet.Actor[st]{
		Name: "hog",
		Actions: rivet.Actions[st]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				entered <- struct{}{}
				<-release
				return 0, nil
			}),
			"bump": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				c.State.Bumps++
				return c.State.Bumps, nil
			}),
			"bumps": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.Bumps, nil }),
		},
	}
	// relayer passes on what its call to the busy hog got: it ran, so its
	// caller must not read that as "did not run".
	relayer := rivet.Actor[st]{
		Name: "relayer",
		Actions: rivet.Actions[st]{
			"relay": rivet.Action(func(c *rivet.ActionCtx[st], key string) (int, error) {
				cctx, cancel := context.WithTimeout(c.Context(), 300*time.Millisecond)
				defer cancel()
				return rivet.Call[int](cctx, c.Client().Get("hog", key), "bump")
			}),
		},
	}
	reg, err := rivet.Setup(hog, relayer)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/turnwait/")
	key := keysOn(na, "hog", "hog", 1)[0]
	dial := func(addr string) *client.Client {
		c, err := client.New(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ca, cb := dial(na.GRPCAddr()), dial(nb.GRPCAddr())
	// The actor in memory and the connections made, the forwarding
	// node's to the owner too: what a call does before it waits for its
	// turn, the first time, is not timed.
	if _, err := ca.GetOrCreate("hog", key).Call(ctx, "bumps"); err != nil {
		t.Fatal(err)
	}
	if _, err := cb.Get("hog", key).Call(ctx, "bumps"); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := ca.Get("hog", key).Call(context.WithoutCancel(ctx), "hold")
		held <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("hold did not start")
	}
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	for _, via := range []struct {
		name string
		c    *client.Client
	}{{"on its node", ca}, {"through another node", cb}} {
		// From the margin's 50 ms floor to its 200 ms.
		for _, within := range []time.Duration{150 * time.Millisecond, 400 * time.Millisecond, time.Second} {
			const want, most = 4, 8
			timeout, counted := within, 0
			for i := 0; counted < want && i < most; i++ {
				cctx, ccancel := context.WithTimeout(ctx, timeout)
				start := time.Now()
				_, err := via.c.Get("hog", key).Call(cctx, "bump")
				took := time.Since(start)
				callerEnded := cctx.Err()
				ccancel()
				if callerEnded != nil {
					t.Logf("%s, deadline %v, call %d: %v after %v (outcome unknown %v), past its deadline; not counted", via.name, timeout, i, err, took.Round(time.Millisecond), rivet.OutcomeUnknown(err))
					timeout = min(2*timeout, 3200*time.Millisecond)
					continue
				}
				counted++
				var re *rivet.Error
				if !errors.Is(err, rivet.ErrTimeout) || rivet.OutcomeUnknown(err) || !errors.As(err, &re) || re.Group != "actor" || re.Code != "busy" {
					t.Errorf("%s, deadline %v, call %d: %v after %v (outcome unknown %v); want a timeout with reason actor.busy, its outcome known", via.name, timeout, i, err, took.Round(time.Millisecond), rivet.OutcomeUnknown(err))
				}
			}
			if counted < want/2 {
				t.Errorf("%s, deadline %v: %d calls of %d answered before their deadline (which doubled, up to 3.2 s, after each late one); want %d at least", via.name, within, counted, most, want/2)
			}
		}
	}
	_, err = rivet.Call[int](ctx, cb.GetOrCreate("relayer", "r"), "relay", key)
	if !errors.Is(err, rivet.ErrTimeout) || !rivet.OutcomeUnknown(err) {
		t.Errorf("an action passing on a busy actor's timeout: %v (outcome unknown %v); want a timeout whose outcome is unknown (the action ran)", err, rivet.OutcomeUnknown(err))
	}
	close(release)
	released = true
	if err := <-held; err != nil {
		t.Fatalf("hold: %v", err)
	}
	if n, err := rivet.Call[int](ctx, ca.Get("hog", key), "bumps"); err != nil || n != 0 {
		t.Fatalf("bumps: %d (%v); want none of the calls that timed out waiting to have run", n, err)
	}
}
