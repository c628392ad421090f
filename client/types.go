package client

import (
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
)

// These types mirror the node's (package runtime) rather than reuse them,
// so that the SDK does not pull a node's dependencies (etcd) into every
// program that calls actors. The JSON tags are the wire's field names, as
// rivetctl prints them.

// ActorInfo is what is known of an actor without activating it: the
// caller package's, which an actor's code gets from rivet.Create too.
type ActorInfo = caller.ActorInfo

// QueueDepth is the number of messages waiting in one queue.
type QueueDepth struct {
	Queue string `json:"queue"`
	Depth uint64 `json:"depth"`
}

// Inspection is an actor's committed state and runtime facts.
type Inspection struct {
	Info ActorInfo `json:"info"`
	// State is the committed state, JSON.
	State json.RawMessage `json:"state"`
	// Active says whether the actor is in memory on its owner now.
	Active bool         `json:"active"`
	Queues []QueueDepth `json:"queues"`
	// WorkflowStatus is "" for an actor without a workflow, else
	// "running", "sleeping", "completed", "failed" or "cancelled".
	WorkflowStatus string `json:"workflow_status,omitempty"`
	WorkflowError  string `json:"workflow_error,omitempty"`
	// WorkflowWakeAt is when a sleeping workflow runs again by itself (a
	// sleep's end, a receive's timeout, a retry's backoff); zero if no
	// time would or none is known.
	WorkflowWakeAt time.Time `json:"workflow_wake_at,omitzero"`
	// WorkflowWakeQueues are the queues a message on which would wake a
	// sleeping workflow, and WorkflowWakeAnyQueue says that any would:
	// known while the actor is in memory on its owner.
	WorkflowWakeQueues   []string `json:"workflow_wake_queues,omitempty"`
	WorkflowWakeAnyQueue bool     `json:"workflow_wake_any_queue,omitempty"`
	// Unregistered says that the owner runs no actor type of this name
	// (one removed from the code, or renamed): the actor is stored,
	// nothing runs it, and only Inspect and Destroy reach it.
	Unregistered bool `json:"unregistered,omitempty"`
	// Schedules are the actor's pending scheduled calls
	// (rivet.Scheduler), the earliest first.
	Schedules []ScheduledCall `json:"schedules,omitempty"`
	// Events are the events the actor's type declares (Subscribe);
	// Subscribers, the subscriptions its owner holds now.
	Events      []string `json:"events,omitempty"`
	Subscribers int      `json:"subscribers,omitempty"`
	// PendingSteps are the workflow's steps in flight (Temporal's pending
	// activities), in the order they started: known while the actor is
	// in memory on its owner (Active), empty otherwise.
	PendingSteps []PendingStep `json:"pending_steps,omitempty"`
	// PendingStepsOmitted counts the steps in flight past the first 1,000,
	// which PendingSteps leaves out (a join of thousands).
	PendingStepsOmitted int `json:"pending_steps_omitted,omitempty"`
}

// PendingStep is a step of a workflow in flight: its body runs now (a
// join or race may run several at once), or it waits out its retry
// backoff after a failed attempt. A rollback handler's attempts are not
// shown.
type PendingStep struct {
	// Path is the step's history path ("charge-loop/~3/charge-card").
	Path string `json:"path"`
	// Attempt is the attempt running (from 1, as StepCtx.Attempt), or,
	// while the step waits out its backoff, the one that runs next;
	// MaxAttempts the most it has (1 + its options' MaxRetries; 0 from an
	// older node).
	Attempt     int `json:"attempt"`
	MaxAttempts int `json:"max_attempts,omitempty"`
	// StartedAt is when the running attempt's body started; zero while
	// the step waits out its backoff.
	StartedAt time.Time `json:"started_at,omitzero"`
	// LastError is the error of the step's previous attempt, as its
	// history records it; "" before a first attempt failed. Cut, ending
	// "... (cut: N bytes in all)", in a response too large to carry it
	// whole.
	LastError string `json:"last_error,omitempty"`
	// NextAttemptAt is, while the step waits out its backoff, when its
	// next attempt runs; zero while a body runs.
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
}

// ScheduledCall is a call of an actor's own action that it asked for at a
// later time (rivet.Scheduler), as Inspect shows it.
type ScheduledCall = rivet.ScheduledCall

// Send statuses.
const (
	SendEnqueued  = caller.SendEnqueued
	SendCompleted = caller.SendCompleted
	SendTimedOut  = caller.SendTimedOut
)

// The states of a message whose sender's wait ran out
// (SendResult.MessageState).
const (
	MessageQueued = caller.MessageQueued
	MessageTaken  = caller.MessageTaken
)

// SendResult says what became of a sent message: the same type as an
// actor's handles return (caller.SendResult).
type SendResult = caller.SendResult

// Member is one node of the cluster.
type Member struct {
	NodeID   string `json:"node_id"`
	GRPCAddr string `json:"grpc_addr"`
	// State is "alive", "dead" or "left", as gossip last heard (it has no
	// suspect state: a node that stopped answering is alive until declared
	// dead); "unknown" for a node registered in etcd that gossip does not
	// know (yet); "unregistered" for one alive in gossip that holds no
	// lease in etcd (starting, cut off from etcd, or killed and not yet
	// declared dead).
	State           string `json:"state"`
	PartitionsOwned uint32 `json:"partitions_owned"`
	// StartedAt is zero, and left out of JSON, for a node that left no
	// record (gone from etcd with its lease): a dead one, say.
	StartedAt  time.Time `json:"started_at,omitzero"`
	GossipAddr string    `json:"gossip_addr,omitempty"`
	HTTPAddr   string    `json:"http_addr,omitempty"`
	// Draining is set while the node hands its partitions off.
	Draining bool `json:"draining,omitempty"`
	// Unreachable says that the node that answered has not reached this
	// one's gRPC for a few seconds, though it is registered: a network
	// fault between the two, through which that node's forwarded requests
	// fail (a client given several node addresses goes through others).
	Unreachable bool `json:"unreachable,omitempty"`
	// Build is the node's build, as `rivet-node --version` prints it first
	// (empty for older builds): which node runs which build during a
	// rolling upgrade.
	Build string `json:"build,omitempty"`
	// ActorTypes are the actor types the node registers, sorted, from its
	// registration. Nil (left out of JSON) when unknown: a node of an
	// older build, one with no registration, or an older node answering;
	// never nil when known ([] for none). Every node must register the
	// same types (docs/deploy.md, "Adding or removing an actor type").
	ActorTypes []string `json:"actor_types,omitzero"`
	// StorageFormat is the newest storage format the node's build reads
	// and writes (`rivet-node --version` says it; 1 for a build before
	// format 2). 0, and left out of JSON, when unknown: a node with no
	// registration, or an older node answering. A build must not run in a
	// cluster that has recorded a newer format than its own
	// (MemberList.RecordedFormats; docs/deploy.md, "Downgrades").
	StorageFormat int `json:"storage_format,omitempty"`
}

// TypesKnown reports whether m says which actor types its node registers.
func (m Member) TypesKnown() bool { return m.ActorTypes != nil }

// PartitionOwner is one row of the partition table.
type PartitionOwner struct {
	Partition uint32 `json:"partition"`
	// Owner is "" for a partition no node holds now.
	Owner string `json:"owner"`
	// Token is the owner's fencing token (its claim's etcd revision).
	Token int64 `json:"token"`
}

// PartitionTable is the cluster's partition table.
type PartitionTable struct {
	// Count is the number of partitions, fixed when the cluster was
	// created.
	Count uint32 `json:"partition_count"`
	// Owners has a row per partition that has an owner.
	Owners []PartitionOwner `json:"partitions"`
	// Note, when set, says why the table may be out of date (the node
	// that answered holds no lease: etcd does not answer it or has no
	// leader).
	Note string `json:"note,omitempty"`
}

// MemberList is the answer of MemberList.
type MemberList struct {
	Members []Member `json:"members"`
	// Note is as PartitionTable's.
	Note string `json:"note,omitempty"`
	// RecordedFormats are the storage formats the cluster has recorded,
	// ascending (format 1 never is): a node whose build does not read one
	// of them, one of an older format than the newest, refuses to start,
	// or, from before the record, starts and misreads the data
	// (docs/deploy.md, "Downgrades"). Nil (left out of JSON) when
	// unknown: the node that answered could not read them (it holds no
	// lease, or etcd did not answer in time), or is of an older build;
	// never nil when known ([] for none).
	RecordedFormats []int `json:"recorded_formats,omitzero"`
}

// RetryingWorkflow is an actor in memory whose workflow retries a step
// (Client.RetryingWorkflows).
type RetryingWorkflow struct {
	Name      string   `json:"name"`
	Key       []string `json:"key"`
	Node      string   `json:"node"`
	Partition uint32   `json:"partition"`
	// Steps are its retrying steps (attempt 2 or more: running again, or
	// waiting out their backoff): the first few, each LastError cut to
	// 256 bytes. StepsOmitted counts those left out.
	Steps        []PendingStep `json:"steps"`
	StepsOmitted int           `json:"steps_omitted,omitempty"`
}

// RetryingList is a node's answer to Client.RetryingWorkflows.
type RetryingList struct {
	Workflows []RetryingWorkflow
	// Omitted counts the workflows the node left out after Workflows to
	// bound its answer's size (about 1 MiB).
	Omitted int
}

func pendingStepsFrom(ps []*rivetv1.PendingStep) []PendingStep {
	var out []PendingStep
	for _, p := range ps {
		out = append(out, PendingStep{Path: p.GetPath(), Attempt: int(p.GetAttempt()), MaxAttempts: int(p.GetMaxAttempts()), StartedAt: timeFrom(p.GetStartedAt()),
			LastError: p.GetLastError(), NextAttemptAt: timeFrom(p.GetNextAttemptAt())})
	}
	return out
}

// HotActor is an actor in memory on a node and the load on it
// (Client.HotActors).
type HotActor struct {
	Name      string   `json:"name"`
	Key       []string `json:"key"`
	Node      string   `json:"node"`
	Partition uint32   `json:"partition"`
	// TurnsPerSecond counts its turns (calls, sends, workflow steps and
	// receives) over the last 10 to 20 s.
	TurnsPerSecond float64 `json:"turns_per_second"`
	// Turns since it came into memory (Since), and how long they waited
	// for its turn all told (contention: the turns before them).
	Turns         uint64    `json:"turns"`
	WaitedSeconds float64   `json:"waited_seconds"`
	Since         time.Time `json:"since"`
	// Waiting is the turns waiting for its turn now.
	Waiting uint32 `json:"waiting"`
}

// Stats are the counters of one node.
type Stats struct {
	NodeID          string `json:"node_id"`
	ActiveActors    uint64 `json:"active_actors"`
	Calls           uint64 `json:"calls"`
	Commits         uint64 `json:"commits"`
	CommitBatches   uint64 `json:"commit_batches"`
	PartitionsOwned uint32 `json:"partitions_owned"`
}

func infoFrom(a *rivetv1.ActorInfo) ActorInfo {
	return ActorInfo{
		Name:      a.GetActor().GetName(),
		Key:       a.GetActor().GetKey(),
		CreatedAt: timeFrom(a.GetCreatedAt()),
		Partition: a.GetPartition(),
		Owner:     a.GetOwner(),

		WorkflowError:    a.GetWorkflowError(),
		WorkflowFailedAt: timeFrom(a.GetWorkflowFailedAt()),
	}
}

func inspectionFrom(r *rivetv1.InspectResponse) Inspection {
	qs := make([]QueueDepth, len(r.GetQueues()))
	for i, q := range r.GetQueues() {
		qs[i] = QueueDepth{Queue: q.GetQueue(), Depth: q.GetDepth()}
	}
	var scs []ScheduledCall
	for _, c := range r.GetSchedules() {
		scs = append(scs, ScheduledCall{ID: c.GetId(), Action: c.GetAction(), Args: c.GetArgs(), At: timeFrom(c.GetAt()), CreatedAt: timeFrom(c.GetCreatedAt()),
			Name: c.GetName(), Every: c.GetEvery().AsDuration(), Cron: c.GetCron(), LastError: c.GetLastError()})
		if c.GetLastRun() != nil {
			scs[len(scs)-1].LastRun = timeFrom(c.GetLastRun())
		}
	}
	pending := pendingStepsFrom(r.GetPendingSteps())
	return Inspection{
		Info:                 infoFrom(r.GetInfo()),
		PendingSteps:         pending,
		PendingStepsOmitted:  int(r.GetPendingStepsOmitted()),
		Schedules:            scs,
		Events:               r.GetEvents(),
		Subscribers:          int(r.GetSubscribers()),
		State:                r.GetState(),
		Active:               r.GetActive(),
		Queues:               qs,
		WorkflowStatus:       r.GetWorkflowStatus(),
		WorkflowError:        r.GetWorkflowError(),
		WorkflowWakeAt:       timeFrom(r.GetWorkflowWakeAt()),
		WorkflowWakeQueues:   r.GetWorkflowWakeQueues(),
		WorkflowWakeAnyQueue: r.GetWorkflowWakeAnyQueue(),
		Unregistered:         r.GetUnregistered(),
	}
}

// timeFrom keeps an unset time zero instead of the Unix epoch.
func timeFrom(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// HistoryEntry is one recorded workflow entry.
type HistoryEntry struct {
	Path     string `json:"path"`
	Kind     string `json:"kind"`
	Status   string `json:"status"`
	Attempts int    `json:"attempts,omitempty"`
	// Output is the entry's recorded value: a step's result, a loop's
	// state, and for a receive that completed the messages it took, an
	// array of {"id", "queue", "body", "created_at", "completed"} (empty
	// if it timed out).
	Output json.RawMessage `json:"output,omitempty"`
	// Error is the entry's error; in a history too large to carry whole,
	// a long one comes cut, ending "... (cut: N bytes in all)".
	Error string `json:"error,omitempty"`
	// ErrorCode is the error's code, if it had one (a UserError's).
	ErrorCode string `json:"error_code,omitempty"`
	// ErrorRivetKind is the rivet kind the error matched when the node
	// recorded it, by its stable group and code ("actor.unknown_action",
	// "user" for a rivet.UserError): the kind the recorded error matches
	// with errors.Is in the workflow (workflow.RecordedError.RivetKind).
	// Empty for an error that matched none, for an entry recorded before
	// the kind was kept, and from a node from before it.
	ErrorRivetKind string    `json:"error_rivet_kind,omitempty"`
	UpdatedAt      time.Time `json:"updated_at,omitzero"`
	// Winner is the branch that won a race (whose output is Output).
	Winner string `json:"winner,omitempty"`
	// OutputOmitted says that Output, which is recorded, was left out: the
	// history was too large for one response to carry every output.
	OutputOmitted bool `json:"output_omitted,omitempty"`
	// Deadline is when a sleep ends, or when a receive with a timeout
	// gives up, as recorded when the workflow first reached it.
	Deadline time.Time `json:"deadline,omitzero"`
	// HasRollback says that a step whose body succeeded has a rollback
	// handler (workflow.StepWithRollback): a compensation that a rollback
	// of the workflow runs. The step completed, or failed because the
	// node refused the state its body left (too large), after its side
	// effect.
	HasRollback bool `json:"has_rollback,omitempty"`
	// RollbackDone says that the step's rollback handler ran and
	// succeeded: the workflow rolled back and compensated this step.
	RollbackDone bool `json:"rollback_done,omitempty"`
	// RollbackSettled says that a retry kept the compensated step and the
	// workflow went on past it (retry --from a later entry): its effect
	// stays undone, and a later failure's retry without a from entry does
	// not run it again. False from a node from before it.
	RollbackSettled bool `json:"rollback_settled,omitempty"`
	// RollbackError is the error of the step's rollback handler, which
	// failed for good (its retries used up, or an error no retry changes)
	// and stopped the rollback there: the handlers of the steps that
	// completed before it did not run. In a history too
	// large to carry whole, a long one comes cut, as Error.
	RollbackError string `json:"rollback_error,omitempty"`
	// RollbackErrorCode is RollbackError's code, if it had one.
	RollbackErrorCode string `json:"rollback_error_code,omitempty"`
	// RollbackAttempts counts the attempts of the step's rollback
	// handler, retried under the step's retry policy: with neither
	// RollbackDone nor RollbackError, the rollback waits to run it again.
	RollbackAttempts int `json:"rollback_attempts,omitempty"`
	// RollbackRetryError is the error of the handler's last attempt while
	// it is to be retried (RollbackAttempts counted, neither RollbackDone
	// nor RollbackError): why the rollback waits, or, in a workflow
	// cancelled during that wait, why it was waiting. Empty from a node
	// from before it. Cut, in a history too large, as Error.
	RollbackRetryError string `json:"rollback_retry_error,omitempty"`
	// RollbackRetryErrorCode is RollbackRetryError's code, if it had one.
	RollbackRetryErrorCode string `json:"rollback_retry_error_code,omitempty"`
	// Version is what a version gate (Kind version_check) resolved to: 1
	// is the old path, taken by an instance that had recorded entries past
	// the gate before it was deployed. Latest is the latest version the
	// code knew when it was recorded.
	Version int `json:"version,omitempty"`
	Latest  int `json:"latest,omitempty"`
	// RemovedKind is the kind of the entry a removed placeholder (Kind
	// removed) stands in for.
	RemovedKind string `json:"removed_kind,omitempty"`
	// Failure is, for a step that failed for good (Status "exhausted"),
	// why: "exhausted" (its retries used up), "critical" (a critical
	// error, not retried), "timeout" (it timed out, and timeouts are not
	// retried) or "rollback" (it returned workflow.Rollback: no retry).
	// Empty from a node from before it.
	Failure string `json:"failure,omitempty"`
}

// History is an actor's workflow status and history.
type History struct {
	WorkflowStatus string `json:"workflow_status"`
	WorkflowError  string `json:"workflow_error,omitempty"`
	// What wakes a sleeping workflow, as Inspection's fields say.
	WorkflowWakeAt       time.Time      `json:"workflow_wake_at,omitzero"`
	WorkflowWakeQueues   []string       `json:"workflow_wake_queues,omitempty"`
	WorkflowWakeAnyQueue bool           `json:"workflow_wake_any_queue,omitempty"`
	Entries              []HistoryEntry `json:"entries"`
	// NextPageToken, on a page of HistoryPage, continues it: "" on the
	// last page, and for the whole history.
	NextPageToken string `json:"next_page_token,omitempty"`
}

// HistoryOptions page through a workflow's history. The zero value asks
// for the whole history in one answer, as History did before it paged.
type HistoryOptions struct {
	// Limit is the page size: 0 means no bound (all the entries after
	// PageToken's); the node serves at most 1000, and fewer when more
	// would not fit in one message.
	Limit int
	// PageToken continues from a previous History.NextPageToken, with the
	// entry after that page's last in the history's order (whatever the
	// workflow recorded meanwhile: no entry twice).
	PageToken string
}
