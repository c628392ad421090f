package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type cancelState struct {
	Ticks int `json:"ticks"`
}

// cancelActor ticks once, then runs a step that waits for release (or its
// context): a workflow that would never end on its own while release
// stays open.
func cancelActor(started, sawCancel *atomic.Int64, release chan struct{}) rivet.Actor[cancelState] {
	return rivet.Actor[cancelState]{
		Name:   "cancelme",
		Queues: rivet.Queues{"jobs": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[cancelState]) error {
			if err := ctx.Step("tick", func(s *workflow.StepCtx[cancelState]) error {
				s.State.Ticks++
				return nil
			}); err != nil {
				return err
			}
			return ctx.StepWith(workflow.StepOptions{Name: "block", Timeout: workflow.NoTimeout}, func(s *workflow.StepCtx[cancelState]) error {
				started.Add(1)
				select {
				case <-release:
					return nil
				case <-s.Context().Done():
					sawCancel.Add(1)
					return s.Context().Err()
				}
			})
		},
		Actions: rivet.Actions[cancelState]{"getState": rivet.Query(func(c *rivet.ActionCtx[cancelState]) (cancelState, error) { return *c.State, nil })},
	}
}

// An operator's cancel stops a workflow whose step would never end: the
// step's context is cancelled and its attempt not recorded, the status is
// cancelled for good (across a restart, with no wakeup left), the actor
// still serves, senders hear that nothing will complete their messages,
// and a retry resumes the run where it stopped.
func TestCancelWorkflowStopsItForGoodUntilRetried(t *testing.T) {
	var started, sawCancel atomic.Int64
	release := make(chan struct{})
	e := newEnv(t, counterReg(t, cancelActor(&started, &sawCancel, release)), nil)
	ref := runtime.Ref{Name: "cancelme", Key: []string{"c"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the blocking step to start", 10*time.Second, func() bool { return started.Load() == 1 })

	prev, err := e.host.CancelWorkflow(ctx(t), ref, "job gone")
	if err != nil || prev != runtime.WorkflowRunning {
		t.Fatalf("CancelWorkflow = %q, %v; want running, nil", prev, err)
	}
	if sawCancel.Load() != 1 {
		t.Fatalf("the step in flight saw its context cancelled %d times, want 1", sawCancel.Load())
	}
	ins := inspect(t, e.host, "cancelme", "c")
	if ins.WorkflowStatus != runtime.WorkflowCancelled || ins.WorkflowError != "cancelled: job gone" {
		t.Fatalf("after cancel: status %q, error %q", ins.WorkflowStatus, ins.WorkflowError)
	}
	h, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range h.Entries {
		if en.Path == "block" {
			t.Fatalf("the cancelled attempt was recorded: %+v", en)
		}
	}
	if prev, err := e.host.CancelWorkflow(ctx(t), ref, "again"); err != nil || prev != runtime.WorkflowCancelled {
		t.Fatalf("second CancelWorkflow = %q, %v; want cancelled, nil (nothing changes)", prev, err)
	}
	if got := inspect(t, e.host, "cancelme", "c").WorkflowError; got != "cancelled: job gone" {
		t.Fatalf("a second cancel changed the error to %q", got)
	}

	// Queued, with the news that nothing takes it; a wait is refused.
	res, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "jobs", Body: json.RawMessage(`2`)})
	if err != nil || res.WorkflowStatus != runtime.WorkflowCancelled {
		t.Fatalf("send to a cancelled workflow = %+v, %v; want queued with workflow status cancelled", res, err)
	}
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "jobs", Body: json.RawMessage(`3`), Wait: true}); !errors.Is(err, rivet.ErrWorkflowFailed) {
		t.Fatalf("send --wait to a cancelled workflow: %v, want ErrWorkflowFailed", err)
	} else if re := (*rivet.Error)(nil); !errors.As(err, &re) || re.Group+"."+re.Code != "workflow.ended" {
		t.Fatalf("send --wait to a cancelled workflow: %v, want the reason workflow.ended (it did not fail)", err)
	}

	// Stored: no wakeup record, and a new node does not run it.
	noWakeup(t, e, ref)
	e.restart()
	raw, err := call(t, e.host, "cancelme", "c", "getState", false)
	if err != nil || string(raw) != `{"ticks":1}` {
		t.Fatalf("getState after restart = %s, %v", raw, err)
	}
	if st := inspect(t, e.host, "cancelme", "c").WorkflowStatus; st != runtime.WorkflowCancelled {
		t.Fatalf("after restart the workflow is %q, want cancelled", st)
	}
	if started.Load() != 1 {
		t.Fatalf("the cancelled workflow ran its step again (%d starts)", started.Load())
	}

	// A retry resumes where it stopped: tick replays, block runs again.
	if _, err := e.host.RetryWorkflow(ctx(t), ref, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the resumed step", 10*time.Second, func() bool { return started.Load() == 2 })
	close(release)
	waitFor(t, "the resumed workflow's end", 10*time.Second, func() bool {
		return inspect(t, e.host, "cancelme", "c").WorkflowStatus == runtime.WorkflowCompleted
	})
	if raw, err := call(t, e.host, "cancelme", "c", "getState", false); err != nil || string(raw) != `{"ticks":1}` {
		t.Fatalf("state after the resumed run = %s, %v; want tick not run again", raw, err)
	}
	if _, err := e.host.CancelWorkflow(ctx(t), ref, ""); !errors.Is(err, rivet.ErrWorkflowFailed) || !strings.Contains(err.Error(), "completed") {
		t.Fatalf("cancel of a completed workflow: %v, want ErrWorkflowFailed naming its status", err)
	}
}

// A sleeping workflow of an actor not in memory is cancelled from storage:
// no wakeup is left to run it.
func TestCancelWorkflowOfAnActorNotInMemory(t *testing.T) {
	t.Parallel()
	sleeper := rivet.Actor[cancelState]{
		Name: "sleeper",
		Run: func(ctx *workflow.Ctx[cancelState]) error {
			return ctx.Sleep("nap", time.Hour)
		},
	}
	e := newEnv(t, counterReg(t, sleeper), nil)
	ref := runtime.Ref{Name: "sleeper", Key: []string{"s"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to sleep", 10*time.Second, func() bool {
		return inspect(t, e.host, "sleeper", "s").WorkflowStatus == runtime.WorkflowSleeping
	})
	e.restart()
	prev, err := e.host.CancelWorkflow(ctx(t), ref, "")
	if err != nil || prev != runtime.WorkflowSleeping {
		t.Fatalf("CancelWorkflow = %q, %v; want sleeping, nil", prev, err)
	}
	ins := inspect(t, e.host, "sleeper", "s")
	if ins.WorkflowStatus != runtime.WorkflowCancelled || ins.WorkflowError != "cancelled" || !ins.WorkflowWake.At.IsZero() {
		t.Fatalf("after cancel: %+v", ins)
	}
	noWakeup(t, e, ref)
}

// noWakeup fails the test if the actor has a wakeup record: nothing would
// run its (cancelled) workflow.
func noWakeup(t *testing.T, e *env, ref runtime.Ref) {
	t.Helper()
	enc := storage.EncodeKey(ref.Key)
	wk := storage.WakeupKey(placement.Partition(ref.Name, enc, testPartitions), ref.Name, enc)
	if _, err := e.store.Get(ctx(t), wk); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("wakeup record of a cancelled workflow: %v, want none", err)
	}
}

// A sender waiting for a completion when the cancel lands hears that none
// will come, and why.
func TestCancelWorkflowAnswersWaitingSenders(t *testing.T) {
	taker := rivet.Actor[cancelState]{
		Name:   "taker",
		Queues: rivet.Queues{"jobs": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[cancelState]) error {
			if _, err := workflow.Next[int](ctx, "take"); err != nil {
				return err
			}
			return ctx.Sleep("nap", time.Hour) // never completes it
		},
	}
	e := newEnv(t, counterReg(t, taker), nil)
	ref := runtime.Ref{Name: "taker", Key: []string{"t"}}
	waited := make(chan error, 1)
	go func() {
		_, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "jobs", Body: json.RawMessage(`1`), Wait: true, Timeout: 20 * time.Second, CreateIfMissing: true})
		waited <- err
	}()
	waitFor(t, "the workflow to take the message and sleep", 10*time.Second, func() bool {
		ins, err := e.host.Inspect(ctx(t), ref)
		return err == nil && ins.WorkflowStatus == runtime.WorkflowSleeping && len(ins.Queues) == 0
	})
	if _, err := e.host.CancelWorkflow(ctx(t), ref, "job gone"); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; !errors.Is(err, rivet.ErrWorkflowFailed) || !strings.Contains(err.Error(), "cancelled: job gone") {
		t.Fatalf("the waiting sender got %v, want ErrWorkflowFailed with the reason", err)
	}
}

// A cancel whose turn never comes (an action holds it past the caller's
// deadline) fails, and the run it stopped on the way runs on: nothing is
// left in memory without a run.
func TestACancelThatTimesOutLeavesTheWorkflowRunning(t *testing.T) {
	t.Parallel()
	holding := make(chan struct{}, 1)
	waiter := rivet.Actor[cancelState]{
		Name:   "waiter",
		Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[cancelState]) error {
			_, err := workflow.Next[int](ctx, "wait-go")
			return err
		},
		Actions: rivet.Actions[cancelState]{"slow": rivet.Action(func(c *rivet.ActionCtx[cancelState], ms int) (int, error) {
			holding <- struct{}{}
			time.Sleep(time.Duration(ms) * time.Millisecond)
			return ms, nil
		})},
	}
	e := newEnv(t, counterReg(t, waiter), nil)
	ref := runtime.Ref{Name: "waiter", Key: []string{"w"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to wait", 10*time.Second, func() bool {
		return inspect(t, e.host, "waiter", "w").WorkflowStatus == runtime.WorkflowSleeping
	})
	slow := make(chan error, 1)
	go func() { _, err := call(t, e.host, "waiter", "w", "slow", false, 1500); slow <- err }()
	<-holding // the action holds the turn
	cctx, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	defer cancel()
	if _, err := e.host.CancelWorkflow(cctx, ref, ""); err == nil {
		t.Fatal("the cancel took a turn the slow action held")
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to take its message and complete", 15*time.Second, func() bool {
		return inspect(t, e.host, "waiter", "w").WorkflowStatus == runtime.WorkflowCompleted
	})
}

// A cancel that times out while a step ignores its context does not run
// that step a second time at once with it, whether the step holds the
// turn (Step) or runs outside it (Do): the workflow runs on once the step
// has ended, from what it recorded.
func TestACancelThatTimesOutDoesNotRunAStepTwiceAtOnce(t *testing.T) {
	t.Parallel()
	for _, stateless := range []bool{false, true} {
		name := "Step"
		if stateless {
			name = "Do"
		}
		t.Run(name, func(t *testing.T) {
			var starts, running, most atomic.Int64
			body := func() (int, error) {
				starts.Add(1)
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(1500 * time.Millisecond) // deaf to its context
				running.Add(-1)
				return 1, nil
			}
			deaf := rivet.Actor[cancelState]{
				Name: "deaf",
				Run: func(ctx *workflow.Ctx[cancelState]) error {
					var err error
					if stateless {
						_, err = workflow.DoOpts(ctx, workflow.StepOptions{Name: "slow", Timeout: workflow.NoTimeout}, func(*workflow.DoCtx) (int, error) { return body() })
					} else {
						_, err = workflow.StepOpts(ctx, workflow.StepOptions{Name: "slow", Timeout: workflow.NoTimeout}, func(*workflow.StepCtx[cancelState]) (int, error) { return body() })
					}
					return err
				},
			}
			e := newEnv(t, counterReg(t, deaf), nil)
			ref := runtime.Ref{Name: "deaf", Key: []string{"d"}}
			if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the step to start", 10*time.Second, func() bool { return starts.Load() == 1 })
			for range 2 { // an operator trying again
				cctx, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
				_, err := e.host.CancelWorkflow(cctx, ref, "")
				cancel()
				if err == nil {
					t.Fatal("the cancel succeeded while the step held on")
				}
			}
			waitFor(t, "the workflow to complete", 20*time.Second, func() bool {
				return inspect(t, e.host, "deaf", "d").WorkflowStatus == runtime.WorkflowCompleted
			})
			if most.Load() != 1 || starts.Load() != 1 {
				t.Fatalf("the step started %d times, %d at once; want once (its success is recorded)", starts.Load(), most.Load())
			}
		})
	}
}

func TestCancelWorkflowRefusesBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t), nil)
	callInt(t, e.host, "counter", "k", "increment", true, 1)
	ref := runtime.Ref{Name: "counter", Key: []string{"k"}}
	if _, err := e.host.CancelWorkflow(ctx(t), ref, ""); !errors.Is(err, rivet.ErrWorkflowFailed) {
		t.Fatalf("cancel on an actor without a workflow: %v, want ErrWorkflowFailed", err)
	}
	if _, err := e.host.CancelWorkflow(ctx(t), runtime.Ref{Name: "nope", Key: []string{"k"}}, ""); !errors.Is(err, rivet.ErrUnknownActor) {
		t.Fatalf("cancel on an unknown actor type: %v", err)
	}
	var started, saw atomic.Int64
	e2 := newEnv(t, counterReg(t, cancelActor(&started, &saw, make(chan struct{}))), nil)
	long := strings.Repeat("x", runtime.MaxCancelReason+1)
	if _, err := e2.host.CancelWorkflow(ctx(t), runtime.Ref{Name: "cancelme", Key: []string{"k"}}, long); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("cancel with a %d-byte reason: %v, want ErrInvalidArgument", len(long), err)
	}
	// A short reason that is not one line is refused for that, not for
	// its length.
	if _, err := e2.host.CancelWorkflow(ctx(t), runtime.Ref{Name: "cancelme", Key: []string{"k"}}, "a\nb"); !errors.Is(err, rivet.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "control character (U+000A at byte 1)") {
		t.Fatalf("cancel with a reason of two lines: %v, want ErrInvalidArgument naming the control character", err)
	}
	if _, err := e2.host.CancelWorkflow(ctx(t), runtime.Ref{Name: "cancelme", Key: []string{"missing"}}, ""); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("cancel on a missing actor: %v, want ErrNotFound", err)
	}
}

// A Destroy that follows one that timed out (a step deaf to its context)
// deletes the actor for good: the first one's stopped run is evicted only
// once no turn holds the actor, so no second activation loads between the
// second Destroy's look and its delete, and none writes the actor back.
func TestDestroyAfterATimedOutDestroyLeavesNothing(t *testing.T) {
	t.Parallel()
	var starts atomic.Int64
	deaf := rivet.Actor[cancelState]{
		Name: "deaf",
		Run: func(ctx *workflow.Ctx[cancelState]) error {
			_, err := workflow.DoOpts(ctx, workflow.StepOptions{Name: "slow", Timeout: workflow.NoTimeout}, func(*workflow.DoCtx) (int, error) {
				starts.Add(1)
				time.Sleep(1500 * time.Millisecond) // deaf to its context
				return 1, nil
			})
			if err != nil {
				return err
			}
			return ctx.Step("after", func(s *workflow.StepCtx[cancelState]) error { s.State.Ticks++; return nil })
		},
		Actions: rivet.Actions[cancelState]{"getState": rivet.Query(func(c *rivet.ActionCtx[cancelState]) (cancelState, error) { return *c.State, nil })},
	}
	e := newEnv(t, counterReg(t, deaf), nil)
	ref := runtime.Ref{Name: "deaf", Key: []string{"d"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the step to start", 10*time.Second, func() bool { return starts.Load() == 1 })
	c1, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	err := e.host.Destroy(c1, ref)
	cancel()
	if err == nil {
		t.Fatal("the first destroy succeeded while the step held on")
	}
	// The second Destroy's delete waits while requests try to load the
	// actor again.
	e.store.delGate, e.store.delEntered = make(chan struct{}), make(chan struct{})
	e.store.holdDelPrefix.Store(true)
	destroyed := make(chan error, 1)
	go func() { destroyed <- e.host.Destroy(ctx(t), ref) }()
	<-e.store.delEntered
	for range 20 {
		cc, cancel := context.WithTimeout(ctx(t), 50*time.Millisecond)
		_, _ = e.host.Call(cc, runtime.CallRequest{Ref: ref, Action: "getState", Args: json.RawMessage(`[]`)})
		cancel()
	}
	e.store.holdDelPrefix.Store(false)
	close(e.store.delGate)
	if err := <-destroyed; err != nil {
		t.Fatalf("second destroy: %v", err)
	}
	// Nothing comes back, through the eviction's rerun (a second later)
	// or a call.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		kvs, err := e.store.List(ctx(t), "", storage.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range kvs {
			if strings.Contains(kv.Key, "deaf") {
				t.Fatalf("written back after the destroy: %s", kv.Key)
			}
		}
	}
	if _, err := call(t, e.host, "deaf", "d", "getState", false); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("getState after the destroy: %v, want ErrNotFound", err)
	}
}

// A cancel that finds the actor still loading leaves it to the loader (run
// under -race: the early look read fields the load was writing).
func TestCancelWhileTheActorLoads(t *testing.T) {
	t.Parallel()
	quick := rivet.Actor[cancelState]{
		Name: "quick",
		Run: func(ctx *workflow.Ctx[cancelState]) error {
			return ctx.Step("one", func(s *workflow.StepCtx[cancelState]) error { s.State.Ticks++; return nil })
		},
		Actions: rivet.Actions[cancelState]{"getState": rivet.Query(func(c *rivet.ActionCtx[cancelState]) (cancelState, error) { return *c.State, nil })},
	}
	e := newEnv(t, counterReg(t, quick), nil)
	ref := runtime.Ref{Name: "quick", Key: []string{"q"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "completion", 10*time.Second, func() bool {
		return inspect(t, e.host, "quick", "q").WorkflowStatus == runtime.WorkflowCompleted
	})
	e.restart()
	part, _ := e.host.PartitionOf(ref)
	e.store.listGate = make(chan struct{})
	e.store.listHoldPrefix.Store(storage.ActorPrefix(part, "quick", storage.EncodeKey(ref.Key)) + storage.WorkflowSuffix)
	loaded := make(chan error, 1)
	go func() { _, err := call(t, e.host, "quick", "q", "getState", false); loaded <- err }()
	waitFor(t, "the load to hold", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 1 })
	cancelled := make(chan error, 1)
	go func() { _, err := e.host.CancelWorkflow(ctx(t), ref, ""); cancelled <- err }()
	time.Sleep(100 * time.Millisecond) // let the cancel look at the loading actor
	e.store.listHoldPrefix.Store("")
	close(e.store.listGate)
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	if err := <-cancelled; !errors.Is(err, rivet.ErrWorkflowFailed) {
		t.Fatalf("cancel of a completed workflow: %v, want ErrWorkflowFailed", err)
	}
}
