package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// The first run of a Sleep or a timed receive waits for the same
// wall-clock deadline its replay reads from history: the host's timer gets
// a time without the monotonic reading of the clock the run computed it
// from (run.now drops it). With one, SystemClock would count a duration,
// and a clock step would end the first run's wait at another time than a
// replay's.
func TestAWaitsTimerIsTheRecordedWallClockTime(t *testing.T) {
	clock := workflowtest.NewClock(time.Now()) // with a monotonic reading
	h := workflowtest.NewHost(log{}, clock)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan workflow.Outcome, 1)
	go func() {
		done <- h.Run(ctx, func(c *logCtx) error {
			if err := c.Sleep("nap", time.Hour); err != nil {
				return err
			}
			_, err := workflow.NextBatch[int](c, "take", workflow.NextOptions{Timeout: time.Hour})
			return err
		})
	}()
	for n := 1; n <= 2; n++ {
		if err := clock.WaitTimers(ctx, 1); err != nil {
			t.Fatalf("wait %d never started: %v", n, err)
		}
		at := clock.Timers()[0]
		if at != at.Round(0) {
			t.Fatalf("wait %d: the timer's deadline %v carries a monotonic reading", n, at)
		}
		clock.Set(at)
	}
	if out := <-done; out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
}
