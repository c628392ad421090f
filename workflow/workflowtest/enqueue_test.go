package workflowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type jobs struct {
	Took []string `json:"took"`
}

// handOff enqueues a job on the workflow's own queue from a step, and then
// takes it with Next.
func handOff(c *workflow.Ctx[jobs]) error {
	if err := c.Step("plan", func(s *workflow.StepCtx[jobs]) error {
		return s.Enqueue("jobs", fmt.Sprintf("job of attempt %d", s.Attempt()))
	}); err != nil {
		return err
	}
	m, err := workflow.Next[string](c, "take", workflow.NextOptions{Names: []string{"jobs"}})
	if err != nil {
		return err
	}
	return c.Step("record", func(s *workflow.StepCtx[jobs]) error {
		s.State.Took = append(s.State.Took, m.Body)
		return nil
	})
}

// A step's Enqueue queues its message as on a node: with the commit of the
// attempt's record, so that a later Next of the workflow takes it. It used
// to fail the step (the host had no Enqueue: "test Enqueue with
// nodetest").
func TestAStepsEnqueuedMessageIsTakenByALaterReceive(t *testing.T) {
	h := workflowtest.NewHost(jobs{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.Queues = []string{"jobs"}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, handOff, workflowtest.DriveOptions{MaxActivations: 10})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %v (%v), want completed", out.Status, out.Err)
	}
	if got := h.State().Took; !slices.Equal(got, []string{"job of attempt 1"}) {
		t.Fatalf("took %q, want the step's message", got)
	}
	if q := h.Queue(); len(q) != 0 {
		t.Fatalf("queue %+v, want empty", q)
	}
}

// A crash of the commit of the step's record queues nothing: the message
// goes with the attempt, and the step's next attempt enqueues it once.
func TestACrashedCommitQueuesNoneOfItsStepsMessages(t *testing.T) {
	h := workflowtest.NewHost(jobs{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.Queues = []string{"jobs"}
	h.CrashAt(1, false) // plan's record
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out := h.Run(ctx, handOff); out.Status != workflow.RunYielded || !errors.Is(out.Err, workflowtest.ErrCrash) {
		t.Fatalf("first run: %v (%v), want a yield to the crash", out.Status, out.Err)
	}
	if q := h.Queue(); len(q) != 0 {
		t.Fatalf("queue after the crashed commit %+v, want empty", q)
	}
	out, _ := h.Drive(ctx, handOff, workflowtest.DriveOptions{MaxActivations: 10})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %v (%v), want completed", out.Status, out.Err)
	}
	// Attempt 2: the crash at its record's commit counts (the node's
	// attempt markers).
	if got := h.State().Took; !slices.Equal(got, []string{"job of attempt 2"}) {
		t.Fatalf("took %q, want the retried step's one message", got)
	}
	if q := h.Queue(); len(q) != 0 {
		t.Fatalf("queue %+v, want empty: the retried step enqueued once", q)
	}
}

// Enqueue checks at the call what a node checks, with its errors; the
// messages of a failed attempt are queued (roll-forward, as its state),
// after the messages sent before, in the order enqueued.
func TestAStepsEnqueueIsCheckedAndOrderedAsOnANode(t *testing.T) {
	h := workflowtest.NewHost(jobs{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.Queues = []string{"jobs", "other"}
	h.MaxMessageBytes = 100
	before := h.Send("other", "sent before")
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[jobs]) error {
		return c.StepWith(workflow.StepOptions{Name: "plan", MaxRetries: 1}, func(s *workflow.StepCtx[jobs]) error {
			if s.Attempt() == 1 {
				errs = append(errs, s.Enqueue("jbos", 1), s.Enqueue("jobs", string(make([]byte, 200))), s.Enqueue("jobs", func() {}))
				for i := range 33 {
					if err := s.Enqueue("jobs", fmt.Sprint(i)); err != nil {
						errs = append(errs, err)
					}
				}
				return errors.New("fails after enqueueing")
			}
			return s.Enqueue("other", "second attempt")
		})
	}, workflowtest.DriveOptions{MaxActivations: 10})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %v (%v), want completed", out.Status, out.Err)
	}
	want := []error{rivet.ErrUnknownQueue, rivet.ErrTooLarge, rivet.ErrInvalidArgument, rivet.ErrTooLarge}
	if len(errs) != len(want) {
		t.Fatalf("errors %v, want %v", errs, want)
	}
	for i, err := range errs {
		if !errors.Is(err, want[i]) {
			t.Errorf("error %d: %v, want %v", i, err, want[i])
		}
	}
	q := h.Queue()
	if len(q) != 34 || q[0].ID != before || q[1].Body == nil || string(q[1].Body) != `"0"` || string(q[32].Body) != `"31"` || string(q[33].Body) != `"second attempt"` {
		t.Fatalf("queue of %d messages %+v; want the one sent, the failed attempt's 32, the second attempt's", len(q), q)
	}
	for i := 1; i < len(q); i++ {
		if q[i].ID <= q[i-1].ID {
			t.Fatalf("queue %+v: IDs out of order", q)
		}
	}
}

// A JSON null for a queue whose type has no null is refused, by Enqueue
// with ErrInvalidArgument and by Send with a panic, as a node's
// rivet.QueueOf refuses it: it would reach the workflow as a zero value
// nobody sent. A queue of pointers takes it.
func TestANullMessageForAQueueOfStructsIsRefused(t *testing.T) {
	type order struct {
		ID int `json:"id"`
	}
	h := workflowtest.NewHost(jobs{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.QueueTypes = rivet.Queues{"orders": rivet.QueueOf[order](), "maybe": rivet.QueueOf[*order]()}.Types()
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[jobs]) error {
		return c.Step("plan", func(s *workflow.StepCtx[jobs]) error {
			errs = append(errs, s.Enqueue("orders", nil), s.Enqueue("orders", json.RawMessage("null")), s.Enqueue("maybe", nil))
			return nil
		})
	}, workflowtest.DriveOptions{MaxActivations: 10})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %v (%v), want completed", out.Status, out.Err)
	}
	if len(errs) != 3 || !errors.Is(errs[0], rivet.ErrInvalidArgument) || !errors.Is(errs[1], rivet.ErrInvalidArgument) || errs[2] != nil {
		t.Fatalf("Enqueue of null: %v; want ErrInvalidArgument twice for orders, nil for maybe", errs)
	}
	if q := h.Queue(); len(q) != 1 || q[0].Queue != "maybe" {
		t.Fatalf("queue %+v, want maybe's null only", q)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Send of null to orders did not panic")
			}
		}()
		h.Send("orders", nil)
	}()
}

// An ephemeral step that enqueues commits at once, as a node commits
// every step: the workflow's next receive takes the message in the same
// activation, rather than wait for a commit that came only with the
// run's eviction.
func TestAnEphemeralStepsMessageIsQueuedWhenItEnds(t *testing.T) {
	h := workflowtest.NewHost(jobs{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	queued := -1
	out, n := h.Drive(ctx, func(c *workflow.Ctx[jobs]) error {
		if err := c.StepWith(workflow.StepOptions{Name: "plan", Ephemeral: true}, func(s *workflow.StepCtx[jobs]) error {
			return s.Enqueue("jobs", "job")
		}); err != nil {
			return err
		}
		if queued < 0 {
			queued = len(h.Queue())
		}
		_, err := workflow.Next[string](c, "take", workflow.NextOptions{Names: []string{"jobs"}})
		return err
	}, workflowtest.DriveOptions{MaxActivations: 10})
	if out.Status != workflow.RunCompleted || n != 1 || queued != 1 {
		t.Fatalf("outcome %v (%v) after %d activations, %d messages queued when the step ended; want completed in 1, the message queued", out.Status, out.Err, n, queued)
	}
}

// Enqueue is bounded as on a node by the queue's depth, counting what the
// attempt staged (ErrQueueFull), and by the bytes of one attempt's
// messages, 256 KiB, which share its commit's transaction (ErrTooLarge).
func TestAStepsEnqueueIsBoundedByDepthAndAttemptBytes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	enqueue := func(h *workflowtest.Host[jobs], n int, body any) []error {
		var errs []error
		out, _ := h.Drive(ctx, func(c *workflow.Ctx[jobs]) error {
			return c.Step("plan", func(s *workflow.StepCtx[jobs]) error {
				errs = nil // the attempt that commits
				for range n {
					errs = append(errs, s.Enqueue("jobs", body))
				}
				return nil
			})
		}, workflowtest.DriveOptions{MaxActivations: 10})
		if out.Status != workflow.RunCompleted {
			t.Fatalf("outcome %v (%v), want completed", out.Status, out.Err)
		}
		return errs
	}

	h := workflowtest.NewHost(jobs{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.MaxQueueDepth = 3
	h.Send("jobs", "a")
	h.Send("jobs", "b")
	if errs := enqueue(h, 2, "c"); len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], rivet.ErrQueueFull) {
		t.Errorf("two enqueues to a queue of 2 with a depth of 3: %v; want nil, then ErrQueueFull", errs)
	}
	if q := h.Queue(); len(q) != 3 {
		t.Errorf("%d messages queued, want 3: the 2 sent, the step's first", len(q))
	}

	h = workflowtest.NewHost(jobs{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	errs := enqueue(h, 5, strings.Repeat("x", 60<<10)) // each under MaxMessageBytes, 64 KiB
	if len(errs) != 5 || slices.ContainsFunc(errs[:4], func(err error) bool { return err != nil }) || !errors.Is(errs[4], rivet.ErrTooLarge) {
		t.Errorf("five 60 KiB enqueues: %v; want four nil (240 KiB), the fifth ErrTooLarge (past 256 KiB)", errs)
	}
	if q := h.Queue(); len(q) != 4 {
		t.Errorf("%d messages queued, want 4", len(q))
	}
}

// A commit that fails (FailCommit) queues none of its attempt's messages,
// as a node's failed transaction: the run fails with the storage error,
// and its end (which commits what the host deferred) queues nothing
// either.
func TestAFailedCommitQueuesNoneOfItsStepsMessages(t *testing.T) {
	h := workflowtest.NewHost(jobs{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	h.FailCommit = func(n int) error {
		if n == 1 {
			return errors.New("etcd unavailable")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, func(c *workflow.Ctx[jobs]) error {
		return c.Step("plan", func(s *workflow.StepCtx[jobs]) error { return s.Enqueue("jobs", "job") })
	}, workflowtest.DriveOptions{MaxActivations: 10})
	if out.Status == workflow.RunCompleted {
		t.Fatalf("outcome %v (%v); want the run failed by the step's commit", out.Status, out.Err)
	}
	if q := h.Queue(); len(q) != 0 {
		t.Fatalf("queue %+v; want empty: the failed commit queued nothing", q)
	}
}
