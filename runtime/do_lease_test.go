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

// doProbe is what the Do steps of doer report to their test.
var doProbe struct {
	owns              func() bool
	ran, unserved     atomic.Int64
	entered, released chan struct{}
	enter             func()
}

type doerState struct{}

// doer runs a Do step that holds until the test lets it go, then a Do
// step that says whether its node served the actor's partition as it ran.
var doer = rivet.Actor[doerState]{
	Name:   "doer",
	Queues: rivet.Queues{"never": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[doerState]) error {
		if _, err := workflow.Do(ctx, "a", func(d *workflow.DoCtx) (int, error) {
			doProbe.enter()
			select {
			case <-doProbe.released:
				return 0, nil
			case <-d.Context().Done():
				return 0, d.Context().Err()
			}
		}); err != nil {
			return err
		}
		if _, err := workflow.Do(ctx, "b", func(*workflow.DoCtx) (int, error) {
			doProbe.ran.Add(1)
			if !doProbe.owns() {
				doProbe.unserved.Add(1)
			}
			return 0, nil
		}); err != nil {
			return err
		}
		_, err := workflow.Next[int](ctx, "wait")
		return err
	},
}

// A Do step's body runs outside the actor's turn, but no more than a
// Step's does it run past the lease's local deadline (a stall: the
// watchdog has not run yet, and the partition's next owner may be
// replaying the same step): the workflow stops there, and runs on once
// the node serves the partition again.
func TestADoStepPastTheLeaseDeadlineDoesNotRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, doer), nil)
	ref := runtime.Ref{Name: "doer", Key: []string{"d"}}
	p, err := e.host.PartitionOf(ref)
	if err != nil {
		t.Fatal(err)
	}
	doProbe.owns = func() bool { return e.host.Owns(p) }
	doProbe.ran.Store(0)
	doProbe.unserved.Store(0)
	doProbe.entered, doProbe.released = make(chan struct{}), make(chan struct{})
	doProbe.enter = sync.OnceFunc(func() { close(doProbe.entered) })
	release := sync.OnceFunc(func() { close(doProbe.released) })
	t.Cleanup(release)
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-doProbe.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("step a did not start")
	}
	runsOnlyWhenServed(t, e, release, &doProbe.ran, &doProbe.unserved)
}
