package node_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/node/nodetest"
	"github.com/rivet-go/rivet/workflow"
)

// A workflow step that calls an action with an idempotency key of its own
// charges once, however often the step runs: here its first attempt fails
// after the call, and the retry makes the same call (a user trial's
// crash tests charged twice, with no way to tell the callee). Through
// the gRPC client, the same keyed call twice runs once too.
func TestAKeyedCallFromAStepRunsOnceAcrossItsAttempts(t *testing.T) {
	var attempts atomic.Int32
	payer := rivet.Actor[tallyState]{
		Name: "payer",
		Run: func(ctx *workflow.Ctx[tallyState]) error {
			return ctx.StepWith(workflow.StepOptions{Name: "charge", MaxRetries: 3, RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond}, func(s *workflow.StepCtx[tallyState]) error {
				n, err := rivet.CallWith[int](s.Context(), s.Client().GetOrCreate("counter", "bank"), "increment",
					rivet.CallOptions{IdempotencyKey: "payer/" + s.Key()[0] + "/charge"}, 10)
				if err != nil {
					return err
				}
				s.State.N = n
				if attempts.Add(1) == 1 {
					return errors.New("the step fails after its call")
				}
				return nil
			})
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := nodetest.Start(t, t.TempDir(), counter.Actor, payer)
	if _, err := c.Create(ctx, "payer", []string{"p"}, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the workflow's end", 30*time.Second, func() bool {
		in, err := c.Actor("payer", "p").Inspect(ctx)
		return err == nil && in.WorkflowStatus == "completed"
	})
	if n, err := rivet.Call[int](ctx, c.Get("counter", "bank"), "getCount"); err != nil || n != 10 || attempts.Load() != 2 {
		t.Fatalf("count %d (%v) after %d attempts; want the keyed call run once, 10", n, err, attempts.Load())
	}

	h := c.GetOrCreate("counter", "client")
	for range 2 {
		if n, err := h.(*client.ActorHandle).CallWith(ctx, "increment", client.CallOptions{IdempotencyKey: "k1"}, 5); err != nil || string(n) != "5" {
			t.Fatalf("keyed call through the client: %s, %v; want 5", n, err)
		}
	}
	if n, err := rivet.Call[int](ctx, c.Get("counter", "client"), "getCount"); err != nil || n != 5 {
		t.Fatalf("count %d (%v) after a keyed call sent twice; want 5", n, err)
	}
}
