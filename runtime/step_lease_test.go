package runtime_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// stepProbe is what the step of stepper reports to its test.
// Tests that share it do not run in parallel with each other (see
// TestMain).
var stepProbe struct {
	owns              func() bool
	ran, unserved     atomic.Int64
	entered, released chan struct{}
}

type stepperState struct {
	B int `json:"b"`
}

// stepper runs a step, naps, then runs a step that says whether its node
// served the actor's partition as it ran. Its "hold" action holds the
// actor's turn until the test lets it go.
var stepper = rivet.Actor[stepperState]{
	Name:   "stepper",
	Queues: rivet.Queues{"never": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[stepperState]) error {
		if err := ctx.Step("a", func(*workflow.StepCtx[stepperState]) error { return nil }); err != nil {
			return err
		}
		if err := ctx.Sleep("nap", 2*time.Second); err != nil {
			return err
		}
		if err := ctx.Step("b", func(s *workflow.StepCtx[stepperState]) error {
			stepProbe.ran.Add(1)
			if !stepProbe.owns() {
				stepProbe.unserved.Add(1)
			}
			s.State.B++
			return nil
		}); err != nil {
			return err
		}
		_, err := workflow.Next[int](ctx, "wait")
		return err
	},
	Actions: rivet.Actions[stepperState]{
		"hold": rivet.Query(func(c *rivet.ActionCtx[stepperState]) (int, error) {
			close(stepProbe.entered)
			<-stepProbe.released
			return c.State.B, nil
		}),
	},
}

// Past the lease's local deadline (a stall: the watchdog has not run yet,
// and another node may serve the partition by now, replaying the same
// step) no workflow step of the node's actors runs: a step waiting for the
// actor's turn finds the claim not served once it has it, as a call does,
// and the workflow runs on once the node serves the partition again.
func TestAStepPastTheLeaseDeadlineDoesNotRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, stepper), nil)
	ref := runtime.Ref{Name: "stepper", Key: []string{"s"}}
	p, err := e.host.PartitionOf(ref)
	if err != nil {
		t.Fatal(err)
	}
	stepProbe.owns = func() bool { return e.host.Owns(p) }
	stepProbe.ran.Store(0)
	stepProbe.unserved.Store(0)
	stepProbe.entered, stepProbe.released = make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(stepProbe.released) })
	t.Cleanup(release)
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	// Step a recorded first: the query is to hold the turn while the nap
	// ends, not to meet step a (a query that came while step a waited for
	// its attempt marker's commit held step a instead, and b never waited).
	waitFor(t, "the workflow to nap", 20*time.Second, func() bool {
		return inspect(t, e.host, "stepper", "s").WorkflowStatus == runtime.WorkflowSleeping
	})
	go func() { _, _ = e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "hold"}) }()
	<-stepProbe.entered
	// The nap ends while "hold" holds the turn: step b waits for it.
	waitFor(t, "step b to wait for the turn", 10*time.Second, func() bool { return e.host.GateWaiters(ref) == 1 })
	runsOnlyWhenServed(t, e, release, &stepProbe.ran, &stepProbe.unserved)
}

// runsOnlyWhenServed takes e's node past its lease's local deadline (its
// renewals muted: a stall, the watchdog not run yet), calls release to let
// the workflow on to its step b, and checks that b (ran, counting the runs
// while the node did not serve the partition in unserved) did not run
// until the node took its partitions back on a new lease, and then did.
func runsOnlyWhenServed(t *testing.T, e *env, release func(), ran, unserved *atomic.Int64) {
	t.Helper()
	_, lost := e.own.LeaseStats()
	e.store.muteRenewals.Store(true)
	e.own.ExpireLocally()
	release()
	waitFor(t, "step b to run, or the watchdog to drop the claims", 20*time.Second, func() bool {
		_, l := e.own.LeaseStats()
		return ran.Load() > 0 || l > lost
	})
	e.store.muteRenewals.Store(false)
	if n := unserved.Load(); n > 0 {
		t.Fatalf("step b ran %d time(s) while its node did not serve the partition", n)
	}
	waitFor(t, "step b to run once the partition is served again", 20*time.Second, func() bool { return ran.Load() > 0 })
	if n := unserved.Load(); n > 0 {
		t.Fatalf("step b ran %d time(s) while its node did not serve the partition", n)
	}
}
