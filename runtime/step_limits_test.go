package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type limitsState struct {
	Blob   string   `json:"blob"`
	N      int      `json:"n"`
	Errors []string `json:"errors"`
}

// A step whose own writes are over the node's limits (its output, its
// state, or the two together too large for one transaction) fails as that
// step, for good, with its changes discarded: the workflow's code gets the
// error and goes on (a host's refusal used to fail the whole run, and a
// retry of the run ran the step's side effect again into the same wall).
func TestAStepOverItsLimitsFailsAsTheStepForTheCodeToHandle(t *testing.T) {
	t.Parallel()
	var bodies [3]atomic.Int32
	var doBodies atomic.Int32
	over := []struct {
		name string
		body func(s *workflow.StepCtx[limitsState]) (string, error)
	}{
		{"big-output", func(s *workflow.StepCtx[limitsState]) (string, error) {
			s.State.N += 100
			return strings.Repeat("o", 1_100_000), nil
		}},
		{"big-state", func(s *workflow.StepCtx[limitsState]) (string, error) {
			s.State.N += 100
			s.State.Blob = strings.Repeat("s", 1_100_000)
			return "small", nil
		}},
		{"both", func(s *workflow.StepCtx[limitsState]) (string, error) {
			s.State.N += 100
			s.State.Blob = strings.Repeat("s", 800_000)
			return strings.Repeat("o", 800_000), nil
		}},
	}
	actor := rivet.Actor[limitsState]{
		Name: "limits",
		Run: func(ctx *workflow.Ctx[limitsState]) error {
			for i, o := range over {
				_, err := workflow.Step(ctx, o.name, func(s *workflow.StepCtx[limitsState]) (string, error) {
					bodies[i].Add(1)
					return o.body(s)
				})
				var se *workflow.StepError
				if !errors.As(err, &se) || se.Kind != workflow.FailureCritical {
					return rivet.Errorf(rivet.ErrInternal, "step %s: got %v, want a critical step error", o.name, err)
				}
				if err := ctx.Step("note-"+o.name, func(s *workflow.StepCtx[limitsState]) error {
					s.State.N++
					s.State.Errors = append(s.State.Errors, err.Error())
					return nil
				}); err != nil {
					return err
				}
			}
			// A step that takes no turn (Do) is bounded alike.
			_, err := workflow.Do(ctx, "big-do", func(d *workflow.DoCtx) (string, error) {
				doBodies.Add(1)
				return strings.Repeat("d", 1_100_000), nil
			})
			var se *workflow.StepError
			if !errors.As(err, &se) || se.Kind != workflow.FailureCritical || !strings.Contains(err.Error(), "is 1100002 bytes") {
				return rivet.Errorf(rivet.ErrInternal, "step big-do: got %v, want a critical step error naming its output's size", err)
			}
			return nil
		},
	}
	e := newEnv(t, counterReg(t, actor), nil)
	runToItsEnd(t, e, "limits")
	check := func(when string) {
		t.Helper()
		ins := inspect(t, e.host, "limits", "k")
		if ins.WorkflowStatus != runtime.WorkflowCompleted {
			t.Fatalf("%s: workflow %s (%s), want completed: the code handled each step's failure", when, ins.WorkflowStatus, ins.WorkflowError)
		}
		var st limitsState
		decodeJSON(t, ins.State, &st)
		if st.N != 3 || st.Blob != "" {
			t.Fatalf("%s: state n=%d, blob of %d bytes; want 3 and none: the refused attempts' changes are discarded", when, st.N, len(st.Blob))
		}
		want := []string{`is 1100002 bytes, the limit is 1048576`, `would be 1100`, `too large for one transaction`}
		for i, w := range want {
			if i >= len(st.Errors) || !strings.Contains(st.Errors[i], w) || !strings.Contains(st.Errors[i], over[i].name) {
				t.Fatalf("%s: the errors the code saw: %q; want #%d to name step %q and say %q", when, st.Errors, i, over[i].name, w)
			}
		}
	}
	check("at the end")
	for i := range bodies {
		if n := bodies[i].Load(); n != 1 {
			t.Fatalf("step %s's body ran %d times, want once: the same writes would be refused again, so no retry", over[i].name, n)
		}
	}
	if n := doBodies.Load(); n != 1 {
		t.Fatalf("step big-do's body ran %d times, want once", n)
	}
	e.restart()
	check("after a restart")
}

type sagaLimitState struct {
	Charged  int    `json:"charged"`
	Refunded int    `json:"refunded"`
	Blob     string `json:"blob"`
}

// A workflow that returns a step's too-large failure rolls back what it did
// before, as for any step that fails for good.
func TestAStepOverItsLimitsRollsTheWorkflowBack(t *testing.T) {
	t.Parallel()
	actor := rivet.Actor[sagaLimitState]{
		Name: "sagaLimit",
		Run: func(ctx *workflow.Ctx[sagaLimitState]) error {
			if err := ctx.RollbackCheckpoint("saga"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(ctx, workflow.StepOptions{Name: "charge"},
				func(s *workflow.StepCtx[sagaLimitState]) (int, error) { s.State.Charged++; return 1, nil },
				func(s *workflow.StepCtx[sagaLimitState], _ int) error { s.State.Refunded++; return nil }); err != nil {
				return err
			}
			return ctx.Step("ship", func(s *workflow.StepCtx[sagaLimitState]) error {
				s.State.Blob = strings.Repeat("s", 1_100_000)
				return nil
			})
		},
	}
	e := newEnv(t, counterReg(t, actor), nil)
	runToItsEnd(t, e, "sagaLimit")
	ins := inspect(t, e.host, "sagaLimit", "k")
	var st sagaLimitState
	decodeJSON(t, ins.State, &st)
	if st.Charged != 1 || st.Refunded != 1 || st.Blob != "" {
		t.Fatalf("state charged=%d refunded=%d blob of %d bytes; want 1, 1 and none: the charge is rolled back", st.Charged, st.Refunded, len(st.Blob))
	}
	if ins.WorkflowStatus != runtime.WorkflowFailed || !strings.Contains(ins.WorkflowError, `"ship"`) || !strings.Contains(ins.WorkflowError, "limit") {
		t.Fatalf("workflow %s (%q), want it failed, its error naming step ship and its limit", ins.WorkflowStatus, ins.WorkflowError)
	}
}

// A StepWithRollback whose body succeeded (its side effect happened) and
// whose state the node then refused fails for good, and still has its
// compensation run when the workflow rolls back, with the output its body
// returned: before, the engine registered compensations for completed
// steps only, and the charge stayed charged. The rollback here comes
// after a restart, from a replay of the failed step.
func TestARefusedStepWithRollbackIsCompensated(t *testing.T) {
	t.Parallel()
	var charged, refunds atomic.Int32
	var refundedID atomic.Value
	actor := rivet.Actor[sagaLimitState]{
		Name:   "refusedSaga",
		Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[sagaLimitState]) error {
			if err := ctx.RollbackCheckpoint("saga"); err != nil {
				return err
			}
			_, err := workflow.StepWithRollback(ctx, workflow.StepOptions{Name: "charge"},
				func(s *workflow.StepCtx[sagaLimitState]) (string, error) {
					charged.Add(1) // the side effect, outside the actor
					s.State.Charged++
					s.State.Blob = strings.Repeat("s", 1_100_000)
					return "ch-1", nil
				},
				func(s *workflow.StepCtx[sagaLimitState], id string) error {
					refunds.Add(1)
					refundedID.Store(id)
					s.State.Refunded++
					return nil
				})
			var se *workflow.StepError
			if !errors.As(err, &se) || se.Kind != workflow.FailureCritical {
				return rivet.Errorf(rivet.ErrInternal, "step charge: got %v, want a critical step error", err)
			}
			if _, rerr := workflow.Next[int](ctx, "confirm"); rerr != nil {
				return rerr
			}
			return err
		},
	}
	e := newEnv(t, counterReg(t, actor), nil)
	ref := runtime.Ref{Name: "refusedSaga", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to wait after the refused step", 20*time.Second, func() bool {
		return inspect(t, e.host, "refusedSaga", "k").WorkflowStatus == runtime.WorkflowSleeping
	})
	h, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, en := range h.Entries {
		if en.Path == "charge" {
			found = true
			if en.Status != "exhausted" || !en.HasRollback || string(en.Output) != `"ch-1"` {
				t.Fatalf("charge's entry: status %s, has_rollback %v, output %s; want exhausted, true, \"ch-1\"", en.Status, en.HasRollback, en.Output)
			}
		}
	}
	if !found {
		t.Fatal("no entry for step charge")
	}
	e.restart() // the rollback's handler comes from a replay of the failure
	send(t, e.host, "refusedSaga", "k", "go", 1)
	runToItsEnd(t, e, "refusedSaga")
	ins := inspect(t, e.host, "refusedSaga", "k")
	if ins.WorkflowStatus != runtime.WorkflowFailed || !strings.Contains(ins.WorkflowError, `"charge"`) {
		t.Fatalf("workflow %s (%q), want it failed with step charge's error", ins.WorkflowStatus, ins.WorkflowError)
	}
	var st sagaLimitState
	decodeJSON(t, ins.State, &st)
	if charged.Load() != 1 || refunds.Load() != 1 || st.Refunded != 1 || st.Charged != 0 || st.Blob != "" {
		t.Fatalf("charged %d, refunded %d times (state: charged %d, refunded %d, blob of %d bytes); want charged once, refunded once, the refused state discarded",
			charged.Load(), refunds.Load(), st.Charged, st.Refunded, len(st.Blob))
	}
	if id, _ := refundedID.Load().(string); id != "ch-1" {
		t.Fatalf("the refund got %q, want the charge's output ch-1", id)
	}
}

// A refused StepWithRollback whose compensation failed has its effect
// standing: a plain retry keeps the step (run again, it would charge
// twice), replays to its failure, and the rollback runs its handler
// afresh. Before, the retry deleted the failed step and ran its body
// again, and the first charge was never refunded.
func TestARetryKeepsARefusedStepWhoseCompensationFailed(t *testing.T) {
	t.Parallel()
	var charged, refunds atomic.Int32
	var refundWorks atomic.Bool
	actor := rivet.Actor[sagaLimitState]{
		Name: "refusedRetry",
		Run: func(ctx *workflow.Ctx[sagaLimitState]) error {
			if err := ctx.RollbackCheckpoint("saga"); err != nil {
				return err
			}
			_, err := workflow.StepWithRollback(ctx, workflow.StepOptions{Name: "charge"},
				func(s *workflow.StepCtx[sagaLimitState]) (string, error) {
					charged.Add(1)
					s.State.Blob = strings.Repeat("s", 1_100_000)
					return "ch-1", nil
				},
				func(s *workflow.StepCtx[sagaLimitState], id string) error {
					if !refundWorks.Load() {
						return workflow.Critical(errors.New("the refund service is down"))
					}
					refunds.Add(1)
					s.State.Refunded++
					return nil
				})
			return err
		},
	}
	e := newEnv(t, counterReg(t, actor), nil)
	ref := runtime.Ref{Name: "refusedRetry", Key: []string{"k"}}
	runToItsEnd(t, e, "refusedRetry")
	if ins := inspect(t, e.host, "refusedRetry", "k"); !strings.Contains(ins.WorkflowError, "refund service is down") {
		t.Fatalf("workflow %s (%q), want it failed by the refund's failure", ins.WorkflowStatus, ins.WorkflowError)
	}
	refundWorks.Store(true)
	if _, err := e.host.RetryWorkflow(ctx(t), ref, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried rollback to refund", 20*time.Second, func() bool {
		return refunds.Load() == 1 && inspect(t, e.host, "refusedRetry", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	if c := charged.Load(); c != 1 {
		t.Fatalf("charged %d times, want once: the retry kept the step whose charge stood", c)
	}
	h, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range h.Entries {
		if en.Path == "charge" && !en.RollbackDone {
			t.Fatalf("charge's entry %+v: want it rolled back", en)
		}
	}
}

type ridingState struct {
	Done bool `json:"done"`
}

// A step's own writes are checked alone: what its thread recorded before
// and had not committed yet (here a settled join's record of two large
// outputs) goes out first, and does not make the step fail, nor the run.
func TestAStepIsNotRefusedForTheWritesThatRideWithIt(t *testing.T) {
	t.Parallel()
	branch := func(c *workflow.Ctx[ridingState]) (string, error) { return strings.Repeat("b", 500_000), nil }
	actor := rivet.Actor[ridingState]{
		Name: "riding",
		Run: func(ctx *workflow.Ctx[ridingState]) error {
			if _, err := workflow.Join(ctx, "j", workflow.Branches[ridingState, string]{"x": branch, "y": branch}); err != nil {
				return err
			}
			if _, err := workflow.Step(ctx, "after", func(s *workflow.StepCtx[ridingState]) (string, error) {
				return strings.Repeat("a", 600_000), nil
			}); err != nil {
				return err
			}
			return ctx.Step("done", func(s *workflow.StepCtx[ridingState]) error { s.State.Done = true; return nil })
		},
	}
	e := newEnv(t, counterReg(t, actor), nil)
	runToItsEnd(t, e, "riding")
	if ins := inspect(t, e.host, "riding", "k"); ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != `{"done":true}` {
		t.Fatalf("workflow %s (%s), state %s; want completed and done", ins.WorkflowStatus, ins.WorkflowError, ins.State)
	}
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

type refusedFailureState struct {
	Blob string `json:"blob"`
	Went bool   `json:"went"`
}

// An attempt that failed and left a state over the limit keeps its own
// failure, and how the policy takes it (retried; a Rollback error that no
// TryStep catches), its changes discarded: the limit turns only a success
// into a failure for good.
func TestAFailedAttemptOverTheLimitKeepsItsFailure(t *testing.T) {
	t.Parallel()
	var attempts atomic.Int32
	actor := rivet.Actor[refusedFailureState]{
		Name: "refusedFailure",
		Run: func(ctx *workflow.Ctx[refusedFailureState]) error {
			_, err := workflow.StepOpts(ctx, workflow.StepOptions{Name: "flaky", RetryBackoffBase: time.Millisecond}, func(s *workflow.StepCtx[refusedFailureState]) (int, error) {
				if attempts.Add(1) == 1 {
					s.State.Blob = strings.Repeat("s", 1_100_000)
					return 0, errors.New("flaky")
				}
				return 1, nil
			})
			if err != nil {
				return err
			}
			_, slow, err := workflow.TryStepOpts(ctx, workflow.StepOptions{Name: "slow", Timeout: 20 * time.Millisecond}, func(s *workflow.StepCtx[refusedFailureState]) (int, error) {
				s.State.Blob = strings.Repeat("s", 1_100_000)
				<-s.Context().Done()
				return 0, nil
			})
			if err != nil {
				return err
			}
			if slow == nil || !strings.Contains(slow.Error(), "timed out") || !strings.Contains(slow.Error(), "discarded") {
				return rivet.Errorf(rivet.ErrInternal, "the timed-out step's failure: %v; want it to say its changes were discarded", slow)
			}
			_, _, err = workflow.TryStep(ctx, "declined", func(s *workflow.StepCtx[refusedFailureState]) (int, error) {
				s.State.Blob = strings.Repeat("s", 1_100_000)
				return 0, workflow.Rollback(errors.New("payment declined"))
			})
			if err != nil {
				return err
			}
			return ctx.Step("went-on", func(s *workflow.StepCtx[refusedFailureState]) error { s.State.Went = true; return nil })
		},
	}
	e := newEnv(t, counterReg(t, actor), nil)
	runToItsEnd(t, e, "refusedFailure")
	ins := inspect(t, e.host, "refusedFailure", "k")
	if ins.WorkflowStatus != runtime.WorkflowFailed || !strings.Contains(ins.WorkflowError, "payment declined") || !strings.Contains(ins.WorkflowError, "discarded") {
		t.Fatalf("workflow %s (%.300s), state %.100s: want it failed by the Rollback error, which TryStep does not catch, saying the changes were discarded", ins.WorkflowStatus, ins.WorkflowError, ins.State)
	}
	if n := attempts.Load(); n != 2 {
		t.Fatalf("the flaky step ran %d times, want twice: its first failure is retried as any failure is", n)
	}
	if string(ins.State) != `{"blob":"","went":false}` {
		t.Fatalf("state %.100s, want the refused changes discarded", ins.State)
	}
}

// A step's error is recorded up to workflow.MaxErrorBytes: a body's huge
// error message can neither make its record too large to commit (failing
// the run) nor fill the history.
func TestAHugeStepErrorIsRecordedCut(t *testing.T) {
	t.Parallel()
	actor := rivet.Actor[refusedFailureState]{
		Name: "hugeError",
		Run: func(ctx *workflow.Ctx[refusedFailureState]) error {
			_, failed, err := workflow.TryStepOpts(ctx, workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[refusedFailureState]) (int, error) {
				s.State.Blob = strings.Repeat("s", 700_000)
				return 0, errors.New(strings.Repeat("e", 800_000))
			})
			if err != nil {
				return err
			}
			if failed == nil || len(failed.Error()) > workflow.MaxErrorBytes+200 || !strings.Contains(failed.Error(), "bytes more not recorded") {
				return rivet.Errorf(rivet.ErrInternal, "the failure as the code sees it: %d bytes", len(fmt.Sprint(failed)))
			}
			return ctx.Step("went-on", func(s *workflow.StepCtx[refusedFailureState]) error { s.State.Went = true; return nil })
		},
	}
	e := newEnv(t, counterReg(t, actor), nil)
	runToItsEnd(t, e, "hugeError")
	if ins := inspect(t, e.host, "hugeError", "k"); ins.WorkflowStatus != runtime.WorkflowCompleted {
		t.Fatalf("workflow %s (%.300s), want completed", ins.WorkflowStatus, ins.WorkflowError)
	}
}

// A step output limit raised above what one transaction holds still fails
// an output too large for it as the step, not the run.
func TestAnOutputUnderARaisedLimitButTooLargeToCommitFailsTheStep(t *testing.T) {
	t.Parallel()
	actor := rivet.Actor[refusedFailureState]{
		Name: "raisedLimit",
		Run: func(ctx *workflow.Ctx[refusedFailureState]) error {
			_, failed, err := workflow.TryStep(ctx, "s", func(s *workflow.StepCtx[refusedFailureState]) (string, error) {
				return strings.Repeat("o", 1_500_000), nil
			})
			if err != nil {
				return err
			}
			if failed == nil || !strings.Contains(failed.Error(), "too large for one transaction") {
				return rivet.Errorf(rivet.ErrInternal, "the step's failure: %v", failed)
			}
			return ctx.Step("went-on", func(s *workflow.StepCtx[refusedFailureState]) error { s.State.Went = true; return nil })
		},
	}
	e := newEnv(t, counterReg(t, actor), func(c *runtime.Config) { c.MaxStepOutputBytes = 4 << 20 })
	runToItsEnd(t, e, "raisedLimit")
	if ins := inspect(t, e.host, "raisedLimit", "k"); ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != `{"blob":"","went":true}` {
		t.Fatalf("workflow %s (%.300s), state %.100s; want completed", ins.WorkflowStatus, ins.WorkflowError, ins.State)
	}
}

// runToItsEnd creates the actor name ["k"] and waits for its workflow to
// complete or fail.
func runToItsEnd(t *testing.T, e *env, name string) {
	t.Helper()
	if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: name, Key: []string{"k"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow's end", 20*time.Second, func() bool {
		st := inspect(t, e.host, name, "k").WorkflowStatus
		return st == runtime.WorkflowCompleted || st == runtime.WorkflowFailed
	})
}

// MaxStateBytes bounds a change of the state, not a state stored under a
// higher limit: after the limit is lowered below an actor's state, an
// action that leaves the state as it is still runs, and one that changes
// it is refused, its change discarded.
func TestALoweredStateLimitRefusesChangesOnly(t *testing.T) {
	t.Parallel()
	actor := rivet.Actor[bigState]{
		Name: "lowered",
		Actions: rivet.Actions[bigState]{
			"grow": rivet.Action0(func(c *rivet.ActionCtx[bigState]) (int, error) {
				c.State.Blob = strings.Repeat("s", 600_000)
				return len(c.State.Blob), nil
			}),
			"peek": rivet.Action0(func(c *rivet.ActionCtx[bigState]) (int, error) { return c.State.N, nil }),
			"bump": rivet.Action0(func(c *rivet.ActionCtx[bigState]) (int, error) { c.State.N++; return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, actor), nil)
	if n := callInt(t, e.host, "lowered", "k", "grow", true); n != 600_000 {
		t.Fatalf("grow = %d", n)
	}
	e.stop()
	e.cfg.MaxStateBytes = 100_000
	e.start()
	if raw, err := call(t, e.host, "lowered", "k", "peek", false); err != nil {
		t.Fatalf("an action that leaves a state over the lowered limit as it is: %s, %v; want it to run", raw, err)
	}
	if _, err := call(t, e.host, "lowered", "k", "bump", false); !errors.Is(err, rivet.ErrTooLarge) {
		t.Fatalf("an action that changes a state over the limit: %v, want ErrTooLarge", err)
	}
	if n := callInt(t, e.host, "lowered", "k", "peek", false); n != 0 {
		t.Fatalf("n = %d after the refused change, want 0", n)
	}
}
