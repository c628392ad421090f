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

type bookingLoopState struct {
	Held  int  `json:"held"`
	Ready bool `json:"ready"`
}

// bookingLoop reserves once an iteration (a step with a rollback handler)
// in a loop that checkpoints every 2 iterations and keeps size of them
// when it prunes, and
// confirms in iteration 4 (in the loop) or after it: a refused payment
// rolls every reservation back. With fetch, each iteration first runs a
// step with no rollback handler.
func bookingLoop(name string, size int, confirmInLoop, fetch bool, healthy *atomic.Bool, reserved, released, fetched *atomic.Int64) rivet.Actor[bookingLoopState] {
	confirm := func(c *workflow.Ctx[bookingLoopState]) error {
		return c.StepWith(workflow.StepOptions{Name: "confirm", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[bookingLoopState]) error {
			if !healthy.Load() {
				return errors.New("payment refused")
			}
			s.State.Ready = true
			return nil
		})
	}
	return rivet.Actor[bookingLoopState]{
		Name: name,
		Run: func(ctx *workflow.Ctx[bookingLoopState]) error {
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 2, HistorySize: size},
				func(lc *workflow.Ctx[bookingLoopState], i int) (int, error) {
					if fetch {
						if err := lc.Step("fetch", func(*workflow.StepCtx[bookingLoopState]) error { fetched.Add(1); return nil }); err != nil {
							return i, err
						}
					}
					if _, err := workflow.StepWithRollback(lc, workflow.StepOptions{Name: "reserve"},
						func(s *workflow.StepCtx[bookingLoopState]) (int, error) {
							reserved.Add(1)
							s.State.Held++
							return 1, nil
						},
						func(s *workflow.StepCtx[bookingLoopState], _ int) error {
							released.Add(1)
							s.State.Held--
							return nil
						}); err != nil {
						return i, err
					}
					if i < 4 {
						return i + 1, nil
					}
					if confirmInLoop {
						if err := confirm(lc); err != nil {
							return i, err
						}
					}
					return i, workflow.Break
				})
			if err != nil || confirmInLoop {
				return err
			}
			return confirm(ctx)
		},
	}
}

// A plain retry of a workflow that rolled back back to an iteration before
// its loop's last checkpoint (or into a loop that completed) is not
// refused for want of --from: the loop kept no state for that iteration,
// so the retry starts the loop again, and the compensated steps run again.
// Nothing else before them ran in the loop, so nothing runs twice whose
// effect still holds.
func TestRetryAfterARollbackIntoALoopRestartsTheLoop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		inLoop bool
	}{{"failed in the loop", true}, {"failed after the loop", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var healthy atomic.Bool
			var reserved, released, fetched atomic.Int64
			e := newEnv(t, counterReg(t, bookingLoop("bookingLoop", 100, tc.inLoop, false, &healthy, &reserved, &released, &fetched)), nil)
			ref := runtime.Ref{Name: "bookingLoop", Key: []string{"b"}}
			createUntilFailed(t, e, ref)
			if st := string(inspect(t, e.host, ref.Name, "b").State); st != `{"held":0,"ready":false}` || released.Load() != 5 {
				t.Fatalf("after the rollback: state %s, %d compensations; want the 5 reservations undone", st, released.Load())
			}
			healthy.Store(true)
			if _, err := e.host.RetryWorkflow(ctx(t), ref, ""); err != nil {
				t.Fatalf("retry without --from: %v", err)
			}
			waitFor(t, "the retried workflow's end", 20*time.Second, func() bool {
				return inspect(t, e.host, ref.Name, "b").WorkflowStatus == runtime.WorkflowCompleted
			})
			if st := string(inspect(t, e.host, ref.Name, "b").State); st != `{"held":5,"ready":true}` {
				t.Fatalf("state after the retry = %s, want the 5 reservations made again and confirmed", st)
			}
			if r, rel := reserved.Load(), released.Load(); r != 10 || rel != 5 {
				t.Fatalf("reserve ran %d times, its compensation %d; want 10 and 5", r, rel)
			}
		})
	}
}

// When starting the loop again would also run again a step whose effect
// the rollback left in place (a step with no handler, before the first
// compensated one), a plain retry is refused, naming that step and the
// --from that would run it again; with that --from (the operator's
// choice) the retry goes ahead.
func TestRetryAfterARollbackIntoALoopNamesStepsItWouldRunTwice(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	var reserved, released, fetched atomic.Int64
	e := newEnv(t, counterReg(t, bookingLoop("bookingFetch", 100, true, true, &healthy, &reserved, &released, &fetched)), nil)
	ref := runtime.Ref{Name: "bookingFetch", Key: []string{"b"}}
	createUntilFailed(t, e, ref)
	healthy.Store(true)
	_, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), `"l/~0/fetch"`) || !strings.Contains(err.Error(), `--from "l"`) {
		t.Fatalf("retry without --from: %v; want INVALID_ARGUMENT naming l/~0/fetch and --from \"l\"", err)
	}
	if st := inspect(t, e.host, ref.Name, "b").WorkflowStatus; st != runtime.WorkflowFailed {
		t.Fatalf("workflow %s after a refused retry, want it still failed", st)
	}
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "l"); err != nil {
		t.Fatalf("retry --from l: %v", err)
	}
	waitFor(t, "the retried workflow's end", 20*time.Second, func() bool {
		return inspect(t, e.host, ref.Name, "b").WorkflowStatus == runtime.WorkflowCompleted
	})
	if st := string(inspect(t, e.host, ref.Name, "b").State); st != `{"held":5,"ready":true}` || fetched.Load() != 10 {
		t.Fatalf("state after the retry = %s, fetch ran %d times; want 5 reservations confirmed, fetch 10", st, fetched.Load())
	}
}

// A loop that pruned iterations before the first compensated step: their
// steps' effects were not undone (their entries, which a rollback
// records on, are gone), and starting the loop again would run them a
// second time. A plain retry is refused, saying so.
func TestRetryAfterARollbackIntoAPrunedLoopIsRefused(t *testing.T) {
	var healthy atomic.Bool
	var reserved, released, fetched atomic.Int64
	e := newEnv(t, counterReg(t, bookingLoop("bookingPruned", 2, true, false, &healthy, &reserved, &released, &fetched)), nil)
	ref := runtime.Ref{Name: "bookingPruned", Key: []string{"b"}}
	createUntilFailed(t, e, ref)
	healthy.Store(true)
	_, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), `the iterations of loop "l" before 2`) || !strings.Contains(err.Error(), `--from "l"`) {
		t.Fatalf("retry without --from: %v; want INVALID_ARGUMENT naming the pruned iterations and --from \"l\"", err)
	}
	if r := reserved.Load(); r != 5 {
		t.Fatalf("reserve ran %d times after a refused retry, want 5", r)
	}
}
