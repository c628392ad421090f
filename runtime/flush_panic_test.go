package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/runtime"
)

// panicOnceObserver panics the first time it hears of a workflow step's
// turn: a bug in an Observer, which runs on the step's goroutine.
type panicOnceObserver struct{ fired atomic.Bool }

func (o *panicOnceObserver) Turn(kind runtime.TurnKind, _ time.Duration) {
	if kind == runtime.TurnStep && o.fired.CompareAndSwap(false, true) {
		panic("observer bug")
	}
}

func (o *panicOnceObserver) Call(string, time.Duration, error) {}

// A workflow step's goroutine commits its writes itself, after its turn:
// a panic between the two (the engine recovers it) must not leave the
// writes uncommitted, the actor's next replies waiting on them for ever,
// and Host.Stop waiting for a flush that never runs.
func TestPanicBeforeAStepsFlushLosesNoFlush(t *testing.T) {
	t.Parallel()
	obs := &panicOnceObserver{}
	e := newEnv(t, counterReg(t, stepsActor("one", "two")), func(c *runtime.Config) { c.Observer = obs })
	_, _ = call(t, e.host, "steps", "k", "getState", true) // starts the workflow; may see the panic's end
	waitFor(t, "the observer's panic", 10*time.Second, obs.fired.Load)

	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := e.host.Call(c, runtime.CallRequest{Ref: runtime.Ref{Name: "steps", Key: []string{"k"}}, Action: "getState"}); err != nil {
		t.Fatalf("a call after the panic: %v", err)
	}
	stopped := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		stopped <- e.host.Stop(sctx)
	}()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return: a flush never ran")
	}
}
