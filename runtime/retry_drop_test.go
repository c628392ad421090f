package runtime_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A poison message (one the workflow fails on every time it takes it) is
// got past by a retry from the receive that took it, with DropMessages:
// the message is dropped, not put back in its queue, and the workflow
// takes the next one. Without it the retry puts it back, and the
// workflow fails on it again (a trial found no way past one but destroy).
// DropMessages with no receive among the deleted entries is refused, and
// changes nothing.
func TestARetryFromAReceiveDropsItsPoisonMessage(t *testing.T) {
	t.Parallel()
	eater := rivet.Actor[bidsState]{
		Name:   "eater",
		Queues: rivet.Queues{"bids": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[bidsState]) error {
			bid, err := workflow.Next[int](ctx, "wait-bid")
			if err != nil {
				return err
			}
			return recordUnlessNegative(ctx, bid.Body)
		},
	}
	e := newEnv(t, counterReg(t, eater), nil)
	ref := runtime.Ref{Name: "eater", Key: []string{"e"}}
	poison := runtime.SendRequest{Ref: ref, Queue: "bids", Body: json.RawMessage(`-1`), CreateIfMissing: true, IdempotencyKey: "bid-1"}
	if _, err := e.host.Send(ctx(t), poison); err != nil {
		t.Fatal(err)
	}
	failed := func() bool { return inspect(t, e.host, "eater", "e").WorkflowStatus == runtime.WorkflowFailed }
	waitFor(t, "the workflow to fail on the poison message", 20*time.Second, failed)

	// Nothing to drop from the failed step alone: refused, still failed.
	if _, err := e.host.RetryWorkflowWith(ctx(t), ref, runtime.RetryOptions{DropMessages: true}); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("a retry dropping messages from the failed step: %v, want ErrInvalidArgument", err)
	}
	if !failed() {
		t.Fatal("a refused retry changed the workflow")
	}
	// Put back, it fails again.
	if _, err := e.host.RetryWorkflowWith(ctx(t), ref, runtime.RetryOptions{From: "wait-bid"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail again on the message put back", 20*time.Second, failed)
	if res, err := e.host.RetryWorkflowWith(ctx(t), ref, runtime.RetryOptions{From: "wait-bid", DropMessages: true}); err != nil || res.Dropped != 1 || res.Removed == 0 {
		t.Fatalf("the retry dropping the poison message: %+v, %v; want it dropped, counted", res, err)
	}
	// Its sender, sending it again with its key to wait for its
	// completion, is told at once that it was dropped (it waited out its
	// timeout, told the message was taken).
	poison.Wait, poison.Timeout = true, 20*time.Second
	t0 := time.Now()
	if _, err := e.host.Send(ctx(t), poison); !errors.Is(err, rivet.ErrFailedPrecondition) || !strings.Contains(err.Error(), "was dropped") || time.Since(t0) > 10*time.Second {
		t.Fatalf("the dropped message sent again to wait for it: %v after %v; want FAILED_PRECONDITION, dropped, at once", err, time.Since(t0))
	}
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "bids", Body: json.RawMessage(`7`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to take the next message", 20*time.Second, func() bool {
		return inspect(t, e.host, "eater", "e").WorkflowStatus == runtime.WorkflowCompleted
	})
	e.restart() // what storage holds
	if ins := inspect(t, e.host, "eater", "e"); string(ins.State) != `{"got":[7]}` || len(ins.Queues) != 0 {
		t.Fatalf("after the retry: state %s, queues %+v; want the next bid taken, the poison one gone", ins.State, ins.Queues)
	}
	// The same retry sent again (its first answer lost) finds the
	// workflow completed, and drops nothing: the good message stays taken.
	if _, err := e.host.RetryWorkflowWith(ctx(t), ref, runtime.RetryOptions{From: "wait-bid", DropMessages: true}); !errors.Is(err, rivet.ErrWorkflowFailed) {
		t.Fatalf("the retry dropping messages sent again: %v, want the workflow's not_failed refusal", err)
	}
	if ins := inspect(t, e.host, "eater", "e"); ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != `{"got":[7]}` {
		t.Fatalf("after the refused retry: %s, state %s", ins.WorkflowStatus, ins.State)
	}
}

// A drop from an earlier receive leaves the kept completion of a message
// the workflow had completed: its sender, asking again, gets it (a
// review's find: it was overwritten, and the sender told the message was
// dropped, though it had run).
func TestADropKeepsTheCompletionOfACompletedMessage(t *testing.T) {
	t.Parallel()
	asker := rivet.Actor[bidsState]{
		Name:   "asker",
		Queues: rivet.Queues{"asks": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[bidsState]) error {
			first, err := workflow.Next[int](ctx, "first")
			if err != nil {
				return err
			}
			if err := first.Complete(first.Body * 2); err != nil {
				return err
			}
			second, err := workflow.Next[int](ctx, "second")
			if err != nil {
				return err
			}
			return recordUnlessNegative(ctx, second.Body)
		},
	}
	e := newEnv(t, counterReg(t, asker), nil)
	ref := runtime.Ref{Name: "asker", Key: []string{"a"}}
	first := runtime.SendRequest{Ref: ref, Queue: "asks", Body: json.RawMessage(`21`), CreateIfMissing: true, IdempotencyKey: "ask-1", Wait: true, Timeout: 20 * time.Second}
	if res, err := e.host.Send(ctx(t), first); err != nil || string(res.Response) != "42" {
		t.Fatalf("first ask: %+v, %v", res, err)
	}
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "asks", Body: json.RawMessage(`-1`), IdempotencyKey: "ask-2"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail on the second ask", 20*time.Second, func() bool {
		return inspect(t, e.host, "asker", "a").WorkflowStatus == runtime.WorkflowFailed
	})
	// Both receives' messages are dropped: the completed one's too.
	if res, err := e.host.RetryWorkflowWith(ctx(t), ref, runtime.RetryOptions{From: "first", DropMessages: true}); err != nil || res.Dropped != 2 {
		t.Fatalf("the retry from the first ask dropping: %+v, %v; want both asks dropped", res, err)
	}
	if res, err := e.host.Send(ctx(t), first); err != nil || !res.Duplicate || res.Status != runtime.SendCompleted || string(res.Response) != "42" {
		t.Fatalf("the first ask sent again after the drop: %+v, %v; want its kept completion, 42", res, err)
	}
}

// recordUnlessNegative records n in a step that fails for good on a
// negative n: the poison message.
func recordUnlessNegative(ctx *workflow.Ctx[bidsState], n int) error {
	return ctx.Step("record", func(s *workflow.StepCtx[bidsState]) error {
		if n < 0 {
			return workflow.Critical(errors.New("a negative number"))
		}
		s.State.Got = append(s.State.Got, n)
		return nil
	})
}
