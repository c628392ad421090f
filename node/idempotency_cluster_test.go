package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/workflow"
)

// A send with an idempotency key from an actor on one node to an actor on
// another (through the node's Remote) is queued once: sent again, the
// answer is the first message's, marked duplicate.
func TestAKeyedSendToAnotherNodeIsQueuedOnce(t *testing.T) {
	sender := rivet.Actor[noState]{
		Name: "sender",
		Actions: rivet.Actions[noState]{
			"send": rivet.Action(func(c *rivet.ActionCtx[noState], to string) (rivet.SendResult, error) {
				return rivet.SendWith(c.Context(), c.Client().GetOrCreate("inbox", to), "q", 7, rivet.SendOptions{IdempotencyKey: "order-7"})
			}),
		},
	}
	reg, err := rivet.Setup(inbox, sender)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/keyed/")
	c, err := client.New(na.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	to := keysOn(nb, "inbox", "i", 1)[0]
	from := c.GetOrCreate("sender", keysOn(na, "sender", "s", 1)[0])
	first, err := rivet.Call[rivet.SendResult](ctx, from, "send", to)
	if err != nil || first.Duplicate {
		t.Fatalf("first send: %+v, %v", first, err)
	}
	again, err := rivet.Call[rivet.SendResult](ctx, from, "send", to)
	if err != nil || !again.Duplicate || again.MessageID != first.MessageID {
		t.Fatalf("the same send again: %+v, %v; want the duplicate of message %d", again, err, first.MessageID)
	}
	in, err := c.Actor("inbox", to).NoCreate().Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	depth := uint64(0)
	for _, q := range in.Queues {
		if q.Queue == "q" {
			depth = q.Depth
		}
	}
	if depth != 1 {
		t.Fatalf("queue q holds %d messages, want 1 (%+v)", depth, in.Queues)
	}
}

// noState is the state of actors that keep none.
type noState struct{}

// inbox is an actor whose workflow waits, for ever, on a queue nobody
// sends to, leaving the messages of "q" queued.
var inbox = rivet.Actor[noState]{
	Name:   "inbox",
	Queues: rivet.Queues{"q": rivet.QueueOf[int](), "never": rivet.QueueOf[int]()},
	Run: func(c *workflow.Ctx[noState]) error {
		_, err := workflow.Next[int](c, "wait", workflow.NextOptions{Names: []string{"never"}})
		return err
	},
}
