package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type requeueState struct {
	// Seen are the ids the losing branch saw, Processed those taken after
	// the race.
	Seen      []uint64 `json:"seen"`
	Processed []uint64 `json:"processed"`
	Winner    string   `json:"winner"`
}

type requeueCtx = workflow.Ctx[requeueState]
type requeueStep = workflow.StepCtx[requeueState]

// requeueRace races a branch that takes a message, records it, and fails,
// against a sleep that then wins; after the race it takes two messages.
// With complete, the failing branch completes its message first.
func requeueRace(complete bool) func(c *requeueCtx) error {
	return func(c *requeueCtx) error {
		winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[requeueState, int]{
			{Name: "taker", Run: func(c *requeueCtx) (int, error) {
				m, err := workflow.Next[job](c, "take", workflow.NextOptions{Names: []string{"offers"}})
				if err != nil {
					return 0, err
				}
				if err := c.Step("saw", func(s *requeueStep) error { s.State.Seen = append(s.State.Seen, m.ID); return nil }); err != nil {
					return 0, err
				}
				if complete {
					if err := m.Complete("done"); err != nil {
						return 0, err
					}
				}
				return 0, errors.New("refused")
			}},
			{Name: "timer", Run: func(c *requeueCtx) (int, error) { return -1, c.Sleep("nap", time.Second) }},
		})
		if err != nil {
			return err
		}
		for i := range 2 {
			m, err := workflow.Next[job](c, fmt.Sprint("after-", i), workflow.NextOptions{Names: []string{"offers"}, Timeout: time.Minute})
			if errors.Is(err, workflow.ErrTimeout) {
				continue
			}
			if err != nil {
				return err
			}
			if err := c.Step(fmt.Sprint("process-", i), func(s *requeueStep) error {
				s.State.Processed = append(s.State.Processed, m.ID)
				return nil
			}); err != nil {
				return err
			}
		}
		return c.Step("rec", func(s *requeueStep) error { s.State.Winner = winner; return nil })
	}
}

type requeueResult struct {
	status  workflow.RunStatus
	state   requeueState
	history string
	queue   []workflow.RawMessage
}

func requeueRun(t *testing.T, complete bool, crashAt int, after bool) (requeueResult, int) {
	t.Helper()
	h := newHost(requeueState{})
	h.Send("offers", job{1}) // id 1: the loser takes it
	h.Send("offers", job{2}) // id 2: queued behind it
	if crashAt > 0 {
		h.CrashAt(crashAt, after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, requeueRace(complete), workflowtest.DriveOptions{})
	if ctx.Err() != nil {
		t.Fatalf("crash at %d (after %v): the workflow did not finish: %+v", crashAt, after, out)
	}
	if out.Status != workflow.RunCompleted {
		t.Fatalf("crash at %d (after %v): outcome %+v", crashAt, after, out)
	}
	return requeueResult{status: out.Status, state: h.State(), history: h.HistoryJSON(), queue: h.Queue()}, h.Commits()
}

// TestARaceLoserThatTookAMessageAndFailedPutsItBack: a branch that took a
// message and then failed while another branch won gives the message back
// to its queue, ahead of the one sent after it, in the race's decision
// commit: its history, the message's only record, goes with the loser's.
// Crashed at any commit, before or after it applies, the run ends the same:
// the message taken again once, never lost, never queued twice.
func TestARaceLoserThatTookAMessageAndFailedPutsItBack(t *testing.T) {
	base, commits := requeueRun(t, false, 0, false)
	want := requeueState{Seen: []uint64{1}, Processed: []uint64{1, 2}, Winner: "timer"}
	if !reflect.DeepEqual(base.state, want) || len(base.queue) != 0 {
		t.Fatalf("state %+v queue %v; want %+v, nothing queued (message 1 back in its queue, ahead of 2)", base.state, base.queue, want)
	}
	for k := 1; k <= commits+1; k++ {
		for _, after := range []bool{false, true} {
			got, _ := requeueRun(t, false, k, after)
			if !reflect.DeepEqual(got, base) {
				t.Fatalf("crash at commit %d (after %v):\n%+v\nwant\n%+v", k, after, got, base)
			}
		}
	}
}

// TestARaceLoserKeepsNoMessageItCompleted: a message the failing loser
// completed was handled (its sender answered): it does not go back.
func TestARaceLoserKeepsNoMessageItCompleted(t *testing.T) {
	got, _ := requeueRun(t, true, 0, false)
	want := requeueState{Seen: []uint64{1}, Processed: []uint64{2}, Winner: "timer"}
	if !reflect.DeepEqual(got.state, want) || len(got.queue) != 0 {
		t.Fatalf("state %+v queue %v; want %+v, nothing queued", got.state, got.queue, want)
	}
}
