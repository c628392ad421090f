package runtime_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type asker struct {
	Last int `json:"last"`
}

// doubler's workflow completes each "ask" with twice its body; "drop"
// nobody reads.
var doubler = rivet.Actor[tickState]{
	Name:   "doubler",
	Queues: rivet.Queues{"ask": rivet.QueueOf[int](), "drop": rivet.QueueOf[int]()},
	Actions: rivet.Actions[tickState]{
		"askBack": rivet.Action(func(c *rivet.ActionCtx[tickState], key string) (rivet.SendResult, error) {
			return rivet.SendWait(c.Context(), c.Client().Get("asker", key), "self", 1, time.Second)
		}),
	},
	Run: func(ctx *workflow.Ctx[tickState]) error {
		return ctx.Loop("serve", func(lc *workflow.Ctx[tickState]) error {
			msg, err := workflow.Next[int](lc, "wait-ask", workflow.NextOptions{Names: []string{"ask"}})
			if err != nil {
				return err
			}
			return msg.Complete(msg.Body * 2)
		})
	},
}

// askerActor waits, from an action and from a workflow step, for another
// actor's workflow to complete its messages (the original engine's
// handle.send(queue, body, {wait: true}) from inside an actor).
var askerActor = rivet.Actor[asker]{
	Name:   "asker",
	Queues: rivet.Queues{"go": rivet.QueueOf[int](), "self": rivet.QueueOf[int]()},
	Actions: rivet.Actions[asker]{
		"ask": rivet.Action(func(c *rivet.ActionCtx[asker], v int) (rivet.SendResult, error) {
			res, err := rivet.SendWait(c.Context(), c.Client().GetOrCreate("doubler", "d"), "ask", v, 20*time.Second)
			if err == nil && res.Status == rivet.SendCompleted {
				err = json.Unmarshal(res.Response, &c.State.Last)
			}
			return res, err
		}),
		"askUnread": rivet.Action0(func(c *rivet.ActionCtx[asker]) (rivet.SendResult, error) {
			return rivet.SendWait(c.Context(), c.Client().GetOrCreate("doubler", "d"), "drop", 1, 200*time.Millisecond)
		}),
		"askSelf": rivet.Action0(func(c *rivet.ActionCtx[asker]) (rivet.SendResult, error) {
			return rivet.SendWait(c.Context(), c.Client().Get("asker", c.Key()...), "self", 1, time.Second)
		}),
		// askLong waits longer than the action may run: the wait ends
		// first, and says so.
		"askLong": rivet.Action0(func(c *rivet.ActionCtx[asker]) (rivet.SendResult, error) {
			return rivet.SendWait(c.Context(), c.Client().GetOrCreate("doubler", "d"), "drop", 1, time.Hour)
		}),
		// viaPeer asks the doubler to wait on this actor's queue, while
		// this turn holds it.
		"viaPeer": rivet.Action0(func(c *rivet.ActionCtx[asker]) (rivet.SendResult, error) {
			return rivet.Call[rivet.SendResult](c.Context(), c.Client().GetOrCreate("doubler", "d"), "askBack", c.Key()[0])
		}),
		"enqueue": rivet.Action(func(c *rivet.ActionCtx[asker], v int) (rivet.SendResult, error) {
			return rivet.Enqueue(c.Context(), c.Client().GetOrCreate("doubler", "d"), "drop", v)
		}),
		"last": rivet.Query(func(c *rivet.ActionCtx[asker]) (int, error) { return c.State.Last, nil }),
	},
	Run: func(ctx *workflow.Ctx[asker]) error {
		return ctx.Loop("loop", func(lc *workflow.Ctx[asker]) error {
			msg, err := workflow.Next[int](lc, "wait-go", workflow.NextOptions{Names: []string{"go"}})
			if err != nil {
				return err
			}
			return lc.Step("ask-doubler", func(sc *workflow.StepCtx[asker]) error {
				res, err := rivet.SendWait(sc.Context(), sc.Client().GetOrCreate("doubler", "d"), "ask", msg.Body, 20*time.Second)
				if err != nil {
					return err
				}
				if res.Status != rivet.SendCompleted {
					return errors.New("not completed: " + res.Status)
				}
				return json.Unmarshal(res.Response, &sc.State.Last)
			})
		})
	},
}

func TestAnActorWaitsForAnotherWorkflowsCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, doubler, askerActor), func(c *runtime.Config) { c.ActionTimeout = 3 * time.Second })
	raw, err := call(t, e.host, "asker", "a", "ask", true, 21)
	var res rivet.SendResult
	if err == nil {
		err = json.Unmarshal(raw, &res)
	}
	if err != nil || res.Status != rivet.SendCompleted || string(res.Response) != "42" || res.MessageID == 0 {
		t.Fatalf("ask from an action: %+v, %v; want completed with 42", res, err)
	}
	if n := callInt(t, e.host, "asker", "a", "last", false); n != 42 {
		t.Fatalf("last = %d, want 42", n)
	}

	// From a workflow step.
	send(t, e.host, "asker", "a", "go", 50)
	waitFor(t, "the step's answer", 20*time.Second, func() bool {
		return callInt(t, e.host, "asker", "a", "last", false) == 100
	})

	// A wait that runs out is no error, and says where the message is.
	raw, err = call(t, e.host, "asker", "a", "askUnread", false)
	res = rivet.SendResult{}
	if err == nil {
		err = json.Unmarshal(raw, &res)
	}
	if err != nil || res.Status != rivet.SendTimedOut || res.MessageState != rivet.MessageQueued {
		t.Fatalf("askUnread: %+v, %v; want timed out, queued", res, err)
	}

	// Enqueue says what became of the message.
	raw, err = call(t, e.host, "asker", "a", "enqueue", false, 7)
	res = rivet.SendResult{}
	if err == nil {
		err = json.Unmarshal(raw, &res)
	}
	if err != nil || res.Status != rivet.SendEnqueued || res.MessageID == 0 {
		t.Fatalf("enqueue: %+v, %v", res, err)
	}

	// Its own workflow could take the message only after this turn: the
	// wait is refused at once rather than left to run out.
	for _, action := range []string{"askSelf", "viaPeer"} {
		if _, err := call(t, e.host, "asker", "a", action, false); !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "in a turn of this call chain") {
			t.Fatalf("%s: %v, want INVALID_ARGUMENT", action, err)
		}
	}

	// A wait longer than the action may run ends first: timed out, not
	// the action's own deadline.
	raw, err = call(t, e.host, "asker", "a", "askLong", false)
	res = rivet.SendResult{}
	if err == nil {
		err = json.Unmarshal(raw, &res)
	}
	if err != nil || res.Status != rivet.SendTimedOut {
		t.Fatalf("askLong: %+v, %v; want timed out within the action's time", res, err)
	}
	if d := inspect(t, e.host, "asker", "a").Queues; len(d) > 0 {
		for _, q := range d {
			if q.Queue == "self" && q.Depth != 0 {
				t.Fatalf("the refused message was queued: %+v", d)
			}
		}
	}
}

type patientState struct {
	Status string `json:"status"`
}

// patient's step waits for a completion that never comes (doubler reads
// no "drop"), for longer than the step may run.
var patient = rivet.Actor[patientState]{
	Name: "patient",
	Run: func(ctx *workflow.Ctx[patientState]) error {
		return ctx.StepWith(workflow.StepOptions{Name: "ask", Timeout: 1500 * time.Millisecond}, func(sc *workflow.StepCtx[patientState]) error {
			res, err := rivet.SendWait(sc.Context(), sc.Client().GetOrCreate("doubler", "p"), "drop", 1, time.Hour)
			if err != nil {
				return err
			}
			sc.State.Status = res.Status
			return nil
		})
	},
}

// A step's timeout is its context's deadline: a send that waits for its
// completion longer than the step may run ends in time to say it timed
// out, which the step can handle, rather than the attempt failing as timed
// out (a critical failure by default, which failed the workflow).
func TestAStepsWaitingSendEndsBeforeTheStepsTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, doubler, patient), nil)
	if _, err := e.host.Create(ctx(t), runtime.Ref{Name: "patient", Key: []string{"p"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to end", 20*time.Second, func() bool {
		s := inspect(t, e.host, "patient", "p").WorkflowStatus
		return s == runtime.WorkflowCompleted || s == runtime.WorkflowFailed
	})
	in := inspect(t, e.host, "patient", "p")
	var st patientState
	if err := json.Unmarshal(in.State, &st); err != nil || in.WorkflowStatus != runtime.WorkflowCompleted || st.Status != rivet.SendTimedOut {
		t.Fatalf("workflow %s (%s), state %s; want completed with the send timed out", in.WorkflowStatus, in.WorkflowError, in.State)
	}
}
