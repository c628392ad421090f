package order_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/examples/tutorial/order"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

var start = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

// newOrder makes an order as a node does, with CreateState, in a Host: an
// in-memory actor with a fake clock.
func newOrder(t *testing.T, in order.Input) *workflowtest.Host[order.State] {
	t.Helper()
	input, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	s, err := order.Actor.CreateState(input)
	if err != nil {
		t.Fatal(err)
	}
	h := workflowtest.NewHost(s, workflowtest.NewClock(start))
	h.Name, h.Key, h.QueueTypes = "order", []string{"o-1"}, order.Actor.Queues.Types()
	return h
}

// flakyCharge fails its first call, as a payment service that is down for
// a moment, and records the idempotency key of every call.
func flakyCharge(keys *[]string) order.ChargeFunc {
	return func(_ context.Context, key, card string, amount int64) (string, error) {
		*keys = append(*keys, key)
		if len(*keys) == 1 {
			return "", errors.New("payment service unavailable")
		}
		return fmt.Sprintf("charged %d to card %s", amount, card), nil
	}
}

func TestTutorialOrderIsPaidAndShipped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var keys []string
	h := newOrder(t, order.Input{Item: "lamp", Amount: 4200})
	h.Send("payment", order.Payment{Card: "4242"})

	// Drive runs the workflow to its end, moving the fake clock over
	// each wait: the charge's retry (1 s) and the sleep (ShipDelay).
	out, _ := h.Drive(ctx, order.New(flakyCharge(&keys)).Run, workflowtest.DriveOptions{})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %s (%v), want completed", out.Status, out.Err)
	}
	if s := h.State(); s.Status != "shipped" || s.Receipt != "charged 4200 to card 4242" {
		t.Fatalf("state %+v, want shipped with its receipt", s)
	}
	if len(keys) != 2 || keys[0] != keys[1] {
		t.Fatalf("charged with keys %q, want 2 attempts with one key", keys)
	}
	if got, want := h.Clock.Now(), start.Add(time.Second+order.ShipDelay); !got.Equal(want) {
		t.Fatalf("shipped at %v, want %v", got, want)
	}
	var events []string
	for _, e := range h.Events() {
		events = append(events, e.Name+" "+string(e.Data))
	}
	if want := []string{`statusChanged "paid"`, `statusChanged "shipped"`}; !reflect.DeepEqual(events, want) {
		t.Fatalf("events %q, want %q", events, want)
	}
}

// A declined card is an answer: charged once, no retry, and the order says
// payment_failed. A payment service down for good: the retries are used
// up, and the order says payment_failed too. Either way the workflow fails.
func TestTutorialOrderWhosePaymentFails(t *testing.T) {
	for _, c := range []struct {
		name     string
		err      error
		attempts int
		elapsed  time.Duration // the backoffs waited
	}{
		{"declined", fmt.Errorf("%w: insufficient funds", order.ErrDeclined), 1, 0},
		// 5 retries after 1 s, 2 s, 4 s, 8 s and 16 s
		{"service down", errors.New("payment service unavailable"), 6, 31 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var keys []string
			failing := func(_ context.Context, key, _ string, _ int64) (string, error) {
				keys = append(keys, key)
				return "", c.err
			}
			h := newOrder(t, order.Input{Item: "lamp", Amount: 4200})
			h.Send("payment", order.Payment{Card: "4000000000000002"})
			out, _ := h.Drive(ctx, order.New(failing).Run, workflowtest.DriveOptions{})
			var stepErr *workflow.StepError
			if out.Status != workflow.RunFailed || !errors.As(out.Err, &stepErr) || stepErr.Path != "charge" {
				t.Fatalf("outcome %s (%v), want failed at the charge", out.Status, out.Err)
			}
			if len(keys) != c.attempts {
				t.Fatalf("charged %d times, want %d", len(keys), c.attempts)
			}
			if got, want := h.Clock.Now(), start.Add(c.elapsed); !got.Equal(want) {
				t.Fatalf("failed at %v, want %v", got, want)
			}
			if s := h.State(); s.Status != "payment_failed" || s.Receipt != "" {
				t.Fatalf("state %+v, want payment_failed without a receipt", s)
			}
			if events := h.Events(); len(events) != 1 || events[0].Name != "statusChanged" || string(events[0].Data) != `"payment_failed"` {
				t.Fatalf("events %+v, want statusChanged \"payment_failed\" only", events)
			}
		})
	}
}

func TestTutorialOrderWithoutPaymentIsCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var keys []string
	h := newOrder(t, order.Input{Item: "lamp", Amount: 4200, PayWithinSeconds: 60})
	out, _ := h.Drive(ctx, order.New(flakyCharge(&keys)).Run, workflowtest.DriveOptions{})
	if out.Status != workflow.RunCompleted || h.State().Status != "cancelled" || len(keys) != 0 {
		t.Fatalf("outcome %s (%v), state %+v, charges %d; want cancelled, nothing charged", out.Status, out.Err, h.State(), len(keys))
	}
	if got, want := h.Clock.Now(), start.Add(time.Minute); !got.Equal(want) {
		t.Fatalf("cancelled at %v, want %v", got, want)
	}
}

// A crash at any commit, before or after it applies: the next activation
// replays the history and the order ships all the same, charged with one
// idempotency key however often the charge ran.
func TestTutorialOrderShipsWhateverTheCrash(t *testing.T) {
	refCtx, refCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer refCancel()
	ref := newOrder(t, order.Input{Item: "lamp", Amount: 4200})
	ref.Send("payment", order.Payment{Card: "4242"})
	var refKeys []string
	if out, _ := ref.Drive(refCtx, order.New(flakyCharge(&refKeys)).Run, workflowtest.DriveOptions{}); out.Status != workflow.RunCompleted {
		t.Fatalf("without a crash: outcome %s (%v), want completed", out.Status, out.Err)
	}
	if len(refKeys) != 2 {
		t.Fatalf("without a crash: charged with keys %q, want 2 attempts", refKeys)
	}
	for n := 1; n <= ref.Commits(); n++ {
		for _, after := range []bool{false, true} {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			var keys []string
			h := newOrder(t, order.Input{Item: "lamp", Amount: 4200})
			h.Send("payment", order.Payment{Card: "4242"})
			h.CrashAt(n, after) // the node dies at commit n
			out, _ := h.Drive(ctx, order.New(flakyCharge(&keys)).Run, workflowtest.DriveOptions{})
			cancel()
			if out.Status != workflow.RunCompleted || h.State().Status != "shipped" {
				t.Fatalf("crash at commit %d (after: %v): outcome %s (%v), state %+v", n, after, out.Status, out.Err, h.State())
			}
			for _, k := range keys {
				if k != refKeys[0] {
					t.Fatalf("crash at commit %d (after: %v): charged with keys %q, want %q only", n, after, keys, refKeys[0])
				}
			}
		}
	}
}

// CreateState refuses an empty input, which is what call and send create
// an order with when its key does not exist.
func TestTutorialCreateStateRefusesWhatIsNoOrder(t *testing.T) {
	for _, input := range []string{``, `null`, `{}`, `{"item":"lamp"}`, `{"item":"lamp","amout":4200}`,
		`{"item":"lamp","amount":-1}`, `{"item":"lamp","amount":1,"payWithinSeconds":-1}`, `"lamp"`,
		`{"item":"lamp","amount":4200}}`, `{"item":"lamp","amount":4200} {"item":"pen","amount":300}`} {
		if s, err := order.Actor.CreateState(json.RawMessage(input)); err == nil {
			t.Errorf("CreateState(%q) = %+v, want an error", input, s)
		}
	}
	// The refusal of an empty input says what an order needs: it is what
	// a send to a mistyped key gets.
	for _, input := range []string{``, `null`} {
		_, err := order.Actor.CreateState(json.RawMessage(input))
		if err == nil || !strings.Contains(err.Error(), "an order is created with its input") {
			t.Errorf("CreateState(%q): %v, want one saying what an order is created with", input, err)
		}
	}
	s, err := order.Actor.CreateState(json.RawMessage(`{"item":"lamp","amount":4200}`))
	if want := (order.State{Item: "lamp", Amount: 4200, PayWithinSeconds: 900, Status: "awaiting_payment"}); err != nil || s != want {
		t.Fatalf("CreateState = %+v, %v; want %+v", s, err, want)
	}
}
