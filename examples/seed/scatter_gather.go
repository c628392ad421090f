package seed

import (
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// ScatterMessage is a message of scatterGatherActor's "scatter" queue.
type ScatterMessage struct {
	Input int `json:"input"`
}

// ShardState is shardActor's state: it has none.
type ShardState struct{}

// ShardActor computes one part of a scattered request.
var ShardActor = rivet.Actor[ShardState]{
	Name: "shardActor",
	Actions: rivet.Actions[ShardState]{
		"compute":  rivet.Action(func(_ *rivet.ActionCtx[ShardState], input int) (int, error) { return input * 10, nil }),
		"getState": rivet.Query(func(c *rivet.ActionCtx[ShardState]) (ShardState, error) { return *c.State, nil }),
	},
}

// ScatterGatherState is scatterGatherActor's state.
type ScatterGatherState struct {
	LastSum int `json:"lastSum"`
}

// ScatterGatherActor is the seed's "Scatter-gather across actors" pattern:
// three shard actors work on the same input in parallel, and their answers
// are summed. The seed declares no queue; "scatter" (its wait entry's name
// without "wait-") carries the input.
var ScatterGatherActor = rivet.Actor[ScatterGatherState]{
	Name: "scatterGatherActor",
	Queues: rivet.Queues{
		"scatter": rivet.QueueOf[ScatterMessage](),
	},
	Run: func(ctx *workflow.Ctx[ScatterGatherState]) error {
		return ctx.Loop("scatter-gather-loop", func(loopCtx *workflow.Ctx[ScatterGatherState]) error {
			messages, err := workflow.NextBatch[ScatterMessage](loopCtx, "wait-scatter", workflow.NextOptions{
				Timeout: 30 * time.Second,
			})
			if err != nil {
				return err
			}

			if len(messages) == 0 {
				return nil
			}
			scatter := messages[0].Body

			gathered, err := workflow.Join(loopCtx, "gather", workflow.Branches[ScatterGatherState, int]{
				"shardA": func(joinCtx *workflow.Ctx[ScatterGatherState]) (int, error) {
					return workflow.Do(joinCtx, "call-shard-a", func(step *workflow.DoCtx) (int, error) {
						return callShard(step, "a", scatter.Input)
					})
				},
				"shardB": func(joinCtx *workflow.Ctx[ScatterGatherState]) (int, error) {
					return workflow.Do(joinCtx, "call-shard-b", func(step *workflow.DoCtx) (int, error) {
						return callShard(step, "b", scatter.Input)
					})
				},
				"shardC": func(joinCtx *workflow.Ctx[ScatterGatherState]) (int, error) {
					return workflow.Do(joinCtx, "call-shard-c", func(step *workflow.DoCtx) (int, error) {
						return callShard(step, "c", scatter.Input)
					})
				},
			})
			if err != nil {
				return err
			}

			return loopCtx.Step("aggregate", func(step *workflow.StepCtx[ScatterGatherState]) error {
				step.State.LastSum = gathered["shardA"] + gathered["shardB"] + gathered["shardC"]
				return nil
			})
		})
	},
	Actions: rivet.Actions[ScatterGatherState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[ScatterGatherState]) (ScatterGatherState, error) { return *c.State, nil }),
	},
}

func callShard(step *workflow.DoCtx, shardID string, input int) (int, error) {
	client := step.Client()
	handle := client.GetOrCreate("shardActor", shardID)
	return rivet.Call[int](step.Context(), handle, "compute", input)
}
