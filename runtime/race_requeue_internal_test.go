package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type raceRequeueState struct {
	Seen   []int  `json:"seen"`
	Got    []int  `json:"got"`
	Winner string `json:"winner"`
}

type rrCtx = workflow.Ctx[raceRequeueState]
type rrStep = workflow.StepCtx[raceRequeueState]

// raceRequeue races a branch that takes a message, records it and fails,
// against a nap that then wins; then it takes up to two more messages.
var raceRequeue = rivet.Actor[raceRequeueState]{
	Name:   "raceRequeue",
	Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
	Run: func(c *rrCtx) error {
		winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[raceRequeueState, string]{
			{Name: "taker", Run: func(c *rrCtx) (string, error) {
				m, err := workflow.Next[int](c, "take")
				if err != nil {
					return "", err
				}
				if err := c.Step("saw", func(s *rrStep) error { s.State.Seen = append(s.State.Seen, m.Body); return nil }); err != nil {
					return "", err
				}
				return "", errors.New("refused")
			}},
			{Name: "timer", Run: func(c *rrCtx) (string, error) { return "timer", c.Sleep("nap", 1500*time.Millisecond) }},
		})
		if err != nil {
			return err
		}
		for i := range 2 {
			m, err := workflow.Next[int](c, fmt.Sprint("after-", i), workflow.NextOptions{Timeout: 3 * time.Second})
			if errors.Is(err, workflow.ErrTimeout) {
				break
			}
			if err != nil {
				return err
			}
			if err := c.Step(fmt.Sprint("got-", i), func(s *rrStep) error { s.State.Got = append(s.State.Got, m.Body); return nil }); err != nil {
				return err
			}
		}
		return c.Step("rec", func(s *rrStep) error { s.State.Winner = winner; return nil })
	},
}

// failOnceStore fails the first commit that writes a key containing sub
// (once it is set): before the commit applies, or, with applied, after.
type failOnceStore struct {
	storage.Store
	sub     atomic.Value // string
	applied bool
	failed  atomic.Bool
}

func (s *failOnceStore) Commit(ctx context.Context, txns ...storage.Txn) error {
	v, _ := s.sub.Load().(string)
	hit := false
	for _, txn := range txns {
		for _, op := range txn.Ops {
			hit = hit || v != "" && strings.Contains(op.Key, v)
		}
	}
	if !hit || !s.sub.CompareAndSwap(v, "") {
		return s.Store.Commit(ctx, txns...)
	}
	s.failed.Store(true)
	if s.applied {
		if err := s.Store.Commit(ctx, txns...); err != nil {
			return err
		}
		return errors.New("injected: the commit applied, its answer was lost")
	}
	return errors.New("injected: the commit failed")
}

// A race branch that took a message and then failed, while another branch
// won, gives the message back to its queue in the race's decision commit,
// ahead of the message sent after it: its history, the message's only
// record, is deleted with the loser's. With "restart", the node stops after
// the branch recorded what it took, before the race is decided, and the
// next one replays the race to the same end. With "fail" and "in-doubt" the
// decision's commit fails, before it applies or after: the activation goes
// and the workflow runs again from storage, to the same end (the message
// neither lost nor queued twice).
func TestARaceLoserThatTookAMessageAndFailedGivesItBack(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(raceRequeue)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"plain", "restart", "fail", "in-doubt"} {
		restart := mode == "restart"
		t.Run(mode, func(t *testing.T) {
			store := &failOnceStore{Store: storage.NewMemory(), applied: mode == "in-doubt"}
			defer store.Close()
			h, stop := memHostOn(t, reg, store)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ref := Ref{Name: "raceRequeue", Key: []string{"k"}}
			if _, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`7`), CreateIfMissing: true}); err != nil {
				t.Fatal(err)
			}
			state := func(h *Host) (raceRequeueState, string) {
				ins, err := h.Inspect(ctx, ref)
				if err != nil {
					t.Fatal(err)
				}
				var st raceRequeueState
				if len(ins.State) > 0 {
					if err := json.Unmarshal(ins.State, &st); err != nil {
						t.Fatal(err)
					}
				}
				return st, ins.WorkflowStatus
			}
			waitUntil := func(h *Host, what string, ok func(raceRequeueState, string) bool) raceRequeueState {
				for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					st, status := state(h)
					if ok(st, status) {
						return st
					}
					if time.Now().After(deadline) {
						t.Fatalf("timed out waiting for %s: workflow %s, state %+v", what, status, st)
					}
				}
			}
			waitUntil(h, "the taker to record its message", func(st raceRequeueState, _ string) bool { return len(st.Seen) > 0 })
			if mode == "fail" || mode == "in-doubt" {
				// The next commit to write message 7's queue key is the
				// decision's, which puts it back.
				store.sub.Store(fmt.Sprintf("%020d/q", 1))
			}
			if _, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`8`)}); err != nil {
				t.Fatal(err)
			}
			if restart {
				if err := stop(ctx); err != nil {
					t.Fatal(err)
				}
				h, _ = memHostOn(t, reg, store)
				if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
					t.Fatal(err)
				}
			}
			st := waitUntil(h, "the workflow's end", func(_ raceRequeueState, status string) bool {
				return status == WorkflowCompleted || status == WorkflowFailed
			})
			if _, status := state(h); status != WorkflowCompleted {
				t.Fatalf("workflow %s, state %+v", status, st)
			}
			if (mode == "fail" || mode == "in-doubt") && !store.failed.Load() {
				t.Fatal("no commit failed")
			}
			want := raceRequeueState{Seen: []int{7}, Got: []int{7, 8}, Winner: "timer"}
			if !reflect.DeepEqual(st, want) {
				t.Fatalf("state %+v, want %+v: the loser's message 7 back in its queue, ahead of 8", st, want)
			}
			a := h.loaded(ref)
			prefix := storage.ActorPrefix(a.part, ref.Name, storage.EncodeKey(ref.Key))
			qs := queuedKeys(t, store, prefix)
			hist, err := store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{KeysOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range hist {
				if strings.Contains(kv.Key, "r/taker") {
					t.Errorf("the loser's history is still stored: %s", kv.Key)
				}
			}
			if len(qs) != 0 {
				t.Errorf("%d message(s) still queued", len(qs))
			}
			if ins, err := h.Inspect(ctx, ref); err != nil || len(ins.Queues) != 0 && ins.Queues[0].Depth != 0 {
				t.Errorf("queues in memory %+v (%v), want none", ins.Queues, err)
			}
		})
	}
}

// queuedKeys returns the keys of the messages queued for the actor at
// prefix: those under q/ but the next message ID (NextMessageSuffix), which
// a commit deleting history writes.
func queuedKeys(t *testing.T, store storage.Store, prefix string) []storage.KV {
	t.Helper()
	qs, err := store.List(context.Background(), prefix+storage.QueueSuffix, storage.ListOptions{KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(qs, func(kv storage.KV) bool { return kv.Key == prefix+storage.NextMessageSuffix })
}
