package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type shipState struct {
	Paid     bool     `json:"paid"`
	Shipped  []string `json:"shipped"`
	SelfSent int      `json:"selfSent"`
}

// shipper's workflow pays in one slow step (a payment service that takes
// its time: until release is closed), then takes want "shipped" messages.
// If selfSends > 0, the payment step also sends that many "note" messages
// to its own actor (re-entering its turn) while others send beside it.
func shipper(entered chan<- struct{}, release <-chan struct{}, want, selfSends int) rivet.Actor[shipState] {
	var once sync.Once
	return rivet.Actor[shipState]{
		Name:   "shipper",
		Queues: rivet.Queues{"shipped": rivet.QueueOf[string](), "note": rivet.QueueOf[int]()},
		Run: func(c *workflow.Ctx[shipState]) error {
			err := c.Step("pay", func(s *workflow.StepCtx[shipState]) error {
				s.State.Paid = true
				once.Do(func() { close(entered) })
				for i := range selfSends {
					h := s.Client().Get("shipper", s.Key()...)
					if err := h.Send(s.Context(), "note", i); err != nil {
						return err
					}
					s.State.SelfSent++
				}
				select {
				case <-release:
					return nil
				case <-s.Context().Done():
					return s.Context().Err()
				}
			})
			if err != nil {
				return err
			}
			for i := range want {
				m, err := workflow.Next[string](c, fmt.Sprintf("ship-%d", i), workflow.NextOptions{Names: []string{"shipped"}})
				if err != nil {
					return err
				}
				if err := c.Step(fmt.Sprintf("record-%d", i), func(s *workflow.StepCtx[shipState]) error {
					s.State.Shipped = append(s.State.Shipped, m.Body)
					return nil
				}); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// startShipper creates a shipper (want, selfSends) keyed key and waits
// until its payment step runs; released ends the step (once).
func startShipper(t *testing.T, key string, want, selfSends int) (e *env, ref runtime.Ref, released func()) {
	t.Helper()
	entered, release := make(chan struct{}), make(chan struct{})
	released = sync.OnceFunc(func() { close(release) })
	e = newEnv(t, counterReg(t, shipper(entered, release, want, selfSends)), nil)
	ref = runtime.Ref{Name: "shipper", Key: []string{key}}
	if _, err := e.host.Create(ctx(t), ref, nil); err != nil {
		released()
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		released()
		t.Fatal("the payment step did not start")
	}
	return e, ref, released
}

// A message sent while a Step body runs is queued at once, not after the
// step: the send runs beside the body (a trial's order saga: a 3 s payment
// step held a "shipped" signal past its race's deadline, where Temporal
// takes a signal while an activity runs). Keyed sends and their repeats
// too; the workflow takes every message once the step is over.
func TestASendIsQueuedWhileAStepBodyRuns(t *testing.T) {
	t.Parallel()
	e, ref, released := startShipper(t, "o1", 3, 0)
	defer released()

	// Each send must be answered while the step still holds on: it holds
	// until release, which only comes after them.
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	send := func(body, key string) runtime.SendResult {
		t.Helper()
		res, err := e.host.Send(sctx, runtime.SendRequest{Ref: ref, Queue: "shipped", Body: json.RawMessage(body), IdempotencyKey: key})
		if err != nil {
			t.Fatalf("send %s while the step runs: %v", body, err)
		}
		return res
	}
	first := send(`"a"`, "")
	keyed := send(`"b"`, "ship-b")
	again := send(`"b"`, "ship-b")
	if !again.Duplicate || again.MessageID != keyed.MessageID || keyed.Duplicate {
		t.Fatalf("keyed send %+v, its repeat %+v: want the repeat a duplicate of the first", keyed, again)
	}
	// Several at once, beside the step one at a time.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Go(func() {
			_, err := e.host.Send(sctx, runtime.SendRequest{Ref: ref, Queue: "note", Body: json.RawMessage(fmt.Sprint(i))})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent send while the step runs: %v", err)
		}
	}
	if first.MessageID >= keyed.MessageID {
		t.Fatalf("message IDs %d then %d: want increasing", first.MessageID, keyed.MessageID)
	}
	ins := inspect(t, e.host, "shipper", "o1")
	if ins.WorkflowStatus != runtime.WorkflowRunning || string(ins.State) != `{"paid":false,"shipped":null,"selfSent":0}` {
		t.Fatalf("while the step runs: workflow %s, state %s; want running, the payment not committed", ins.WorkflowStatus, ins.State)
	}

	released()
	send(`"c"`, "")
	waitFor(t, "the workflow to take the messages", 20*time.Second, func() bool {
		return inspect(t, e.host, "shipper", "o1").WorkflowStatus != runtime.WorkflowRunning
	})
	ins = inspect(t, e.host, "shipper", "o1")
	if ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != `{"paid":true,"shipped":["a","b","c"],"selfSent":0}` {
		t.Fatalf("workflow %s (%s), state %s; want completed with a, b, c shipped in order", ins.WorkflowStatus, ins.WorkflowError, ins.State)
	}
	depth := map[string]uint64{}
	for _, q := range ins.Queues {
		depth[q.Queue] = q.Depth
	}
	if depth["shipped"] != 0 || depth["note"] != 4 {
		t.Fatalf("queues %+v: want shipped empty, the 4 notes queued", ins.Queues)
	}

	// What was queued is durable: a new activation reads the same.
	e.restart()
	ins = inspect(t, e.host, "shipper", "o1")
	depth = map[string]uint64{}
	for _, q := range ins.Queues {
		depth[q.Queue] = q.Depth
	}
	if ins.WorkflowStatus != runtime.WorkflowCompleted || depth["note"] != 4 || depth["shipped"] != 0 {
		t.Fatalf("after a restart: workflow %s, queues %+v; want completed, 4 notes", ins.WorkflowStatus, ins.Queues)
	}
}

// A step body that sends to its own actor re-enters its turn, as any call
// it makes does, while other callers' sends run beside the body: neither
// waits for ever for the other, and every message is queued once (run with
// -race: the queues' bookkeeping is shared).
func TestAStepsOwnSendsAndSendsBesideItTakeTurns(t *testing.T) {
	t.Parallel()
	const selfSends, others = 20, 20
	e, ref, released := startShipper(t, "o2", 0, selfSends)
	defer released()
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, others)
	for i := range others {
		wg.Go(func() {
			_, err := e.host.Send(sctx, runtime.SendRequest{Ref: ref, Queue: "note", Body: json.RawMessage(fmt.Sprint(100 + i))})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("send beside the step: %v", err)
		}
	}
	released()
	waitFor(t, "the workflow's end", 20*time.Second, func() bool {
		return inspect(t, e.host, "shipper", "o2").WorkflowStatus != runtime.WorkflowRunning
	})
	ins := inspect(t, e.host, "shipper", "o2")
	if ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != fmt.Sprintf(`{"paid":true,"shipped":null,"selfSent":%d}`, selfSends) {
		t.Fatalf("workflow %s (%s), state %s; want completed, %d sent by the step", ins.WorkflowStatus, ins.WorkflowError, ins.State, selfSends)
	}
	depth := map[string]uint64{}
	for _, q := range ins.Queues {
		depth[q.Queue] = q.Depth
	}
	if depth["note"] != selfSends+others {
		t.Fatalf("note queue holds %d messages, want %d", depth["note"], selfSends+others)
	}
}
