package workflow

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Kind is what a history entry records.
type Kind string

// The entry kinds. They are stored, so their values never change.
const (
	KindStep               Kind = "step"
	KindLoop               Kind = "loop"
	KindSleep              Kind = "sleep"
	KindMessage            Kind = "message"
	KindRollbackCheckpoint Kind = "rollback_checkpoint"
	KindJoin               Kind = "join"
	KindRace               Kind = "race"
	KindRemoved            Kind = "removed"
	KindVersionCheck       Kind = "version_check"
	// KindJoinOutputs holds outputs of a settled join's branches, too
	// many to ride in its own record (Entry.OutputParts): one of its
	// entries under "name/~outputs/", which no code visits but the join.
	KindJoinOutputs Kind = "join_outputs"
	// KindHeldBranch records, while its join is pending, the failure of
	// one branch that failed while others went on (HeldBranchesHost), in
	// Branches under the branch's name (its own status is completed: the
	// record is): one of the join's entries under "name/~held/", one a
	// branch, which no code visits but the join, and which its settle
	// deletes (the join's record then holds the failure).
	KindHeldBranch Kind = "held_branch"
	// KindTry is a try block (Ctx.Try), which records no entry of its
	// own, only the entries in it (under "name/"), which record its
	// place (Entry.TryPlaces). Only Removed takes it: Removed(name,
	// KindTry) retires a block, accepting the entries it left in the
	// histories of workflows in flight. A *DivergenceError names a block
	// reached out of order with it.
	KindTry Kind = "try"
)

// Status is where an entry (or a join or race branch) stands. Stored.
type Status string

// The statuses. Not every kind uses every status: see Entry.
const (
	// StatusPending: started, not finished (a sleep before its deadline, a
	// loop between iterations, a join or race whose branches run).
	StatusPending Status = "pending"
	// StatusCompleted: finished; replay returns the recorded result.
	StatusCompleted Status = "completed"
	// StatusFailed: a step whose last attempt failed and that will be
	// retried after its backoff; a join, race or branch that settled with
	// an error.
	StatusFailed Status = "failed"
	// StatusExhausted: a step that failed for good (retries used up, or a
	// critical error). Sticky: replay fails it again.
	StatusExhausted Status = "exhausted"
	// StatusCancelled: a race branch that lost.
	StatusCancelled Status = "cancelled"
)

// Entry is one record of a workflow's history, keyed by its name path.
// Entries are JSON so that the host can store them as they are; the fields a
// kind does not use stay empty.
type Entry struct {
	// Path names the entry: the names of the enclosing scopes and its own,
	// joined by '/'. A loop iteration is the segment "~<n>"; a join or race
	// branch is the segment of its name: "charge-loop/~3/charge-card",
	// "par/x/work".
	Path string `json:"path"`
	// Seq is the entry's place among the entries of its scope, from 1, in
	// the order the code made them: a replay that reaches them in another
	// order has diverged. 0 (unknown) is not checked. A version gate or a
	// Removed placeholder that a replay under new code records before
	// entries an earlier run recorded shares the place of the first of
	// them (History.PlaceBefore): places may repeat, never go backwards.
	Seq int `json:"seq,omitempty"`
	// TryPlaces is, for an entry in a try block (which records no entry
	// of its own), the place of that block among the entries of the
	// scope that holds it, then the place of that scope in its own if it
	// is a try block too, and so on up to the first scope that is not:
	// a replay that reaches a try block in another order than its
	// entries' scope recorded it has diverged. Empty in an entry recorded
	// outside a try block, and in the entries of a try block first
	// recorded by a build before it (their order is not checked).
	TryPlaces []int  `json:"try_places,omitempty"`
	Kind      Kind   `json:"kind"`
	Status    Status `json:"status"`
	// Time is the workflow time after the entry: when a step or receive
	// completed, when a sleep ended, the end of the last recorded
	// iteration of a loop. Ctx.Now returns it, so replays see the same
	// time the first run saw.
	Time time.Time `json:"time,omitzero"`

	// Steps.
	Attempts      int             `json:"attempts,omitempty"`
	LastAttemptAt time.Time       `json:"last_attempt_at,omitzero"`
	Output        json.RawMessage `json:"output,omitempty"` // also a loop's or race's result
	Error         *RecordedError  `json:"error,omitempty"`
	Failure       FailureKind     `json:"failure,omitempty"` // why an exhausted step failed
	// HasRollback marks a step whose body succeeded and that has a
	// rollback handler, so that a rollback can tell a handler it did not
	// get (its scope was not replayed) from a step that has none: a
	// completed step, or one that failed because the host refused the
	// state its success left (StepEnv.Check), which records the output
	// for its compensation.
	HasRollback  bool `json:"has_rollback,omitempty"`
	RollbackDone bool `json:"rollback_done,omitempty"`
	// RollbackSettled marks a compensated step (RollbackDone) that a
	// retry kept (retry --from a later entry): the workflow went on with
	// its effect undone. A later rollback does not undo it again, as for
	// any compensated step, and a later plain retry does not take it for
	// a compensation of its failure to run again: the workflow then
	// resumes where that failure stopped it.
	RollbackSettled bool           `json:"rollback_settled,omitempty"`
	RollbackError   *RecordedError `json:"rollback_error,omitempty"` // the handler failed for good
	// RollbackAttempts counts the handler's attempts recorded so far, as
	// Attempts does the step's: a handler that fails is retried under
	// the step's retry policy, after the backoff from RollbackAttemptAt
	// (the start of its last attempt), and RollbackRetryError holds that
	// attempt's error meanwhile. Absent from entries recorded before
	// handlers were retried.
	RollbackAttempts   int            `json:"rollback_attempts,omitempty"`
	RollbackAttemptAt  time.Time      `json:"rollback_attempt_at,omitzero"`
	RollbackRetryError *RecordedError `json:"rollback_retry_error,omitempty"`

	// Sleeps, and receives with a timeout: recorded on the first call, so
	// that a replay never resets it.
	Deadline time.Time `json:"deadline,omitzero"`

	// Loops. Iteration is the next iteration to run; State is the loop
	// state it starts from. Iterations before PrunedBefore were deleted
	// (in slots, Slots: left to be overwritten, and dropped when a host
	// reads the history).
	Iteration    int             `json:"iteration,omitempty"`
	PrunedBefore int             `json:"pruned_before,omitempty"`
	State        json.RawMessage `json:"state,omitempty"`
	// Slots, if not 0, is how many iterations of the loop a host keeps in
	// storage slots (SlotHost): iteration i's entries overwrite those of
	// iteration i-Slots, which pruning has dropped. Decided when the loop
	// is first recorded, and kept for that loop: code deployed since that
	// prunes it less, or not at all, prunes within them.
	Slots int `json:"slots,omitempty"`
	// TookMessages marks a loop run under a race whose pruning deleted
	// receives that took messages not all completed: its race branch took
	// them, so it holds the race's claim (it wins if it finishes), which a
	// replay can no longer tell from the receives. Absent from loops
	// recorded before it was, whose replays give the claim up as they did.
	TookMessages bool `json:"took_messages,omitempty"`

	// Receives: the messages taken, in the order taken.
	Messages []RecordedMessage `json:"messages,omitempty"`

	// Joins and races.
	Branches map[string]Branch `json:"branches,omitempty"`
	Winner   string            `json:"winner,omitempty"`
	// OutputParts is, for a settled join whose branches' outputs were
	// too large together to ride in one commit (MaxRidingBytes), how
	// many KindJoinOutputs entries hold them (at outputsPart(path, i)),
	// committed each on its own before this record: its Branches keep
	// every branch's name and status, those entries their outputs. 0:
	// the outputs are in Branches.
	OutputParts int `json:"output_parts,omitempty"`

	// Removed placeholders: the kind of the entry that was removed.
	RemovedKind Kind `json:"removed_kind,omitempty"`

	// Version checks.
	Version int `json:"version,omitempty"`
	Latest  int `json:"latest,omitempty"`

	// StartedAt, on an entry at the top of the workflow (in its own
	// scope or in try blocks there; not in a loop's iteration or a
	// branch), is when the run that committed the history's first entry
	// started: Ctx.Now before any entry that records a time, the same on
	// every replay. Every such entry a run writes carries it, so that it
	// stays while any of them does (loops prune only within themselves).
	// Absent from histories recorded before it (their Ctx.Now there is
	// the host's clock, as it was).
	StartedAt time.Time `json:"started_at,omitzero"`
}

// Branch is the record of one join or race branch.
type Branch struct {
	Status Status          `json:"status"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  *RecordedError  `json:"error,omitempty"`
	// FailedAt is, for a failed branch of a failed join or race, the
	// entry whose failure failed it (a step, join or race), or NoEntry if
	// its error names none (the branch's own error). A retry of the failed
	// join or race runs that entry again, not the failures a Try caught in
	// the branch. Empty in a branch recorded before it was (a race's
	// branches before failed races kept their entries for a retry), and in
	// a race's losers (their history goes with them).
	FailedAt string `json:"failed_at,omitempty"`
}

// NoEntry is a Branch's FailedAt when its error names no entry.
const NoEntry = "-"

// RawMessage is a queue message as the host hands it over.
type RawMessage struct {
	// ID orders an actor's messages (FIFO across its queues).
	ID    uint64          `json:"id"`
	Queue string          `json:"queue"`
	Body  json.RawMessage `json:"body"`
	// CreatedAt is when the message was first enqueued (when it became
	// visible to Queued, see MessagePeeker; a message put back in its
	// queue, HistoryWrite.Requeue, keeps it), as precisely as the Host's
	// Now (and the same however the host reads it): the engine ranks it
	// against a receive's deadline (see MessagePeeker), and a time cut to
	// a coarser unit ranks a message sent just after the deadline before
	// it.
	CreatedAt time.Time `json:"created_at"`
}

// RecordedMessage is a message as a receive entry records it.
type RecordedMessage struct {
	RawMessage
	// Completed is set once the workflow completed the message, so that a
	// replayed Complete does not answer its sender twice.
	Completed bool `json:"completed,omitempty"`
}

// HistoryWrite is one change to the history: Put sets an entry, DeleteTree
// deletes the entry at a path and every entry under it. Exactly one is set.
//
// Requeue, set alone, changes the queues instead: it puts the messages back
// in their queues, each under its own ID (so ahead of any message sent
// since it was taken). The engine writes it with the deletion of the
// receive entries that took them, in one batch, as those entries are the
// messages' only record: a race's decision deleting a loser's history.
type HistoryWrite struct {
	Put        *Entry       `json:"put,omitempty"`
	DeleteTree string       `json:"delete_tree,omitempty"`
	Requeue    []RawMessage `json:"requeue,omitempty"`
	// Prune marks a DeleteTree of a loop's iteration that pruning drops:
	// a host that keeps the loop's iterations in slots (Entry.Slots)
	// leaves them to be overwritten, and deletes only the entries of
	// earlier iterations that the pruned one did not overwrite.
	Prune bool `json:"prune,omitempty"`
}

// Under reports whether path is tree or lies under it.
func Under(path, tree string) bool {
	return path == tree || (strings.HasPrefix(path, tree) && len(path) > len(tree) && path[len(tree)] == '/')
}

func joinPath(scope, name string) string {
	if scope == "" {
		return name
	}
	return scope + "/" + name
}

// IsIteration reports whether path names a loop iteration ("l/~3"): a
// scope, never an entry of its own (names cannot start with '~'), so a
// host deleting its tree has only the entries under it to delete.
func IsIteration(path string) bool {
	return strings.HasPrefix(path[strings.LastIndexByte(path, '/')+1:], "~")
}

func iterationPath(loop string, i int) string {
	// Its number in a buffer of the stack: one allocation, not two past
	// iteration 99.
	var num [20]byte
	return loop + "/~" + string(strconv.AppendInt(num[:0], int64(i), 10))
}

// clone returns a copy that shares nothing mutable with e: entries in a
// History are never changed in place, only replaced.
func (e *Entry) clone() *Entry {
	c := *e
	if e.TryPlaces != nil {
		c.TryPlaces = append([]int(nil), e.TryPlaces...)
	}
	if e.Messages != nil {
		c.Messages = append([]RecordedMessage(nil), e.Messages...)
	}
	if e.Branches != nil {
		c.Branches = make(map[string]Branch, len(e.Branches))
		for k, v := range e.Branches {
			c.Branches[k] = v
		}
	}
	return &c
}
