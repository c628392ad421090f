package runtime

import (
	"encoding/json"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/workflow"
)

// Ref names one actor.
type Ref struct {
	Name string
	Key  []string
}

// Chain identifies a call chain across actors, so that A -> B -> A re-enters
// A's turn instead of waiting for it (a deadlock). Callers outside actors
// leave it zero.
type Chain struct {
	ID string
}

// CallRequest runs one action.
type CallRequest struct {
	Ref    Ref
	Action string
	// Args is a JSON array; empty means [].
	Args json.RawMessage
	// CreateIfMissing gives getOrCreate semantics; otherwise a missing
	// actor is rivet.ErrNotFound.
	CreateIfMissing bool
	// Input is the create input, used only if this call creates the actor.
	Input json.RawMessage
	Chain Chain
	// ReadOnly asks for a read-only action: any other is refused
	// (rivet.ErrFailedPrecondition, reason actor.not_read_only) before it
	// runs or creates the actor, so that the caller may send the call
	// again after a break that left its outcome unknown.
	ReadOnly bool
	// IdempotencyKey, if set, makes the call run once (callkeys.go): the
	// actor records the key and the result with the action's change, and
	// the same call with the same key gets that result without running.
	IdempotencyKey string
}

// CreateOptions are the options of Host.CreateWith.
type CreateOptions struct {
	// IdempotencyKey is caller.CreateOptions.IdempotencyKey, which says
	// what it does.
	IdempotencyKey string
	// Chain is the call chain of an actor's create (rivet.Create from an
	// action, a step, a hook), zero for a client's: a create made by a
	// turn that a handoff of the new actor's partition waits for is served
	// on the partition's claim, as that turn's calls are (letIn). A create
	// takes no turn of an actor that exists, so it never queues behind
	// other turns and is never refused as overloaded, whoever sends it (it
	// waits for the new actor's hooks, its first turn, which run on a
	// chain of their own, not this one).
	Chain Chain
}

// SendRequest appends a message to a queue.
type SendRequest struct {
	Ref             Ref
	Queue           string
	Body            json.RawMessage
	CreateIfMissing bool
	Input           json.RawMessage
	// Wait asks to return once the message was completed by the actor's
	// workflow, for at most Timeout (0: 30 s).
	Wait    bool
	Timeout time.Duration
	// RequireRunning refuses the send, as one with Wait is, unless the
	// actor's workflow runs (caller.SendOptions.RequireRunning): before
	// anything is queued or the key recorded. A duplicate answers as one.
	RequireRunning bool
	Chain          Chain
	// IdempotencyKey, if set, makes the send happen once (idempotency.go):
	// a send to the same actor with a key it recorded queues nothing, and
	// its result is the first one's, with Duplicate set.
	IdempotencyKey string
}

// Send statuses, and the states of a message whose sender's wait ran out
// (SendResult.MessageState).
const (
	SendEnqueued  = caller.SendEnqueued
	SendCompleted = caller.SendCompleted
	SendTimedOut  = caller.SendTimedOut
	MessageQueued = caller.MessageQueued
	MessageTaken  = caller.MessageTaken
)

// SendResult says what became of a sent message (caller.SendResult: an
// actor's handles return it as it is). With Wait, SendEnqueued says that
// the message is queued but its completion could not be waited for here
// (the actor moved to another node, or this one stopped): the workflow
// completes it all the same.
type SendResult = caller.SendResult

// ActorInfo is what is known of an actor without activating it.
type ActorInfo struct {
	Ref       Ref
	CreatedAt time.Time
	Partition uint32
	// Owner is the node that owns the actor's partition ("" if none).
	Owner string
	// WorkflowError and WorkflowFailedAt are set in a list of failed
	// workflows (ListOptions.FailedWorkflows): the workflow's error (cut
	// to 1 KiB; Inspect has all of it) and when it failed.
	WorkflowError    string
	WorkflowFailedAt time.Time
}

// callerInfo is i as the caller package has it (what rivet.Create
// answers an actor's code).
func (i ActorInfo) callerInfo() caller.ActorInfo {
	return caller.ActorInfo{
		Name: i.Ref.Name, Key: i.Ref.Key, CreatedAt: i.CreatedAt, Partition: i.Partition, Owner: i.Owner,
		WorkflowError: i.WorkflowError, WorkflowFailedAt: i.WorkflowFailedAt,
	}
}

// QueueDepth is the number of messages waiting in one queue.
type QueueDepth struct {
	Queue string
	Depth uint64
}

// Inspection is an actor's state and runtime facts.
type Inspection struct {
	Info ActorInfo
	// State is the committed state, JSON.
	State  json.RawMessage
	Active bool
	Queues []QueueDepth
	// WorkflowStatus is "" for an actor without a workflow.
	WorkflowStatus string
	WorkflowError  string
	// WorkflowWake says what would wake a sleeping workflow: the time
	// (zero if none is known), and the queues only while the actor is in
	// memory (otherwise a message activates it and its replay decides).
	WorkflowWake workflow.Wake
	// Schedules is the actor's pending scheduled calls (rivet.Scheduler)
	// as storage holds them, the earliest first.
	Schedules []rivet.ScheduledCall
	// Events are the events the actor's type declares, sorted;
	// Subscribers, the subscriptions to them this node holds now.
	Events      []string
	Subscribers int
	// Unregistered says that the node that owns the actor runs no actor
	// type of its name (a type removed from the code, or renamed): it is
	// stored, nothing runs it, and only Inspect and Destroy reach it.
	Unregistered bool
	// PendingSteps are the workflow's steps in flight (Temporal's pending
	// activities), in the order they started: known only while the actor
	// is in memory on its owner (Active), empty otherwise. At most 1,000:
	// PendingStepsOmitted counts the others (a join of thousands).
	PendingSteps        []PendingStep
	PendingStepsOmitted int
}

// PendingStep is a step of a workflow in flight: its body runs now (a
// Step's or a Do's; a join or race may run several at once), or it waits
// out its retry backoff after a failed attempt. A rollback handler's
// attempts are not shown, nor a workflow's steps when its actor is not in
// memory (a backoff longer than the idle timeout, after a restart): what
// storage holds of them is its history (Host.History) and its wakeup's
// time (Inspection.WorkflowWake).
type PendingStep struct {
	// Path is the step's history path ("charge-loop/~3/charge-card").
	Path string
	// Attempt is the attempt running (StepCtx.Attempt), or, while the step
	// waits out its backoff, the one that runs next; MaxAttempts, the most
	// it has (1 + its options' MaxRetries; a timeout is retried only with
	// RetryOnTimeout).
	Attempt     int
	MaxAttempts int
	// StartedAt is when the running attempt's body started (the clock's
	// time, the one its history record keeps as its last attempt's);
	// zero while the step waits out its backoff.
	StartedAt time.Time
	// LastError is the error of the step's previous attempt, as its
	// history records it (in this activation or an earlier one: a retry
	// after a restart has it too); "" before a first attempt failed.
	LastError string
	// NextAttemptAt is, while the step waits out its backoff, when its
	// next attempt runs (the backoff's end); zero while a body runs.
	NextAttemptAt time.Time
}

// ListOptions page through actors.
type ListOptions struct {
	// Name restricts the list to one actor name; "" lists all.
	Name string
	// Limit is the page size: 0 means 100; at most 1000.
	Limit int
	// PageToken continues a previous List.
	PageToken string
	// FailedWorkflows lists only the actors whose workflow is failed
	// (exhausted a step's retries, diverged from its history...), from
	// their own index: a failure recorded before that index existed is
	// not listed until the workflow fails again.
	FailedWorkflows bool
}

// ListResult is one page of actors.
type ListResult struct {
	Actors        []ActorInfo
	NextPageToken string
}

// Member is one node of the cluster as the runtime knows it.
type Member struct {
	NodeID          string
	GRPCAddr        string
	State           string
	PartitionsOwned uint32
	StartedAt       time.Time
	GossipAddr      string
	HTTPAddr        string
	Draining        bool
	// Unreachable says that the node answering cannot reach this one's
	// gRPC, though it is registered.
	Unreachable bool
	// Build is the node's build, from its registration ("" for older
	// builds, and for a node gossip knows that holds no registration).
	Build string
	// ActorTypes are the actor types the node registers, sorted, from its
	// registration; nil if ActorTypesKnown is false (a build before
	// NodeRecord.ActorTypes, or a node with no registration).
	ActorTypes      []string
	ActorTypesKnown bool
	// StorageFormat is the newest storage format the node's build reads
	// and writes, from its registration (NodeRecord.Format); 0 when
	// unknown: a node gossip knows that holds no registration.
	StorageFormat int
}

// PartitionOwner is one row of the partition table.
type PartitionOwner struct {
	Partition uint32
	Owner     string
	Token     int64
}

// Stats are counters of one node. Counters count since the Host was made;
// gauges (ActiveActors, TasksRunning, PartitionsOwned, QueuedMessages,
// WorkflowsRunning)
// are the value now.
type Stats struct {
	NodeID       string
	ActiveActors uint64
	// Hot is the node's busiest actors (HotActors), where asked for;
	// HotCounted says the node counts turns (an older node does not).
	Hot        []HotActor
	HotCounted bool
	// Retrying is the node's actors in memory whose workflow retries a
	// step (RetryingWorkflows), where asked for; RetryingCounted says the
	// node looked (an older node does not).
	Retrying        []RetryingWorkflow
	RetryingCounted bool
	// RetryingOmitted counts the retrying workflows left out after
	// Retrying to bound an answer's size.
	RetryingOmitted int
	// TasksRunning is the actors' KeepAwake functions running now.
	TasksRunning uint64
	// ActorsShed counts the actors deactivated before their idle timeout
	// because the node held more than Config.MaxActiveActors.
	ActorsShed uint64
	// CallsShed counts the calls refused because as many turns as
	// Config.MaxWaitingCalls waited for their actor already
	// (actor.overloaded).
	CallsShed uint64
	// SchedulesFired counts scheduled calls whose action ran to the end;
	// SchedulesFailed the runs that failed (the action's error, or an
	// action or arguments that no longer fit): a one-shot call is used up
	// by it, a recurring one's next run comes.
	SchedulesFired, SchedulesFailed uint64
	// SendKeysEvicted and CallKeysEvicted count idempotency keys an actor
	// dropped to keep its last 1024 while they were still within their
	// 24 hours: a send or call sent again with one of them runs again.
	SendKeysEvicted, CallKeysEvicted uint64
	// WakeHooksFailed counts activations whose CreateVars or OnWake failed
	// (each failed the request that woke the actor); SleepHooksFailed and
	// DestroyHooksFailed, OnSleep and OnDestroy failures (logged; the
	// actor slept or was destroyed all the same).
	WakeHooksFailed, SleepHooksFailed, DestroyHooksFailed uint64
	Calls                                                 uint64
	Commits                                               uint64
	CommitBatches                                         uint64
	PartitionsOwned                                       uint32

	// QueuedMessages is the pending queue messages of the actors in memory
	// on this node, summed.
	QueuedMessages uint64
	// MessagesSent counts messages durably appended to queues (Send);
	// MessagesReceived, messages workflows took from them.
	MessagesSent, MessagesReceived uint64
	// WorkflowsRunning is the workflow runs in memory on this node (working,
	// or waiting in memory for a message or a time).
	WorkflowsRunning uint64
	// WorkflowsCompleted and WorkflowsFailed count workflows that ended on
	// this node; WorkflowsCancelled those CancelWorkflow stopped here.
	WorkflowsCompleted, WorkflowsFailed, WorkflowsCancelled uint64
	// StepsCompleted, StepsFailed and StepsExhausted count committed step
	// attempts by outcome: done, failed (to be retried), failed for good.
	StepsCompleted, StepsFailed, StepsExhausted uint64
	// Refences counts partitions this node claimed again because one of
	// their writes had an unknown outcome (Host.InDoubt).
	Refences uint64
	// Resolved counts replies that waited on a write whose outcome was
	// unknown and learned it from storage once its claim was replaced.
	Resolved uint64
	// EventSubscribers is the event subscriptions this node holds;
	// EventsDelivered counts events handed to them, and
	// EventSubscribersDropped the subscriptions ended because their
	// subscriber fell behind.
	EventSubscribers                         uint64
	EventsDelivered, EventSubscribersDropped uint64
}

// HistoryEntry is one recorded workflow entry, for people.
type HistoryEntry struct {
	Path string
	Kind string
	// Status is the entry's; a held_branch row's (a pending join's branch
	// that failed while others went on) is its branch's, failed, with
	// its error in Error, as a reader looks for the failure there.
	Status   string
	Attempts int
	// Output is the entry's recorded value; a loop's state; for a receive
	// that completed, the messages it took (workflow.RecordedMessage, a
	// JSON array, empty if it timed out), as a history of signals shows
	// their payloads.
	Output json.RawMessage
	Error  string
	// ErrorCode is the error's code, if it had one (a UserError's).
	ErrorCode string
	// ErrorRivetKind is the rivet kind the error matched when it was
	// recorded (workflow.RecordedError.RivetKind), "" for none or for an
	// entry recorded before the kind was kept.
	ErrorRivetKind string
	UpdatedAt      time.Time
	// Winner is the branch that won a race.
	Winner string
	// Deadline is when a sleep ends, or a receive with a timeout gives
	// up: recorded when the workflow first reached it.
	Deadline time.Time
	// HasRollback says that a step whose body succeeded has a rollback
	// handler (workflow.StepWithRollback): a completed step, or one the
	// node's limits failed for the state it left. RollbackDone says that the handler ran
	// and succeeded in a rollback of the workflow; RollbackError (and its
	// code, RollbackErrorCode) is its error if it failed for good (its
	// retries used up, or an error no retry changes), which stopped the
	// rollback there. RollbackAttempts counts the handler's attempts,
	// retried under the step's policy: with neither done nor an error,
	// the rollback waits to run it again (0 in histories recorded before
	// handlers were retried), and RollbackRetryError (and its code) is
	// the error of its last attempt: why it waits.
	HasRollback  bool
	RollbackDone bool
	// RollbackSettled says that a retry kept the compensated step (retry
	// --from a later entry): the workflow went on with its effect undone,
	// and a later failure's plain retry does not run it again.
	RollbackSettled        bool
	RollbackError          string
	RollbackErrorCode      string
	RollbackAttempts       int
	RollbackRetryError     string
	RollbackRetryErrorCode string
	// Version is what a version gate (kind version_check) resolved to (1:
	// the old path), and Latest the latest version its code knew then.
	Version, Latest int
	// RemovedKind is the kind of the entry a removed placeholder stands in
	// for.
	RemovedKind string
	// Failure is, for a step that failed for good (Status exhausted), why:
	// workflow.FailureExhausted, FailureCritical, FailureTimeout or
	// FailureRollback.
	Failure string
	// Entry is, for HistoryOptions.Raw, the entry as the engine records
	// and replays it (workflow.MarshalEntry); Output is then nil.
	Entry json.RawMessage
}

// History is an actor's workflow status and history, its entries in the
// order the workflow made them (each followed by the entries under it).
type History struct {
	WorkflowStatus string
	WorkflowError  string
	// WorkflowWake is as Inspection's.
	WorkflowWake workflow.Wake
	Entries      []HistoryEntry
	// NextPageToken continues a page of HistoryPage: "" on the last page
	// (and for the whole history).
	NextPageToken string
	// PageTokens, on a page of HistoryPage with a Limit, holds for each
	// entry the token that resumes after it, for a caller that cuts the
	// page short (one that would not fit in a message).
	PageTokens []string
}

// RetryOptions shape a RetryWorkflowWith.
type RetryOptions struct {
	// From is the entry to run again from; "" for the entries that failed.
	From string
	// OnlyFailed retries only a failed workflow: a completed or cancelled
	// one is left as it is (rivet.ErrWorkflowFailed, reason
	// workflow.not_failed), decided in the retry's own turn, so that no
	// retry or cancel in between is overridden.
	OnlyFailed bool
	// DropMessages drops the messages that the receives the retry deletes
	// took, rather than put them back in their queues: a poison message's
	// way out (retry from its receive). rivet.ErrInvalidArgument if the
	// retry deletes no receive that took one. It implies OnlyFailed.
	DropMessages bool
	// DryRun makes the retry's checks (its status, a replay of what it
	// would leave against the code deployed now; not its transaction's
	// size) and says what it would remove and drop, writing nothing. The
	// actor is loaded if it was not in memory (its OnWake runs).
	DryRun bool
}

// RetryResult is what a RetryWorkflowWith did.
type RetryResult struct {
	// Removed counts the history entries deleted for the replay; not a
	// pending join's failures held apart (held_branch), which are the
	// join's bookkeeping, so that it counts the same whichever way the
	// join holds them.
	Removed int
	// Dropped counts the messages a DropMessages retry dropped.
	Dropped int
}

// HistoryOptions page through a workflow's history.
type HistoryOptions struct {
	// Limit is the page size: 0 means no bound (the whole history, or
	// all of it after PageToken); at most 1000.
	Limit int
	// PageToken continues a previous page: with the entry after its last,
	// in the history's order. It names that entry's place in the order,
	// not a count, so entries recorded since before it (a join's branch
	// running behind) are not listed, and none is listed twice.
	PageToken string
	// Raw asks for each entry as the engine records it (HistoryEntry's
	// Entry), to export the history (workflow.HistoryExport).
	Raw bool
}
