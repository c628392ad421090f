package order

import (
	"context"
	"fmt"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

// Place creates the order key. It fails with rivet.ErrAlreadyExists if the
// key is taken, and rivet.ErrInvalidArgument if CreateState refuses in.
func Place(ctx context.Context, c *client.Client, key string, in Input) error {
	_, err := c.Create(ctx, "order", []string{key}, in)
	return err
}

// Pay sends the payment of an order that exists (rivet.ErrNotFound if not:
// a mistyped key creates nothing).
func Pay(ctx context.Context, c *client.Client, key string, p Payment) error {
	return pay(ctx, c.Get("order", key), key, p)
}

// PlaceAndPay is signal-with-start: it creates the order with in if it
// does not exist, and sends it the payment, in one call.
func PlaceAndPay(ctx context.Context, c *client.Client, key string, in Input, p Payment) error {
	return pay(ctx, c.Actor("order", key).WithInput(in), key, p)
}

// pay sends the payment with an idempotency key: sent again, after an error
// that left its outcome unknown, it queues nothing; another payment of the
// order is refused (rivet.ErrInvalidArgument): an order takes one. With
// RequireRunning, an order that is over (its workflow ended: shipped,
// cancelled or failed) refuses it (rivet.ErrWorkflowFailed) and queues
// nothing, so that a retry of its workflow cannot take a stale payment
// later. That is best effort as an order cancels itself (a payment sent
// then may be queued without the error); a payment sent again after its
// first was queued answers as the first did, and says if the order is
// over since.
func pay(ctx context.Context, h rivet.Handle, key string, p Payment) error {
	res, err := rivet.SendWith(ctx, h, "payment", p, rivet.SendOptions{IdempotencyKey: "payment", RequireRunning: true})
	if err != nil {
		return err
	}
	if res.WorkflowStatus != "" { // queued before the order ended: nothing takes it
		return fmt.Errorf("order %s: its workflow is %s", key, res.WorkflowStatus)
	}
	return nil
}

// Status reads an order: a query, which creates nothing (rivet.ErrNotFound
// for a key that is no order) and changes nothing.
func Status(ctx context.Context, c *client.Client, key string) (State, error) {
	return rivet.CallQuery[State](ctx, c.Get("order", key), "status")
}
