// Package order is the actor of the tutorial (docs/tutorial.md): an order
// that waits for its payment, cancels itself if none comes in time, charges
// the card with retries, waits, and ships.
package order

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// Input is what an order is created with (its workflow's input).
type Input struct {
	Item   string `json:"item"`
	Amount int64  `json:"amount"` // in cents
	// PayWithinSeconds is how long the order waits for its payment
	// before it cancels itself; 0: 15 minutes.
	PayWithinSeconds int `json:"payWithinSeconds,omitempty"`
}

// Payment is a message of the "payment" queue.
type Payment struct {
	Card string `json:"card"`
}

// State is an order's durable state.
type State struct {
	Item             string `json:"item"`
	Amount           int64  `json:"amount"`
	PayWithinSeconds int    `json:"payWithinSeconds"`
	Status           string `json:"status"` // awaiting_payment, paid, shipped, payment_failed or cancelled
	Receipt          string `json:"receipt,omitempty"`
}

// ShipDelay is how long a paid order waits before it ships.
const ShipDelay = 10 * time.Second

// ChargeFunc charges a card and returns the payment service's receipt. The
// idempotency key is the same for every attempt of one order's charge: pass
// it to the service, so that a retried charge is not a second one.
type ChargeFunc func(ctx context.Context, idempotencyKey, card string, amount int64) (string, error)

// ErrDeclined is the error of a ChargeFunc (or one it wraps) for a card
// the payment service refused: an answer, which no retry changes, not an
// outage.
var ErrDeclined = errors.New("card declined")

// FakeCharge is a stand-in payment service that always succeeds.
func FakeCharge(_ context.Context, _, card string, amount int64) (string, error) {
	return fmt.Sprintf("charged %d to card %s", amount, card), nil
}

// Actor is the "order" actor with the stand-in payment service.
var Actor = New(FakeCharge)

// New returns the "order" actor, charging cards with charge.
func New(charge ChargeFunc) rivet.Actor[State] {
	return rivet.Actor[State]{
		Name: "order",
		// call and send create an order that does not exist, with an
		// empty input: refuse it, so that a mistyped key is an error,
		// not a new order of nothing.
		CreateState: func(input json.RawMessage) (State, error) {
			if len(input) == 0 || string(input) == "null" {
				return State{}, errors.New(`an order is created with its input, {"item":...,"amount":...} (rivetctl create order KEY --input ...)`)
			}
			var in Input
			dec := json.NewDecoder(bytes.NewReader(input))
			dec.DisallowUnknownFields() // a misspelt field is an error, not a zero
			if err := dec.Decode(&in); err != nil {
				return State{}, fmt.Errorf("order input: %w", err)
			}
			if dec.Decode(new(json.RawMessage)) != io.EOF { // one value, nothing after it
				return State{}, errors.New("order input: data after the order's JSON object")
			}
			if in.Item == "" || in.Amount <= 0 || in.PayWithinSeconds < 0 {
				return State{}, errors.New("an order needs an item, an amount > 0 and a payWithinSeconds >= 0")
			}
			if in.PayWithinSeconds == 0 {
				in.PayWithinSeconds = 15 * 60
			}
			return State{Item: in.Item, Amount: in.Amount, PayWithinSeconds: in.PayWithinSeconds, Status: "awaiting_payment"}, nil
		},
		Queues: rivet.Queues{"payment": rivet.QueueOf[Payment]()},
		Events: rivet.Events{"statusChanged": rivet.EventOf[string]()},
		Actions: rivet.Actions[State]{
			"status": rivet.Query(func(c *rivet.ActionCtx[State]) (State, error) { return *c.State, nil }),
		},
		Run: func(ctx *workflow.Ctx[State]) error {
			// Workflow code sees the state only in steps: read the order.
			order, err := workflow.Step(ctx, "read-order", func(s *workflow.StepCtx[State]) (State, error) {
				return *s.State, nil
			})
			if err != nil {
				return err
			}
			pay, err := workflow.Next[Payment](ctx, "wait-payment",
				workflow.NextOptions{Timeout: time.Duration(order.PayWithinSeconds) * time.Second})
			if errors.Is(err, workflow.ErrTimeout) {
				return ctx.Step("cancel", setStatus("cancelled", ""))
			}
			if err != nil {
				return err
			}
			// The payment service is I/O: a Do step, outside the actor's
			// turn, retried up to 5 times with a backoff (1 s, 2 s, 4 s...),
			// a timeout too, as the idempotency key makes a retry safe.
			receipt, err := workflow.DoOpts(ctx, workflow.StepOptions{
				Name: "charge", Timeout: 10 * time.Second, RetryOnTimeout: true,
				MaxRetries: 5, RetryBackoffBase: 500 * time.Millisecond,
			}, func(d *workflow.DoCtx) (string, error) {
				receipt, err := charge(d.Context(), d.IdempotencyKey("charge"), pay.Body.Card, order.Amount)
				if errors.Is(err, ErrDeclined) {
					return "", workflow.Critical(err) // fails the step at once: no retry
				}
				return receipt, err
			})
			var failed *workflow.StepError
			if errors.As(err, &failed) {
				// Declined, or retries used up: say so in the state, then
				// fail the workflow (rivetctl actors --failed).
				if serr := ctx.Step("payment-failed", setStatus("payment_failed", "")); serr != nil {
					return serr
				}
				return err
			}
			if err != nil {
				return err
			}
			if err := ctx.Step("mark-paid", setStatus("paid", receipt)); err != nil {
				return err
			}
			if err := ctx.Sleep("wait-to-ship", ShipDelay); err != nil {
				return err
			}
			return ctx.Step("ship", setStatus("shipped", ""))
		},
	}
}

// setStatus is a step body that sets the status (and the receipt, if
// given) and tells subscribers.
func setStatus(status, receipt string) func(*workflow.StepCtx[State]) error {
	return func(s *workflow.StepCtx[State]) error {
		s.State.Status = status
		if receipt != "" {
			s.State.Receipt = receipt
		}
		return s.Broadcast("statusChanged", status)
	}
}
