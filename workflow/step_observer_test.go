package workflow_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// observed is one call a StepObserver got.
type observed struct {
	call        string // "started", "backoff" or "idle"
	path        string
	attempt     int
	maxAttempts int
	at          time.Time
	lastErr     string
}

// observingHost is a bareHost that keeps the steps in flight as a host
// that shows them does (workflow.StepObserver), in a slice it reuses, and
// whose clock moves to a backoff's end as it waits it (Timer). log, if
// set, records every call.
type observingHost struct {
	bareHost
	now atomic.Int64 // unix ns

	mu      sync.Mutex
	running []observed
	log     *[]observed
}

func newObservingHost() *observingHost {
	h := &observingHost{bareHost: bareHost{state: &rst{}}}
	h.now.Store(time.Unix(1e9, 0).UnixNano())
	return h
}

func (h *observingHost) Now() time.Time { return time.Unix(0, h.now.Load()) }

// Timer fires at once the timers due within 10 s (the backoffs here),
// moving the clock to their time, and never the others (the steps' 30 s
// timeouts).
func (h *observingHost) Timer(at time.Time) (<-chan time.Time, func()) {
	d := at.UnixNano() - h.now.Load()
	if d >= int64(10*time.Second) {
		return make(chan time.Time), func() {} // as bareHost's
	}
	if d > 0 {
		h.now.Store(at.UnixNano())
	}
	c := make(chan time.Time, 1)
	c <- at
	return c, func() {}
}

func (h *observingHost) record(o observed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.log != nil {
		*h.log = append(*h.log, o)
	}
	for i := range h.running {
		if h.running[i].path == o.path {
			h.running = slices.Delete(h.running, i, i+1)
			break
		}
	}
	if o.call != "idle" {
		h.running = append(h.running, o)
	}
}

func (h *observingHost) StepStarted(path string, attempt, maxAttempts int, at time.Time, lastErr string) {
	h.record(observed{call: "started", path: path, attempt: attempt, maxAttempts: maxAttempts, at: at, lastErr: lastErr})
}

func (h *observingHost) StepBackingOff(path string, attempt, maxAttempts int, next time.Time, lastErr string) {
	h.record(observed{call: "backoff", path: path, attempt: attempt, maxAttempts: maxAttempts, at: next, lastErr: lastErr})
}

func (h *observingHost) StepIdle(path string) { h.record(observed{call: "idle", path: path}) }

func (h *observingHost) inFlight() []observed {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.running)
}

var _ workflow.StepObserver = (*observingHost)(nil)

// A host that observes steps hears of each body as it runs (its path, its
// attempt, the error of the attempt before) and of each backoff (with the
// time of the next attempt), and of their ends: nothing is left once the
// step has completed.
func TestStepObserverSeesBodiesAndBackoffs(t *testing.T) {
	h := newObservingHost()
	var log []observed
	h.log = &log
	var seen [][]observed
	out := workflow.Run(context.Background(), func(c *workflow.Ctx[rst]) error {
		return c.Loop("l", func(lc *workflow.Ctx[rst]) error {
			err := lc.StepWith(workflow.StepOptions{Name: "charge", MaxRetries: 2, RetryBackoffBase: time.Second, RetryBackoffMax: time.Minute},
				func(s *workflow.StepCtx[rst]) error {
					seen = append(seen, h.inFlight())
					if s.Attempt() < 3 {
						return errors.New("card declined " + string(rune('0'+s.Attempt())))
					}
					return nil
				})
			if err != nil {
				return err
			}
			return workflow.Break
		})
	}, h, nil)
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if len(seen) != 3 {
		t.Fatalf("the body ran %d times, want 3", len(seen))
	}
	for i, want := range []string{"", "card declined 1", "card declined 2"} {
		if len(seen[i]) != 1 {
			t.Fatalf("attempt %d saw in flight %+v, want the step alone", i+1, seen[i])
		}
		s := seen[i][0]
		if s.call != "started" || s.path != "l/~0/charge" || s.attempt != i+1 || s.maxAttempts != observedMaxAttempts || s.lastErr != want || s.at.IsZero() {
			t.Errorf("attempt %d saw in flight %+v, want started l/~0/charge attempt %d, last error %q", i+1, s, i+1, want)
		}
	}
	var backoffs []observed
	for _, o := range log {
		if o.call == "backoff" {
			backoffs = append(backoffs, o)
		}
	}
	if len(backoffs) != 2 || backoffs[0].attempt != 2 || backoffs[0].maxAttempts != observedMaxAttempts || backoffs[0].lastErr != "card declined 1" ||
		backoffs[1].attempt != 3 || backoffs[1].lastErr != "card declined 2" {
		t.Fatalf("backoffs %+v, want attempts 2 and 3 with the errors before them", backoffs)
	}
	// The next attempt is the backoff after the failed attempt's start,
	// and runs then.
	if !backoffs[0].at.After(seen[0][0].at) || !backoffs[0].at.Equal(seen[1][0].at) {
		t.Errorf("the backoff said the next attempt at %v; the first started at %v, the second at %v", backoffs[0].at, seen[0][0].at, seen[1][0].at)
	}
	if left := h.inFlight(); len(left) != 0 {
		t.Errorf("in flight after the run: %+v", left)
	}
}

// Do bodies, which run outside the actor's turn, are observed too, each
// branch's of a join at once.
func TestStepObserverSeesJoinBranches(t *testing.T) {
	h := newObservingHost()
	both := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(2)
	var during []observed
	var once sync.Once
	branch := func(c *workflow.Ctx[rst]) (int, error) {
		return workflow.Do(c, "fetch", func(*workflow.DoCtx) (int, error) {
			arrived.Done()
			arrived.Wait()
			once.Do(func() { during = h.inFlight(); close(both) })
			<-both
			return 1, nil
		})
	}
	out := workflow.Run(context.Background(), func(c *workflow.Ctx[rst]) error {
		_, err := workflow.Join(c, "par", workflow.Branches[rst, int]{"a": branch, "b": branch})
		return err
	}, h, nil)
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	paths := []string{}
	for _, o := range during {
		paths = append(paths, o.path)
	}
	slices.Sort(paths)
	if !slices.Equal(paths, []string{"par/a/fetch", "par/b/fetch"}) {
		t.Errorf("in flight during the join: %+v, want both branches' steps", during)
	}
	if left := h.inFlight(); len(left) != 0 {
		t.Errorf("in flight after the run: %+v", left)
	}
}

// Observing steps costs a step no allocation of the engine's.
func TestAnObservedStepAllocatesNoMore(t *testing.T) {
	step := func(c *workflow.Ctx[rst], name string) error {
		return c.Step(name, func(s *workflow.StepCtx[rst]) error { s.State.N++; return nil })
	}
	bare := allocsPerStep(t, step)
	observed := allocsPerStepOn(t, func() workflow.Host { return newObservingHost() }, step)
	if observed > bare+0.5 {
		t.Errorf("an observed step: %.2f allocations, an unobserved one %.2f", observed, bare)
	}
}

// observedMaxAttempts is the attempts the observed steps above have: 1 +
// their MaxRetries, 2.
const observedMaxAttempts = 3
