package runtime_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type bidsState struct {
	Got []int `json:"got"`
}

// A message's ID is not given to another message of the actor once its
// queue is empty and the actor is loaded again: the receive that took it
// keeps it in the history, and a retry puts it back in its queue under that
// ID. A message sent since under the same ID was overwritten by it (lost,
// while memory still counted it).
func TestAMessageIDTakenByTheWorkflowIsNotReusedAfterALoad(t *testing.T) {
	t.Parallel()
	bidder := rivet.Actor[bidsState]{
		Name:   "bidder",
		Queues: rivet.Queues{"bids": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[bidsState]) error {
			bid, err := workflow.Next[int](ctx, "wait-bid")
			if err != nil {
				return err
			}
			return ctx.Step("record", func(s *workflow.StepCtx[bidsState]) error {
				s.State.Got = append(s.State.Got, bid.Body)
				return nil
			})
		},
	}
	e := newEnv(t, counterReg(t, bidder), nil)
	ref := runtime.Ref{Name: "bidder", Key: []string{"b"}}
	first, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "bids", Body: json.RawMessage(`100`), CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow's end", 20*time.Second, func() bool {
		return inspect(t, e.host, "bidder", "b").WorkflowStatus == runtime.WorkflowCompleted
	})
	e.restart() // the queue is empty: the actor is loaded again without any message
	second, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "bids", Body: json.RawMessage(`5`)})
	if err != nil {
		t.Fatal(err)
	}
	if second.MessageID <= first.MessageID {
		t.Errorf("message IDs: %d, then %d after a load; want a new one", first.MessageID, second.MessageID)
	}
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "wait-bid"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried workflow's end", 20*time.Second, func() bool {
		return inspect(t, e.host, "bidder", "b").WorkflowStatus == runtime.WorkflowCompleted
	})
	if st := string(inspect(t, e.host, "bidder", "b").State); st != `{"got":[100,100]}` {
		t.Fatalf("state after the retry = %s, want the first bid taken again", st)
	}
	e.restart() // what storage holds, not what memory counted
	if q := inspect(t, e.host, "bidder", "b").Queues; len(q) != 1 || q[0].Queue != "bids" || q[0].Depth != 1 {
		t.Fatalf("queues after the retry = %+v, want the second bid still queued", q)
	}
}

type takerState struct {
	Taken int `json:"taken"`
}

// Nor once the loop that took it has pruned the iterations that recorded
// it: a workflow that deduplicates by message ID (a "last ID seen" kept in
// its state, as an auto-increment ID invites) would otherwise drop the
// messages sent after the actor is loaded again.
func TestAMessageIDIsNotReusedAfterItsReceiveWasPruned(t *testing.T) {
	t.Parallel()
	taker := rivet.Actor[takerState]{
		Name:   "taker",
		Queues: rivet.Queues{"in": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[takerState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "take", HistoryPruneInterval: 2, HistorySize: 1}, func(c *workflow.Ctx[takerState], n int) (int, error) {
				got, err := workflow.NextBatch[int](c, "wait-in", workflow.NextOptions{Count: 10, Timeout: 20 * time.Millisecond})
				if err != nil || len(got) == 0 {
					return n, err
				}
				return n + 1, c.Step("count", func(s *workflow.StepCtx[takerState]) error {
					s.State.Taken += len(got)
					return nil
				})
			})
			return err
		},
	}
	e := newEnv(t, counterReg(t, taker), nil)
	ref := runtime.Ref{Name: "taker", Key: []string{"t"}}
	var last uint64
	for i := range 3 {
		res, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "in", Body: json.RawMessage(`1`), CreateIfMissing: i == 0})
		if err != nil {
			t.Fatal(err)
		}
		last = res.MessageID
	}
	waitFor(t, "the messages taken", 20*time.Second, func() bool {
		return string(inspect(t, e.host, "taker", "t").State) == `{"taken":3}`
	})
	// Empty receives follow every 20 ms: once a few iterations have gone
	// by, none that took a message is left in the history.
	waitFor(t, "the receives that took the messages pruned", 20*time.Second, func() bool {
		h, err := e.host.History(ctx(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range h.Entries {
			if strings.HasSuffix(en.Path, "/count") {
				return false // an iteration that took messages
			}
		}
		return len(h.Entries) > 0
	})
	e.restart()
	res, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "in", Body: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.MessageID <= last {
		t.Errorf("message IDs: up to %d, then %d after a load; want a new one", last, res.MessageID)
	}
}
