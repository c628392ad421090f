package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/workflow"
)

// stoppable's workflow ends at the first message on "stop"; nothing reads
// "q".
var stoppable = rivet.Actor[noState]{
	Name:   "stoppable",
	Queues: rivet.Queues{"q": rivet.QueueOf[int](), "stop": rivet.QueueOf[int]()},
	Run: func(c *workflow.Ctx[noState]) error {
		_, err := workflow.Next[int](c, "stop", workflow.NextOptions{Names: []string{"stop"}})
		return err
	},
}

// A send with RequireRunning to an actor whose workflow has completed is
// refused (workflow.ended) and queues nothing, from the Go client through
// the node's gRPC server and from an actor on another node through the
// node's Remote; a plain send is still queued, as before.
func TestRequireRunningRefusesASendToAnEndedWorkflow(t *testing.T) {
	sender := rivet.Actor[noState]{
		Name: "rrsender",
		Actions: rivet.Actions[noState]{
			"send": rivet.Action(func(c *rivet.ActionCtx[noState], to string) (rivet.SendResult, error) {
				return rivet.SendWith(c.Context(), c.Client().Get("stoppable", to), "q", 1, rivet.SendOptions{RequireRunning: true, IdempotencyKey: "from-actor"})
			}),
		},
	}
	reg, err := rivet.Setup(stoppable, sender)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/requirerunning/")
	c, err := client.New(na.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	to := keysOn(nb, "stoppable", "s", 1)[0]
	h := c.Actor("stoppable", to)
	depth := func() uint64 {
		t.Helper()
		in, err := c.Actor("stoppable", to).NoCreate().Inspect(ctx)
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
	wantEnded := func(what string, err error) {
		t.Helper()
		var re *rivet.Error
		if !errors.Is(err, rivet.ErrWorkflowFailed) || !errors.As(err, &re) || re.Group+"."+re.Code != "workflow.ended" {
			t.Fatalf("%s = %v, want ErrWorkflowFailed with reason workflow.ended", what, err)
		}
	}

	// Running: accepted.
	if res, err := h.SendWith(ctx, "q", 1, client.SendOptions{RequireRunning: true}); err != nil || res.WorkflowStatus != "" {
		t.Fatalf("send with RequireRunning to a running workflow: %+v, %v", res, err)
	}
	if err := h.Send(ctx, "stop", 0); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the workflow to complete", time.Minute, func() bool {
		in, err := c.Actor("stoppable", to).NoCreate().Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return in.WorkflowStatus == "completed"
	})

	// From the client.
	_, err = h.SendWith(ctx, "q", 2, client.SendOptions{RequireRunning: true, IdempotencyKey: "from-client"})
	wantEnded("client send with RequireRunning", err)
	// From an actor on the other node.
	from := c.GetOrCreate("rrsender", keysOn(na, "rrsender", "r", 1)[0])
	_, err = rivet.Call[rivet.SendResult](ctx, from, "send", to)
	wantEnded("actor's send with RequireRunning", err)
	if d := depth(); d != 1 {
		t.Fatalf("queue q holds %d messages after the refusals, want 1", d)
	}
	// The default is unchanged: queued, saying the workflow completed.
	if err := h.Send(ctx, "q", 3); err != nil {
		t.Fatalf("plain send to an ended workflow: %v", err)
	}
	if res, err := h.SendWith(ctx, "q", 2, client.SendOptions{IdempotencyKey: "from-client"}); err != nil || res.Duplicate || res.WorkflowStatus != "completed" {
		t.Fatalf("plain keyed send after its refusal = %+v, %v; want it queued anew, saying the workflow completed", res, err)
	}
	if d := depth(); d != 3 {
		t.Fatalf("queue q holds %d messages, want 3", d)
	}
}
