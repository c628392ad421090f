package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// A handoff that stops a workflow after every branch of a join (or the
// winner of a race, its loser waiting for a message) returned, before the
// join or race recorded its end, leaves the workflow with work to do at
// once: the next owner runs it with no request. Before, the stopped run
// asked to be woken by nothing (or by the loser's message), and its
// wakeup record said so: the workflow slept until a message came.
func TestAHandoffAsAJoinOrRaceSettlesLeavesItsWorkflowDue(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"join", "race"} {
		t.Run(kind, func(t *testing.T) {
			type st struct{}
			stopped := make(chan struct{})
			var first atomic.Bool
			first.Store(true)
			// branch returns at once, except on its first run, which
			// waits for the handoff to stop the run first.
			branch := func(c *workflow.Ctx[st]) (int, error) {
				if first.Swap(false) {
					close(stopped)
					<-c.Context().Done()
				}
				return 1, nil
			}
			act := rivet.Actor[st]{
				Name:   "settles",
				Queues: rivet.Queues{"never": rivet.QueueOf[int]()},
				Run: func(ctx *workflow.Ctx[st]) error {
					if kind == "join" {
						_, err := workflow.Join(ctx, "j", workflow.Branches[st, int]{"x": branch})
						return err
					}
					// The loser waits for a message that never comes.
					_, _, err := workflow.Race(ctx, "r", []workflow.RaceBranch[st, int]{{Name: "x", Run: branch}, {Name: "wait", Run: func(c *workflow.Ctx[st]) (int, error) {
						m, err := workflow.Next[int](c, "never")
						return m.Body, err
					}}})
					return err
				},
			}
			e := newEnv(t, counterReg(t, act), nil)
			h2, own2 := secondHost(t, e)
			ref := runtime.Ref{Name: "settles", Key: []string{"k"}}
			p := placement.Partition("settles", storage.EncodeKey(ref.Key), testPartitions)
			if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
				t.Fatal(err)
			}
			select {
			case <-stopped:
			case <-time.After(20 * time.Second):
				t.Fatal("the branch did not run")
			}
			hctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := e.host.Handoff(hctx, p); err != nil {
				t.Fatal(err)
			}
			if got, err := own2.Claim(ctx(t), []uint32{p}); err != nil || len(got) != 1 {
				t.Fatalf("claim after handoff: %v, %v", got, err)
			}
			// Inspect does not activate the actor: only its wakeup runs it.
			waitFor(t, "the workflow's end on the next owner, with no request", 10*time.Second, func() bool {
				return inspect(t, h2, "settles", "k").WorkflowStatus == runtime.WorkflowCompleted
			})
		})
	}
}
