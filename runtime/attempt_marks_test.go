package runtime_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type attemptsState struct {
	Seen []int `json:"seen"`
}

// A step body its node abandons on a graceful stop (the stop's StepGrace
// ran out while the body ran) did not crash its node: it is not counted.
// A step that never fails, with the default retries, whose body four
// rolling restarts in a row cut short, completes, run again each time as
// attempt 1 (with each cut counted, the fourth exhausted it: a few deploys
// failed workflows whose steps never failed).
func TestAStepAbandonedByGracefulStopsIsNotCounted(t *testing.T) {
	t.Parallel()
	const cuts = 4
	started := make(chan struct{}, 1)
	var bodies atomic.Int32
	cut := rivet.Actor[attemptsState]{
		Name: "cutStep",
		Run: func(c *workflow.Ctx[attemptsState]) error {
			return c.StepWith(workflow.StepOptions{Name: "work", RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond},
				func(s *workflow.StepCtx[attemptsState]) error {
					s.State.Seen = append(s.State.Seen, s.Attempt())
					if bodies.Add(1) <= cuts {
						// Still running when the stop's grace runs out.
						started <- struct{}{}
						<-s.Context().Done()
						return s.Context().Err()
					}
					return nil
				})
		},
		Actions: rivet.Actions[attemptsState]{"get": rivet.Query(func(c *rivet.ActionCtx[attemptsState]) (attemptsState, error) { return *c.State, nil })},
	}
	e := newEnv(t, counterReg(t, cut), func(c *runtime.Config) { c.StepGrace = 100 * time.Millisecond })
	ref := runtime.Ref{Name: "cutStep", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	for i := range cuts {
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatalf("the step's body did not start (run %d)", i+1)
		}
		e.restart()
	}
	waitFor(t, "the workflow to end", 30*time.Second, func() bool {
		st := inspect(t, e.host, "cutStep", "k").WorkflowStatus
		return st == runtime.WorkflowCompleted || st == runtime.WorkflowFailed
	})
	if in := inspect(t, e.host, "cutStep", "k"); in.WorkflowStatus != runtime.WorkflowCompleted {
		t.Fatalf("workflow %s (%s); want completed: no attempt of its step failed", in.WorkflowStatus, in.WorkflowError)
	}
	raw, err := call(t, e.host, "cutStep", "k", "get", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(raw); got != `{"seen":[1]}` || bodies.Load() != cuts+1 {
		t.Fatalf("state %s after %d bodies; want %d, the last as attempt 1", got, bodies.Load(), cuts+1)
	}
	hist, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist.Entries) != 1 || hist.Entries[0].Attempts != 1 || hist.Entries[0].Status != string(workflow.StatusCompleted) {
		t.Fatalf("history %+v; want work completed after 1 attempt", hist.Entries)
	}
}

// A step whose every attempt ends with its node (its record never
// commits: a storage failure here, which drops the activation's memory as
// a crash would, and runs the workflow again from storage) is retried
// only as its retries allow: with MaxRetries 2 its third such attempt
// exhausts it, the workflow fails with an error saying how its attempts
// ended, and its history says so.
func TestAStepThatCrashesItsNodeEachTimeExhaustsItsRetries(t *testing.T) {
	t.Parallel()
	var e *env
	var bodies atomic.Int32
	var mu sync.Mutex
	var attempts []int
	poison := rivet.Actor[attemptsState]{
		Name: "poisonStep",
		Run: func(c *workflow.Ctx[attemptsState]) error {
			return c.StepWith(workflow.StepOptions{Name: "poison", MaxRetries: 2, RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond},
				func(s *workflow.StepCtx[attemptsState]) error {
					if bodies.Add(1) > 10 {
						return workflow.Critical(errors.New("run too many times"))
					}
					mu.Lock()
					attempts = append(attempts, s.Attempt())
					mu.Unlock()
					// The attempt's record is lost with the node.
					e.store.failCommitSub.Store("wf/poison")
					return errors.New("never recorded")
				})
		},
	}
	e = newEnv(t, counterReg(t, poison), nil)
	ref := runtime.Ref{Name: "poisonStep", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 60*time.Second, func() bool {
		return inspect(t, e.host, "poisonStep", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	in := inspect(t, e.host, "poisonStep", "k")
	mu.Lock()
	defer mu.Unlock()
	if n := bodies.Load(); n != 3 {
		t.Fatalf("%d bodies ran (attempts %v); want 3: the first and its 2 retries", n, attempts)
	}
	if len(attempts) != 3 || attempts[0] != 1 || attempts[1] != 2 || attempts[2] != 3 {
		t.Errorf("attempts %v, want [1 2 3]", attempts)
	}
	if !strings.Contains(in.WorkflowError, "exhausted") || !strings.Contains(in.WorkflowError, "attempt 3 ended without its outcome recorded") {
		t.Errorf("workflow error %q; want the step exhausted, its attempt 3 ended without its outcome recorded", in.WorkflowError)
	}
	hist, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist.Entries) != 1 || hist.Entries[0].Attempts != 3 || hist.Entries[0].Status != string(workflow.StatusExhausted) ||
		!strings.Contains(hist.Entries[0].Error, "attempt 3 ended without its outcome recorded") {
		t.Fatalf("history %+v; want poison exhausted after 3 attempts, the last ended with its node", hist.Entries)
	}
}

// A marked attempt that the workflow's cancel cuts short (not a crash, but
// not a graceful leave either: its marker stays) does not count after the
// workflow ended: the cancel's commit deletes the workflow's markers, and
// a retry after a restart runs the step as attempt 1, not 2.
func TestAStepsMarkerGoesWithTheWorkflowsEnd(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	var bodies atomic.Int32
	act := rivet.Actor[attemptsState]{
		Name: "cancelledStep",
		Run: func(c *workflow.Ctx[attemptsState]) error {
			return c.StepWith(workflow.StepOptions{Name: "work", RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond},
				func(s *workflow.StepCtx[attemptsState]) error {
					s.State.Seen = append(s.State.Seen, s.Attempt())
					if bodies.Add(1) == 1 {
						started <- struct{}{}
						<-s.Context().Done()
						return s.Context().Err()
					}
					return nil
				})
		},
		Actions: rivet.Actions[attemptsState]{"get": rivet.Query(func(c *rivet.ActionCtx[attemptsState]) (attemptsState, error) { return *c.State, nil })},
	}
	e := newEnv(t, counterReg(t, act), nil)
	ref := runtime.Ref{Name: "cancelledStep", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the step's body did not start")
	}
	if _, err := e.host.CancelWorkflow(ctx(t), ref, "test"); err != nil {
		t.Fatal(err)
	}
	kvs, err := e.store.List(ctx(t), "", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if strings.Contains(kv.Key, storage.AttemptMarkSuffix) {
			t.Errorf("attempt marker %s left after the workflow's cancel", kv.Key)
		}
	}
	// Loaded again, the actor would read a marker left as one of an
	// attempt before the load.
	e.restart()
	if _, err := e.host.RetryWorkflow(ctx(t), ref, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to complete", 30*time.Second, func() bool {
		return inspect(t, e.host, "cancelledStep", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	raw, err := call(t, e.host, "cancelledStep", "k", "get", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(raw); got != `{"seen":[1]}` || bodies.Load() != 2 {
		t.Fatalf("state %s after %d bodies; want 2, the retried one as attempt 1", got, bodies.Load())
	}
}

// A race's loser, whose Do body was marked as it started beside the
// winner's and then cut off unrecorded, leaves no marker once the race is
// decided: its tree goes, and its marker with it. Left, a loop that races
// Do bodies at each wake would add one at each load, for every load to
// read until the workflow ends.
func TestARaceLosersMarkerGoesWithItsTree(t *testing.T) {
	t.Parallel()
	slowStarted := make(chan struct{})
	act := rivet.Actor[attemptsState]{
		Name: "markedRace",
		Run: func(c *workflow.Ctx[attemptsState]) error {
			if _, _, err := workflow.Race(c, "r", []workflow.RaceBranch[attemptsState, int]{
				{Name: "fast", Run: func(bc *workflow.Ctx[attemptsState]) (int, error) {
					return workflow.Do(bc, "quick", func(d *workflow.DoCtx) (int, error) {
						// Marked too only if it starts before the other's
						// body has recorded anything: wait for it.
						select {
						case <-slowStarted:
						case <-d.Context().Done():
						}
						return 1, nil
					})
				}},
				{Name: "slow", Run: func(bc *workflow.Ctx[attemptsState]) (int, error) {
					return workflow.Do(bc, "long", func(d *workflow.DoCtx) (int, error) {
						close(slowStarted)
						<-d.Context().Done()
						return 0, d.Context().Err()
					})
				}},
			}); err != nil {
				return err
			}
			return c.Sleep("after", time.Hour)
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "markedRace", Key: []string{"k"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to sleep after the race", 20*time.Second, func() bool {
		return inspect(t, e.host, "markedRace", "k").WorkflowStatus == runtime.WorkflowSleeping
	})
	kvs, err := e.store.List(ctx(t), "", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if strings.Contains(kv.Key, storage.AttemptMarkSuffix) {
			t.Errorf("attempt marker %s left after the race was decided", kv.Key)
		}
	}
}
