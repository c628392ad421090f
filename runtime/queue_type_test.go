package runtime_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// On a node too, a receive without names takes from the queues of its
// message type only (workflowtest's TestAReceiveWithoutNamesTakesFromTheQueuesOfItsType):
// the bid sent after a cancel of another type is the one taken.
func TestAReceiveWithoutNamesTakesFromTheQueuesOfItsType(t *testing.T) {
	t.Parallel()
	type cancel struct {
		Why string `json:"why"`
	}
	bidder := rivet.Actor[bidsState]{
		Name:   "typed",
		Queues: rivet.Queues{"bids": rivet.QueueOf[int](), "cancel": rivet.QueueOf[cancel]()},
		Run: func(ctx *workflow.Ctx[bidsState]) error {
			bid, err := workflow.Next[int](ctx, "wait-bid")
			if err != nil {
				return err
			}
			return recordUnlessNegative(ctx, bid.Body)
		},
	}
	e := newEnv(t, counterReg(t, bidder), nil)
	ref := runtime.Ref{Name: "typed", Key: []string{"t"}}
	// Decoded into an int, {"why":...} fails the workflow; before the
	// receive took it, that is the failure this test would see.
	for _, m := range []runtime.SendRequest{
		{Ref: ref, Queue: "cancel", Body: json.RawMessage(`{"why":"changed my mind"}`), CreateIfMissing: true},
		{Ref: ref, Queue: "bids", Body: json.RawMessage(`7`)},
	} {
		if _, err := e.host.Send(ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the workflow's end", 20*time.Second, func() bool {
		st := inspect(t, e.host, "typed", "t").WorkflowStatus
		return st == runtime.WorkflowCompleted || st == runtime.WorkflowFailed
	})
	if ins := inspect(t, e.host, "typed", "t"); ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != `{"got":[7]}` || len(ins.Queues) != 1 {
		t.Fatalf("workflow %s (%s), state %s, queues %+v; want the bid taken, the cancel still queued", ins.WorkflowStatus, ins.WorkflowError, ins.State, ins.Queues)
	}
}
