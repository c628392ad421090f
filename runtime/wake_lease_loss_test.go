package runtime_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// A workflow in a timed receive, in memory when its node loses its lease
// and claims its partitions again at once, takes a message sent after the
// claim within moments, not at the receive's deadline. The lost lease
// failed the stopped run's last record, which counted as a run storage
// stopped (its rerun due in a second); the claim's load of the wakeups
// then moved that rerun to the stored deadline, an hour away, and every
// load of the actor until then (the Send's) waited out that "backoff"
// without starting the workflow.
func TestAMessageAfterALeaseLossIsTakenBeforeTheReceiveTimesOut(t *testing.T) {
	t.Parallel()
	mailbox := servingMailbox(rivet.Actions[boxState]{
		"get": rivet.Query(func(c *rivet.ActionCtx[boxState]) (int, error) { return c.State.Seen, nil }),
	})
	e := newEnv(t, counterReg(t, mailbox), func(c *runtime.Config) { c.IdleTimeout = 300 * time.Millisecond })
	ref := runtime.Ref{Name: "mailbox", Key: []string{"m"}}
	send := func() {
		t.Helper()
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	seenN := func() int {
		var st boxState
		_ = json.Unmarshal(inspect(t, e.host, "mailbox", "m").State, &st)
		return st.Seen
	}
	send()
	waitFor(t, "the first message", 10*time.Second, func() bool { return seenN() == 1 })
	// Put to sleep in its next receive: its wakeup record holds the
	// receive's deadline.
	waitFor(t, "deactivation", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	// Loaded again by a call, its workflow waits in memory.
	if _, err := call(t, e.host, "mailbox", "m", "get", false); err != nil {
		t.Fatal(err)
	}
	p := placement.Partition("mailbox", storage.EncodeKey(ref.Key), testPartitions)
	_, lost := e.own.LeaseStats()
	e.store.muteRenewals.Store(true)
	e.own.ExpireLocally() // not put to sleep meanwhile: its claim is not served
	waitFor(t, "the lease to be lost", 20*time.Second, func() bool { _, l := e.own.LeaseStats(); return l > lost })
	e.store.muteRenewals.Store(false)
	waitFor(t, "the partition claimed again", 20*time.Second, func() bool { return e.host.Owns(p) })
	send()
	deadline := time.Now().Add(15 * time.Second)
	for seenN() != 2 {
		if time.Now().After(deadline) {
			at, ok := e.host.NextWakeup(ref)
			t.Fatalf("the message sent after the lease loss was not taken within 15 s (the actor's next wakeup: %v in %v, %v)", at, time.Until(at).Round(time.Second), ok)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A lease lost and claimed back is no storage failure of the workflows it
// stopped: one that waits for messages takes a message sent after the
// claim at once, not after the backoff of a workflow storage stopped (its
// last record, refused by the fence, counted as one).
func TestALeaseLossDoesNotDeferAWorkflowAsAStorageFailure(t *testing.T) {
	defer runtime.SetWorkflowRerunMin(runtime.SetWorkflowRerunMin(time.Hour))
	mailbox := rivet.Actor[boxState]{
		Name:   "mailbox",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[boxState]) error {
			return ctx.Loop("serve", func(lc *workflow.Ctx[boxState]) error {
				if _, err := workflow.Next[int](lc, "m"); err != nil {
					return err
				}
				return lc.Step("count", func(s *workflow.StepCtx[boxState]) error { s.State.Seen++; return nil })
			})
		},
	}
	e := newEnv(t, counterReg(t, mailbox), nil)
	ref := runtime.Ref{Name: "mailbox", Key: []string{"m"}}
	send := func() {
		t.Helper()
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	seenN := func() int {
		var st boxState
		_ = json.Unmarshal(inspect(t, e.host, "mailbox", "m").State, &st)
		return st.Seen
	}
	send()
	waitFor(t, "the first message", 10*time.Second, func() bool { return seenN() == 1 })
	p := placement.Partition("mailbox", storage.EncodeKey(ref.Key), testPartitions)
	_, lost := e.own.LeaseStats()
	e.store.muteRenewals.Store(true)
	e.own.ExpireLocally()
	waitFor(t, "the lease to be lost", 20*time.Second, func() bool { _, l := e.own.LeaseStats(); return l > lost })
	waitFor(t, "the workflow to stop", 20*time.Second, func() bool { return e.host.Stats().WorkflowsRunning == 0 })
	e.store.muteRenewals.Store(false)
	waitFor(t, "the partition claimed again", 20*time.Second, func() bool { return e.host.Owns(p) })
	send()
	// An hour's backoff, counted, would hold it far past this wait.
	waitFor(t, "the message sent after the claim", 30*time.Second, func() bool { return seenN() == 2 })
}
