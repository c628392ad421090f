package seed

import (
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// Reminder is a message of reminderActor's "reminders" queue.
type Reminder struct {
	Text string `json:"text"`
	At   int64  `json:"at"` // unix ms
}

// ReminderState is reminderActor's state.
type ReminderState struct {
	Fired []string `json:"fired"`
}

// ReminderActor is the seed's "Timers" pattern: queue messages trigger a
// durable sleep until the reminder's time, then the reminder is recorded.
var ReminderActor = rivet.Actor[ReminderState]{
	Name:  "reminderActor",
	State: ReminderState{Fired: []string{}},
	Queues: rivet.Queues{
		"reminders": rivet.QueueOf[Reminder](),
	},
	Run: func(ctx *workflow.Ctx[ReminderState]) error {
		return ctx.Loop("reminder-loop", func(loopCtx *workflow.Ctx[ReminderState]) error {
			message, err := workflow.Next[Reminder](loopCtx, "wait-reminder")
			if err != nil {
				return err
			}

			runAt := time.UnixMilli(max(loopCtx.Now().UnixMilli(), message.Body.At))
			if err := loopCtx.SleepUntil("wait-until-reminder", runAt); err != nil {
				return err
			}

			return loopCtx.Step("record-reminder", func(step *workflow.StepCtx[ReminderState]) error {
				step.State.Fired = append(step.State.Fired, message.Body.Text)
				return nil
			})
		})
	},
	Actions: rivet.Actions[ReminderState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[ReminderState]) (ReminderState, error) { return *c.State, nil }),
	},
}
