package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

// A client waiting for a completion through a node that forwards its send
// to the actor's owner, when that forwarding node stops, hears at once that
// its message is queued, with its ID, as it does when the owner stops: it
// got UNAVAILABLE once the stop ran out of time (20 s by default, less than
// a wait's default 30 s), for a message already queued that a retry would
// queue twice, and the wait held the forwarding node's stop until then.
func TestAWaitingSendThroughAStoppingNodeSaysItsMessageIsQueued(t *testing.T) {
	reg, err := rivet.Setup(inbox)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/sendwait-forwarder-stop/")
	ca := dial(t, na)
	to := keysOn(nb, "inbox", "i", 1)[0]
	h := ca.Actor("inbox", to)
	if _, err := h.Enqueue(ctx, "q", 0); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res client.SendResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := h.SendWait(ctx, "q", 1, 30*time.Second)
		done <- result{res, err}
	}()
	cb := dial(t, nb)
	depth := func() uint64 {
		in, err := cb.Actor("inbox", to).NoCreate().Inspect(ctx)
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
	waitUntil(t, "the waiting send's message to be queued", 30*time.Second, func() bool { return depth() == 2 })

	// A stop's default bound: one the wait held ran it out, and failed.
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if err := na.Stop(sctx); err != nil {
		t.Errorf("stop of the forwarding node: %v", err)
	}
	r := <-done
	if r.err != nil || r.res.Status != client.SendEnqueued || r.res.MessageID == 0 {
		t.Errorf("the waiting send through the stopping node: %+v, %v; want enqueued with its message's ID", r.res, r.err)
	}
	if d := depth(); d != 2 {
		t.Errorf("queue q holds %d messages, want 2", d)
	}
}
