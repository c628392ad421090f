package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/node/nodetest"
	"github.com/rivet-go/rivet/workflow"
)

type shipState struct {
	Notes  []string `json:"notes"`
	Status string   `json:"status"`
}

type shipCtx = workflow.Ctx[shipState]

// shipper is a Temporal-style "update handler while a timer runs" (a user
// trial's): its workflow races a 2 s timer against a loop that takes
// notes, handles each in a step and completes it, then ships.
var shipper = rivet.Actor[shipState]{
	Name:   "shipper",
	Queues: rivet.Queues{"note": rivet.QueueOf[string]()},
	Run: func(c *shipCtx) error {
		winner, _, err := workflow.Race(c, "ship-wait", []workflow.RaceBranch[shipState, bool]{
			{Name: "timer", Run: func(b *shipCtx) (bool, error) { return true, b.Sleep("t", 2*time.Second) }},
			{Name: "notes", Run: func(b *shipCtx) (bool, error) {
				for i := range 100 {
					m, err := workflow.Next[string](b, fmt.Sprintf("note-%d", i), workflow.NextOptions{Names: []string{"note"}})
					if err != nil {
						return false, err
					}
					if err := b.Step(fmt.Sprintf("add-note-%d", i), func(s *workflow.StepCtx[shipState]) error {
						s.State.Notes = append(s.State.Notes, m.Body)
						return nil
					}); err != nil {
						return false, err
					}
					if err := m.Complete("noted"); err != nil {
						return false, err
					}
				}
				return false, nil
			}},
		})
		if err != nil {
			return err
		}
		return c.Step("ship", func(s *workflow.StepCtx[shipState]) error { s.State.Status = "shipped by " + winner; return nil })
	},
}

// On a node, a timer raced against a loop that takes notes and completes
// each wins when it runs out, after the loop took a note: the workflow
// goes on, with the note handled once and answered. (A user trial: it
// waited on the note queue for good, the timer's finish never winning.)
func TestATimerRacedAgainstALoopOfCompletedNotesWinsOnANode(t *testing.T) {
	c, _ := nodetest.Start(t, t.TempDir(), shipper)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := c.Actor("shipper", "s1")
	res, err := h.SendWait(ctx, "note", "leave at door", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != caller.SendCompleted || string(res.Response) != `"noted"` {
		t.Fatalf("send: %+v, want completed with \"noted\"", res)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		in, err := h.NoCreate().Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if in.WorkflowStatus == "completed" {
			var s shipState
			if err := json.Unmarshal(in.State, &s); err != nil {
				t.Fatal(err)
			}
			want := shipState{Notes: []string{"leave at door"}, Status: "shipped by timer"}
			if !reflect.DeepEqual(s, want) {
				t.Fatalf("state %+v, want %+v", s, want)
			}
			for _, q := range in.Queues {
				if q.Depth != 0 {
					t.Fatalf("queue %s holds %d: the completed note was put back", q.Queue, q.Depth)
				}
			}
			return
		}
		if in.WorkflowStatus == "failed" || time.Now().After(deadline) {
			t.Fatalf("workflow %s (%s), waking at %v on %v, 20 s after the note was completed: want completed, the 2 s timer winning", in.WorkflowStatus, in.WorkflowError, in.WorkflowWakeAt, in.WorkflowWakeQueues)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
