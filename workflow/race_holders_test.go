package workflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// twoHolders: "first" takes a message and fails a second later, "second"
// then takes the next message and finishes at 11 s, "other" finishes at 5 s
// and must wait for second, which holds the claim.
func twoHolders(c *requeueCtx) error {
	winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[requeueState, int]{
		{Name: "first", Run: func(c *requeueCtx) (int, error) {
			if _, err := workflow.Next[job](c, "take", workflow.NextOptions{Names: []string{"offers"}}); err != nil {
				return 0, err
			}
			if err := c.Sleep("think", time.Second); err != nil {
				return 0, err
			}
			return 0, errors.New("refused")
		}},
		{Name: "second", Run: func(c *requeueCtx) (int, error) {
			if err := c.Sleep("let-first-start", time.Millisecond); err != nil {
				return 0, err
			}
			m, err := workflow.Next[job](c, "take", workflow.NextOptions{Names: []string{"offers"}})
			if err != nil {
				return 0, err
			}
			return m.Body.N, c.Sleep("work", 10*time.Second)
		}},
		{Name: "other", Run: func(c *requeueCtx) (int, error) { return -1, c.Sleep("nap", 5*time.Second) }},
	})
	if err != nil {
		return err
	}
	return c.Step("rec", func(s *requeueStep) error { s.State.Winner = winner; return nil })
}

// TestARaceReplayedWithTwoMessageHoldersPicksTheSameWinner: the branch that
// holds the claim when the run is evicted (the second to take messages,
// the first having failed) still wins after the replay, whichever branch
// the replay reaches first.
func TestARaceReplayedWithTwoMessageHoldersPicksTheSameWinner(t *testing.T) {
	for i := 0; i < 30; i++ {
		h := newHost(requeueState{})
		h.Send("offers", job{1})
		h.Send("offers", job{2})
		evicted := false
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, _ := h.Drive(ctx, twoHolders, workflowtest.DriveOptions{Evict: func(w workflow.Wake) bool {
			// Evicted once, while every branch waits for second's work.
			if !evicted && !h.Clock.Now().Before(t0.Add(5*time.Second)) {
				evicted = true
				return true
			}
			return false
		}})
		cancel()
		if out.Status != workflow.RunCompleted || !evicted {
			t.Fatalf("run %d: outcome %+v evicted %v", i, out, evicted)
		}
		if st := h.State(); st.Winner != "second" {
			t.Fatalf("run %d: winner %q, want second (it held the claim)", i, st.Winner)
		}
		if q := h.Queue(); len(q) != 1 || q[0].ID != 1 {
			t.Fatalf("run %d: queue %v, want first's message 1 back", i, q)
		}
	}
}
