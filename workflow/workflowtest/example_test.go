package workflowtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A workflow that charges an order through another actor, tested with a
// fake of that actor: its first answer is the error of a node that is
// restarting, so the step retries; the record shows both calls. A Get of
// an actor the test did not create is not found, as on a node.
func ExampleFakeClient() {
	type Order struct{ Receipt string }
	run := func(c *workflow.Ctx[Order]) error {
		return c.Step("charge", func(s *workflow.StepCtx[Order]) error {
			payments := s.Client().GetOrCreate("payments", "order-7")
			receipt, err := rivet.CallWith[string](s.Context(), payments, "charge",
				rivet.CallOptions{IdempotencyKey: s.IdempotencyKey("charge")}, 1250)
			if err != nil {
				return err // retried
			}
			s.State.Receipt = receipt
			return nil
		})
	}

	fc := workflowtest.NewFakeClient()
	restarting := true // the step's attempts run one at a time
	workflowtest.HandleAction(fc, "payments", "charge", func(ctx context.Context, key []string, cents int) (string, error) {
		if restarting {
			restarting = false
			return "", rivet.Errorf(rivet.ErrUnavailable, "the payments node is restarting")
		}
		return fmt.Sprintf("receipt for %s: %d cents", key[0], cents), nil
	})

	h := workflowtest.NewHost(Order{}, workflowtest.NewClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)))
	h.Client = fc
	out, _ := h.Drive(context.Background(), run, workflowtest.DriveOptions{})
	fmt.Println(out.Status, h.State().Receipt)
	for _, c := range fc.Calls() {
		fmt.Println(c.Action, string(c.Args[0]), c.Err)
	}

	_, err := fc.Get("payments", "order-8").Call(context.Background(), "charge", 1)
	fmt.Println(errors.Is(err, rivet.ErrNotFound))
	// Output:
	// completed receipt for order-7: 1250 cents
	// charge 1250 the payments node is restarting
	// charge 1250 <nil>
	// true
}
