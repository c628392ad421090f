package runtime_test

import (
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A workflow waiting in memory (for a message, for a timer) holds one
// goroutine, not two: a node keeps up to its bound on actors in memory
// (100,000 by default) waiting so, and a goroutine that only waited for
// the other cost each about 4 KiB of stack.
func TestAWaitingWorkflowHoldsOneGoroutine(t *testing.T) {
	var waiting atomic.Int64
	a := rivet.Actor[struct{}]{
		Name:   "waits",
		Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
		Run: func(c *workflow.Ctx[struct{}]) error {
			if err := c.Step("ready", func(*workflow.StepCtx[struct{}]) error { waiting.Add(1); return nil }); err != nil {
				return err
			}
			if c.Key()[0] == "sleeps" {
				return c.Sleep("nap", time.Hour)
			}
			_, err := workflow.Next[struct{}](c, "wait-go")
			return err
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	const n = 200
	for k, kind := range []string{"receives", "sleeps"} {
		waiting.Store(0)
		before := goruntime.NumGoroutine()
		// A few creates at a time, which the committer writes together:
		// one at a time, each waited for its own etcd commit, most of the
		// test's time. The creators have ended before any count is taken.
		var wg sync.WaitGroup
		errs := make(chan error, n)
		next := atomic.Int64{}
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
					if _, err := e.host.Create(ctx(t), runtime.Ref{Name: "waits", Key: []string{kind, fmt.Sprint(i)}}, nil); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		waitFor(t, "every workflow past its first step", 20*time.Second, func() bool { return waiting.Load() == n })
		// Each is blocked in its wait soon after its step: count until
		// the goroutines are as few as they get.
		var extra int
		waitFor(t, "the workflows blocked", 20*time.Second, func() bool {
			extra = goruntime.NumGoroutine() - before
			return extra <= n*3/2
		})
		if running := e.host.Stats().WorkflowsRunning; running != uint64((k+1)*n) {
			t.Fatalf("%s: %d workflows running, want %d: the count above is not of waiting workflows", kind, running, (k+1)*n)
		}
	}
}
