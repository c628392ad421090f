package runtime_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type retrySagaState struct {
	Undone int `json:"undone"`
}

// A compensation that fails is retried after its step's backoff (its
// history says why: the failed attempt's error), and a node stopped
// during that backoff resumes the rollback when it starts again: the
// failed attempt, recorded, does not run again; the next one does and
// completes the rollback. (Should the backoff end before the
// node stops, that attempt waits for the restart and ends as evicted,
// unrecorded: the test then holds all the same.)
func TestARollbackHandlerIsRetriedAcrossARestart(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	restarted := make(chan struct{})
	saga := rivet.Actor[retrySagaState]{
		Name: "retrysaga",
		Run: func(ctx *workflow.Ctx[retrySagaState]) error {
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(ctx, workflow.StepOptions{Name: "hotel", RetryBackoffBase: time.Second, RetryBackoffMax: time.Minute},
				func(*workflow.StepCtx[retrySagaState]) (int, error) { return 1, nil },
				func(s *workflow.StepCtx[retrySagaState], _ int) error {
					if calls.Add(1) == 1 {
						return rivet.UserError("hotel.down", "hotel service down", nil)
					}
					select {
					case <-restarted:
					case <-s.Context().Done():
						return s.Context().Err()
					}
					s.State.Undone++
					return nil
				}); err != nil {
				return err
			}
			return ctx.Step("pay", func(*workflow.StepCtx[retrySagaState]) error {
				return workflow.Rollback(errors.New("payment refused"))
			})
		},
		Actions: rivet.Actions[retrySagaState]{"getState": rivet.Query(func(c *rivet.ActionCtx[retrySagaState]) (retrySagaState, error) { return *c.State, nil })},
	}
	e := newEnv(t, counterReg(t, saga), nil)
	ref := runtime.Ref{Name: "retrysaga", Key: []string{"r"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	hotel := func() runtime.HistoryEntry {
		h, err := e.host.History(ctx(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		for _, he := range h.Entries {
			if he.Path == "hotel" {
				return he
			}
		}
		return runtime.HistoryEntry{}
	}
	waitFor(t, "the hotel's handler to fail once", 20*time.Second, func() bool { return hotel().RollbackAttempts == 1 })
	if he := hotel(); he.RollbackDone || he.RollbackError != "" || he.RollbackRetryError != "hotel service down" || he.RollbackRetryErrorCode != "hotel.down" {
		t.Fatalf("hotel after one failed attempt = %+v, want a retry to come, after hotel.down", he)
	}
	e.restart()
	close(restarted)
	if _, err := call(t, e.host, "retrysaga", "r", "getState", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "retrysaga", "r").WorkflowStatus == runtime.WorkflowFailed
	})
	if he := hotel(); !he.RollbackDone || he.RollbackError != "" || he.RollbackRetryError != "" || he.RollbackAttempts != 2 {
		t.Fatalf("hotel = %+v, want rolled back in 2 attempts", he)
	}
	msg := inspect(t, e.host, "retrysaga", "r").WorkflowError
	if !strings.Contains(msg, "payment refused") || strings.Contains(msg, "rollback of step") {
		t.Fatalf("workflow error %q, want the payment's alone", msg)
	}
	raw, err := call(t, e.host, "retrysaga", "r", "getState", false)
	if err != nil || string(raw) != `{"undone":1}` {
		t.Fatalf("state %s %v", raw, err)
	}
}
