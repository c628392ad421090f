package workflow_test

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// TestRaceHoldsAFailedBranchWhileOthersWait: a race whose branch failed
// while another still waits (for a message) is restarted; the failed
// branch stays failed, as it would have in a run without the restart, even
// if its code changed since so that it would now succeed: it does not win,
// and its step does not run again. The race then goes as it would have:
// the waiting branch wins, or, failing too, fails the race with both
// failures.
func TestRaceHoldsAFailedBranchWhileOthersWait(t *testing.T) {
	for _, tc := range append(heldBranches(),
		heldBranch{"took a message, then failed", func(lenient bool, runs *atomic.Int32) func(*logCtx) (int, error) {
			return func(c *logCtx) (int, error) {
				m, err := workflow.Next[job](c, "offer", workflow.NextOptions{Names: []string{"offers"}})
				if err != nil {
					return 0, err
				}
				runs.Add(1) // replayed, it counts again: see below
				if !lenient {
					return 0, codedErr{}
				}
				return m.Body.N, nil
			}
		}},
	) {
		for _, bFails := range []bool{false, true} {
			name := tc.name + ", b wins"
			if bFails {
				name = tc.name + ", b fails too"
			}
			t.Run(name, func(t *testing.T) {
				h := newHost(log{})
				h.Send("offers", job{7})
				var runs atomic.Int32
				wf := func(lenient bool) func(*logCtx) error {
					return func(c *logCtx) error {
						w, v, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
							{Name: "a", Run: tc.a(lenient, &runs)},
							{Name: "b", Run: func(c *logCtx) (int, error) {
								m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"go"}})
								if err == nil && bFails {
									err = errors.New("b gave up")
								}
								return m.Body.N, err
							}},
						})
						if err != nil {
							return err
						}
						return c.Step("rec", func(s *logStep) error {
							s.State.Log = append(s.State.Log, w, string(rune('0'+v)))
							return nil
						})
					}
				}
				if out := drive(t, h, wf(false)); out.Status != workflow.RunYielded || runs.Load() != 1 {
					t.Fatalf("first run: %s %v, a ran %d times", out.Status, out.Err, runs.Load())
				}
				h.Send("go", job{2})
				out := drive(t, h, wf(true))
				if bFails {
					re := failedWith[*workflow.RaceError](t, out)
					var coder interface{ ErrorCode() string }
					if len(re.Errors) != 2 || re.Errors[0].Name != "a" || !errors.As(re.Errors[0].Err, &coder) || coder.ErrorCode() != "card_declined" {
						t.Fatalf("race error %v, want a's recorded failure and b's", re)
					}
				} else {
					if out.Status != workflow.RunCompleted {
						t.Fatalf("outcome %s %v", out.Status, out.Err)
					}
					if got, want := h.State().Log, []string{"b", "2"}; !reflect.DeepEqual(got, want) {
						t.Fatalf("log %q, want %q (b wins, as without the restart)", got, want)
					}
					if tc.name == "took a message, then failed" {
						// The loser's message goes back to its queue.
						if q := h.Queue(); len(q) != 1 || q[0].ID != 1 {
							t.Fatalf("queue %v, want a's message back", q)
						}
					}
				}
				// a's step ran once: its record replayed (the receive
				// case counts a's code after its receive, which replays).
				want := int32(1)
				if tc.name == "took a message, then failed" {
					want = 2
				}
				if runs.Load() != want {
					t.Fatalf("a ran %d times, want %d", runs.Load(), want)
				}
			})
		}
	}
}

// TestRaceHeldBranchKeepsItsRollbacks: a held branch still replays its
// steps after a restart, so that a rollback knows their handlers.
func TestRaceHeldBranchKeepsItsRollbacks(t *testing.T) {
	h := newHost(log{})
	wf := func(c *logCtx) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
			{Name: "a", Run: func(c *logCtx) (int, error) {
				if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "reserve"}, func(*logStep) (int, error) { return 1, nil },
					func(s *logStep, _ int) error { s.State.Log = append(s.State.Log, "undo reserve"); return nil }); err != nil {
					return 0, err
				}
				return 0, codedErr{}
			}},
			{Name: "b", Run: func(c *logCtx) (int, error) {
				if _, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"go"}}); err != nil {
					return 0, err
				}
				return 0, errors.New("b gave up")
			}},
		})
		return err
	}
	if out := drive(t, h, wf); out.Status != workflow.RunYielded {
		t.Fatalf("first run: %s %v", out.Status, out.Err)
	}
	h.Send("go", job{1})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{})
	failedWith[*workflow.RaceError](t, out)
	if got := h.State().Log; len(got) != 1 || got[0] != "undo reserve" {
		t.Fatalf("rollbacks %v (%v)", got, out.Err)
	}
}
