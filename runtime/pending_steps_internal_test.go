package runtime

import (
	"strconv"
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
		w.StepStarted("loop/~3/step", 1, 4, at, "")
		w.StepIdle("loop/~3/step")
	}
	step() // the run's first step makes the slice
	if n := testing.AllocsPerRun(100, step); n != 0 {
		t.Errorf("a step recorded in flight and ended: %.1f allocations, want 0", n)
	}
	if left, _ := r.pendingSteps(); len(left) != 0 {
		t.Errorf("in flight after its end: %+v", left)
	}
	// A backoff then its attempt: one record, replaced, then none.
	w.StepBackingOff("s", 2, 4, at, "boom")
	w.StepStarted("s", 2, 4, at, "boom")
	if got, _ := r.pendingSteps(); len(got) != 1 || got[0].Attempt != 2 || !got[0].NextAttemptAt.IsZero() || !got[0].StartedAt.Equal(at) {
		t.Errorf("after a backoff and its attempt's start: %+v, want the attempt alone", got)
	}
	w.StepIdle("s")
	w.StepIdle("s") // twice: nothing to remove
	if left, _ := r.pendingSteps(); len(left) != 0 {
		t.Errorf("in flight after its end: %+v", left)
	}
}

// A join of thousands of steps: each recorded and ended in constant time
// (a slice searched and shifted made it quadratic), listed in the order
// they started whatever order they end in, at most maxPendingSteps of
// them, the others counted.
func TestStepsInFlightOfALargeJoin(t *testing.T) {
	r := &wfRunner{}
	w := &wfHost{r: r}
	at := time.Now()
	const n = 30_000
	paths := make([]string, n)
	for i := range paths {
		paths[i] = "join/b" + strconv.Itoa(i) + "/fetch"
	}
	t0 := time.Now()
	for _, p := range paths {
		w.StepStarted(p, 1, 4, at, "")
	}
	// Every other one ends, from the first.
	for i := 0; i < n; i += 2 {
		w.StepIdle(paths[i])
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Fatalf("%d steps recorded and half of them ended in %v: not linear", n, d)
	}
	got, omitted := r.pendingSteps()
	if len(got) != maxPendingSteps || omitted != n/2-maxPendingSteps {
		t.Fatalf("%d listed, %d omitted; want %d and %d", len(got), omitted, maxPendingSteps, n/2-maxPendingSteps)
	}
	for i, ps := range got {
		if want := paths[2*i+1]; ps.Path != want {
			t.Fatalf("listed %d: %s, want %s (the order they started)", i, ps.Path, want)
		}
	}
}

// Steps in flight are found by a scan while few, by stepAt from
// stepIndexMin on: each way, one that ends leaves the others listed, in
// the order they started, and each found again.
func TestStepsInFlightFewAndMany(t *testing.T) {
	for _, n := range []int{3, stepIndexMin - 1, stepIndexMin, 3 * stepIndexMin} {
		r := &wfRunner{}
		w := &wfHost{r: r}
		at := time.Now()
		var paths []string
		for i := range n {
			paths = append(paths, "b"+strconv.Itoa(i)+"/step")
			w.StepStarted(paths[i], 1, 4, at, "")
		}
		w.StepIdle(paths[0])
		w.StepIdle(paths[n/2])
		for i, p := range paths {
			if i != 0 && i != n/2 {
				w.StepStarted(p, 2, 4, at, "again") // found: replaced, not added
			}
		}
		got, _ := r.pendingSteps()
		var want []string
		for i, p := range paths {
			if i != 0 && i != n/2 {
				want = append(want, p)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%d in flight, 2 ended: %d listed, want %d", n, len(got), len(want))
		}
		for i, ps := range got {
			if ps.Path != want[i] || ps.Attempt != 2 {
				t.Fatalf("%d in flight, 2 ended: listed %d: %s attempt %d, want %s attempt 2", n, i, ps.Path, ps.Attempt, want[i])
			}
		}
		for _, p := range want {
			w.StepIdle(p)
		}
		if left, _ := r.pendingSteps(); len(left) != 0 {
			t.Fatalf("%d in flight, all ended: %+v left", n, left)
		}
	}
}
