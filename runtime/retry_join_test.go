package runtime_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// Tests that share these do not run in parallel with each other (see
// TestMain).
var (
	joinedA, joinedB1, joinedB, joinedX atomic.Int64
	joinedHealthy                       atomic.Bool
)

type joinedState struct {
	Sum int `json:"sum"`
}

// joined joins two branches: a's step completes; b tries a step that
// always fails (a Try catches it), completes b1, then runs sb, which fails
// until healthy. After the join, a step records the sum of its values.
var joined = rivet.Actor[joinedState]{
	Name: "joined",
	Run: func(ctx *workflow.Ctx[joinedState]) error {
		out, err := workflow.Join(ctx, "j", workflow.Branches[joinedState, int]{
			"a": func(c *workflow.Ctx[joinedState]) (int, error) {
				return workflow.Step(c, "sa", func(*workflow.StepCtx[joinedState]) (int, error) {
					joinedA.Add(1)
					return 1, nil
				})
			},
			"b": func(c *workflow.Ctx[joinedState]) (int, error) {
				if _, err := c.Try("t", func(c *workflow.Ctx[joinedState]) error {
					return c.StepWith(workflow.StepOptions{Name: "x", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[joinedState]) error {
						joinedX.Add(1)
						return errors.New("x is down for good")
					})
				}); err != nil {
					return 0, err
				}
				v, err := workflow.Step(c, "b1", func(*workflow.StepCtx[joinedState]) (int, error) {
					joinedB1.Add(1)
					return 10, nil
				})
				if err != nil {
					return 0, err
				}
				w, err := workflow.StepOpts(c, workflow.StepOptions{Name: "sb", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[joinedState]) (int, error) {
					joinedB.Add(1)
					if !joinedHealthy.Load() {
						return 0, errors.New("b is down")
					}
					return 100, nil
				})
				return v + w, err
			},
		})
		if err != nil {
			return err
		}
		return ctx.Step("after", func(s *workflow.StepCtx[joinedState]) error {
			s.State.Sum = out["a"] + out["b"]
			return nil
		})
	},
	Actions: rivet.Actions[joinedState]{"getState": rivet.Query(func(c *rivet.ActionCtx[joinedState]) (joinedState, error) { return *c.State, nil })},
}

// A retry without --from after a join failed (one branch's step failed
// for good, the other branch completed) runs again only what failed: the
// join goes back to pending, the failed step is deleted, and the steps that
// completed, in either branch, replay from their records (rivet-semantics.md
// 1.7) instead of running a second time. The failure a Try caught in the
// failed branch stays caught.
func TestRetryAfterAFailedJoinRunsOnlyTheFailedSteps(t *testing.T) {
	for _, c := range []*atomic.Int64{&joinedA, &joinedB1, &joinedB, &joinedX} {
		c.Store(0)
	}
	joinedHealthy.Store(false)
	e := newEnv(t, counterReg(t, joined), nil)
	ref := runtime.Ref{Name: "joined", Key: []string{"k"}}
	createUntilFailed(t, e, ref)
	if a, b := joinedA.Load(), joinedB.Load(); a != 1 || b != 1 {
		t.Fatalf("before the retry: a's step ran %d times, b's %d; want 1 and 1", a, b)
	}
	joinedHealthy.Store(true)
	removed, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if err != nil || removed != 1 {
		t.Fatalf("retry: removed %d, %v; want 1 (j/b/sb only)", removed, err)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "joined", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	if a, b1, b, x := joinedA.Load(), joinedB1.Load(), joinedB.Load(), joinedX.Load(); a != 1 || b1 != 1 || b != 2 || x != 1 {
		t.Fatalf("after the retry: sa ran %d times, b1 %d, sb %d, the caught x %d; want 1, 1, 2, 1", a, b1, b, x)
	}
	if raw, _ := call(t, e.host, "joined", "k", "getState", false); string(raw) != `{"sum":111}` {
		t.Fatalf("state after retry = %s, want the join's values summed (111)", raw)
	}
	hist, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range hist.Entries {
		if en.Path == "j" && en.Status != "completed" {
			t.Fatalf("join entry after the retry: %+v", en)
		}
		if strings.HasPrefix(en.Path, "j/") && en.Path != "j/b/t/x" && en.Status != "completed" {
			t.Fatalf("branch entry after the retry: %+v", en)
		}
	}
}

// retry --from an entry of a failed join's branch is taken (the join goes
// back to pending and runs its branches again), where a settled join's
// entries are refused: the join kept no result to replay.
func TestRetryFromInsideAFailedJoin(t *testing.T) {
	for _, c := range []*atomic.Int64{&joinedA, &joinedB1, &joinedB, &joinedX} {
		c.Store(0)
	}
	joinedHealthy.Store(false)
	e := newEnv(t, counterReg(t, joined), nil)
	ref := runtime.Ref{Name: "joined", Key: []string{"f"}}
	createUntilFailed(t, e, ref)
	joinedHealthy.Store(true)
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "j/b/sb"); err != nil {
		t.Fatalf("retry --from j/b/sb: %v", err)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "joined", "f").WorkflowStatus == runtime.WorkflowCompleted
	})
	if b1, b, x := joinedB1.Load(), joinedB.Load(), joinedX.Load(); b1 != 1 || b != 2 || x != 1 {
		t.Fatalf("after the retry: b1 ran %d times, sb %d, the caught x %d; want 1, 2, 1", b1, b, x)
	}
	if raw, _ := call(t, e.host, "joined", "f", "getState", false); string(raw) != `{"sum":111}` {
		t.Fatalf("state after retry = %s, want 111", raw)
	}
}

// A workflow whose failed join rolled it back is retried from its first
// compensated step, inside the join: the join goes back to pending (a
// settled join's entries are refused as a place to retry from, a failed
// one's are not), the compensated step runs again (its effect was undone),
// the failed branch's failure goes, and what completed before the
// compensated step (outside the join) replays.
func TestRetryAfterARollbackFromInsideAFailedJoin(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	var pre, reserved, released atomic.Int64
	booking := rivet.Actor[bookingJoinState]{
		Name: "bookingJoin",
		Run: func(ctx *workflow.Ctx[bookingJoinState]) error {
			if err := ctx.Step("pre", func(*workflow.StepCtx[bookingJoinState]) error { pre.Add(1); return nil }); err != nil {
				return err
			}
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			_, err := workflow.Join(ctx, "j", workflow.Branches[bookingJoinState, int]{
				"a": func(c *workflow.Ctx[bookingJoinState]) (int, error) {
					return workflow.StepWithRollback(c, workflow.StepOptions{Name: "reserve"},
						func(s *workflow.StepCtx[bookingJoinState]) (int, error) {
							reserved.Add(1)
							s.State.Held++
							return 1, nil
						},
						func(s *workflow.StepCtx[bookingJoinState], _ int) error {
							released.Add(1)
							s.State.Held--
							return nil
						})
				},
				"b": func(c *workflow.Ctx[bookingJoinState]) (int, error) {
					return workflow.StepOpts(c, workflow.StepOptions{Name: "confirm", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[bookingJoinState]) (int, error) {
						if !healthy.Load() {
							return 0, errors.New("payment refused")
						}
						s.State.Ready = true
						return 1, nil
					})
				},
			})
			return err
		},
	}
	e := newEnv(t, counterReg(t, booking), nil)
	ref := runtime.Ref{Name: "bookingJoin", Key: []string{"b"}}
	createUntilFailed(t, e, ref)
	if st := string(inspect(t, e.host, "bookingJoin", "b").State); st != `{"held":0,"ready":false}` || released.Load() != 1 {
		t.Fatalf("after the rollback: state %s, %d compensations; want the reservation undone once", st, released.Load())
	}
	healthy.Store(true)
	removed, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if err != nil || removed != 2 {
		t.Fatalf("retry: removed %d, %v; want 2 (j/a/reserve and j/b/confirm)", removed, err)
	}
	waitFor(t, "the retried workflow's end", 20*time.Second, func() bool {
		return inspect(t, e.host, "bookingJoin", "b").WorkflowStatus == runtime.WorkflowCompleted
	})
	if st := string(inspect(t, e.host, "bookingJoin", "b").State); st != `{"held":1,"ready":true}` {
		t.Fatalf("state after the retry = %s, want the reservation made again and confirmed", st)
	}
	if p, r, rel := pre.Load(), reserved.Load(), released.Load(); p != 1 || r != 2 || rel != 1 {
		t.Fatalf("after the retry: pre ran %d times, reserve %d, its compensation %d; want 1, 2, 1", p, r, rel)
	}
	hist, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range hist.Entries {
		if (en.Path == "j" || strings.HasPrefix(en.Path, "j/")) && en.Status != "completed" {
			t.Fatalf("join entry after the retry: %+v", en)
		}
	}
}

type bookingJoinState struct {
	Held  int  `json:"held"`
	Ready bool `json:"ready"`
}

// createUntilFailed creates the actor of ref and waits for its workflow to
// fail (to be retried).
func createUntilFailed(t *testing.T, e *env, ref runtime.Ref) {
	t.Helper()
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, ref.Name, ref.Key[0]).WorkflowStatus == runtime.WorkflowFailed
	})
}
