package caller

import (
	"encoding/json"
	"time"
)

// ScheduledCall is a call of one of the actor's own actions that the
// actor asked for at a later time (Scheduler.After or At).
type ScheduledCall struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	// Args is the call's arguments as a JSON array. A client's Inspect
	// gets it empty when the node left it out of a response too large to
	// carry every call's arguments (the largest go first).
	Args      json.RawMessage `json:"args"`
	At        time.Time       `json:"at"`
	CreatedAt time.Time       `json:"created_at"`
	// Name and Every, or Name and Cron, are a recurring call's
	// (Scheduler.Every, Scheduler.Cron): At is its next run. (Every is in
	// nanoseconds in JSON, as time.Duration is.)
	Name  string        `json:"name,omitempty"`
	Every time.Duration `json:"every,omitzero"`
	Cron  string        `json:"cron,omitempty"`
	// LastRun, for a recurring call that has run, is when its last run
	// came due; LastError is how that run failed ("": it ran to the end,
	// or there was none).
	LastRun   time.Time `json:"last_run,omitzero"`
	LastError string    `json:"last_error,omitempty"`
}

// Scheduler is an actor's durable timers for its own actions, like Rivet's
// c.schedule and Orleans' reminders. A scheduled call is stored with the
// turn that made it (an action that fails schedules nothing) and survives
// restarts, crashes and moves of the actor: whichever node owns the actor
// at At runs the action, as a turn of its own, with the stored arguments.
// Its run and the call's removal commit together, so a call that ran to
// the end is not run again, even if its node dies right after; a call whose
// action returns an error is removed and not retried (handle retries in
// the action), as is one whose action the deployed code lacks, but a
// recurring call's next run comes all the same (cancel a recurring call of
// an action removed on purpose: it fails at every run). A call comes due at At or, if no node served the actor
// then, as soon as one does.
//
// Scheduling, and cancelling, changes the actor: a read-only action (rivet.Query,
// QueryArg) can only look (it gets rivet.ErrInternal, a bug in the actor's
// code). A call's action is checked when it is scheduled: an unknown
// action, the wrong number of arguments or arguments that do not decode
// as its types are rivet.ErrInvalidArgument then, not a failure later. Its
// target may be a read-only action too (it runs, and changes nothing). The calls of one turn commit in one etcd
// transaction, so a turn schedules and cancels at most 64 of them, the
// messages it enqueues counted with them (rivet.ActionCtx.Enqueue), with
// at most 256 KiB of arguments in all (rivet.ErrTooLarge past that).
type Scheduler interface {
	// After schedules action with args to run d from now (0 or less: as
	// soon as possible) and returns the call's id. The action must be one
	// of the actor's, taking len(args) arguments.
	After(d time.Duration, action string, args ...any) (string, error)
	// At is After for a time; a time past runs as soon as possible. The
	// zero time is refused (an unset time.Time), as is one past the year
	// 2286.
	At(t time.Time, action string, args ...any) (string, error)
	// Every schedules action with args to run every interval (at least a
	// second), the first run one interval from now, and returns the id
	// "every:"+name, which stays the same across runs (a name is up to 64
	// letters, digits, '_' and '-', starting with a letter). Scheduling a
	// name again replaces its call, unless nothing about it changed (the
	// interval, action and arguments): then its pending run stays, so that
	// code scheduling it on every wake does not push it back. A run that
	// fails is not retried, but the next one comes. Of the runs missed
	// while no node served the actor (a restart, a failover), one runs as
	// soon as a node serves it (the earliest: ScheduledCall.At says when
	// it was due) and the rest are skipped, not caught up; the next run
	// keeps to the call's own grid of times, so it may follow within
	// moments (an hourly call that missed its 10:00 run, its node back at
	// 10:59, runs at 10:59 and at 11:00). The action can Cancel its own
	// call, and that cancel stands even if the action then fails (which
	// discards its other changes). Runs go up to the year 2286, as At's:
	// an interval whose first run is later is refused, and the call ends
	// with its last run before then.
	Every(name string, interval time.Duration, action string, args ...any) (string, error)
	// Cron schedules action with args to run at the times of a cron
	// expression (Rivet's c.cron.set): five fields, minute hour
	// day-of-month month day-of-week ("0 9 * * 1-5": 9:00 on weekdays), or
	// @yearly, @monthly, @weekly, @daily or @hourly; in UTC, unless it
	// begins with CRON_TZ= and an IANA zone ("CRON_TZ=Europe/Paris 0 9 * *
	// 1-5"), never the node's own zone. It is a recurring call as Every's
	// are, and shares their names: the id is "every:"+name, scheduling a
	// name again replaces its call (or keeps it, if nothing changed), a run
	// that fails is not retried, and of the runs missed while no node
	// served the actor one runs as soon as a node serves it and the rest
	// are skipped, the next at the expression's first time after that (as
	// Every's). Where the zone's clocks change, a run at a time the zone
	// repeats runs once, and one at a time it skips runs that day, shifted
	// by the gap (Vixie cron's rule). An expression that does not
	// parse, or never comes due, is rivet.ErrInvalidArgument.
	Cron(name, expr, action string, args ...any) (string, error)
	// Get returns the pending call id.
	Get(id string) (ScheduledCall, bool)
	// List returns the pending calls, the earliest first. A destroy the
	// actor asked for (rivet.ActionCtx.Destroy) is not one of them: Get,
	// List and Cancel do not see it (a turn that cancels every call it
	// lists does not withdraw it); an operator's inspect shows it, as a
	// call of "$destroy".
	List() []ScheduledCall
	// Cancel removes the pending call id, and says whether there was one
	// (false: it ran, or was cancelled, already).
	Cancel(id string) (bool, error)
}
