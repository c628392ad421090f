package runtime_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// shopState is what the shop actor's actions and workflow leave: Placed
// counts the orders actions placed, Got and IDs the messages the workflow
// took, in order.
type shopState struct {
	Placed int      `json:"placed"`
	Got    []int    `json:"got"`
	IDs    []uint64 `json:"ids"`
}

var errOrderRefused = rivet.Errorf(rivet.ErrFailedPrecondition, "order refused")

// shopActor's actions hand orders to its workflow with ActionCtx.Enqueue,
// as the README's placeOrder does; stepEnqueue names an order a step of
// the workflow enqueues itself when it takes order 0. A gated shop's
// workflow takes no order before a message of its queue "go": until then
// nothing but the actions commits.
func shopActor(gated bool) rivet.Actor[shopState] {
	return rivet.Actor[shopState]{
		Name:   "shop",
		Queues: rivet.Queues{"orders": rivet.QueueOf[int](), "go": rivet.QueueOf[int]()},
		Actions: rivet.Actions[shopState]{
			// place raises Placed and enqueues each order, then fails if
			// one is negative: after its message is staged.
			"place": rivet.Action(func(c *rivet.ActionCtx[shopState], orders []int) (int, error) {
				c.State.Placed++
				for _, o := range orders {
					if err := c.Enqueue("orders", o); err != nil {
						return 0, err
					}
				}
				for _, o := range orders {
					if o < 0 {
						return 0, errOrderRefused
					}
				}
				return c.State.Placed, nil
			}),
			"placeThenPanic": rivet.Action(func(c *rivet.ActionCtx[shopState], order int) (int, error) {
				c.State.Placed++
				if err := c.Enqueue("orders", order); err != nil {
					return 0, err
				}
				panic("after the enqueue")
			}),
			// placeReenterThenFail enqueues, calls place on its own
			// actor (a re-entrant turn, whose commit writes what this
			// turn changed and enqueued so far), then fails.
			"placeReenterThenFail": rivet.Action(func(c *rivet.ActionCtx[shopState], order int) (int, error) {
				c.State.Placed++
				if err := c.Enqueue("orders", order); err != nil {
					return 0, err
				}
				if _, err := c.Client().GetOrCreate(c.Name(), c.Key()...).Call(c.Context(), "place", []int{}); err != nil {
					return 0, err
				}
				return 0, errOrderRefused
			}),
			// fill schedules calls[0] calls, then enqueues calls[1]
			// messages, then schedules calls[2] more.
			"fill": rivet.Action(func(c *rivet.ActionCtx[shopState], calls [3]int) (int, error) {
				c.State.Placed++
				for range calls[0] {
					if _, err := c.Schedule().After(time.Hour, "get"); err != nil {
						return 0, err
					}
				}
				for range calls[1] {
					if err := c.Enqueue("orders", 3); err != nil {
						return 0, err
					}
				}
				for range calls[2] {
					if _, err := c.Schedule().After(time.Hour, "get"); err != nil {
						return 0, err
					}
				}
				return 0, nil
			}),
			// misuse returns the error of an Enqueue that must be refused.
			"misuse": rivet.Action(func(c *rivet.ActionCtx[shopState], what string) (string, error) {
				switch what {
				case "queue":
					return "", c.Enqueue("nope", 1)
				case "type":
					return "", c.Enqueue("orders", "not an int")
				case "size":
					return "", c.Enqueue("orders", strings.Repeat("1", 2<<20))
				}
				return "", nil
			}),
			"peekEnqueue": rivet.Query(func(c *rivet.ActionCtx[shopState]) (int, error) {
				return 0, c.Enqueue("orders", 1)
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[shopState]) (shopState, error) { return *c.State, nil }),
		},
		Run: func(ctx *workflow.Ctx[shopState]) error {
			if gated {
				if _, err := workflow.Next[int](ctx, "gate", workflow.NextOptions{Names: []string{"go"}}); err != nil {
					return err
				}
			}
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "take"}, func(c *workflow.Ctx[shopState], n int) (int, error) {
				m, err := workflow.Next[int](c, "order", workflow.NextOptions{Names: []string{"orders"}})
				if err != nil {
					return n, err
				}
				return n + 1, c.Step("record", func(s *workflow.StepCtx[shopState]) error {
					s.State.Got = append(s.State.Got, m.Body)
					s.State.IDs = append(s.State.IDs, m.ID)
					if m.Body == 0 {
						// A step hands on work as an action does.
						return s.Enqueue("orders", 1000)
					}
					return nil
				})
			})
			return err
		},
	}
}

func shopGet(t *testing.T, e *env) shopState {
	t.Helper()
	raw, err := call(t, e.host, "shop", "s", "get", false)
	if err != nil {
		t.Fatal(err)
	}
	var st shopState
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// shopQueued is the depth of the orders queue as the host says, in memory
// or, after a restart, as storage holds it.
func shopQueued(t *testing.T, e *env) uint64 {
	t.Helper()
	for _, q := range inspect(t, e.host, "shop", "s").Queues {
		if q.Queue == "orders" {
			return q.Depth
		}
	}
	return 0
}

// waitShopWaiting waits until the shop's workflow waits in Next for an
// order: what an enqueue must then wake.
func waitShopWaiting(t *testing.T, e *env) {
	t.Helper()
	waitFor(t, "the workflow waiting for orders", 20*time.Second, func() bool {
		return slices.Contains(inspect(t, e.host, "shop", "s").WorkflowWake.Queues, "orders")
	})
}

// An action's Enqueue commits with its changes: an action that fails or
// panics after it queues nothing (the README's placeOrder, which queued
// the order through its own handle and had it processed with placed
// still 0), one that succeeds queues its message for the workflow.
func TestEnqueueOfAFailedActionQueuesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, shopActor(false)), nil)
	if _, err := call(t, e.host, "shop", "s", "place", true, []int{}); err != nil {
		t.Fatal(err)
	}
	waitShopWaiting(t, e)
	if _, err := call(t, e.host, "shop", "s", "place", false, []int{5, -1}); !errors.Is(err, rivet.ErrFailedPrecondition) {
		t.Fatalf("place of a refused order: %v, want its FAILED_PRECONDITION", err)
	}
	if _, err := call(t, e.host, "shop", "s", "placeThenPanic", false, 6); !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("placeThenPanic: %v, want INTERNAL", err)
	}
	// A later action's commit must not carry the failed ones' messages.
	if _, err := call(t, e.host, "shop", "s", "place", false, []int{7}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to take order 7", 20*time.Second, func() bool { return len(shopGet(t, e).Got) > 0 })
	e.restart()
	// Whatever storage holds is taken by now: the workflow runs again
	// on the load, and takes anything queued; the actions count as their
	// commits do.
	if _, err := call(t, e.host, "shop", "s", "place", false, []int{8}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to take order 8", 20*time.Second, func() bool { return len(shopGet(t, e).Got) >= 2 })
	st := shopGet(t, e)
	if !slices.Equal(st.Got, []int{7, 8}) || st.Placed != 3 {
		t.Fatalf("state = %+v, want orders [7 8] taken and 3 placed (the failed actions' orders never queued)", st)
	}
	if d := shopQueued(t, e); d != 0 {
		t.Fatalf("orders queued = %d, want 0", d)
	}
}

// A turn whose commit fails queues nothing, and its caller gets the
// commit's error: the message is in the transaction that failed.
func TestEnqueueOfATurnWhoseCommitFailsQueuesNothing(t *testing.T) {
	t.Parallel()
	// As a node's host: the commit in doubt is resolved (not applied) by
	// claiming its partition again, so the caller learns it at once.
	e := newEnvWith(t, counterReg(t, shopActor(true)), nil, true)
	if _, err := call(t, e.host, "shop", "s", "place", true, []int{}); err != nil {
		t.Fatal(err)
	}
	// The commit that writes the state: a message sent apart from it
	// would be queued all the same.
	e.store.failCommitSub.Store("/" + storage.StateSuffix)
	_, err := call(t, e.host, "shop", "s", "place", false, []int{9})
	if !errors.Is(err, rivet.ErrUnavailable) || !strings.Contains(err.Error(), "not written") {
		t.Fatalf("place whose commit failed: %v, want UNAVAILABLE, not written", err)
	}
	e.restart()
	if d := shopQueued(t, e); d != 0 {
		t.Fatalf("orders queued after the failed commit = %d, want 0", d)
	}
	if st := shopGet(t, e); st.Placed != 1 || len(st.Got) != 0 {
		t.Fatalf("state = %+v, want 1 placed and nothing taken", st)
	}
}

// Enqueued messages take their IDs in order with the sends around them,
// and the workflow waiting in Next takes them at once, in that order.
func TestEnqueuedMessagesAreInOrderWithSendsAndWakeTheWorkflow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, shopActor(false)), nil)
	if _, err := call(t, e.host, "shop", "s", "place", true, []int{}); err != nil {
		t.Fatal(err)
	}
	waitShopWaiting(t, e)
	ref := runtime.Ref{Name: "shop", Key: []string{"s"}}
	before, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "orders", Body: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, e.host, "shop", "s", "place", false, []int{2, 3}); err != nil {
		t.Fatal(err)
	}
	after, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "orders", Body: json.RawMessage(`4`)})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to take the four orders", 20*time.Second, func() bool { return len(shopGet(t, e).Got) >= 4 })
	st := shopGet(t, e)
	if !slices.Equal(st.Got, []int{1, 2, 3, 4}) {
		t.Fatalf("orders taken = %v, want [1 2 3 4]", st.Got)
	}
	if want := []uint64{before.MessageID, before.MessageID + 1, before.MessageID + 2, after.MessageID}; !slices.Equal(st.IDs, want) || after.MessageID != before.MessageID+3 {
		t.Fatalf("message IDs = %v (sends %d and %d), want %v", st.IDs, before.MessageID, after.MessageID, want)
	}
}

// The workflow waiting in Next (no timeout) is woken by the action's
// commit alone: nothing else happens to the actor meanwhile.
func TestEnqueueWakesTheWaitingWorkflow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, shopActor(false)), nil)
	if _, err := call(t, e.host, "shop", "s", "place", true, []int{}); err != nil {
		t.Fatal(err)
	}
	waitShopWaiting(t, e)
	if _, err := call(t, e.host, "shop", "s", "place", false, []int{11}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to take order 11", 20*time.Second, func() bool {
		ins := inspect(t, e.host, "shop", "s")
		return strings.Contains(string(ins.State), `"got":[11]`)
	})
}

// A step's Enqueue commits with its record, and the workflow takes the
// message later in the run.
func TestStepEnqueueIsTakenByTheWorkflow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, shopActor(false)), nil)
	if _, err := call(t, e.host, "shop", "s", "place", true, []int{0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to take the order its step enqueued", 20*time.Second, func() bool { return len(shopGet(t, e).Got) >= 2 })
	st := shopGet(t, e)
	if !slices.Equal(st.Got, []int{0, 1000}) || st.IDs[1] != st.IDs[0]+1 {
		t.Fatalf("state = %+v, want orders [0 1000] with IDs in a row", st)
	}
	// Replayed from its history, the step does not enqueue again.
	e.restart()
	if st := shopGet(t, e); len(st.Got) != 2 {
		t.Fatalf("orders taken after the replay = %v, want 2", st.Got)
	}
	waitShopWaiting(t, e)
	if d := shopQueued(t, e); d != 0 {
		t.Fatalf("orders queued after the replay = %d, want 0", d)
	}
	if st := shopGet(t, e); len(st.Got) != 2 {
		t.Fatalf("orders taken after the replay = %v, want 2", st.Got)
	}
}

// What Enqueue refuses, it refuses at the call, with a Send's codes; a
// query, which commits nothing, cannot enqueue.
func TestEnqueueRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, shopActor(false)), nil)
	for _, c := range []struct {
		what string
		kind error
	}{{"queue", rivet.ErrUnknownQueue}, {"type", rivet.ErrInvalidArgument}, {"size", rivet.ErrTooLarge}} {
		_, err := call(t, e.host, "shop", "s", "misuse", true, c.what)
		if !errors.Is(err, c.kind) {
			t.Errorf("Enqueue misused (%s): %v, want %v", c.what, err, c.kind)
		}
	}
	_, err := call(t, e.host, "shop", "s", "peekEnqueue", false)
	if !errors.Is(err, rivet.ErrInternal) || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("Enqueue in a query: %v, want INTERNAL saying it is read-only", err)
	}
	// More than a turn may stage.
	many := slices.Repeat([]int{2}, 33)
	_, err = call(t, e.host, "shop", "s", "place", false, many[1:]) // 32: fits
	if err != nil {
		t.Fatalf("place of 32 orders: %v", err)
	}
	_, err = call(t, e.host, "shop", "s", "place", false, many)
	if !errors.Is(err, rivet.ErrTooLarge) {
		t.Errorf("place of 33 orders: %v, want TOO_LARGE", err)
	}
}

// A step attempt that fails has its messages queued, as its changes to
// the state are committed (roll-forward): the retry finds both.
func TestAFailedStepAttemptsMessagesAreQueuedWithItsState(t *testing.T) {
	t.Parallel()
	relay := rivet.Actor[shopState]{
		Name:   "relay",
		Queues: rivet.Queues{"orders": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[shopState]) error {
			err := ctx.StepWith(workflow.StepOptions{Name: "hand", MaxRetries: 1, RetryBackoffBase: time.Millisecond}, func(s *workflow.StepCtx[shopState]) error {
				s.State.Placed++
				if err := s.Enqueue("orders", s.Attempt()); err != nil {
					return err
				}
				if s.Attempt() == 1 {
					return errors.New("first attempt fails after its enqueue")
				}
				return nil
			})
			if err != nil {
				return err
			}
			got, err := workflow.NextBatch[int](ctx, "take", workflow.NextOptions{Count: 10})
			if err != nil {
				return err
			}
			return ctx.Step("record", func(s *workflow.StepCtx[shopState]) error {
				for _, m := range got {
					s.State.Got = append(s.State.Got, m.Body)
				}
				return nil
			})
		},
	}
	e := newEnv(t, counterReg(t, relay), nil)
	ref := runtime.Ref{Name: "relay", Key: []string{"r"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the relay's workflow to end", 20*time.Second, func() bool {
		return inspect(t, e.host, "relay", "r").WorkflowStatus == runtime.WorkflowCompleted
	})
	var st shopState
	if err := json.Unmarshal(inspect(t, e.host, "relay", "r").State, &st); err != nil {
		t.Fatal(err)
	}
	if st.Placed != 2 || !slices.Equal(st.Got, []int{1, 2}) {
		t.Fatalf("state = %+v, want both attempts' changes and messages [1 2]", st)
	}
}

// OnWake enqueues as an action does: a create's first wake hands the
// workflow its first order, once (the state says it did).
func TestOnWakeEnqueueCommitsWithTheCreate(t *testing.T) {
	t.Parallel()
	shop := shopActor(false)
	shop.OnWake = func(c *rivet.ActionCtx[shopState]) error {
		if c.State.Placed > 0 {
			return nil
		}
		c.State.Placed++
		return c.Enqueue("orders", 42)
	}
	e := newEnv(t, counterReg(t, shop), nil)
	if _, err := call(t, e.host, "shop", "s", "get", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to take the order OnWake enqueued", 20*time.Second, func() bool { return len(shopGet(t, e).Got) > 0 })
	e.restart()
	shopGet(t, e) // loads it: OnWake runs again and enqueues nothing
	waitShopWaiting(t, e)
	if st := shopGet(t, e); !slices.Equal(st.Got, []int{42}) || st.Placed != 1 {
		t.Fatalf("state = %+v, want the order 42 taken once", st)
	}
}

// A re-entrant action commits what the outer action changed and enqueued
// so far with its own changes, as the docs say of the state: an outer
// action that enqueued, called its own actor and then failed has its
// message queued, and its state so far committed with it.
func TestEnqueueBeforeAReentrantCallCommitsWithIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, shopActor(false)), nil)
	if _, err := call(t, e.host, "shop", "s", "place", true, []int{}); err != nil {
		t.Fatal(err)
	}
	waitShopWaiting(t, e)
	if _, err := call(t, e.host, "shop", "s", "placeReenterThenFail", false, 4); !errors.Is(err, rivet.ErrFailedPrecondition) {
		t.Fatalf("placeReenterThenFail: %v, want its FAILED_PRECONDITION", err)
	}
	waitFor(t, "the workflow to take order 4", 20*time.Second, func() bool { return len(shopGet(t, e).Got) > 0 })
	e.restart()
	if _, err := call(t, e.host, "shop", "s", "place", false, []int{8}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to take order 8", 20*time.Second, func() bool { return len(shopGet(t, e).Got) >= 2 })
	// 1 (the first place), 2 (the outer action, committed by the inner
	// one), 3 (the inner place), 4 (the last place).
	if st := shopGet(t, e); !slices.Equal(st.Got, []int{4, 8}) || st.Placed != 4 {
		t.Fatalf("state = %+v, want orders [4 8] taken and 4 placed (the outer action's order and count committed by the re-entrant call)", st)
	}
	if d := shopQueued(t, e); d != 0 {
		t.Fatalf("orders queued = %d, want 0", d)
	}
}

// padState's Pad makes a step's state large; Refused is the error the
// big step was refused with.
type padState struct {
	Pad     string `json:"pad"`
	Refused string `json:"refused"`
}

// A step whose output, state and messages together are too large for one
// transaction, though each is within its limit, is refused at its check
// as one with too many scheduled calls is: its changes and messages
// discarded, the step failed with TOO_LARGE for the workflow's code to
// handle, not the run failed by the commit.
func TestAStepTooLargeWithItsMessagesIsRefusedAtItsCheck(t *testing.T) {
	t.Parallel()
	big := rivet.Actor[padState]{
		Name:   "big",
		Queues: rivet.Queues{"pads": rivet.QueueOf[string]()},
		Run: func(ctx *workflow.Ctx[padState]) error {
			_, err := workflow.Step(ctx, "big", func(s *workflow.StepCtx[padState]) (string, error) {
				s.State.Pad = strings.Repeat("s", 200<<10)
				for range 4 {
					if err := s.Enqueue("pads", strings.Repeat("m", 60<<10)); err != nil {
						return "", err
					}
				}
				return strings.Repeat("o", 1000<<10), nil
			})
			if err == nil {
				return errors.New("the big step was not refused")
			}
			return ctx.Step("note", func(s *workflow.StepCtx[padState]) error {
				s.State.Refused = err.Error()
				return nil
			})
		},
	}
	e := newEnv(t, counterReg(t, big), nil)
	if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "big", Key: []string{"b"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the big workflow to end", 20*time.Second, func() bool {
		s := inspect(t, e.host, "big", "b").WorkflowStatus
		return s == runtime.WorkflowCompleted || s == runtime.WorkflowFailed
	})
	in := inspect(t, e.host, "big", "b")
	if in.WorkflowStatus != runtime.WorkflowCompleted {
		t.Fatalf("workflow %s (%s), want completed: the big step refused at its check, which the run handles", in.WorkflowStatus, in.WorkflowError)
	}
	var st padState
	if err := json.Unmarshal(in.State, &st); err != nil {
		t.Fatal(err)
	}
	if st.Pad != "" || !strings.Contains(st.Refused, "messages it enqueued") {
		t.Fatalf("pad of %d bytes, refused %q: want the step's changes discarded and its refusal naming the messages", len(st.Pad), st.Refused)
	}
	for _, q := range in.Queues {
		if q.Depth != 0 {
			t.Fatalf("queue %s holds %d messages, want none (the refused step's)", q.Queue, q.Depth)
		}
	}
}

// A turn's messages count with its scheduled calls against the turn's
// limit, so that the ops of its transaction stay within etcd's 128: past
// it the call is refused (TOO_LARGE), and the action that fails with it
// writes nothing.
func TestEnqueueCountsWithTheTurnsScheduledCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, shopActor(true)), nil)
	if _, err := call(t, e.host, "shop", "s", "place", true, []int{}); err != nil {
		t.Fatal(err)
	}
	for _, fill := range [][3]int{{60, 5, 0}, {0, 4, 61}} {
		if _, err := call(t, e.host, "shop", "s", "fill", false, fill); !errors.Is(err, rivet.ErrTooLarge) {
			t.Fatalf("fill %v: %v, want TOO_LARGE (64 calls and messages in a turn)", fill, err)
		}
	}
	if _, err := call(t, e.host, "shop", "s", "fill", false, [3]int{30, 4, 30}); err != nil {
		t.Fatalf("fill of 64 calls and messages: %v", err)
	}
	e.restart()
	if d := shopQueued(t, e); d != 4 {
		t.Fatalf("orders queued = %d, want the 4 of the turn that fit", d)
	}
	if st := shopGet(t, e); st.Placed != 2 {
		t.Fatalf("placed = %d, want 2 (the refused turns committed nothing)", st.Placed)
	}
}
