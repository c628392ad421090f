package order_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/tutorial/order"
	"github.com/rivet-go/rivet/node/nodetest"
)

func TestMain(m *testing.M) { nodetest.VerifyNoLeaks(m) }

// waitStatus waits until the order's status is want, for at most 20 s.
func waitStatus(ctx context.Context, t *testing.T, c *client.Client, key, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := order.Status(ctx, c, key)
		if err == nil && s.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s: status %+v, %v; want %s", key, s, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The client of the tutorial against a real node: each error is a rivet
// kind, and nothing but Place and PlaceAndPay creates an order.
func TestTutorialClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := nodetest.Start(t, t.TempDir(), order.Actor)

	if err := order.Place(ctx, c, "o-1", order.Input{Item: "lamp", Amount: 4200}); err != nil {
		t.Fatal(err)
	}
	err := order.Place(ctx, c, "o-1", order.Input{Item: "lamp", Amount: 4200})
	if !errors.Is(err, rivet.ErrAlreadyExists) {
		t.Fatalf("Place of o-1 again: %v, want ErrAlreadyExists", err)
	}
	err = order.Place(ctx, c, "o-2", order.Input{Item: "lamp"})
	if !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("Place without an amount: %v, want ErrInvalidArgument", err)
	}

	// A mistyped key: no order, and none made.
	if err := order.Pay(ctx, c, "o-l", order.Payment{Card: "4242"}); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("Pay of o-l: %v, want ErrNotFound", err)
	}
	if _, err := order.Status(ctx, c, "o-l"); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("Status of o-l: %v, want ErrNotFound", err)
	}
	// A call that creates gets CreateState's refusal of an empty input.
	_, err = rivet.Call[order.State](ctx, c.GetOrCreate("order", "o-l"), "status")
	if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "an order is created with its input") {
		t.Fatalf("a call that creates o-l: %v, want CreateState's refusal", err)
	}

	if err := order.Pay(ctx, c, "o-1", order.Payment{Card: "4242"}); err != nil {
		t.Fatal(err)
	}
	// Sent again (its first outcome unknown, say): queued once.
	if err := order.Pay(ctx, c, "o-1", order.Payment{Card: "4242"}); err != nil {
		t.Fatal(err)
	}
	// Another payment of the same order is refused: it takes one.
	if err := order.Pay(ctx, c, "o-1", order.Payment{Card: "5555"}); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("a second payment of o-1: %v, want ErrInvalidArgument", err)
	}
	waitStatus(ctx, t, c, "o-1", "paid")
	if s, err := order.Status(ctx, c, "o-1"); err != nil || s.Receipt != "charged 4200 to card 4242" {
		t.Fatalf("o-1: %+v, %v; want its receipt", s, err)
	}

	// Signal-with-start: created with its input by the payment's send.
	if err := order.PlaceAndPay(ctx, c, "o-3", order.Input{Item: "mug", Amount: 900}, order.Payment{Card: "4242"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(ctx, t, c, "o-3", "paid")
	// Sent again, to an order that exists: its input is ignored, and the
	// payment, a duplicate, queues nothing.
	if err := order.PlaceAndPay(ctx, c, "o-3", order.Input{Item: "mug", Amount: 900}, order.Payment{Card: "4242"}); err != nil {
		t.Fatal(err)
	}

	// An order not paid in time is cancelled, and a payment then is refused.
	if err := order.Place(ctx, c, "o-4", order.Input{Item: "desk", Amount: 25000, PayWithinSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	waitStatus(ctx, t, c, "o-4", "cancelled")
	// The cancel step's state commits before the workflow's end: wait for
	// that too, which a payment's send then sees.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ins, err := c.Actor("order", "o-4").NoCreate().Inspect(ctx)
		if err == nil && ins.WorkflowStatus == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("o-4's workflow: %+v, %v; want completed", ins.WorkflowStatus, err)
		}
	}
	if err := order.Pay(ctx, c, "o-4", order.Payment{Card: "4242"}); !errors.Is(err, rivet.ErrWorkflowFailed) {
		t.Fatalf("Pay of the cancelled o-4: %v, want refused: its workflow is over (RequireRunning)", err)
	}
	err = order.PlaceAndPay(ctx, c, "o-4", order.Input{Item: "desk", Amount: 25000}, order.Payment{Card: "4242"})
	if !errors.Is(err, rivet.ErrWorkflowFailed) {
		t.Fatalf("PlaceAndPay of the cancelled o-4: %v, want refused: its workflow is over (RequireRunning)", err)
	}
	// Nothing was queued for it.
	if ins, err := c.Actor("order", "o-4").Inspect(ctx); err != nil || len(ins.Queues) > 0 && ins.Queues[0].Depth != 0 {
		t.Fatalf("o-4's queues after the refused payments: %+v, %v; want none queued", ins.Queues, err)
	}

	list, err := c.ListAll(ctx, "order")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, a := range list {
		keys = append(keys, strings.Join(a.Key, "/"))
	}
	slices.Sort(keys)
	if got := strings.Join(keys, " "); got != "o-1 o-3 o-4" {
		t.Fatalf("orders %s, want o-1 o-3 o-4", got)
	}
}

// An order whose card is declined is payment_failed, its workflow failed
// at the charge. A retry from the charge (the bank lifted its block, the
// service is back) charges again and the order goes on; a plain retry is
// refused, as the history has the payment-failed step after the charge.
func TestTutorialPaymentFailedIsRetriedFromTheCharge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var calls atomic.Int32
	declinedOnce := func(ctx context.Context, key, card string, amount int64) (string, error) {
		if calls.Add(1) == 1 {
			return "", order.ErrDeclined
		}
		return order.FakeCharge(ctx, key, card, amount)
	}
	c, _ := nodetest.Start(t, t.TempDir(), order.New(declinedOnce))

	if err := order.PlaceAndPay(ctx, c, "o-1", order.Input{Item: "lamp", Amount: 4200}, order.Payment{Card: "4242"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(ctx, t, c, "o-1", "payment_failed")
	h := c.Actor("order", "o-1").NoCreate()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ins, err := h.Inspect(ctx)
		if err == nil && ins.WorkflowStatus == "failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("o-1's workflow: %+v, %v; want failed", ins.WorkflowStatus, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("charged %d times, want 1: a decline is not retried", n)
	}

	if _, err := h.RetryWorkflow(ctx, ""); !errors.Is(err, rivet.ErrWorkflowFailed) || !strings.Contains(err.Error(), `"payment-failed"`) || !strings.Contains(err.Error(), "retry --from charge") {
		t.Fatalf("a plain retry: %v, want refused, naming the payment-failed step and the retry that works", err)
	}
	if _, err := h.RetryWorkflow(ctx, "charge"); err != nil {
		t.Fatal(err)
	}
	waitStatus(ctx, t, c, "o-1", "paid")
	if s, err := order.Status(ctx, c, "o-1"); err != nil || s.Receipt != "charged 4200 to card 4242" || calls.Load() != 2 {
		t.Fatalf("o-1: %+v, %v, %d charges; want its receipt, of a second charge", s, err, calls.Load())
	}
}
