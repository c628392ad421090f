package runtime

import (
	"testing"
	"time"
)

// Recording a step in flight and its end costs a step no allocation once
// the run has recorded one (the slice is reused): two short locked
// updates of a slice, on the hot path of every step.
func TestRecordingAStepInFlightAllocatesNothing(t *testing.T) {
	r := &wfRunner{}
	w := &wfHost{r: r}
	at := time.Now()
	step := func() {
		w.StepStarted("loop/~3/step", 1, at, "")
		w.StepIdle("loop/~3/step")
	}
	step() // the run's first step makes the slice
	if n := testing.AllocsPerRun(100, step); n != 0 {
		t.Errorf("a step recorded in flight and ended: %.1f allocations, want 0", n)
	}
	if left := r.pendingSteps(); len(left) != 0 {
		t.Errorf("in flight after its end: %+v", left)
	}
	// A backoff then its attempt: one record, replaced, then none.
	w.StepBackingOff("s", 2, at, "boom")
	w.StepStarted("s", 2, at, "boom")
	if got := r.pendingSteps(); len(got) != 1 || got[0].Attempt != 2 || !got[0].NextAttemptAt.IsZero() || !got[0].StartedAt.Equal(at) {
		t.Errorf("after a backoff and its attempt's start: %+v, want the attempt alone", got)
	}
	w.StepIdle("s")
	w.StepIdle("s") // twice: nothing to remove
	if left := r.pendingSteps(); len(left) != 0 {
		t.Errorf("in flight after its end: %+v", left)
	}
}
