package runtime_test

import (
	"errors"
	"testing"
	"time"

	rivet "github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// failKinds fails its one step for good in the way its key names: with a
// critical error, a timeout (not retried) or a Rollback, none retried, or
// by using up its retries.
var failKinds = rivet.Actor[struct{}]{
	Name: "failKinds",
	Run: func(ctx *workflow.Ctx[struct{}]) error {
		how := ctx.Key()[0]
		opts := workflow.StepOptions{Name: "s", MaxRetries: 1, RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond}
		if how == "timeout" {
			opts.Timeout = 10 * time.Millisecond
		}
		return ctx.StepWith(opts, func(s *workflow.StepCtx[struct{}]) error {
			switch how {
			case "critical":
				return workflow.Critical(errors.New("bad input"))
			case "timeout":
				<-s.Context().Done()
				return s.Context().Err()
			case "rollback":
				return workflow.Rollback(errors.New("declined"))
			}
			return errors.New("api down")
		})
	},
}

// A history says why a step failed for good: its failure kind, so that
// rivetctl history can tell a failure that was never retried from retries
// used up (a user trial read "exhausted, 1 attempt" as a retry policy's).
func TestHistorySaysWhyAStepFailedForGood(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, failKinds), nil)
	for key, want := range map[string]struct {
		failure  workflow.FailureKind
		attempts int
	}{
		"critical": {workflow.FailureCritical, 1},
		"timeout":  {workflow.FailureTimeout, 1},
		"rollback": {workflow.FailureRollback, 1},
		"retried":  {workflow.FailureExhausted, 2},
	} {
		ref := runtime.Ref{Name: "failKinds", Key: []string{key}}
		if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, key+"'s workflow to fail", 20*time.Second, func() bool {
			return inspect(t, e.host, "failKinds", key).WorkflowStatus == runtime.WorkflowFailed
		})
		hist, err := e.host.History(ctx(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		if len(hist.Entries) != 1 || hist.Entries[0].Status != string(workflow.StatusExhausted) || hist.Entries[0].Failure != string(want.failure) || hist.Entries[0].Attempts != want.attempts {
			t.Fatalf("%s: history %+v, want one exhausted step whose failure is %s after %d attempt(s)", key, hist.Entries, want.failure, want.attempts)
		}
	}
}
