package seed

import (
	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/workflow"
)

// Refresh is a message of dashboardActor's "refresh" queue: it carries
// nothing (the seed's Record<string, never>).
type Refresh struct{}

// Summary is what dashboardActor gathers.
type Summary struct {
	Users   float64 `json:"users"`
	Orders  float64 `json:"orders"`
	Revenue float64 `json:"revenue"`
}

// DashboardState is dashboardActor's state.
type DashboardState struct {
	// Summary is null until the first refresh is saved.
	Summary *Summary `json:"summary"`
}

// DashboardActor is the seed's "Join" pattern: three independent fetches
// run in parallel, and the workflow goes on once all of them are done.
var DashboardActor = rivet.Actor[DashboardState]{
	Name: "dashboardActor",
	Queues: rivet.Queues{
		"refresh": rivet.QueueOf[Refresh](),
	},
	Run: func(ctx *workflow.Ctx[DashboardState]) error {
		return ctx.Loop("dashboard-loop", func(loopCtx *workflow.Ctx[DashboardState]) error {
			if _, err := workflow.Next[Refresh](loopCtx, "wait-refresh"); err != nil {
				return err
			}

			summary, err := workflow.Join(loopCtx, "fetch-summary", workflow.Branches[DashboardState, float64]{
				"users": func(branchCtx *workflow.Ctx[DashboardState]) (float64, error) {
					return workflow.Do(branchCtx, "fetch-users", func(step *workflow.DoCtx) (float64, error) {
						return exampleapi.FetchCount(step.Context(), "/users")
					})
				},
				"orders": func(branchCtx *workflow.Ctx[DashboardState]) (float64, error) {
					return workflow.Do(branchCtx, "fetch-orders", func(step *workflow.DoCtx) (float64, error) {
						return exampleapi.FetchCount(step.Context(), "/orders")
					})
				},
				"revenue": func(branchCtx *workflow.Ctx[DashboardState]) (float64, error) {
					return workflow.Do(branchCtx, "fetch-revenue", func(step *workflow.DoCtx) (float64, error) {
						return exampleapi.FetchCount(step.Context(), "/revenue")
					})
				},
			})
			if err != nil {
				return err
			}

			return loopCtx.Step("save-summary", func(step *workflow.StepCtx[DashboardState]) error {
				step.State.Summary = &Summary{Users: summary["users"], Orders: summary["orders"], Revenue: summary["revenue"]}
				return nil
			})
		})
	},
	Actions: rivet.Actions[DashboardState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[DashboardState]) (DashboardState, error) { return *c.State, nil }),
	},
}
