package runtime_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// stopper's workflow waits for one message on "stop" and ends as it
// says: completed, or failed if the body is {"fail":true}. Its "go" queue
// is read by no one: a message sent there stays queued.
func stopper() rivet.Actor[stepsState] {
	type stop struct {
		Fail bool `json:"fail"`
	}
	return rivet.Actor[stepsState]{
		Name: "stopper",
		Queues: rivet.Queues{
			"go":   rivet.QueueOf[struct{}](),
			"stop": rivet.QueueOf[stop](),
		},
		Run: func(ctx *workflow.Ctx[stepsState]) error {
			m, err := workflow.Next[stop](ctx, "stop", workflow.NextOptions{Names: []string{"stop"}})
			if err != nil {
				return err
			}
			if m.Body.Fail {
				return errors.New("told to fail")
			}
			return nil
		},
		Actions: rivet.Actions[stepsState]{"getState": rivet.Query(getState)},
	}
}

func depthOf(ins runtime.Inspection, queue string) uint64 {
	for _, q := range ins.Queues {
		if q.Queue == queue {
			return q.Depth
		}
	}
	return 0
}

func wantReason(t *testing.T, what string, err error, reason string) {
	t.Helper()
	var re *rivet.Error
	if !errors.Is(err, rivet.ErrWorkflowFailed) || !errors.As(err, &re) {
		t.Fatalf("%s = %v, want ErrWorkflowFailed", what, err)
	}
	if got := re.Group + "." + re.Code; got != reason {
		t.Fatalf("%s: reason %s, want %s (%v)", what, got, reason, err)
	}
}

// A send with RequireRunning to an actor whose workflow has ended (or
// whose type has none) is refused before anything is queued, and its
// idempotency key is not recorded; one to a running workflow is queued; a
// plain send to an ended workflow is still queued (the default is
// unchanged); and a duplicate of a send that was accepted while the
// workflow ran answers as a duplicate after the workflow ended.
func TestSendRequireRunning(t *testing.T) {
	t.Parallel()
	noWf := queuesOnly[struct{}]{rivet.Actor[struct{}]{Name: "nowf", Queues: rivet.Queues{"jobs": rivet.QueueOf[struct{}]()}}}
	e := newEnv(t, counterReg(t, stopper(), noWf), nil)
	body := json.RawMessage(`{}`)
	send := func(key, queue, idem string, require bool) (runtime.SendResult, error) {
		return e.host.Send(ctx(t), runtime.SendRequest{Ref: runtime.Ref{Name: "stopper", Key: []string{key}}, Queue: queue, Body: body, CreateIfMissing: true, IdempotencyKey: idem, RequireRunning: require})
	}
	ended := func(key string, fail bool, status string) {
		t.Helper()
		b := json.RawMessage(`{"fail":false}`)
		if fail {
			b = json.RawMessage(`{"fail":true}`)
		}
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: runtime.Ref{Name: "stopper", Key: []string{key}}, Queue: "stop", Body: b, CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, key+"'s workflow to end", 10*time.Second, func() bool {
			return inspect(t, e.host, "stopper", key).WorkflowStatus == status
		})
	}

	// Running (a new actor, its workflow not started yet, or waiting): queued.
	res, err := send("run", "go", "k-run", true)
	if err != nil || res.Duplicate || res.WorkflowStatus != "" {
		t.Fatalf("send to a running workflow = %+v, %v; want it queued", res, err)
	}
	// Its duplicate after the workflow ended: the duplicate, not the
	// refusal (its message is queued), saying the workflow ended.
	ended("run", false, runtime.WorkflowCompleted)
	dup, err := send("run", "go", "k-run", true)
	if err != nil || !dup.Duplicate || dup.MessageID != res.MessageID || dup.WorkflowStatus != runtime.WorkflowCompleted {
		t.Fatalf("duplicate after the workflow ended = %+v, %v; want Duplicate of message %d with WorkflowStatus completed", dup, err, res.MessageID)
	}
	// A new key to the ended workflow: refused, nothing queued, no key kept.
	_, err = send("run", "go", "k-new", true)
	wantReason(t, "send with RequireRunning to a completed workflow", err, "workflow.ended")
	if d := depthOf(inspect(t, e.host, "stopper", "run"), "go"); d != 1 {
		t.Fatalf("queue go holds %d messages after the refusal, want 1 (the first send's)", d)
	}
	// The same key without RequireRunning: queued (the default), as a new
	// message (the refusal recorded no key).
	res, err = send("run", "go", "k-new", false)
	if err != nil || res.Duplicate || res.WorkflowStatus != runtime.WorkflowCompleted {
		t.Fatalf("plain send to a completed workflow = %+v, %v; want it queued (not a duplicate) with WorkflowStatus completed", res, err)
	}
	if d := depthOf(inspect(t, e.host, "stopper", "run"), "go"); d != 2 {
		t.Fatalf("queue go holds %d messages, want 2", d)
	}

	// A failed workflow: workflow.failed, with or without a key.
	if _, err := send("fail", "go", "", false); err != nil {
		t.Fatal(err)
	}
	ended("fail", true, runtime.WorkflowFailed)
	_, err = send("fail", "go", "", true)
	wantReason(t, "send with RequireRunning to a failed workflow", err, "workflow.failed")
	_, err = send("fail", "go", "k-fail", true)
	wantReason(t, "keyed send with RequireRunning to a failed workflow", err, "workflow.failed")
	if d := depthOf(inspect(t, e.host, "stopper", "fail"), "go"); d != 1 {
		t.Fatalf("queue go of the failed one holds %d messages, want 1", d)
	}

	// No workflow at all: workflow.none, and the actor is not created.
	_, err = e.host.Send(ctx(t), runtime.SendRequest{Ref: runtime.Ref{Name: "nowf", Key: []string{"x"}}, Queue: "jobs", Body: body, CreateIfMissing: true, RequireRunning: true})
	wantReason(t, "send with RequireRunning to an actor without a workflow", err, "workflow.none")
	if _, err := e.host.Inspect(ctx(t), runtime.Ref{Name: "nowf", Key: []string{"x"}}); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("inspect after the refusal = %v, want ErrNotFound (nothing created)", err)
	}
}

// A send that requires a running workflow (RequireRunning, or Wait) to an
// actor whose workflow has ended is refused as such, workflow.ended, even
// when its queue is full: both refusals come before anything is queued,
// and the workflow's end is what the sender must hear. A plain send still
// finds the queue full.
func TestAnEndedWorkflowIsRefusedBeforeAFullQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, stopper()), func(c *runtime.Config) { c.MaxQueueDepth = 2 })
	ref := runtime.Ref{Name: "stopper", Key: []string{"full"}}
	send := func(queue string, body json.RawMessage, mutate func(*runtime.SendRequest)) error {
		req := runtime.SendRequest{Ref: ref, Queue: queue, Body: body, CreateIfMissing: true}
		if mutate != nil {
			mutate(&req)
		}
		_, err := e.host.Send(ctx(t), req)
		return err
	}
	for range 2 {
		if err := send("go", json.RawMessage(`{}`), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := send("stop", json.RawMessage(`{"fail":false}`), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to end", 10*time.Second, func() bool {
		return inspect(t, e.host, "stopper", "full").WorkflowStatus == runtime.WorkflowCompleted
	})
	if err := send("go", json.RawMessage(`{}`), nil); !errors.Is(err, rivet.ErrQueueFull) {
		t.Fatalf("plain send to the full queue = %v, want ErrQueueFull", err)
	}
	err := send("go", json.RawMessage(`{}`), func(r *runtime.SendRequest) { r.RequireRunning = true })
	wantReason(t, "send with RequireRunning to an ended workflow's full queue", err, "workflow.ended")
	err = send("go", json.RawMessage(`{}`), func(r *runtime.SendRequest) { r.RequireRunning, r.IdempotencyKey = true, "k1" })
	wantReason(t, "keyed send with RequireRunning to an ended workflow's full queue", err, "workflow.ended")
	err = send("go", json.RawMessage(`{}`), func(r *runtime.SendRequest) { r.Wait, r.Timeout = true, 5*time.Second })
	wantReason(t, "waiting send to an ended workflow's full queue", err, "workflow.ended")
	if d := depthOf(inspect(t, e.host, "stopper", "full"), "go"); d != 2 {
		t.Fatalf("queue go holds %d messages, want 2", d)
	}
}
