package seed

import (
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// TaskMessage is a message of coordinatorActor's "task" queue.
type TaskMessage struct {
	TaskID   string `json:"taskId"`
	WorkerID string `json:"workerId"`
	Value    int    `json:"value"`
}

// WorkerState is workerActor's state: it has none.
type WorkerState struct{}

// WorkerActor runs the tasks coordinatorActor dispatches.
var WorkerActor = rivet.Actor[WorkerState]{
	Name: "workerActor",
	Actions: rivet.Actions[WorkerState]{
		"runTask":  rivet.Action(func(_ *rivet.ActionCtx[WorkerState], value int) (int, error) { return value * 2, nil }),
		"getState": rivet.Query(func(c *rivet.ActionCtx[WorkerState]) (WorkerState, error) { return *c.State, nil }),
	},
}

// CoordinatorState is coordinatorActor's state.
type CoordinatorState struct {
	// LastTaskID is null until the first task is recorded.
	LastTaskID *string `json:"lastTaskId"`
	LastResult int     `json:"lastResult"`
}

// CoordinatorActor is the seed's "Coordinator -> worker RPC" pattern: each
// task is dispatched to the worker actor it names, by calling its action.
// The seed declares no queue; "task" (its wait entry's name without
// "wait-") carries the tasks.
var CoordinatorActor = rivet.Actor[CoordinatorState]{
	Name: "coordinatorActor",
	Queues: rivet.Queues{
		"task": rivet.QueueOf[TaskMessage](),
	},
	Run: func(ctx *workflow.Ctx[CoordinatorState]) error {
		return ctx.Loop("orchestrator-loop", func(loopCtx *workflow.Ctx[CoordinatorState]) error {
			messages, err := workflow.NextBatch[TaskMessage](loopCtx, "wait-task", workflow.NextOptions{
				Timeout: 30 * time.Second,
			})
			if err != nil {
				return err
			}

			if len(messages) == 0 {
				return nil
			}
			task := messages[0].Body

			result, err := workflow.Step(loopCtx, "dispatch-rpc", func(step *workflow.StepCtx[CoordinatorState]) (int, error) {
				return dispatchTask(step, task)
			})
			if err != nil {
				return err
			}

			return loopCtx.Step("record-result", func(step *workflow.StepCtx[CoordinatorState]) error {
				step.State.LastTaskID = &task.TaskID
				step.State.LastResult = result
				return nil
			})
		})
	},
	Actions: rivet.Actions[CoordinatorState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[CoordinatorState]) (CoordinatorState, error) { return *c.State, nil }),
	},
}

func dispatchTask(step *workflow.StepCtx[CoordinatorState], task TaskMessage) (int, error) {
	client := step.Client()
	worker := client.GetOrCreate("workerActor", task.WorkerID)
	return rivet.Call[int](step.Context(), worker, "runTask", task.Value)
}
