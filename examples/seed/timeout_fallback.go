package seed

import (
	"encoding/json"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// PrimaryServiceState is primaryServiceActor's state: it has none.
type PrimaryServiceState struct{}

// PrimaryServiceActor is a slow service: fetchValue takes 500 ms.
var PrimaryServiceActor = rivet.Actor[PrimaryServiceState]{
	Name: "primaryServiceActor",
	Actions: rivet.Actions[PrimaryServiceState]{
		"fetchValue": rivet.Action0(func(c *rivet.ActionCtx[PrimaryServiceState]) (string, error) {
			timer := time.NewTimer(500 * time.Millisecond)
			defer timer.Stop()
			select {
			case <-timer.C:
				return "primary", nil
			case <-c.Context().Done():
				return "", c.Context().Err()
			}
		}),
		"getState": rivet.Query(func(c *rivet.ActionCtx[PrimaryServiceState]) (PrimaryServiceState, error) { return *c.State, nil }),
	},
}

// FallbackServiceState is fallbackServiceActor's state: it has none.
type FallbackServiceState struct{}

// FallbackServiceActor is the fast fallback service.
var FallbackServiceActor = rivet.Actor[FallbackServiceState]{
	Name: "fallbackServiceActor",
	Actions: rivet.Actions[FallbackServiceState]{
		"fetchValue": rivet.Action0(func(*rivet.ActionCtx[FallbackServiceState]) (string, error) { return "fallback", nil }),
		"getState":   rivet.Query(func(c *rivet.ActionCtx[FallbackServiceState]) (FallbackServiceState, error) { return *c.State, nil }),
	},
}

// TimeoutFallbackState is timeoutFallbackActor's state.
type TimeoutFallbackState struct {
	// LastSource is "none", "primary" or "fallback".
	LastSource string `json:"lastSource"`
	LastValue  string `json:"lastValue"`
}

// TimeoutFallbackActor is the seed's "Timeout + fallback actor" pattern:
// the primary service races a 200 ms timer, and if the timer wins the
// fallback service answers. The seed declares no queue; "request" (its wait
// entry's name without "wait-") triggers a round, whatever its body. As in
// the seed, a round also runs when no request came within 30 s.
var TimeoutFallbackActor = rivet.Actor[TimeoutFallbackState]{
	Name:  "timeoutFallbackActor",
	State: TimeoutFallbackState{LastSource: "none", LastValue: ""},
	Queues: rivet.Queues{
		"request": rivet.QueueOf[json.RawMessage](),
	},
	Run: func(ctx *workflow.Ctx[TimeoutFallbackState]) error {
		return ctx.Loop("timeout-loop", func(loopCtx *workflow.Ctx[TimeoutFallbackState]) error {
			if _, err := workflow.NextBatch[json.RawMessage](loopCtx, "wait-request", workflow.NextOptions{
				Timeout: 30 * time.Second,
			}); err != nil {
				return err
			}

			winner, value, err := workflow.Race(loopCtx, "primary-vs-timeout", []workflow.RaceBranch[TimeoutFallbackState, string]{
				{
					Name: "primary",
					Run: func(raceCtx *workflow.Ctx[TimeoutFallbackState]) (string, error) {
						return workflow.Step(raceCtx, "call-primary", callPrimaryValue)
					},
				},
				{
					Name: "timeout",
					Run: func(raceCtx *workflow.Ctx[TimeoutFallbackState]) (string, error) {
						if err := raceCtx.Sleep("primary-timeout", 200*time.Millisecond); err != nil {
							return "", err
						}
						return "timeout", nil
					},
				},
			})
			if err != nil {
				return err
			}

			source := "primary"

			if winner == "timeout" {
				value, err = workflow.Step(loopCtx, "fallback-call", callFallbackValue)
				if err != nil {
					return err
				}
				source = "fallback"
			}

			return loopCtx.Step("record-choice", func(step *workflow.StepCtx[TimeoutFallbackState]) error {
				step.State.LastSource = source
				step.State.LastValue = value
				return nil
			})
		})
	},
	Actions: rivet.Actions[TimeoutFallbackState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[TimeoutFallbackState]) (TimeoutFallbackState, error) { return *c.State, nil }),
	},
}

func callPrimaryValue(step *workflow.StepCtx[TimeoutFallbackState]) (string, error) {
	client := step.Client()
	primary := client.GetOrCreate("primaryServiceActor", "main")
	return rivet.Call[string](step.Context(), primary, "fetchValue")
}

func callFallbackValue(step *workflow.StepCtx[TimeoutFallbackState]) (string, error) {
	client := step.Client()
	fallback := client.GetOrCreate("fallbackServiceActor", "main")
	return rivet.Call[string](step.Context(), fallback, "fetchValue")
}
