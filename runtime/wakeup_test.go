package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type dozeState struct {
	Woke bool `json:"woke"`
}

var dozer = rivet.Actor[dozeState]{
	Name: "dozer",
	Run: func(ctx *workflow.Ctx[dozeState]) error {
		if err := ctx.Sleep("nap", 2*time.Second); err != nil {
			return err
		}
		return ctx.Step("wake", func(s *workflow.StepCtx[dozeState]) error { s.State.Woke = true; return nil })
	},
}

// A partition claimed while its wakeups cannot be read (a re-fence, a
// handoff in, a lease re-established, with etcd failing a read) still
// wakes its sleeping workflows: the load is tried again. Its previous
// owner dropped their timers with the partition.
func TestWakeupsOfAClaimedPartitionAreLoadedDespiteAFailedRead(t *testing.T) {
	e := newEnv(t, counterReg(t, dozer), func(c *runtime.Config) { c.IdleTimeout = 200 * time.Millisecond })
	ref := runtime.Ref{Name: "dozer", Key: []string{"d"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deactivation", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	p, _ := e.host.PartitionOf(ref)
	if err := e.host.Handoff(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	e.store.failListPrefix.Store(storage.WakeupPartitionPrefix(p))
	if parts, err := e.own.Claim(ctx(t), []uint32{p}); err != nil || len(parts) != 1 {
		t.Fatalf("claim: %v %v", parts, err)
	}
	if v, _ := e.store.failListPrefix.Load().(string); v != "" {
		t.Fatal("the wakeup load did not run")
	}
	waitFor(t, "the sleeper to wake", 20*time.Second, func() bool {
		return string(inspect(t, e.host, "dozer", "d").State) == `{"woke":true}`
	})
}

// The commit that records a workflow's end, refused once (etcd: too many
// requests), is tried again soon, not only when a request comes.
func TestARefusedEndOfWorkflowIsRecordedLater(t *testing.T) {
	e := newEnv(t, counterReg(t, dozer), nil)
	e.store.refuseCommitSub.Store(storage.WorkflowStatusSuffix)
	if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "dozer", Key: []string{"f"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refused end", 20*time.Second, func() bool { v, _ := e.store.refuseCommitSub.Load().(string); return v == "" })
	waitFor(t, "the end recorded", 20*time.Second, func() bool {
		return inspect(t, e.host, "dozer", "f").WorkflowStatus == runtime.WorkflowCompleted
	})
}

// A workflow that waits only for messages (its wakeup record asks for no
// timer) is not activated by a claim of its partition: a message sent to
// it writes a record that is due.
func TestAClaimDoesNotWakeAWorkflowWaitingOnlyForMessages(t *testing.T) {
	e := newEnv(t, counterReg(t, ticker), func(c *runtime.Config) { c.IdleTimeout = 300 * time.Millisecond })
	tick(t, e, "idle")
	waitFor(t, "the tick", 10*time.Second, func() bool { return seen(t, e, "idle") == 1 })
	waitFor(t, "deactivation", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	e.cfg.IdleTimeout = time.Minute // a wrong wake would stay active
	e.restart()
	time.Sleep(500 * time.Millisecond) // time for a wrong wake (absence: cannot flake)
	if st := e.host.Stats(); st.ActiveActors != 0 {
		t.Fatalf("a workflow waiting only for messages was activated by the claim (%d active)", st.ActiveActors)
	}
	tick(t, e, "idle")
	waitFor(t, "the second tick", 10*time.Second, func() bool { return seen(t, e, "idle") == 2 })
}

type boxState struct {
	Seen int `json:"seen"`
}

// A message sent while the node stops is taken after a restart, not only
// at the deadline of the receive its workflow was in: the stopping
// workflow's wakeup record (written without the actor's turn) and the
// Send's (which saw the older time and wrote none) raced.
func TestAMessageSentDuringAStopIsTakenAfterTheRestart(t *testing.T) {
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	mailbox := rivet.Actor[boxState]{
		Name:   "mailbox",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[boxState]) error {
			return ctx.Loop("serve", func(lc *workflow.Ctx[boxState]) error {
				_, err := workflow.Next[int](lc, "m", workflow.NextOptions{Timeout: time.Hour})
				if err != nil && !errors.Is(err, workflow.ErrTimeout) {
					return err
				}
				return lc.Step("count", func(s *workflow.StepCtx[boxState]) error { s.State.Seen++; return nil })
			})
		},
		Actions: rivet.Actions[boxState]{
			"block": rivet.Query(func(c *rivet.ActionCtx[boxState]) (int, error) {
				entered <- struct{}{}
				<-block
				return 0, nil
			}),
		},
	}
	e := newEnv(t, counterReg(t, mailbox), nil)
	ref := runtime.Ref{Name: "mailbox", Key: []string{"m"}}
	send := func() error {
		_, err := e.host.Send(context.Background(), runtime.SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), CreateIfMissing: true})
		return err
	}
	seenN := func() int {
		var st boxState
		_ = json.Unmarshal(inspect(t, e.host, "mailbox", "m").State, &st)
		return st.Seen
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first message", 10*time.Second, func() bool { return seenN() == 1 })
	// The orderings below are made likely by short pauses; if one does not
	// happen, the test is weaker, not wrong.
	time.Sleep(200 * time.Millisecond) // the next receive's deadline is recorded
	callDone := make(chan error, 1)
	go func() { _, err := call(t, e.host, "mailbox", "m", "block", false); callDone <- err }()
	<-entered
	sendDone := make(chan error, 1)
	go func() { sendDone <- send() }() // waits for the turn
	time.Sleep(200 * time.Millisecond)
	e.store.holdGate, e.store.holdEntered = make(chan struct{}), make(chan struct{})
	e.store.holdCommitSub.Store(storage.WakeupsPrefix)
	stopped := make(chan struct{})
	go func() { e.stop(); close(stopped) }()
	<-e.store.holdEntered // the stopping workflow's record is on its way
	close(block)          // the Send's turn runs now
	time.Sleep(300 * time.Millisecond)
	close(e.store.holdGate)
	if err := <-sendDone; err != nil {
		t.Fatalf("send: %v", err)
	}
	<-callDone
	<-stopped
	e.start()
	waitFor(t, "the message sent during the stop", 20*time.Second, func() bool { return seenN() == 2 })
}
