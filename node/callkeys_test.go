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

// A workflow step that calls an action with its key (StepCtx.IdempotencyKey)
// charges once, however often the step runs: here the first iteration's
// first attempt fails after the call, and the retry makes the same call (a
// user trial's crash tests charged twice, with no way to tell the callee);
// the loop's next iteration, a step of the same name, has a key of its own
// and charges again. Through the gRPC client, the same keyed call twice
// runs once too.
func TestAKeyedCallFromAStepRunsOnceAcrossItsAttempts(t *testing.T) {
	var attempts atomic.Int32
	payer := rivet.Actor[tallyState]{
		Name: "payer",
		Run: func(ctx *workflow.Ctx[tallyState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "months"}, func(lc *workflow.Ctx[tallyState], i int) (int, error) {
				if i == 2 {
					return i, workflow.Break
				}
				return i + 1, lc.StepWith(workflow.StepOptions{Name: "charge", MaxRetries: 3, RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond}, func(s *workflow.StepCtx[tallyState]) error {
					n, err := rivet.CallWith[int](s.Context(), s.Client().GetOrCreate("counter", "bank"), "increment",
						rivet.CallOptions{IdempotencyKey: s.IdempotencyKey("charge")}, 10)
					if err != nil {
						return err
					}
					s.State.N = n
					if attempts.Add(1) == 1 {
						return errors.New("the step fails after its call")
					}
					return nil
				})
			})
			return err
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
	if n, err := rivet.Call[int](ctx, c.Get("counter", "bank"), "getCount"); err != nil || n != 20 || attempts.Load() != 3 {
		t.Fatalf("count %d (%v) after %d attempts; want the keyed call run once an iteration, 20 in 3 attempts", n, err, attempts.Load())
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
