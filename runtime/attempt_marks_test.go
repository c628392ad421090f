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
	"github.com/rivet-go/rivet/workflow"
)

type attemptsState struct {
	Seen []int `json:"seen"`
}

// A step attempt whose node stops while its body runs (the stop's step
// grace ran out, as a kill's would: nothing of the attempt is recorded)
// counts if it was the first body since the workflow's load: after the
// restart the step runs as attempt 2, not as attempt 1 with its retries
// counted from none, and its record says 2 attempts. A later body of a run
// is not marked (no write per step): cut short, it runs again as attempt
// 1, the first body of the next run, marked then.
func TestAStepAttemptCutShortByItsNodeCountsAfterTheRestart(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	var bodies atomic.Int32
	cut := rivet.Actor[attemptsState]{
		Name: "cutStep",
		Run: func(c *workflow.Ctx[attemptsState]) error {
			if err := c.Step("before", func(*workflow.StepCtx[attemptsState]) error { return nil }); err != nil {
				return err
			}
			return c.StepWith(workflow.StepOptions{Name: "work", MaxRetries: 3, RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond},
				func(s *workflow.StepCtx[attemptsState]) error {
					bodies.Add(1)
					s.State.Seen = append(s.State.Seen, s.Attempt())
					if s.Attempt() == 1 {
						// In flight when its node goes: it ends with the
						// node, recording nothing.
						started <- struct{}{}
						<-s.Context().Done()
						return s.Context().Err()
					}
					return nil
				})
		},
		Actions: rivet.Actions[attemptsState]{"get": rivet.Query(func(c *rivet.ActionCtx[attemptsState]) (attemptsState, error) { return *c.State, nil })},
	}
	e := newEnv(t, counterReg(t, cut), nil)
	ref := runtime.Ref{Name: "cutStep", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		select {
		case <-started:
		case <-time.After(20 * time.Second):
			t.Fatalf("the step's body did not start (run %d)", i+1)
		}
		// First cut after "before", unmarked; then as the run's first
		// body, marked.
		e.restart()
	}
	waitFor(t, "the workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "cutStep", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	raw, err := call(t, e.host, "cutStep", "k", "get", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(raw); got != `{"seen":[2]}` || bodies.Load() != 3 {
		t.Fatalf("state %s after %d bodies of work; want 3, the last as attempt 2 (the first two as attempt 1, their changes dropped with them)", got, bodies.Load())
	}
	hist, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range hist.Entries {
		if en.Path == "work" {
			found = true
			if en.Attempts != 2 || en.Status != string(workflow.StatusCompleted) {
				t.Errorf("work's record: %+v; want completed after 2 attempts", en)
			}
		}
	}
	if !found {
		t.Fatalf("no record of work in %+v", hist.Entries)
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
	if !strings.Contains(in.WorkflowError, "exhausted") || !strings.Contains(in.WorkflowError, "attempt 3 ended with its node") {
		t.Errorf("workflow error %q; want the step exhausted, its attempt 3 ended with its node", in.WorkflowError)
	}
	hist, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist.Entries) != 1 || hist.Entries[0].Attempts != 3 || hist.Entries[0].Status != string(workflow.StatusExhausted) ||
		!strings.Contains(hist.Entries[0].Error, "attempt 3 ended with its node") {
		t.Fatalf("history %+v; want poison exhausted after 3 attempts, the last ended with its node", hist.Entries)
	}
}
