package workflowtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A step's idempotency key is the same for each of its attempts, its own
// for each iteration of a loop, and its rollback handler's differs from
// its body's (a review found every handler sharing one key).
func TestStepKeysMatchAcrossAttemptsAndDifferAcrossIterationsAndHandlers(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var bodies, handlers []string
	failed := false
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		if err := c.RollbackCheckpoint("saga"); err != nil {
			return err
		}
		_, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "months"}, func(lc *workflow.Ctx[struct{}], i int) (int, error) {
			if i == 2 {
				return i, workflow.Break
			}
			_, err := workflow.StepWithRollback(lc, workflow.StepOptions{Name: "pay", MaxRetries: 2, RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond},
				func(s *workflow.StepCtx[struct{}]) (int, error) {
					bodies = append(bodies, s.IdempotencyKey("payment"))
					if !failed {
						failed = true
						return 0, errors.New("the first attempt fails")
					}
					return i, nil
				},
				func(s *workflow.StepCtx[struct{}], _ int) error {
					handlers = append(handlers, s.IdempotencyKey("payment"))
					return nil
				})
			return i + 1, err
		})
		if err != nil {
			return err
		}
		return c.Step("end", func(*workflow.StepCtx[struct{}]) error { return workflow.Critical(errors.New("roll back")) })
	}, workflowtest.DriveOptions{})
	if out.Status != workflow.RunFailed {
		t.Fatalf("outcome %v %v; want failed after the rollback (bodies %q)", out.Status, out.Err, bodies)
	}
	if len(bodies) != 3 || bodies[0] != bodies[1] || bodies[1] == bodies[2] {
		t.Fatalf("body keys %q (run %v): want the first iteration's two attempts alike, the second iteration's its own", bodies, out.Err)
	}
	if len(handlers) != 2 || handlers[0] == handlers[1] || handlers[0] == bodies[2] || handlers[1] == bodies[0] || handlers[0] == bodies[0] || handlers[1] == bodies[2] {
		t.Fatalf("handler keys %q, body keys %q: want each its own", handlers, bodies)
	}
}
