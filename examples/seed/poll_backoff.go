package seed

import (
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// PollBackoffState is pollBackoffActor's state.
type PollBackoffState struct {
	Attempts  int `json:"attempts"`
	BackoffMs int `json:"backoffMs"`
	// Status is "unknown", "healthy" or "retrying".
	Status string `json:"status"`
}

// pollExternal is the seed's dependency of variable availability: up on
// every third attempt.
func pollExternal(attempt int) bool {
	return attempt%3 == 0
}

// PollBackoffActor is the seed's "Poll + backoff loop" pattern: it polls
// from its creation on, doubling the delay after each failure (up to 5 s)
// and resetting it after a success.
var PollBackoffActor = rivet.Actor[PollBackoffState]{
	Name:  "pollBackoffActor",
	State: PollBackoffState{Attempts: 0, BackoffMs: 100, Status: "unknown"},
	Run: func(ctx *workflow.Ctx[PollBackoffState]) error {
		return ctx.Loop("poll-loop", func(loopCtx *workflow.Ctx[PollBackoffState]) error {
			success, err := workflow.Step(loopCtx, "poll-target", func(step *workflow.StepCtx[PollBackoffState]) (bool, error) {
				step.State.Attempts++
				return pollExternal(step.State.Attempts), nil
			})
			if err != nil {
				return err
			}

			if success {
				if err := loopCtx.Step("reset-backoff", func(step *workflow.StepCtx[PollBackoffState]) error {
					step.State.Status = "healthy"
					step.State.BackoffMs = 100
					return nil
				}); err != nil {
					return err
				}
				return loopCtx.Sleep("healthy-interval", time.Second)
			}

			retryDelay, err := workflow.Step(loopCtx, "grow-backoff", func(step *workflow.StepCtx[PollBackoffState]) (int, error) {
				step.State.Status = "retrying"
				step.State.BackoffMs = min(step.State.BackoffMs*2, 5000)
				return step.State.BackoffMs, nil
			})
			if err != nil {
				return err
			}

			return loopCtx.Sleep("retry-delay", time.Duration(retryDelay)*time.Millisecond)
		})
	},
	Actions: rivet.Actions[PollBackoffState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[PollBackoffState]) (PollBackoffState, error) { return *c.State, nil }),
	},
}
