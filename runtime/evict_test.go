package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type accState struct {
	N   int `json:"n"`
	Got int `json:"got"`
}

// An activation evicted (here: its workflow stopped by a failed read)
// while a write of one of its turns is in flight keeps its claim's token:
// that write may still land. The actor must not be loaded again before it
// settles, or the new activation reads storage without it and writes over
// it, and an acknowledged increment is lost.
func TestEvictedActivationIsNotLoadedAgainBeforeItsWritesSettle(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	acc := rivet.Actor[accState]{
		Name:   "acc",
		Queues: rivet.Queues{"tick": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[accState]) error {
			select {
			case <-release:
			case <-ctx.Context().Done():
				return ctx.Context().Err()
			}
			if _, err := workflow.Next[int](ctx, "m"); err != nil {
				return err
			}
			return ctx.Step("got", func(s *workflow.StepCtx[accState]) error { s.State.Got++; return nil })
		},
		Actions: rivet.Actions[accState]{
			"inc": rivet.Action(func(c *rivet.ActionCtx[accState], by int) (int, error) { c.State.N += by; return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, acc), nil)
	ref := runtime.Ref{Name: "acc", Key: []string{"x"}}
	type result struct {
		n   int
		err error
	}
	inc := func(out chan<- result) {
		raw, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "inc", Args: json.RawMessage(`[1]`), CreateIfMissing: true})
		var n int
		if err == nil {
			err = json.Unmarshal(raw, &n)
		}
		out <- result{n, err}
	}
	// A queued message, then a restart: the new activation knows the
	// message but not its body, which the workflow's Next reads.
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "tick", Body: json.RawMessage(`1`), CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	e.restart()

	// 1. An increment whose state write is held in flight.
	e.store.holdGate, e.store.holdEntered = make(chan struct{}), make(chan struct{})
	e.store.holdCommitSub.Store("/" + storage.StateSuffix)
	r1 := make(chan result, 1)
	go inc(r1)
	<-e.store.holdEntered
	// 2. The workflow's read of the message fails: the activation is
	// evicted, its write still in flight.
	e.store.failGetSub.Store("/" + storage.QueueSuffix)
	close(release)
	waitFor(t, "the activation's eviction", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	// 3. A second increment, which must wait for the first's write.
	r2 := make(chan result, 1)
	go inc(r2)
	select {
	case r := <-r2:
		t.Fatalf("the second increment ended (%d, %v) while the first one's write was still in flight", r.n, r.err)
	case <-time.After(300 * time.Millisecond): // time for it to load, if it could
	}
	close(e.store.holdGate)
	a, b := <-r1, <-r2
	if a.err != nil || b.err != nil {
		t.Fatalf("increments: %d, %v and %d, %v", a.n, a.err, b.n, b.err)
	}
	if a.n != 1 || b.n != 2 {
		t.Fatalf("increments returned %d and %d, want 1 and 2", a.n, b.n)
	}
	var s accState
	if err := json.Unmarshal(inspect(t, e.host, "acc", "x").State, &s); err != nil {
		t.Fatal(err)
	}
	if s.N != 2 {
		t.Fatalf("two increments acknowledged, stored n = %d", s.N)
	}
}

// A timer that comes due while storage fails one read is tried again: the
// node still owns the actor's partition, and no one else would wake it.
func TestDueWakeupSurvivesAFailedRead(t *testing.T) {
	t.Parallel()
	napper := rivet.Actor[tickState]{
		Name: "napper",
		Run: func(ctx *workflow.Ctx[tickState]) error {
			if err := ctx.Sleep("nap", 1500*time.Millisecond); err != nil {
				return err
			}
			return ctx.Step("woke", func(s *workflow.StepCtx[tickState]) error { s.State.Seen++; return nil })
		},
	}
	e := newEnv(t, counterReg(t, napper), func(c *runtime.Config) { c.IdleTimeout = 200 * time.Millisecond })
	ref := runtime.Ref{Name: "napper", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	// The sleep outlasts the idle timeout: the actor is deactivated, and
	// only its timer wakes it.
	waitFor(t, "deactivation", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	enc := storage.EncodeKey(ref.Key)
	prefix := storage.ActorPrefix(placement.Partition("napper", enc, testPartitions), "napper", enc)
	e.store.failGetSub.Store(prefix + storage.MetaSuffix) // the wakeup's load fails once
	waitFor(t, "the wakeup's failed load", 10*time.Second, func() bool { return e.store.failGetSub.Load() == "" })
	waitFor(t, "the workflow's end", 20*time.Second, func() bool {
		return inspect(t, e.host, "napper", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
}

// A completion travels in its sender's reply, under the bound of an
// action's result: a larger one fails the workflow with an error that
// says so (an operator can fix the code and retry it), and its sender
// learns that the workflow failed, rather than sending a reply that would
// fail in the transport after the message was taken.
func TestACompletionLargerThanAResultFailsTheWorkflowClearly(t *testing.T) {
	t.Parallel()
	completer := rivet.Actor[tickState]{
		Name:   "completer",
		Queues: rivet.Queues{"ask": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[tickState]) error {
			msg, err := workflow.Next[int](ctx, "wait-ask")
			if err != nil {
				return err
			}
			return msg.Complete(strings.Repeat("x", 200))
		},
	}
	e := newEnv(t, counterReg(t, completer), func(c *runtime.Config) { c.MaxResultBytes = 100 })
	ref := runtime.Ref{Name: "completer", Key: []string{"k"}}
	_, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "ask", Body: json.RawMessage(`1`), CreateIfMissing: true, Wait: true, Timeout: 20 * time.Second})
	if !errors.Is(err, rivet.ErrWorkflowFailed) {
		t.Fatalf("SendWait = %v, want ErrWorkflowFailed", err)
	}
	ins := inspect(t, e.host, "completer", "k")
	if ins.WorkflowStatus != runtime.WorkflowFailed || !strings.Contains(ins.WorkflowError, "the limit (of an action's result) is 100") {
		t.Fatalf("workflow %s (%s); want failed, saying the completion is over the limit", ins.WorkflowStatus, ins.WorkflowError)
	}
}

// A NextBatch of large messages queued before a restart (whose bodies the
// new activation has not read yet) takes what one transaction holds, as it
// does without the restart, rather than failing its commit for ever.
func TestNextBatchOfLargeMessagesAfterARestartFitsOneTransaction(t *testing.T) {
	t.Parallel()
	big := rivet.Actor[batchState]{
		Name:   "bigbatch",
		Queues: rivet.Queues{"q": rivet.QueueOf[string]()},
		Run: func(ctx *workflow.Ctx[batchState]) error {
			if err := ctx.Sleep("let-them-queue", 2*time.Second); err != nil {
				return err
			}
			ms, err := workflow.NextBatch[string](ctx, "batch", workflow.NextOptions{Count: 30})
			if err != nil {
				return err
			}
			return ctx.Step("count", func(s *workflow.StepCtx[batchState]) error {
				s.State.Taken = append(s.State.Taken, len(ms))
				return nil
			})
		},
	}
	e := newEnv(t, counterReg(t, big), nil)
	ref := runtime.Ref{Name: "bigbatch", Key: []string{"b"}}
	body, _ := json.Marshal(strings.Repeat("x", 60<<10))
	for range 30 {
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "q", Body: body, CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	e.restart()
	waitFor(t, "the workflow's end", 30*time.Second, func() bool {
		s := inspect(t, e.host, "bigbatch", "b").WorkflowStatus
		return s == runtime.WorkflowCompleted || s == runtime.WorkflowFailed
	})
	in := inspect(t, e.host, "bigbatch", "b")
	var s batchState
	if err := json.Unmarshal(in.State, &s); err != nil {
		t.Fatal(err)
	}
	if in.WorkflowStatus != runtime.WorkflowCompleted || len(s.Taken) != 1 || s.Taken[0] < 1 || s.Taken[0] >= 30 {
		t.Fatalf("workflow %s (%s), state %s; want completed, having taken some of the 30 messages in one batch", in.WorkflowStatus, in.WorkflowError, in.State)
	}
}

type bookingState struct {
	Held  int  `json:"held"`
	Ready bool `json:"ready"`
}

// A workflow that rolled back is retried from its first compensated step:
// that step's effect was undone, and replayed as completed it would not
// run again, leaving the retried workflow to go on without it.
func TestRetryAfterARollbackRunsTheCompensatedStepsAgain(t *testing.T) {
	rollbackThenRetry(t, func(ctx *workflow.Ctx[bookingState], healthy bool) error {
		return ctx.StepWith(workflow.StepOptions{Name: "confirm", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[bookingState]) error {
			if !healthy {
				return errors.New("payment refused")
			}
			s.State.Ready = true
			return nil
		})
	}, 0)
}

// The same when the workflow's own error started the rollback (a saga
// that gives up on a business decision), not a step's failure: that error
// names no entry, and the retry deleted nothing, so the run replayed the
// compensated step as completed and failed again at once, its rollback
// done (the retry said it removed 0 entries and changed nothing).
func TestRetryAfterARollbackOnTheWorkflowsOwnErrorRunsTheCompensatedStepsAgain(t *testing.T) {
	rollbackThenRetry(t, func(ctx *workflow.Ctx[bookingState], healthy bool) error {
		paid, err := workflow.Step(ctx, "pay", func(*workflow.StepCtx[bookingState]) (bool, error) { return healthy, nil })
		if err != nil {
			return err
		}
		if !paid {
			return errors.New("payment refused")
		}
		return ctx.Step("confirm", func(s *workflow.StepCtx[bookingState]) error {
			s.State.Ready = true
			return nil
		})
	}, 2) // reserve and pay
}

// rollbackThenRetry runs a booking workflow (a checkpoint, a compensated
// "reserve", then pay: what payment does while unhealthy must fail the
// workflow) until it has rolled back, makes payment healthy, retries it
// without --from and checks that the reservation was made again and
// confirmed. removed, if not 0, is how many entries the retry must say it
// removed.
func rollbackThenRetry(t *testing.T, pay func(ctx *workflow.Ctx[bookingState], healthy bool) error, removed int) {
	t.Helper()
	var healthy atomic.Bool
	booking := rivet.Actor[bookingState]{
		Name: "booking",
		Run: func(ctx *workflow.Ctx[bookingState]) error {
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(ctx, workflow.StepOptions{Name: "reserve"},
				func(s *workflow.StepCtx[bookingState]) (int, error) { s.State.Held++; return 1, nil },
				func(s *workflow.StepCtx[bookingState], _ int) error { s.State.Held--; return nil }); err != nil {
				return err
			}
			return pay(ctx, healthy.Load())
		},
	}
	e := newEnv(t, counterReg(t, booking), nil)
	ref := runtime.Ref{Name: "booking", Key: []string{"b"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rollback", 20*time.Second, func() bool {
		return inspect(t, e.host, "booking", "b").WorkflowStatus == runtime.WorkflowFailed
	})
	if st := string(inspect(t, e.host, "booking", "b").State); st != `{"held":0,"ready":false}` {
		t.Fatalf("state after the rollback = %s, want the reservation undone", st)
	}
	healthy.Store(true)
	n, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if err != nil {
		t.Fatal(err)
	}
	if removed != 0 && n != removed {
		t.Errorf("the retry removed %d entries, want %d", n, removed)
	}
	waitFor(t, "the retried workflow's end", 20*time.Second, func() bool {
		s := inspect(t, e.host, "booking", "b").WorkflowStatus
		return s == runtime.WorkflowCompleted || s == runtime.WorkflowFailed
	})
	if in := inspect(t, e.host, "booking", "b"); in.WorkflowStatus != runtime.WorkflowCompleted || string(in.State) != `{"held":1,"ready":true}` {
		t.Fatalf("after the retry: workflow %s (%s), state %s; want completed, the reservation made again and confirmed", in.WorkflowStatus, in.WorkflowError, in.State)
	}
}

// A workflow retried in the activation that saw it fail completes the
// messages of waiting senders again.
func TestSendWaitAfterARetryInTheSameActivation(t *testing.T) {
	var healthy atomic.Bool
	echo := rivet.Actor[tickState]{
		Name:   "echo",
		Queues: rivet.Queues{"ask": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[tickState]) error {
			if err := ctx.StepWith(workflow.StepOptions{Name: "gate", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[tickState]) error {
				if !healthy.Load() {
					return errors.New("not yet")
				}
				return nil
			}); err != nil {
				return err
			}
			return ctx.Loop("serve", func(lc *workflow.Ctx[tickState]) error {
				msg, err := workflow.Next[int](lc, "wait-ask")
				if err != nil {
					return err
				}
				return msg.Complete(msg.Body * 2)
			})
		},
	}
	e := newEnv(t, counterReg(t, echo), nil)
	ref := runtime.Ref{Name: "echo", Key: []string{"e"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow's failure", 20*time.Second, func() bool {
		return inspect(t, e.host, "echo", "e").WorkflowStatus == runtime.WorkflowFailed
	})
	healthy.Store(true)
	if _, err := e.host.RetryWorkflow(ctx(t), ref, ""); err != nil {
		t.Fatal(err)
	}
	res, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "ask", Body: json.RawMessage(`21`), Wait: true, Timeout: 20 * time.Second})
	if err != nil || res.Status != runtime.SendCompleted || string(res.Response) != "42" {
		t.Fatalf("SendWait after the retry = %+v, %v; want completed with 42", res, err)
	}
}

// When the node's watchdog takes its lease for lost (no renewal heard in
// time) while a write is in flight, that write may still apply: the lease
// may live on in etcd. Its caller is not told "not written" (which it
// would retry, applying the increment twice): it waits for the write's
// real outcome, here that it applied.
func TestALostLeaseDoesNotAnswerNotWrittenForAWriteThatApplies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t), nil)
	if n := callInt(t, e.host, "counter", "x", "increment", true, 1); n != 1 {
		t.Fatalf("count = %d, want 1", n)
	}
	e.store.applyGate, e.store.applyEntered = make(chan struct{}), make(chan struct{})
	open := sync.OnceFunc(func() { close(e.store.applyGate) })
	t.Cleanup(open)
	e.store.applyThenHoldSub.Store("/" + storage.StateSuffix)
	type reply struct {
		raw json.RawMessage
		err error
	}
	done := make(chan reply, 1)
	go func() {
		raw, err := call(t, e.host, "counter", "x", "increment", false, 1)
		done <- reply{raw, err}
	}()
	<-e.store.applyEntered // applied; its answer is slow
	_, lost := e.own.LeaseStats()
	e.store.muteRenewals.Store(true)
	// Counted, not seen in Owned: the node claims its partitions again on
	// a new lease within milliseconds of the drop, which a poll of Owned
	// can miss several times over (each miss a TTL more).
	waitFor(t, "the watchdog to drop the claims and the actor", 20*time.Second, func() bool {
		_, l := e.own.LeaseStats()
		return l > lost && e.host.Stats().ActiveActors == 0
	})
	select {
	case r := <-done:
		t.Fatalf("the caller was answered (%s, %v) while its write was still on its way", r.raw, r.err)
	default:
	}
	e.store.muteRenewals.Store(false)
	open()
	r := <-done
	if n := mustInt(t, r.raw, r.err); n != 2 {
		t.Fatalf("increment = %d, want 2", n)
	}
}

type bigState struct {
	Blob string `json:"blob"`
	N    int    `json:"n"`
}

// A step whose record and state together are too large for one store
// transaction fails as that step (here the workflow returns its error), and
// its state change stays uncommitted: actions do not see it, and a later
// action does not commit it.
func TestAStepTooLargeToCommitLeavesTheStateAsItWas(t *testing.T) {
	t.Parallel()
	big := rivet.Actor[bigState]{
		Name: "big",
		Run: func(ctx *workflow.Ctx[bigState]) error {
			_, err := workflow.Step(ctx, "grow", func(s *workflow.StepCtx[bigState]) (string, error) {
				s.State.Blob = strings.Repeat("s", 900_000) // under the 1 MiB state limit
				return strings.Repeat("o", 900_000), nil    // with the state, over one txn
			})
			return err
		},
		Actions: rivet.Actions[bigState]{
			"len":   rivet.Query(func(c *rivet.ActionCtx[bigState]) (int, error) { return len(c.State.Blob), nil }),
			"touch": rivet.Action0(func(c *rivet.ActionCtx[bigState]) (int, error) { c.State.N++; return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, big), nil)
	if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "big", Key: []string{"y"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow's failure", 20*time.Second, func() bool {
		return inspect(t, e.host, "big", "y").WorkflowStatus == runtime.WorkflowFailed
	})
	if ins := inspect(t, e.host, "big", "y"); !strings.Contains(ins.WorkflowError, "too large") || !strings.Contains(ins.WorkflowError, `step "grow"`) {
		t.Fatalf("workflow error %q, want it to name the step and say its write is too large", ins.WorkflowError)
	}
	if n := callInt(t, e.host, "big", "y", "len", false); n != 0 {
		t.Fatalf("an action sees a blob of %d bytes that was never committed", n)
	}
	if n := callInt(t, e.host, "big", "y", "touch", false); n != 1 {
		t.Fatalf("touch = %d, want 1", n)
	}
	e.restart()
	if n := callInt(t, e.host, "big", "y", "len", false); n != 0 {
		t.Fatalf("after a later action and a restart, the failed step's change (%d bytes) is durable", n)
	}
}

type raceTurnState struct {
	Winner string `json:"winner"`
}

// A race loser cancelled while it waits for the actor's turn (another
// branch's step holds it) loses its race alone: the run goes on with the
// winner, neither stopped nor run again.
func TestARaceLoserWaitingForTheTurnDoesNotStopTheRun(t *testing.T) {
	t.Parallel()
	var runs, bodies atomic.Int32
	slow := func(name string) func(*workflow.Ctx[raceTurnState]) (string, error) {
		return func(c *workflow.Ctx[raceTurnState]) (string, error) {
			return workflow.Step(c, name, func(s *workflow.StepCtx[raceTurnState]) (string, error) {
				bodies.Add(1)
				<-s.Context().Done() // holds the turn until the race is lost
				return "", s.Context().Err()
			})
		}
	}
	racer := rivet.Actor[raceTurnState]{
		Name: "raceTurn",
		Run: func(ctx *workflow.Ctx[raceTurnState]) error {
			runs.Add(1)
			w, _, err := workflow.Race(ctx, "r", []workflow.RaceBranch[raceTurnState, string]{
				{Name: "fast", Run: func(c *workflow.Ctx[raceTurnState]) (string, error) {
					return "fast", c.Sleep("nap", 300*time.Millisecond)
				}},
				{Name: "slow-a", Run: slow("a")},
				{Name: "slow-b", Run: slow("b")},
			})
			if err != nil {
				return err
			}
			return ctx.Step("result", func(s *workflow.StepCtx[raceTurnState]) error { s.State.Winner = w; return nil })
		},
	}
	e := newEnv(t, counterReg(t, racer), nil)
	if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "raceTurn", Key: []string{"k"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow's end", 20*time.Second, func() bool {
		st := inspect(t, e.host, "raceTurn", "k").WorkflowStatus
		return st == runtime.WorkflowCompleted || st == runtime.WorkflowFailed
	})
	ins := inspect(t, e.host, "raceTurn", "k")
	if ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != `{"winner":"fast"}` {
		t.Fatalf("workflow %s (%s), state %s; want completed with the fast branch", ins.WorkflowStatus, ins.WorkflowError, ins.State)
	}
	if runs.Load() != 1 || bodies.Load() != 1 {
		t.Fatalf("the workflow ran %d times and the slow steps %d times; want once and once (one held the turn, the other never got it)", runs.Load(), bodies.Load())
	}
}

// A create whose commit went in doubt but had applied is answered as a
// create once the claim is replaced: Create succeeds, and GetOrCreate says
// this caller created the actor (a retry would have got ALREADY_EXISTS,
// and no answer created=true).
func TestACreateInDoubtThatAppliedIsACreate(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, counterReg(t), nil, true)
	ref := runtime.Ref{Name: "counter", Key: []string{"born"}}
	e.store.applyThenFailSub.Store(storage.EncodeKey(ref.Key) + "/" + storage.MetaSuffix)
	if _, err := e.host.Create(ctx(t), ref, nil); err != nil {
		t.Fatalf("Create whose commit applied but whose reply was lost: %v", err)
	}
	ref2 := runtime.Ref{Name: "counter", Key: []string{"born2"}}
	e.store.applyThenFailSub.Store(storage.EncodeKey(ref2.Key) + "/" + storage.MetaSuffix)
	if _, created, err := e.host.GetOrCreate(ctx(t), ref2, nil); err != nil || !created {
		t.Fatalf("GetOrCreate whose commit applied but whose reply was lost = created %v, %v; want created", created, err)
	}
	if got := e.host.Stats().Resolved; got < 2 {
		t.Fatalf("Resolved = %d, want the two creates", got)
	}
}

// A Destroy whose delete is refused leaves the actor as it was: a sender
// waiting for its message's completion is not told the message was
// destroyed, and the workflow takes it later without a request.
func TestAFailedDestroyLeavesTheActorAndItsWaiters(t *testing.T) {
	t.Parallel()
	slow := rivet.Actor[tickState]{
		Name:   "slow",
		Queues: rivet.Queues{"ask": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[tickState]) error {
			if err := ctx.Sleep("first", 2*time.Second); err != nil {
				return err
			}
			msg, err := workflow.Next[int](ctx, "wait-ask")
			if err != nil {
				return err
			}
			return msg.Complete(msg.Body * 2)
		},
	}
	e := newEnv(t, counterReg(t, slow), nil)
	ref := runtime.Ref{Name: "slow", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	type res struct {
		r   runtime.SendResult
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "ask", Body: json.RawMessage(`21`), Wait: true, Timeout: 20 * time.Second})
		done <- res{r, err}
	}()
	waitFor(t, "the message queued", 10*time.Second, func() bool { return len(inspect(t, e.host, "slow", "k").Queues) == 1 })
	e.store.refuseCommitSub.Store(storage.IndexPrefix + "slow/")
	if err := e.host.Destroy(ctx(t), ref); !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("Destroy whose delete was refused = %v, want UNAVAILABLE", err)
	}
	if r := <-done; errors.Is(r.err, rivet.ErrNotFound) {
		t.Fatalf("the waiting sender was told its message was destroyed (%v), but the destroy failed", r.err)
	}
	waitFor(t, "the workflow to take the message", 20*time.Second, func() bool { return len(inspect(t, e.host, "slow", "k").Queues) == 0 })
}

// A Destroy that gives up (its caller's deadline) while a write of the
// actor is still in flight has destroyed nothing: the actor must go on as
// before, its workflow (which Destroy stopped first) running again, not
// left in memory stopped with nothing to restart it.
func TestADestroyThatGaveUpLeavesTheWorkflowRunning(t *testing.T) {
	t.Parallel()
	var after atomic.Int64
	vic := rivet.Actor[accState]{
		Name:   "vic",
		Queues: rivet.Queues{"m": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[accState]) error {
			if _, err := workflow.Next[int](ctx, "m"); err != nil {
				return err
			}
			return ctx.Step("b", func(s *workflow.StepCtx[accState]) error { after.Add(1); s.State.Got++; return nil })
		},
		Actions: rivet.Actions[accState]{
			"inc": rivet.Action(func(c *rivet.ActionCtx[accState], by int) (int, error) { c.State.N += by; return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, vic), nil)
	ref := runtime.Ref{Name: "vic", Key: []string{"x"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	// An increment whose state write is held in flight; Destroy stops the
	// workflow (waiting for its message) and waits for that write, past
	// its caller's deadline.
	e.store.holdGate, e.store.holdEntered = make(chan struct{}), make(chan struct{})
	e.store.holdCommitSub.Store("/" + storage.StateSuffix)
	incDone := make(chan error, 1)
	go func() {
		_, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "inc", Args: json.RawMessage(`[1]`)})
		incDone <- err
	}()
	<-e.store.holdEntered
	dctx, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	err := e.host.Destroy(dctx, ref)
	cancel()
	if err == nil {
		t.Fatal("Destroy returned nil while a write it had to wait for was held")
	}
	close(e.store.holdGate)
	if err := <-incDone; err != nil {
		t.Fatalf("the increment: %v", err)
	}
	// The actor exists, and its workflow takes the next message.
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "m", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow's step after the message", 20*time.Second, func() bool { return after.Load() == 1 })
	var s accState
	if err := json.Unmarshal(inspect(t, e.host, "vic", "x").State, &s); err != nil {
		t.Fatal(err)
	}
	if s.N != 1 || s.Got != 1 {
		t.Fatalf("state after a failed destroy and a message: %+v, want n 1, got 1", s)
	}
}

type raceListenState struct {
	Winner string `json:"winner"`
	Later  int    `json:"later"`
}

// A race branch waiting for a message does not hold its race while it
// waits for the actor's turn before it has taken one: a step of another
// branch holds the turn until it loses, and the timeout branch must win
// at its deadline, not when that step's own timeout (an hour here) ends
// it. Whether the queue is empty or holds a message the branch would
// take, which then stays queued for the workflow's next receive.
func TestARaceReceiveWaitingForTheTurnDoesNotHoldTheRaceBehindAStep(t *testing.T) {
	t.Parallel()
	for _, queued := range []bool{false, true} {
		t.Run(fmt.Sprintf("message queued %v", queued), func(t *testing.T) {
			started := make(chan struct{})
			var once sync.Once
			racer := rivet.Actor[raceListenState]{
				Name:   "raceListen",
				Queues: rivet.Queues{"approval": rivet.QueueOf[int](), "go": rivet.QueueOf[int]()},
				Run: func(ctx *workflow.Ctx[raceListenState]) error {
					if _, err := workflow.Next[int](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}}); err != nil {
						return err
					}
					w, _, err := workflow.Race(ctx, "r", []workflow.RaceBranch[raceListenState, string]{
						{Name: "timeout", Run: func(c *workflow.Ctx[raceListenState]) (string, error) {
							return "timeout", c.Sleep("nap", 300*time.Millisecond)
						}},
						{Name: "work", Run: func(c *workflow.Ctx[raceListenState]) (string, error) {
							return workflow.StepOpts(c, workflow.StepOptions{Name: "work", Timeout: time.Hour}, func(s *workflow.StepCtx[raceListenState]) (string, error) {
								once.Do(func() { close(started) })
								<-s.Context().Done() // holds the turn until the race is lost
								return "", s.Context().Err()
							})
						}},
						{Name: "listen", Run: func(c *workflow.Ctx[raceListenState]) (string, error) {
							<-started // receive once the step holds the turn
							m, err := workflow.Next[int](c, "wait-approval", workflow.NextOptions{Names: []string{"approval"}})
							return fmt.Sprint(m.Body), err
						}},
					})
					if err != nil {
						return err
					}
					if err := ctx.Step("result", func(s *workflow.StepCtx[raceListenState]) error { s.State.Winner = w; return nil }); err != nil {
						return err
					}
					m, err := workflow.Next[int](ctx, "later", workflow.NextOptions{Names: []string{"approval"}})
					if err != nil {
						return err
					}
					return ctx.Step("record-later", func(s *workflow.StepCtx[raceListenState]) error { s.State.Later = m.Body; return nil })
				},
			}
			e := newEnv(t, counterReg(t, racer), nil)
			ref := runtime.Ref{Name: "raceListen", Key: []string{"k"}}
			if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
				t.Fatal(err)
			}
			send := func(queue string) {
				t.Helper()
				if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: queue, Body: json.RawMessage(`7`)}); err != nil {
					t.Fatal(err)
				}
			}
			if queued {
				send("approval")
			}
			send("go")
			waitFor(t, "the race's end", 20*time.Second, func() bool {
				return strings.Contains(string(inspect(t, e.host, "raceListen", "k").State), `"winner":"timeout"`)
			})
			if !queued {
				send("approval")
			}
			waitFor(t, "the workflow's end", 20*time.Second, func() bool {
				st := inspect(t, e.host, "raceListen", "k").WorkflowStatus
				return st == runtime.WorkflowCompleted || st == runtime.WorkflowFailed
			})
			if ins := inspect(t, e.host, "raceListen", "k"); ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != `{"winner":"timeout","later":7}` {
				t.Fatalf("workflow %s (%s), state %s; want completed with the timeout, the message taken after", ins.WorkflowStatus, ins.WorkflowError, ins.State)
			}
		})
	}
}

// A race branch that took a message and then needs the actor's turn for a
// step gets it, although a step of another branch holds the turn until it
// loses: once a branch has finished (the timeout here), the branches that
// can no longer win are cancelled, not kept until the decision, which
// waits for the message's taker (it wins if it finishes). The race waited
// until the holding step's own timeout (an hour here).
func TestARaceBranchThatTookAMessageGetsTheTurnFromALosingStep(t *testing.T) {
	t.Parallel()
	taken := make(chan struct{})
	working := make(chan struct{})
	var takenOnce, workingOnce sync.Once
	racer := rivet.Actor[raceListenState]{
		Name:   "raceTaker",
		Queues: rivet.Queues{"approval": rivet.QueueOf[int](), "go": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[raceListenState]) error {
			if _, err := workflow.Next[int](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}}); err != nil {
				return err
			}
			w, _, err := workflow.Race(ctx, "r", []workflow.RaceBranch[raceListenState, string]{
				{Name: "timeout", Run: func(c *workflow.Ctx[raceListenState]) (string, error) {
					<-working
					return "timeout", c.Sleep("nap", 300*time.Millisecond)
				}},
				{Name: "work", Run: func(c *workflow.Ctx[raceListenState]) (string, error) {
					<-taken // the message is taken first
					return workflow.StepOpts(c, workflow.StepOptions{Name: "work", Timeout: time.Hour}, func(s *workflow.StepCtx[raceListenState]) (string, error) {
						workingOnce.Do(func() { close(working) })
						<-s.Context().Done() // holds the turn until the branch loses
						return "", s.Context().Err()
					})
				}},
				{Name: "listen", Run: func(c *workflow.Ctx[raceListenState]) (string, error) {
					m, err := workflow.Next[int](c, "wait-approval", workflow.NextOptions{Names: []string{"approval"}})
					if err != nil {
						return "", err
					}
					takenOnce.Do(func() { close(taken) })
					<-working // the step needs the turn the work step holds
					return "listen", c.Step("handle", func(s *workflow.StepCtx[raceListenState]) error { s.State.Later = m.Body; return nil })
				}},
			})
			if err != nil {
				return err
			}
			return ctx.Step("result", func(s *workflow.StepCtx[raceListenState]) error { s.State.Winner = w; return nil })
		},
	}
	e := newEnv(t, counterReg(t, racer), nil)
	ref := runtime.Ref{Name: "raceTaker", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"approval", "go"} {
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: q, Body: json.RawMessage(`7`)}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the workflow's end", 20*time.Second, func() bool {
		st := inspect(t, e.host, "raceTaker", "k").WorkflowStatus
		return st == runtime.WorkflowCompleted || st == runtime.WorkflowFailed
	})
	if ins := inspect(t, e.host, "raceTaker", "k"); ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != `{"winner":"listen","later":7}` {
		t.Fatalf("workflow %s (%s), state %s; want completed, won by the branch that took the message", ins.WorkflowStatus, ins.WorkflowError, ins.State)
	}
}
