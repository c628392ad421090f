package workflowtest_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A step's events are published as on a node: those of attempts whose
// commit applied (a failed attempt's too), once, and not those of an
// attempt lost to a crash before its commit, whose run publishes them
// again. A host without them made a step that broadcast fail after four
// attempts (a user trial). A step that schedules fails at once, saying to
// test schedules on a node.
func TestTheHostPublishesCommittedStepsEvents(t *testing.T) {
	type st struct{ N int }
	wf := func(c *workflow.Ctx[st]) error {
		if err := c.Step("first", func(s *workflow.StepCtx[st]) error { return s.Broadcast("started", map[string]int{"n": 1}) }); err != nil {
			return err
		}
		return c.StepWith(workflow.StepOptions{Name: "flaky", MaxRetries: 2, RetryBackoffBase: time.Millisecond}, func(s *workflow.StepCtx[st]) error {
			s.State.N++
			if err := s.Broadcast("attempt", s.State.N); err != nil {
				return err
			}
			if s.State.N < 2 {
				return errors.New("not yet")
			}
			return nil
		})
	}
	h := workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.CrashAt(1, false) // the first step's commit never applies
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{}); out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	want := []workflowtest.Event{{Name: "started", Data: []byte(`{"n":1}`)}, {Name: "attempt", Data: []byte(`1`)}, {Name: "attempt", Data: []byte(`2`)}}
	if got := h.Events(); !reflect.DeepEqual(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}

	h2 := workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	out, _ := h2.Drive(ctx, func(c *workflow.Ctx[st]) error {
		return c.Step("remind", func(s *workflow.StepCtx[st]) error {
			_, err := s.Schedule().After(time.Hour, "remind")
			return err
		})
	}, workflowtest.DriveOptions{})
	var se *workflow.StepError
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &se) || se.Attempts != 1 || !strings.Contains(out.Err.Error(), "nodetest") {
		t.Fatalf("a step that schedules: %+v (%v), want it failed at its first attempt, pointing at nodetest", out, out.Err)
	}
}

// A run held by a step body that waits for its context (not the clock,
// which Drive moves) ends with Drive's context, and Drive's error says what
// to look at: it used to be the context's error alone (a user trial).
func TestDriveSaysARunHeldByAStepBodyIsWhyItsContextEnded(t *testing.T) {
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[struct{}]) error {
		return c.Step("call", func(s *workflow.StepCtx[struct{}]) error {
			<-s.Context().Done() // a fake call that never answers
			return s.Context().Err()
		})
	}, workflowtest.DriveOptions{})
	if !errors.Is(out.Err, context.DeadlineExceeded) || !strings.Contains(out.Err.Error(), "Host.Hang") {
		t.Fatalf("outcome %+v (%v): want Drive's deadline, naming Host.Hang", out, out.Err)
	}
}

// A StepCtx kept past its step's attempt fails to Broadcast, as on a node
// (ErrInternal), where the host took the call and dropped the event (a
// user trial): a test passed that a node would fail.
func TestABroadcastAfterItsStepEndedFails(t *testing.T) {
	type st struct{}
	var kept *workflow.StepCtx[st]
	var late error
	h := workflowtest.NewHost(st{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[st]) error {
		if err := c.Step("a", func(s *workflow.StepCtx[st]) error { kept = s; return nil }); err != nil {
			return err
		}
		late = kept.Broadcast("ev", 1)
		return nil
	}, workflowtest.DriveOptions{})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if !errors.Is(late, rivet.ErrInternal) || !strings.Contains(late.Error(), `broadcast event "ev" after its step's attempt ended`) {
		t.Fatalf("Broadcast on a kept StepCtx: %v; want ErrInternal saying the attempt ended", late)
	}
	if evs := h.Events(); len(evs) != 0 {
		t.Fatalf("events %q, want none", evs)
	}
}
