package rivet

import "github.com/rivet-go/rivet/caller"

// MaxSchedules bounds the pending scheduled calls of one actor, as Rivet's
// schedule does (1000). A destroy the actor asked for (ActionCtx.Destroy),
// which inspect shows as a call of "$destroy", is not one of them (nor
// one Scheduler.List shows).
const MaxSchedules = 1000

// ScheduledCall is a call of one of the actor's own actions that the actor
// asked for at a later time (see caller.ScheduledCall).
type ScheduledCall = caller.ScheduledCall

// Scheduler is an actor's durable timers for its own actions, Rivet's
// c.schedule and Orleans' reminders (see caller.Scheduler).
type Scheduler = caller.Scheduler
