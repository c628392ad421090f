package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
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

// secondHost starts another host over e's store that owns nothing yet, as
// a second node would.
func secondHost(t *testing.T, e *env) (*runtime.Host, *runtime.Ownership) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	com := storage.NewCommitter(e.store, storage.DefaultCommitterConfig())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = com.Run(ctx) }()
	own := runtime.NewOwnership(e.store, runtime.NodeRecord{NodeID: "n2"}, 5*time.Second, nil)
	if err := own.Establish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = own.Run(ctx) }()
	cfg := e.cfg
	cfg.NodeID = "n2"
	h, err := runtime.New(cfg, e.reg, e.store, com, own)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = h.Stop(sctx)
		_ = own.Resign(sctx)
		cancel()
		wg.Wait()
	})
	return h, own
}

// A handoff moves a partition with a busy actor and a sleeping workflow:
// the turns in flight finish, every acknowledged increment is there on the
// next owner, calls to the old owner are refused with UNAVAILABLE (which
// clients retry), and the workflow wakes on the next owner at its time.
func TestHandoffMovesActorsAndSleepingWorkflows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, sleeper), nil)
	h2, own2 := secondHost(t, e)
	part := func(name, key string) uint32 {
		return placement.Partition(name, storage.EncodeKey([]string{key}), testPartitions)
	}
	// A sleeper and a counter in one partition.
	p := part("counter", "c")
	sk := ""
	for i := range 10000 {
		k := string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		if part("sleeper", k) == p {
			sk = k
			break
		}
	}
	sref := runtime.Ref{Name: "sleeper", Key: []string{sk}}
	if _, _, err := e.host.GetOrCreate(ctx(t), sref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sleep to be recorded", 10*time.Second, func() bool {
		h, err := e.host.History(ctx(t), sref)
		return err == nil && len(h.Entries) == 1
	})

	// Increments run against the old owner during the handoff.
	var acked, refused atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := call(t, e.host, "counter", "c", "increment", true, 1)
				switch {
				case err == nil:
					acked.Add(1)
				case errors.Is(err, rivet.ErrUnavailable):
					refused.Add(1)
				default:
					t.Errorf("increment during handoff: %v", err)
					return
				}
			}
		}()
	}
	waitFor(t, "some increments", 10*time.Second, func() bool { return acked.Load() >= 20 })
	if err := e.host.Handoff(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "calls to the old owner refused", 10*time.Second, func() bool { return refused.Load() > 0 })
	close(stop)
	wg.Wait()
	if e.host.Owns(p) {
		t.Fatal("old owner still serves the partition")
	}

	// The next owner claims it and has every acknowledged increment.
	got, err := own2.Claim(ctx(t), []uint32{p})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim after handoff: %v, %v", got, err)
	}
	n := callInt(t, h2, "counter", "c", "getCount", false)
	if n < int(acked.Load()) {
		t.Fatalf("count on the next owner = %d, below the %d acknowledged", n, acked.Load())
	}
	// The sleeper wakes there, with no request.
	waitFor(t, "the sleeper to wake on the next owner", 20*time.Second, func() bool {
		ins, err := h2.Inspect(ctx(t), sref)
		return err == nil && string(ins.State) == `{"woke":true}`
	})
}

type heldState struct {
	Seen int `json:"seen"`
}

// held counts each message of "ask", then holds it a while before
// completing it, so that a handoff can come while its sender waits.
var held = rivet.Actor[heldState]{
	Name:   "held",
	Queues: rivet.Queues{"ask": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[heldState]) error {
		return ctx.Loop("serve", func(lc *workflow.Ctx[heldState]) error {
			msg, err := workflow.Next[int](lc, "wait-ask")
			if err != nil {
				return err
			}
			if err := lc.Step("count", func(s *workflow.StepCtx[heldState]) error {
				s.State.Seen++
				return nil
			}); err != nil {
				return err
			}
			if err := lc.Sleep("hold", 2*time.Second); err != nil {
				return err
			}
			return msg.Complete(msg.Body)
		})
	},
	Actions: rivet.Actions[heldState]{"get": rivet.Query(func(c *rivet.ActionCtx[heldState]) (heldState, error) { return *c.State, nil })},
}

// A sender waiting for the completion of a message that is durable when
// the actor moves is told that its message is queued (not an error: a
// client would send it again), and the next owner has that one message.
func TestSendWaitDuringAHandoffSaysTheMessageIsQueued(t *testing.T) {
	e := newEnv(t, counterReg(t, held), nil)
	h2, own2 := secondHost(t, e)
	ref := runtime.Ref{Name: "held", Key: []string{"k"}}
	p := placement.Partition("held", storage.EncodeKey(ref.Key), testPartitions)
	type sent struct {
		res runtime.SendResult
		err error
	}
	done := make(chan sent, 1)
	go func() {
		res, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "ask", Body: json.RawMessage(`1`), CreateIfMissing: true, Wait: true, Timeout: 20 * time.Second})
		done <- sent{res, err}
	}()
	waitFor(t, "the message to be received", 10*time.Second, func() bool {
		ins, err := e.host.Inspect(ctx(t), ref)
		return err == nil && string(ins.State) == `{"seen":1}`
	})
	if err := e.host.Handoff(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s.err != nil || s.res.Status != runtime.SendEnqueued || s.res.MessageID == 0 {
		t.Fatalf("SendWait cut short by a handoff = %+v, %v; want status %q with its message id, no error", s.res, s.err, runtime.SendEnqueued)
	}
	if _, err := own2.Claim(ctx(t), []uint32{p}); err != nil {
		t.Fatal(err)
	}
	out, err := h2.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "get"})
	if err != nil || string(out) != `{"seen":1}` {
		t.Fatalf("state after the move = %s, %v; want the message counted once", out, err)
	}
}

type longStepState struct {
	Sleeps  int `json:"sleeps"`
	Started int `json:"started"`
	Done    int `json:"done"`
}

// A handoff does not wait for a workflow step that holds the actor's turn
// past its StepGrace: it stops the workflow, which cancels the step (its
// attempt runs again on the next owner, as after a crash), and the actor
// leaves cleanly, OnSleep and all, long before the step's own timeout. The
// partition was out of service meanwhile: every other actor in it waited
// (clients retry UNAVAILABLE for seconds, not for a step's half minute),
// and a handoff that ran out of time evicted the actor without OnSleep.
func TestAHandoffCancelsAStepThatHoldsTheTurn(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	var attempts atomic.Int32
	long := rivet.Actor[longStepState]{
		Name: "longStep",
		OnSleep: func(c *rivet.ActionCtx[longStepState]) error {
			c.State.Sleeps++
			return nil
		},
		Run: func(ctx *workflow.Ctx[longStepState]) error {
			return ctx.StepWith(workflow.StepOptions{Name: "work", Timeout: time.Hour}, func(s *workflow.StepCtx[longStepState]) error {
				s.State.Started++
				if attempts.Add(1) == 1 {
					// The first attempt, on the first owner, holds the
					// turn until it is cancelled; the next one ends.
					started <- struct{}{}
					select {
					case <-s.Context().Done():
						return s.Context().Err()
					case <-time.After(time.Hour):
					}
				}
				s.State.Done++
				return nil
			})
		},
	}
	e := newEnv(t, counterReg(t, long), nil)
	ref := runtime.Ref{Name: "longStep", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the step did not start")
	}
	p := placement.Partition("longStep", storage.EncodeKey(ref.Key), testPartitions)
	hctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := e.host.Handoff(hctx, p); err != nil {
		t.Fatal(err)
	}
	if hctx.Err() != nil {
		t.Fatal("the handoff ran out of time waiting for the step")
	}
	h2 := claimOnASecondHost(t, e, p)
	// The step runs again there, from the state before its cancelled
	// attempt.
	waitFor(t, "the workflow's end on the next owner", 20*time.Second, func() bool {
		return inspect(t, h2, "longStep", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	if ins := inspect(t, h2, "longStep", "k"); string(ins.State) != `{"sleeps":1,"started":1,"done":1}` {
		t.Fatalf("state on the next owner %s: want OnSleep run once (a clean handoff) and the step run to its end once", ins.State)
	}
}

type finishState struct {
	Sleeps int `json:"sleeps"`
	Works  int `json:"works"`
	Nexts  int `json:"nexts"`
}

// finishingActor runs a step "work" whose body waits for release (or its
// context), then a step "next"; works and nexts count the bodies that
// started, the state those that committed.
func finishingActor(started chan struct{}, release chan struct{}, works, nexts *atomic.Int32) rivet.Actor[finishState] {
	return rivet.Actor[finishState]{
		Name: "finishing",
		OnSleep: func(c *rivet.ActionCtx[finishState]) error {
			c.State.Sleeps++
			return nil
		},
		Run: func(ctx *workflow.Ctx[finishState]) error {
			if err := ctx.StepWith(workflow.StepOptions{Name: "work", Timeout: time.Hour}, func(s *workflow.StepCtx[finishState]) error {
				works.Add(1)
				select {
				case started <- struct{}{}:
				default:
				}
				select {
				case <-s.Context().Done():
					return s.Context().Err()
				case <-release:
				}
				s.State.Works++
				return nil
			}); err != nil {
				return err
			}
			return ctx.Step("next", func(s *workflow.StepCtx[finishState]) error {
				nexts.Add(1)
				s.State.Nexts++
				return nil
			})
		},
	}
}

// A handoff lets a step body in flight run to its end (within StepGrace),
// and records and commits its attempt, so that the next owner does not
// run it again (a rolling deploy re-ran every step with a call in flight:
// a trial's orders were charged twice); the run goes on there, from the
// step after it, which did not start here; and the actor leaves as
// cleanly as ever, OnSleep and all. A node's graceful stop does the same,
// and the restarted node runs the rest.
func TestAHandoffOrAStopLetsAStepInFlightFinish(t *testing.T) {
	for _, byStop := range []bool{false, true} {
		t.Run(map[bool]string{false: "handoff", true: "stop"}[byStop], func(t *testing.T) {
			started, release := make(chan struct{}, 1), make(chan struct{})
			var works, nexts atomic.Int32
			e := newEnv(t, counterReg(t, finishingActor(started, release, &works, &nexts)), func(c *runtime.Config) { c.StepGrace = 20 * time.Second })
			ref := runtime.Ref{Name: "finishing", Key: []string{"k"}}
			if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
				t.Fatal(err)
			}
			select {
			case <-started:
			case <-time.After(20 * time.Second):
				t.Fatal("the step did not start")
			}
			old := e.host
			left := make(chan error, 1)
			if byStop {
				go func() {
					e.stop()
					left <- nil
				}()
			} else {
				left = handOffLater(e, placement.Partition("finishing", storage.EncodeKey(ref.Key), testPartitions))
			}
			waitFor(t, "the workflow to be told its actor leaves", 10*time.Second, func() bool { return old.WorkflowLeaving(ref) })
			close(release)
			if err := <-left; err != nil {
				t.Fatal(err)
			}
			if n := nexts.Load(); n != 0 {
				t.Fatalf("the step after the one in flight ran %d times on the node it left", n)
			}
			var next *runtime.Host
			if byStop {
				e.start()
				next = e.host
			} else {
				next = claimOnASecondHost(t, e, placement.Partition("finishing", storage.EncodeKey(ref.Key), testPartitions))
			}
			waitFor(t, "the workflow's end on the next owner", 20*time.Second, func() bool {
				return inspect(t, next, "finishing", "k").WorkflowStatus == runtime.WorkflowCompleted
			})
			if ins := inspect(t, next, "finishing", "k"); string(ins.State) != `{"sleeps":1,"works":1,"nexts":1}` || works.Load() != 1 || nexts.Load() != 1 {
				t.Fatalf("state on the next owner %s, the step in flight ran %d times, the next %d; want each once, and OnSleep once", ins.State, works.Load(), nexts.Load())
			}
		})
	}
}

// A step that waits for its actor's turn (a slow action holds it) when a
// handoff begins does not start its body once the action ends: it runs on
// the next owner, once (a review's find: it started, and ran twice when the
// grace ran out).
func TestAStepWaitingForTheTurnDoesNotStartWhileItsActorLeaves(t *testing.T) {
	t.Parallel()
	holding, releaseHold := make(chan struct{}, 1), make(chan struct{})
	var works atomic.Int32
	queued := rivet.Actor[finishState]{
		Name: "queued",
		Run: func(ctx *workflow.Ctx[finishState]) error {
			if err := ctx.Sleep("nap", 200*time.Millisecond); err != nil {
				return err
			}
			return ctx.Step("work", func(s *workflow.StepCtx[finishState]) error {
				works.Add(1)
				s.State.Works++
				return nil
			})
		},
		Actions: rivet.Actions[finishState]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[finishState]) (int, error) {
				holding <- struct{}{}
				<-releaseHold
				return 0, nil
			}),
		},
	}
	e := newEnv(t, counterReg(t, queued), func(c *runtime.Config) { c.StepGrace = 20 * time.Second })
	ref := runtime.Ref{Name: "queued", Key: []string{"k"}}
	held := make(chan error, 1)
	go func() {
		_, err := call(t, e.host, "queued", "k", "hold", true)
		held <- err
	}()
	<-holding
	waitFor(t, "the step to wait for the turn", 20*time.Second, func() bool {
		return inspect(t, e.host, "queued", "k").WorkflowStatus == runtime.WorkflowRunning
	})
	p := placement.Partition("queued", storage.EncodeKey(ref.Key), testPartitions)
	handedOff := handOffLater(e, p)
	waitFor(t, "the workflow to be told its actor leaves", 10*time.Second, func() bool { return e.host.WorkflowLeaving(ref) })
	close(releaseHold)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-handedOff; err != nil {
		t.Fatal(err)
	}
	if n := works.Load(); n != 0 {
		t.Fatalf("the step ran %d times on the node its actor left", n)
	}
	h2 := claimOnASecondHost(t, e, p)
	waitFor(t, "the workflow's end on the next owner", 20*time.Second, func() bool {
		return inspect(t, h2, "queued", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	if n := works.Load(); n != 1 {
		t.Fatalf("the step ran %d times in all, want once", n)
	}
}

// handOffLater hands p off from e's host on a goroutine of its own; the
// handoff's error comes on the channel.
func handOffLater(e *env, p uint32) chan error {
	handedOff := make(chan error, 1)
	go func() {
		hctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		handedOff <- e.host.Handoff(hctx, p)
	}()
	return handedOff
}

// claimOnASecondHost claims p, handed off, on a second host of e's
// storage, and returns that host.
func claimOnASecondHost(t *testing.T, e *env, p uint32) *runtime.Host {
	t.Helper()
	h2, own2 := secondHost(t, e)
	if got, err := own2.Claim(ctx(t), []uint32{p}); err != nil || len(got) != 1 {
		t.Fatalf("claim after handoff: %v, %v", got, err)
	}
	return h2
}

// Nor is a Do body in flight in one branch of a join cancelled when
// another branch, its own body done, is refused its next one: the refused
// branch waits for it (a review's find: the refusal ended the run, and the
// payment call of a fan-out ran again on the next owner).
func TestAHandoffLetsAJoinsDoBodiesInFlightFinish(t *testing.T) {
	t.Parallel()
	started := make(chan string, 4)
	aRelease, chargeRelease := make(chan struct{}), make(chan struct{})
	var charges, as, bs atomic.Int32
	body := func(n *atomic.Int32, name string, release chan struct{}) func(*workflow.DoCtx) (int, error) {
		return func(d *workflow.DoCtx) (int, error) {
			n.Add(1)
			started <- name
			if release != nil {
				select {
				case <-d.Context().Done():
					return 0, d.Context().Err()
				case <-release:
				}
			}
			return 1, nil
		}
	}
	fanout := rivet.Actor[finishState]{
		Name: "fanout",
		Run: func(ctx *workflow.Ctx[finishState]) error {
			_, err := workflow.Join(ctx, "both", workflow.Branches[finishState, int]{
				"pay": func(c *workflow.Ctx[finishState]) (int, error) {
					return workflow.Do(c, "charge", body(&charges, "charge", chargeRelease))
				},
				"other": func(c *workflow.Ctx[finishState]) (int, error) {
					if _, err := workflow.Do(c, "a", body(&as, "a", aRelease)); err != nil {
						return 0, err
					}
					return workflow.Do(c, "b", body(&bs, "b", nil))
				},
			})
			return err
		},
	}
	e := newEnv(t, counterReg(t, fanout), func(c *runtime.Config) { c.StepGrace = 20 * time.Second })
	ref := runtime.Ref{Name: "fanout", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatal("the branches' bodies did not start")
		}
	}
	p := placement.Partition("fanout", storage.EncodeKey(ref.Key), testPartitions)
	handedOff := handOffLater(e, p)
	waitFor(t, "the workflow to be told its actor leaves", 10*time.Second, func() bool { return e.host.WorkflowLeaving(ref) })
	close(aRelease)
	// The other branch is refused its next body and waits (or, were the
	// run ended, the handoff would end while charge is held).
	var handoffErr error
	ended := false
	waitFor(t, "the other branch to be refused its next body", 10*time.Second, func() bool {
		select {
		case handoffErr = <-handedOff:
			ended = true
		default:
		}
		return ended || e.host.WorkflowParked(ref) == 1
	})
	close(chargeRelease)
	if !ended {
		handoffErr = <-handedOff
	}
	if handoffErr != nil {
		t.Fatal(handoffErr)
	}
	if n := bs.Load(); n != 0 {
		t.Fatalf("the refused body ran %d times on the node it left", n)
	}
	h2 := claimOnASecondHost(t, e, p)
	waitFor(t, "the workflow's end on the next owner", 20*time.Second, func() bool {
		return inspect(t, h2, "fanout", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	if charges.Load() != 1 || as.Load() != 1 || bs.Load() != 1 {
		t.Fatalf("bodies run: charge %d, a %d, b %d; want each once", charges.Load(), as.Load(), bs.Load())
	}
}
