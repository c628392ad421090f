package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// A stop whose deadline ends while a workflow step runs code that ignores
// its context returns soon after its deadline (Host.Stop's doc: it gives
// up waiting), instead of waiting for the step for as long as it runs.
// The step's attempt, ending after the stop, is not recorded: the next
// start runs it again, as after a crash.
func TestAStopPastItsDeadlineDoesNotWaitForAStepThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	inStep := make(chan struct{}, 2)
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseStep := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseStep()
	stuck := rivet.Actor[boxState]{
		Name: "stuck",
		Run: func(ctx *workflow.Ctx[boxState]) error {
			return ctx.Step("block", func(s *workflow.StepCtx[boxState]) error {
				runs.Add(1)
				inStep <- struct{}{}
				<-release // not s.Context(): it ignores it
				s.State.Seen++
				return nil
			})
		},
	}
	reg, err := rivet.Setup(stuck)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	defer store.Close()
	h, stop := memHostOn(t, reg, store)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ref := Ref{Name: "stuck", Key: []string{"s"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inStep:
	case <-ctx.Done():
		t.Fatal("the step did not start")
	}

	const deadline = 100 * time.Millisecond
	stopped := make(chan error, 1)
	t0 := time.Now()
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), deadline)
		defer scancel()
		stopped <- stop(sctx)
	}()
	select {
	case err := <-stopped:
		if err == nil {
			t.Error("the stop returned nil with a step still running past its deadline")
		}
	case <-time.After(deadline + StopGrace + 10*time.Second):
		releaseStep()
		<-stopped
		t.Fatalf("the stop (deadline %v) was still waiting for the step %v later", deadline, time.Since(t0))
	}
	releaseStep()

	// The next start runs the step again: its late attempt was not
	// recorded.
	memHostOn(t, reg, store)
	select {
	case <-inStep:
	case <-ctx.Done():
		t.Fatal("after the restart the step did not run again")
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the step ran %d times, want 2", n)
	}
}
