package rivet

import (
	"encoding/json"
	"time"
)

// MaxSchedules bounds the pending scheduled calls of one actor, as Rivet's
// schedule does (1000).
const MaxSchedules = 1000

// ScheduledCall is a call of one of the actor's own actions that the
// actor asked for at a later time (Scheduler.After or At).
type ScheduledCall struct {
	ID     string
	Action string
	// Args is the call's arguments as a JSON array.
	Args      json.RawMessage
	At        time.Time
	CreatedAt time.Time
	// Name and Every are a recurring call's (Scheduler.Every): At is its
	// next run.
	Name  string
	Every time.Duration
}

// Scheduler is an actor's durable timers for its own actions, like Rivet's
// c.schedule and Orleans' reminders. A scheduled call is stored with the
// turn that made it (an action that fails schedules nothing) and survives
// restarts, crashes and moves of the actor: whichever node owns the actor
// at At runs the action, as a turn of its own, with the stored arguments.
// Its run and the call's removal commit together, so a call that ran to
// the end is not run again, even if its node dies right after; a call whose
// action returns an error is removed and not retried (handle retries in
// the action). A call comes due at At or, if no node served the actor
// then, as soon as one does.
//
// Scheduling, and cancelling, changes the actor: a read-only action (Query,
// QueryArg) can only look. The calls of one turn commit in one etcd
// transaction, so a turn schedules and cancels at most 64 of them, with
// at most 256 KiB of arguments in all (ErrTooLarge past that).
type Scheduler interface {
	// After schedules action with args to run d from now (0 or less: as
	// soon as possible) and returns the call's id. The action must be one
	// of the actor's, taking len(args) arguments.
	After(d time.Duration, action string, args ...any) (string, error)
	// At is After for a time.
	At(t time.Time, action string, args ...any) (string, error)
	// Every schedules action with args to run every interval (at least a
	// second), the first run one interval from now, and returns the id
	// "every:"+name, which stays the same across runs. Scheduling a name
	// again replaces its call. A run that fails is not retried, but the
	// next one comes; runs missed while no node served the actor are
	// skipped, not caught up; the action can Cancel its own call.
	Every(name string, interval time.Duration, action string, args ...any) (string, error)
	// Get returns the pending call id.
	Get(id string) (ScheduledCall, bool)
	// List returns the pending calls, the earliest first.
	List() []ScheduledCall
	// Cancel removes the pending call id, and says whether there was one
	// (false: it ran, or was cancelled, already).
	Cancel(id string) (bool, error)
}
