package workflowtest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type limited struct {
	N        int    `json:"n"`
	Blob     string `json:"blob"`
	Refunded string `json:"refunded"`
	Errors   []string
}

// The test host bounds a step's writes as a node does: a step whose state
// or output is over the limits fails for good as that step, its changes
// discarded, for the workflow's code to handle, so that users can test
// that handling without a node.
func TestTheHostBoundsAStepsWritesAsANodeDoes(t *testing.T) {
	h := limitedHost()
	h.MaxStateBytes, h.MaxStepOutputBytes = 1000, 100
	critical := func(err error) bool {
		var se *workflow.StepError
		return errors.As(err, &se) && se.Kind == workflow.FailureCritical
	}
	fn := func(c *workflow.Ctx[limited]) error {
		var errs []string
		err := c.Step("big-state", func(s *workflow.StepCtx[limited]) error {
			s.State.N++
			s.State.Blob = strings.Repeat("s", 1200)
			return nil
		})
		if !critical(err) {
			return workflow.Critical(errors.New("big-state: " + errText(err)))
		}
		errs = append(errs, err.Error())
		_, err = workflow.Step(c, "big-output", func(s *workflow.StepCtx[limited]) (string, error) {
			s.State.N++
			return strings.Repeat("o", 150), nil
		})
		if !critical(err) {
			return workflow.Critical(errors.New("big-output: " + errText(err)))
		}
		errs = append(errs, err.Error())
		_, err = workflow.Do(c, "big-do", func(d *workflow.DoCtx) (string, error) {
			return strings.Repeat("d", 150), nil
		})
		if !critical(err) {
			return workflow.Critical(errors.New("big-do: " + errText(err)))
		}
		errs = append(errs, err.Error())
		return c.Step("note", func(s *workflow.StepCtx[limited]) error {
			s.State.N += 10
			s.State.Errors = errs
			return nil
		})
	}
	if out := h.Run(context.Background(), fn); out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v, want completed: the code handled each step's failure", out)
	}
	st := h.State()
	if st.N != 10 || st.Blob != "" {
		t.Fatalf("state n=%d, blob of %d bytes; want 10 and none: the refused attempts' changes are discarded", st.N, len(st.Blob))
	}
	want := []string{"the state would be 12", "the output of a step is 152 bytes, the limit is 100", "the output of a step is 152 bytes"}
	for i, w := range want {
		if i >= len(st.Errors) || !strings.Contains(st.Errors[i], w) {
			t.Fatalf("the errors the code saw: %q; want #%d to say %q", st.Errors, i, w)
		}
	}
}

// A StepWithRollback whose success the host refused for its state has had
// its side effect: its compensation runs, with its output, when the
// workflow rolls back, here in a later activation that replays the failure.
func TestARefusedStepWithRollbackIsCompensatedAfterAReplay(t *testing.T) {
	h := limitedHost()
	h.MaxStateBytes = 200
	charges := 0
	fn := func(c *workflow.Ctx[limited]) error {
		if err := c.RollbackCheckpoint("saga"); err != nil {
			return err
		}
		_, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "charge"},
			func(s *workflow.StepCtx[limited]) (string, error) {
				charges++
				s.State.Blob = strings.Repeat("s", 1200)
				return "ch-1", nil
			},
			func(s *workflow.StepCtx[limited], id string) error {
				s.State.Refunded = id
				return nil
			})
		if _, rerr := workflow.Next[int](c, "confirm"); rerr != nil {
			return rerr
		}
		return err
	}
	if out, _ := h.Drive(context.Background(), fn, workflowtest.DriveOptions{}); out.Status != workflow.RunYielded {
		t.Fatalf("first activation: %+v, want it yielded, waiting for confirm", out)
	}
	var charge *workflow.Entry
	for _, e := range h.History() {
		if e.Path == "charge" {
			charge = &e
		}
	}
	if charge == nil || charge.Status != workflow.StatusExhausted || !charge.HasRollback || string(charge.Output) != `"ch-1"` {
		t.Fatalf("charge's entry %+v: want exhausted, with its rollback and output", charge)
	}
	h.Send("confirm", 1)
	out, _ := h.Drive(context.Background(), fn, workflowtest.DriveOptions{})
	if out.Status != workflow.RunFailed || !strings.Contains(errText(out.Err), "the state would be") {
		t.Fatalf("second activation: %+v, want failed with charge's error", out)
	}
	if st := h.State(); st.Refunded != "ch-1" || st.Blob != "" || charges != 1 {
		t.Fatalf("state %+v after %d charges: want refunded ch-1, no blob, one charge", st, charges)
	}
}

// limitedHost is a test host of a limited state, at a fixed time.
func limitedHost() *workflowtest.Host[limited] {
	return workflowtest.NewHost(limited{}, workflowtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

type receipt struct {
	ID string `json:"id"`
}

// A refused step whose value is null (a nil pointer) records no output,
// and still has its compensation run, with the null value.
func TestARefusedStepWithANullValueIsCompensated(t *testing.T) {
	h := limitedHost()
	h.MaxStateBytes = 200
	refunds := 0
	fn := func(c *workflow.Ctx[limited]) error {
		if err := c.RollbackCheckpoint("saga"); err != nil {
			return err
		}
		_, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "charge"},
			func(s *workflow.StepCtx[limited]) (*receipt, error) {
				s.State.Blob = strings.Repeat("s", 1200)
				return nil, nil
			},
			func(s *workflow.StepCtx[limited], r *receipt) error {
				if r != nil {
					return workflow.Critical(errors.New("the refund got a receipt, want nil"))
				}
				refunds++
				return nil
			})
		return err
	}
	out, _ := h.Drive(context.Background(), fn, workflowtest.DriveOptions{})
	if out.Status != workflow.RunFailed || refunds != 1 {
		t.Fatalf("outcome %+v after %d refunds: want failed, refunded once", out, refunds)
	}
}
