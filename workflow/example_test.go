package workflow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A reminder workflow, run against the in-memory host: it takes a message,
// sleeps until the reminder is due, records it, and waits for the next one.
// The host evicts it while it waits for a message that is not there; the
// outcome says what would wake it.
func Example() {
	type State struct{ Fired []string }
	type Reminder struct {
		Text string
		In   time.Duration
	}
	run := func(ctx *workflow.Ctx[State]) error {
		return ctx.Loop("reminder-loop", func(ctx *workflow.Ctx[State]) error {
			msg, err := workflow.Next[Reminder](ctx, "wait-reminder", workflow.NextOptions{Names: []string{"reminders"}})
			if err != nil {
				return err // ErrEvicted included: return it unchanged
			}
			if err := ctx.SleepUntil("wait-until-reminder", ctx.Now().Add(msg.Body.In)); err != nil {
				return err
			}
			return ctx.Step("record-reminder", func(s *workflow.StepCtx[State]) error {
				s.State.Fired = append(s.State.Fired, msg.Body.Text)
				return nil
			})
		})
	}

	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	host := workflowtest.NewHost(State{}, workflowtest.NewClock(start))
	host.Send("reminders", Reminder{Text: "stand up", In: time.Hour})
	host.Send("reminders", Reminder{Text: "send weekly report", In: 30 * time.Minute})

	out, _ := host.Drive(context.Background(), run, workflowtest.DriveOptions{})
	fmt.Println(out.Status, out.Wake.Queues)
	fmt.Println(host.State().Fired, host.Clock.Now().Sub(start))
	// Output:
	// yielded [reminders]
	// [stand up send weekly report] 1h30m0s
}
