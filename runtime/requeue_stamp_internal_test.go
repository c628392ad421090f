package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type requeueStampState struct {
	After []int `json:"after"`
	Done  bool  `json:"done"`
}

type rsCtx = workflow.Ctx[requeueStampState]

// requeueStamp joins a race, whose loser takes a message of q and fails
// holding it while the winner waits for a message of win, with a branch
// that, once a message of gate0 comes, receives a batch of q with a
// timeout, keeps what it got, and waits on gate: its timeout's record
// waits for that branch's next commit.
var requeueStamp = rivet.Actor[requeueStampState]{
	Name: "requeueStamp",
	Queues: rivet.Queues{
		"q": rivet.QueueOf[int](), "win": rivet.QueueOf[int](),
		"gate0": rivet.QueueOf[int](), "gate": rivet.QueueOf[int](),
	},
	Run: func(c *rsCtx) error {
		var bodies []int
		_, err := workflow.Join(c, "j", workflow.Branches[requeueStampState, int]{
			"a": func(c *rsCtx) (int, error) {
				_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[requeueStampState, int]{
					{Name: "loser", Run: func(c *rsCtx) (int, error) {
						if _, err := workflow.Next[int](c, "took", workflow.NextOptions{Names: []string{"q"}}); err != nil {
							return 0, err
						}
						return 0, errors.New("fails holding the message")
					}},
					{Name: "winner", Run: func(c *rsCtx) (int, error) {
						_, err := workflow.Next[int](c, "won", workflow.NextOptions{Names: []string{"win"}})
						return 1, err
					}},
				})
				return 0, err
			},
			"b": func(c *rsCtx) (int, error) {
				if _, err := workflow.Next[int](c, "g0", workflow.NextOptions{Names: []string{"gate0"}}); err != nil {
					return 0, err
				}
				ms, err := workflow.NextBatch[int](c, "first", workflow.NextOptions{Names: []string{"q"}, Count: 5, Timeout: 300 * time.Millisecond})
				if err != nil {
					return 0, err
				}
				bodies = []int{}
				for _, m := range ms {
					bodies = append(bodies, m.Body)
				}
				_, err = workflow.Next[int](c, "gate", workflow.NextOptions{Names: []string{"gate"}})
				return 0, err
			},
		})
		if err != nil {
			return err
		}
		return c.Step("rec", func(s *workflow.StepCtx[requeueStampState]) error {
			s.State.After, s.State.Done = bodies, true
			return nil
		})
	},
	Actions: rivet.Actions[requeueStampState]{"get": rivet.Query(func(c *rivet.ActionCtx[requeueStampState]) (requeueStampState, error) {
		return *c.State, nil
	})},
}

// A message that a race's loser took goes back to its queue stamped as it
// is back, not at the time it was first sent: a join sibling's receive of
// that queue that timed out while the loser held it had not seen it, and
// its replay after a restart (its timeout not committed yet, it waits for
// the sibling's next commit) times out as the first run did, the message
// left queued. With its first time, before the receive's deadline, the
// replay took it: the workflow went on with a message its first run had
// not received.
func TestAMessageARaceLoserGivesBackIsStampedAsItIsBack(t *testing.T) {
	reg, err := rivet.Setup(requeueStamp)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	defer store.Close()
	h, stop := memHostOn(t, reg, store)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ref := Ref{Name: "requeueStamp", Key: []string{"s"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	a := h.loaded(ref)
	depth := func(h *Host, queue string) uint64 {
		in, err := h.Inspect(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range in.Queues {
			if q.Queue == queue {
				return q.Depth
			}
		}
		return 0
	}
	entry := func(path string) (workflow.Entry, bool) {
		kv, err := store.Get(ctx, historyKey(a.prefix, path))
		if errors.Is(err, storage.ErrNotFound) {
			return workflow.Entry{}, false
		}
		if err != nil {
			t.Fatal(err)
		}
		var e workflow.Entry
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			t.Fatal(err)
		}
		return e, true
	}
	send := func(h *Host, queue string) {
		t.Helper()
		if _, err := h.Send(ctx, SendRequest{Ref: ref, Queue: queue, Body: json.RawMessage(`7`)}); err != nil {
			t.Fatal(err)
		}
	}

	send(h, "q")
	waitUntil(t, ctx, "the loser to take the message and fail", func() bool {
		return depth(h, "q") == 0 && waitsOn(a, "gate0", "win")
	})
	send(h, "gate0")
	waitUntil(t, ctx, "the sibling's receive to time out", func() bool { return waitsOn(a, "gate", "win") })
	send(h, "win")
	waitUntil(t, ctx, "the race decided, the message back", func() bool {
		e, ok := entry("j/a/r")
		return ok && e.Status == workflow.StatusCompleted && depth(h, "q") == 1
	})

	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := stop(sctx); err != nil {
		t.Fatal(err)
	}
	// The premise: the timeout's record was not committed, so the replay
	// looks at the queue again.
	if e, ok := entry("j/b/first"); !ok || e.Status != workflow.StatusPending {
		t.Fatalf("the receive's entry is %q (stored: %v) once the host stopped, want it pending", e.Status, ok)
	}

	h2, _ := memHostOn(t, reg, store)
	send(h2, "gate")
	var s requeueStampState
	waitUntil(t, ctx, "the workflow's end", func() bool {
		out, err := h2.Call(ctx, CallRequest{Ref: ref, Action: "get"})
		return err == nil && json.Unmarshal(out, &s) == nil && s.Done
	})
	if len(s.After) != 0 {
		t.Errorf("the timed-out receive replayed with %v, want none (it timed out while the loser held the message)", s.After)
	}
	if d := depth(h2, "q"); d != 1 {
		t.Errorf("queue q holds %d message(s), want the one given back", d)
	}
}
