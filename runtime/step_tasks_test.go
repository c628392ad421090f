package runtime_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A workflow step's KeepAwake: the function starts once per committed
// attempt (not for an abandoned one, not again on replay), after the
// step, and keeps the actor in memory while it runs.
func TestAStepsKeepAwakeRunsOnceAndHoldsTheActor(t *testing.T) {
	started := make(chan int, 8)
	release := make(chan struct{})
	var runs, abandoned atomic.Int32
	fn := func(v int) func(context.Context, caller.Client) {
		return func(ctx context.Context, _ caller.Client) {
			runs.Add(1)
			started <- v
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}
	stepper := rivet.Actor[tickState]{
		Name:   "stepper",
		Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
		Actions: rivet.Actions[tickState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[tickState]) (int, error) { return c.State.Seen, nil }),
		},
		Run: func(ctx *workflow.Ctx[tickState]) error {
			return ctx.Loop("loop", func(lc *workflow.Ctx[tickState]) error {
				msg, err := workflow.Next[int](lc, "wait-go")
				if err != nil {
					return err
				}
				// An attempt abandoned (its race branch lost) starts
				// nothing.
				if winner, _, err := workflow.Race(lc, "race", []workflow.RaceBranch[tickState, int]{
					{Name: "slow", Run: func(bc *workflow.Ctx[tickState]) (int, error) {
						return 0, bc.Step("abandoned", func(sc *workflow.StepCtx[tickState]) error {
							abandoned.Add(1)
							if err := sc.KeepAwake(fn(-1)); err != nil {
								return err
							}
							<-sc.Context().Done()
							return sc.Context().Err()
						})
					}},
					{Name: "fast", Run: func(bc *workflow.Ctx[tickState]) (int, error) {
						return 0, bc.Sleep("nap", 20*time.Millisecond)
					}},
				}); err != nil || winner != "fast" {
					return fmt.Errorf("race: %s, %v", winner, err)
				}
				return lc.Step("kick", func(sc *workflow.StepCtx[tickState]) error {
					sc.State.Seen = msg.Body
					return sc.KeepAwake(fn(msg.Body))
				})
			})
		},
	}
	e := newEnv(t, counterReg(t, stepper), func(c *runtime.Config) { c.IdleTimeout = 100 * time.Millisecond })
	send(t, e.host, "stepper", "s", "go", 7)
	select {
	case v := <-started:
		if v != 7 {
			t.Fatalf("the abandoned attempt's task ran (%d)", v)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the step's task never started")
	}
	// The workflow waits for its next message, idle: only the task keeps
	// the actor in memory. The reaper passes over it meanwhile.
	passes := e.host.ReapPasses()
	waitFor(t, "reaper passes", 20*time.Second, func() bool { return e.host.ReapPasses() >= passes+3 })
	if st := e.host.Stats(); st.ActiveActors != 1 || st.TasksRunning != 1 {
		t.Fatalf("with its task running: %d actors, %d tasks; want 1 and 1", st.ActiveActors, st.TasksRunning)
	}
	close(release)
	waitFor(t, "the idle actor to sleep once its task ended", 20*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	// It wakes (a replay of its history): the step does not run again.
	if n := callInt(t, e.host, "stepper", "s", "get", false); n != 7 {
		t.Fatalf("seen %d, want 7", n)
	}
	waitFor(t, "the replayed workflow to wait again", 20*time.Second, func() bool {
		return inspect(t, e.host, "stepper", "s").WorkflowStatus == runtime.WorkflowSleeping
	})
	if r := runs.Load(); r != 1 {
		t.Fatalf("the task ran %d times, want once", r)
	}
	if n := abandoned.Load(); n != 1 {
		t.Fatalf("the losing branch's step ran %d times, want once (abandoned as it waited)", n)
	}
}
