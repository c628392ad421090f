package workflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A replayed branch that completed the messages it took holds no claim
// when the branch that held it before ends: in a race of a timer (a, 10 s)
// against b, which takes a message and fails, and c, which takes a message
// after b failed (at 1 s) and completes it, the timer wins, as c gave the
// claim up with its completion. A crash between c's take and its
// completion replays both takes (b's first, which reserves the claim); c
// completes its message while b replays, holding the claim, and b's end
// then handed the claim to c, which held no message any more, and c won at
// its end, 20 s. (Found by TestRandomSim, seed 1651 at size 40 with
// evictions: c's completion and b's end came in either order by goroutine
// timing; here b waits for c's completion.)
func TestRaceClaimIsNotHandedToABranchThatCompletedItsMessages(t *testing.T) {
	type wctx = workflow.Ctx[claimState]
	// gate, set for the replay, holds b after its take until c completed
	// its message.
	var gate chan struct{}
	took := 0 // the commit that records c's take, in the first run
	var h *workflowtest.Host[claimState]
	wf := func(c *wctx) error {
		w, _, err := workflow.Race(c, "r", []workflow.RaceBranch[claimState, int]{
			{Name: "a", Run: func(c *wctx) (int, error) { return 0, c.Sleep("z", 10*time.Second) }},
			{Name: "b", Run: func(c *wctx) (int, error) {
				if _, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"qb"}}); err != nil {
					return 0, err
				}
				if gate != nil {
					<-gate
				}
				return 0, c.StepWith(workflow.StepOptions{Name: "f", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[claimState]) error {
					return errors.New("refused")
				})
			}},
			{Name: "c", Run: func(c *wctx) (int, error) {
				if err := c.Sleep("z", time.Second); err != nil {
					return 0, err
				}
				m, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"qc"}, Completable: true})
				if err != nil {
					return 0, err
				}
				if gate == nil {
					took = h.Commits()
				}
				err = m.Complete(m.Body)
				if gate != nil {
					close(gate)
				}
				if err != nil {
					return 0, err
				}
				return 0, c.Sleep("after", 20*time.Second)
			}},
		})
		if err != nil {
			return err
		}
		if w != "a" {
			return errors.New("won by " + w)
		}
		return nil
	}
	run := func(crash int) (workflow.Outcome, int) {
		h = newHost(claimState{})
		h.Send("qb", 1)
		h.Send("qc", 2)
		if crash > 0 {
			h.CrashAt(crash, true)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return h.Drive(ctx, func(c *wctx) error {
			if crash > 0 && gate == nil && h.Commits() >= crash {
				gate = make(chan struct{})
			}
			return wf(c)
		}, workflowtest.DriveOptions{MaxActivations: 10})
	}
	if out, _ := run(0); out.Status != workflow.RunCompleted || took == 0 {
		t.Fatalf("crash-free: %+v (c's take at commit %d); history %s", out, took, h.HistoryJSON())
	}
	out, n := run(took)
	if out.Status != workflow.RunCompleted || n != 2 {
		t.Fatalf("crashed after c's take (commit %d): %+v in %d activations; history %s", took, out, n, h.HistoryJSON())
	}
	if q := h.Queue(); len(q) != 1 || q[0].Queue != "qb" {
		t.Errorf("queue %v: want b's message put back, c's completed", q)
	}
}

// A replayed branch that completed the messages it took no longer holds
// any, so it is cancelled like any other branch that can no longer win
// once a branch holding messages is waited for: in a race of a timer (a,
// 10 s) against b, which takes a message and fails, c, which takes a
// message after b failed (at 1 s), completes it and runs a step that holds
// the actor's turn until its branch loses, and d, which takes a message
// once c completed and then needs the turn for a step, the timer's finish
// cancels c, and d gets the turn and wins. A crash between c's take and
// its completion replays both takes: c completes while b, replaying,
// holds the claim, and b's end hands it to no branch, d taking it live.
// c's flag of a replayed holder stayed set: the timer's finish spared c,
// whose step kept the turn from d, which the decision waited for, until
// the step's timeout (an hour here).
func TestRaceBranchThatCompletedItsReplayedMessagesCanBeCancelled(t *testing.T) {
	type wctx = workflow.Ctx[claimState]
	type sctx = workflow.StepCtx[claimState]
	// gate, set for the replay, holds b after its take until c completed
	// its message; stepping and dTook order c's step and d's take in each
	// activation.
	var gate, stepping, dTook chan struct{}
	took := 0 // the commit that records c's take, in the first run
	var h *workflowtest.Host[claimState]
	await := func(c *wctx, ch chan struct{}) error {
		select {
		case <-ch:
			return nil
		case <-c.Context().Done():
			return c.Context().Err()
		}
	}
	wf := func(c *wctx) error {
		w, _, err := workflow.Race(c, "r", []workflow.RaceBranch[claimState, int]{
			{Name: "a", Run: func(c *wctx) (int, error) { return 0, c.Sleep("z", 10*time.Second) }},
			{Name: "b", Run: func(c *wctx) (int, error) {
				if _, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"qb"}}); err != nil {
					return 0, err
				}
				if gate != nil {
					if err := await(c, gate); err != nil {
						return 0, err
					}
				}
				return 0, c.StepWith(workflow.StepOptions{Name: "f", MaxRetries: workflow.NoRetries}, func(*sctx) error {
					return errors.New("refused")
				})
			}},
			{Name: "c", Run: func(c *wctx) (int, error) {
				if err := c.Sleep("z", time.Second); err != nil {
					return 0, err
				}
				m, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"qc"}, Completable: true})
				if err != nil {
					return 0, err
				}
				if gate == nil {
					took = h.Commits()
				}
				err = m.Complete(m.Body)
				if gate != nil {
					close(gate)
				}
				if err != nil {
					return 0, err
				}
				return 0, c.StepWith(workflow.StepOptions{Name: "hold", Timeout: time.Hour}, func(s *sctx) error {
					close(stepping)
					select {
					case <-dTook:
					case <-s.Context().Done():
						return s.Context().Err()
					}
					// The clock moves to the timer's deadline, the
					// earliest: only c's cancellation ends this.
					h.Hang(s.Context())
					return s.Context().Err()
				})
			}},
			{Name: "d", Run: func(c *wctx) (int, error) {
				if err := c.Sleep("z", time.Second); err != nil {
					return 0, err
				}
				// c's step holds the turn: it completed its message.
				if err := await(c, stepping); err != nil {
					return 0, err
				}
				if _, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"qd"}}); err != nil {
					return 0, err
				}
				close(dTook)
				return 0, c.Step("work", func(*sctx) error { return nil })
			}},
		})
		if err != nil {
			return err
		}
		if w != "d" {
			return errors.New("won by " + w)
		}
		return nil
	}
	run := func(crash int) (workflow.Outcome, int, error) {
		h = newHost(claimState{})
		gate = nil
		h.Send("qb", 1)
		h.Send("qc", 2)
		h.Send("qd", 3)
		if crash > 0 {
			h.CrashAt(crash, true)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, n := h.Drive(ctx, func(c *wctx) error {
			if crash > 0 && gate == nil && h.Commits() >= crash {
				gate = make(chan struct{})
			}
			stepping, dTook = make(chan struct{}), make(chan struct{})
			return wf(c)
		}, workflowtest.DriveOptions{MaxActivations: 10})
		return out, n, ctx.Err()
	}
	if out, _, err := run(0); out.Status != workflow.RunCompleted || took == 0 {
		t.Fatalf("crash-free: %+v (c's take at commit %d, %v); history %s", out, took, err, h.HistoryJSON())
	}
	out, n, err := run(took)
	if err != nil {
		t.Fatalf("crashed after c's take (commit %d): stalled (%v), c's step keeping the turn from d: %+v; history %s", took, err, out, h.HistoryJSON())
	}
	if out.Status != workflow.RunCompleted || n != 2 {
		t.Fatalf("crashed after c's take (commit %d): %+v in %d activations; history %s", took, out, n, h.HistoryJSON())
	}
	if q := h.Queue(); len(q) != 1 || q[0].Queue != "qb" {
		t.Errorf("queue %v: want b's message put back, c's completed and d's taken", q)
	}
}
