package workflowtest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type seen struct {
	Outside []string `json:"outside"`
	Step    []string `json:"step"`
	Name    string   `json:"name"`
}

// identity records what the workflow, a step and a Do step read of their
// actor's name and key, changing each copy it gets to show that the next
// read does not see it.
func identity(c *workflow.Ctx[seen]) error {
	outside := c.Key()
	name := c.Name()
	if len(outside) > 0 {
		c.Key()[0] = "changed"
	}
	doKey, err := workflow.Do(c, "do", func(d *workflow.DoCtx) ([]string, error) {
		if d.Name() != name {
			return nil, workflow.Critical(errString("DoCtx.Name " + d.Name()))
		}
		return d.Key(), nil
	})
	if err != nil {
		return err
	}
	return c.Step("record", func(s *workflow.StepCtx[seen]) error {
		s.State.Outside = outside
		s.State.Step = s.Key()
		s.State.Name = s.Name()
		if !slices.Equal(doKey, s.Key()) {
			return workflow.Critical(errString("Do step saw another key"))
		}
		return nil
	})
}

type errString string

func (e errString) Error() string { return string(e) }

// Workflow code reads its actor's name and key from the host: the test
// host's default, or what the test sets.
func TestWorkflowReadsItsActorsKey(t *testing.T) {
	clock := workflowtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

	h := workflowtest.NewHost(seen{}, clock)
	if out := h.Run(context.Background(), identity); out.Status != workflow.RunCompleted {
		t.Fatalf("default host: %+v", out)
	}
	if got := h.State(); got.Name != "test" || !slices.Equal(got.Outside, []string{"test"}) || !slices.Equal(got.Step, []string{"test"}) {
		t.Fatalf("default host: state %+v, want name test and key [test]", got)
	}

	h = workflowtest.NewHost(seen{}, clock)
	h.Name, h.Key = "order", []string{"eu", "42"}
	if out := h.Run(context.Background(), identity); out.Status != workflow.RunCompleted {
		t.Fatalf("%+v", out)
	}
	want := []string{"eu", "42"}
	if got := h.State(); got.Name != "order" || !slices.Equal(got.Outside, want) || !slices.Equal(got.Step, want) {
		t.Fatalf("state %+v, want name order and key %v", got, want)
	}
	// Reading them recorded nothing: the history has the two steps.
	if hist := h.History(); len(hist) != 2 {
		t.Fatalf("history %+v, want the two steps only", hist)
	}
}
