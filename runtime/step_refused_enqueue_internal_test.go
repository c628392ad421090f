package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// limitStore is a store whose transactions are limited to limits.
type limitStore struct {
	storage.Store
	limits storage.Limits
}

func (s limitStore) Limits() storage.Limits { return s.limits }

// refusedEnqueueSeen is what the actor's memory held of the messages its
// refused step enqueued, read in a turn (no step runs meanwhile).
type refusedEnqueueSeen struct {
	Pending  map[string]int    `json:"pending"`
	Arrivals uint64            `json:"arrivals"`
	Msgs     int               `json:"msgs"`
	Depth    map[string]uint64 `json:"depth"`
	Staged   int               `json:"staged"`
	AnyQueue bool              `json:"any_queue"`
}

// A step whose commit the store refuses as too large (its messages, each
// small, too large together for one transaction, which the step's own
// check does not weigh below ownWritesChecked) fails the run, and leaves
// nothing of its messages in memory: they were counted pending (and
// stamped) before their writes were made, and the refusal uncounts them
// (but for arrivals, which only rises: uncountArrivedLocked).
// Left counted, a receive of their queue would find a message that is not
// there, and the workflow would be woken for it.
func TestAStepRefusedAtItsCommitLeavesNoneOfItsMessagesCounted(t *testing.T) {
	var act atomic.Pointer[activation]
	actor := rivet.Actor[struct{}]{
		Name:   "refusedEnqueue",
		Queues: rivet.Queues{"pads": rivet.QueueOf[string]()},
		Run: func(c *workflow.Ctx[struct{}]) error {
			return c.Step("big", func(s *workflow.StepCtx[struct{}]) error {
				for range 4 {
					if err := s.Enqueue("pads", strings.Repeat("m", 10<<10)); err != nil {
						return err
					}
				}
				return nil
			})
		},
		Actions: rivet.Actions[struct{}]{"seen": rivet.Query(func(c *rivet.ActionCtx[struct{}]) (refusedEnqueueSeen, error) {
			a := act.Load()
			if a == nil {
				return refusedEnqueueSeen{}, fmt.Errorf("no activation yet")
			}
			var s refusedEnqueueSeen
			a.mu.Lock()
			s.Arrivals = a.wf.arrivals
			a.mu.Unlock()
			a.wf.notifyMu.Lock()
			s.Pending = map[string]int{}
			for q, n := range a.wf.pending {
				s.Pending[q] = n
			}
			s.Msgs = len(a.wf.msgs)
			a.wf.notifyMu.Unlock()
			s.Depth = map[string]uint64{}
			for q, n := range a.depth {
				s.Depth[q] = uint64(n)
			}
			s.Staged = len(a.staged)
			s.AnyQueue = a.hasPendingFor(workflow.Wake{AnyQueue: true})
			return s, nil
		})},
	}
	reg, err := rivet.Setup(actor)
	if err != nil {
		t.Fatal(err)
	}
	mem := storage.NewMemory()
	defer mem.Close()
	l := storage.DefaultLimits()
	l.MaxTxnBytes = 32 << 10 // the 4 messages of 10 KiB do not fit
	h, _ := memHostOn(t, reg, limitStore{Store: mem, limits: l})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref := Ref{Name: "refusedEnqueue", Key: []string{"k"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	act.Store(h.loaded(ref))
	var in Inspection
	waitUntil(t, ctx, "the workflow to fail", func() bool {
		in, err = h.Inspect(ctx, ref)
		return err == nil && in.WorkflowStatus == WorkflowFailed
	})
	if !strings.Contains(in.WorkflowError, "too large for one transaction") {
		t.Fatalf("workflow failed with %q, want the step's commit refused as too large", in.WorkflowError)
	}
	out, err := h.Call(ctx, CallRequest{Ref: ref, Action: "seen"})
	if err != nil {
		t.Fatal(err)
	}
	var s refusedEnqueueSeen
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatal(err)
	}
	// arrivals only rises (uncountArrivedLocked): the 4 messages counted
	// stay counted there, and there alone.
	if s.Pending["pads"] != 0 || s.Arrivals != 4 || s.Msgs != 0 || s.Depth["pads"] != 0 || s.Staged != 0 || s.AnyQueue {
		t.Errorf("memory after the refusal %+v, want no message of the refused step counted pending, queued or staged (arrivals 4: it only rises)", s)
	}
	for _, q := range in.Queues {
		if q.Depth != 0 {
			t.Errorf("queue %s holds %d messages, want none (the refused step's)", q.Queue, q.Depth)
		}
	}
	a := act.Load()
	if h.loaded(ref) != a {
		t.Fatal("the actor was loaded again: its memory above was not the refusal's")
	}
	qs := queuedKeys(t, mem, a.prefix)
	if len(qs) != 0 {
		t.Errorf("%d message(s) stored, want none", len(qs))
	}
}
