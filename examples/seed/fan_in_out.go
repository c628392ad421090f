package seed

import (
	"encoding/json"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/workflow"
)

// FanInOutState is fanInOutActor's state.
type FanInOutState struct {
	Total float64 `json:"total"`
}

// FanInOutActor is the seed's "Fan-out / fan-in (join)" pattern:
// independent fetches run in parallel and their results are merged into one
// total. The seed declares no queue; "refresh" (its wait entry's name
// without "wait-") triggers a round, whatever its body.
var FanInOutActor = rivet.Actor[FanInOutState]{
	Name: "fanInOutActor",
	Queues: rivet.Queues{
		"refresh": rivet.QueueOf[json.RawMessage](),
	},
	Run: func(ctx *workflow.Ctx[FanInOutState]) error {
		return ctx.Loop("join-loop", func(loopCtx *workflow.Ctx[FanInOutState]) error {
			messages, err := workflow.NextBatch[json.RawMessage](loopCtx, "wait-refresh", workflow.NextOptions{
				Timeout: 30 * time.Second,
			})
			if err != nil {
				return err
			}

			if len(messages) == 0 {
				return nil
			}

			joined, err := workflow.Join(loopCtx, "parallel-work", workflow.Branches[FanInOutState, float64]{
				"users": func(branchCtx *workflow.Ctx[FanInOutState]) (float64, error) {
					return workflow.Do(branchCtx, "fetch-users", func(step *workflow.DoCtx) (float64, error) {
						return exampleapi.FetchCount(step.Context(), "/users")
					})
				},
				"orders": func(branchCtx *workflow.Ctx[FanInOutState]) (float64, error) {
					return workflow.Do(branchCtx, "fetch-orders", func(step *workflow.DoCtx) (float64, error) {
						return exampleapi.FetchCount(step.Context(), "/orders")
					})
				},
				"invoices": func(branchCtx *workflow.Ctx[FanInOutState]) (float64, error) {
					return workflow.Do(branchCtx, "fetch-invoices", func(step *workflow.DoCtx) (float64, error) {
						return exampleapi.FetchCount(step.Context(), "/invoices")
					})
				},
			})
			if err != nil {
				return err
			}

			return loopCtx.Step("merge-results", func(step *workflow.StepCtx[FanInOutState]) error {
				step.State.Total = joined["users"] + joined["orders"] + joined["invoices"]
				return nil
			})
		})
	},
	Actions: rivet.Actions[FanInOutState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[FanInOutState]) (FanInOutState, error) { return *c.State, nil }),
	},
}
