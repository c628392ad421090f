package seed

import (
	"context"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// ChargeRequest is a message of timeoutActor's "charge" queue.
type ChargeRequest struct {
	OrderID string `json:"orderId"`
}

// TimeoutState is timeoutActor's state.
type TimeoutState struct {
	// LastChargeID is null until the first charge is saved.
	LastChargeID *string `json:"lastChargeId"`
}

// chargeCard is the seed's slow or flaky payment dependency.
func chargeCard(_ context.Context, orderID string) (string, error) {
	return "charge-" + orderID, nil
}

// TimeoutActor is the seed's "Timeouts" pattern: a step with a timeout
// that is retried like any other failure (RetryOnTimeout), with bounded
// retries and backoff.
var TimeoutActor = rivet.Actor[TimeoutState]{
	Name: "timeoutActor",
	Queues: rivet.Queues{
		"charge": rivet.QueueOf[ChargeRequest](),
	},
	Run: func(ctx *workflow.Ctx[TimeoutState]) error {
		return ctx.Loop("charge-loop", func(loopCtx *workflow.Ctx[TimeoutState]) error {
			message, err := workflow.Next[ChargeRequest](loopCtx, "wait-charge")
			if err != nil {
				return err
			}

			chargeID, err := workflow.StepOpts(loopCtx, workflow.StepOptions{
				Name:             "charge-card",
				Timeout:          5 * time.Second,
				RetryOnTimeout:   true,
				MaxRetries:       5,
				RetryBackoffBase: 200 * time.Millisecond,
				RetryBackoffMax:  2 * time.Second,
			}, func(step *workflow.StepCtx[TimeoutState]) (string, error) {
				return chargeCard(step.Context(), message.Body.OrderID)
			})
			if err != nil {
				return err
			}

			return loopCtx.Step("save-charge", func(step *workflow.StepCtx[TimeoutState]) error {
				step.State.LastChargeID = &chargeID
				return nil
			})
		})
	},
	Actions: rivet.Actions[TimeoutState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[TimeoutState]) (TimeoutState, error) { return *c.State, nil }),
	},
}
