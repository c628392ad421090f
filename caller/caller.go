// Package caller holds the two small interfaces through which code calls
// actors: Client (find an actor) and Handle (call it). Actions and workflow
// steps get a Client bound to their node and call chain; the gRPC client
// package implements the same interfaces, so code that calls actors reads
// the same in both places. It is a leaf package so that rivet and workflow
// can both use it without importing each other.
package caller

import (
	"context"
	"encoding/json"
	"time"
)

// Client finds actors by name and key.
type Client interface {
	// GetOrCreate returns a handle whose calls create the actor if it does
	// not exist (the original engine's getOrCreate).
	GetOrCreate(name string, key ...string) Handle
	// Get returns a handle whose calls fail with rivet.ErrNotFound if the
	// actor does not exist; it never creates.
	Get(name string, key ...string) Handle
}

// Handle calls one actor. Handles are cheap and stateless: the key is
// resolved on every call.
type Handle interface {
	// Call runs an action with args (each marshalled to JSON) and returns
	// its JSON result.
	Call(ctx context.Context, action string, args ...any) (json.RawMessage, error)
	// Send appends body (marshalled to JSON) to one of the actor's queues
	// and returns once the message is durable.
	Send(ctx context.Context, queue string, body any) error
}

// Sender is what this module's handles offer beyond Send: a send that says
// what became of the message, and one that waits for the receiving
// workflow to complete it (the original engine's send with wait: true).
// rivet.Enqueue and rivet.SendWait reach it through any Handle.
type Sender interface {
	// Enqueue is Send that returns the message's ID, and in
	// WorkflowStatus whether the actor's workflow had already ended.
	Enqueue(ctx context.Context, queue string, body any) (SendResult, error)
	// SendWait appends body to a queue and waits, for at most timeout
	// (0: 30 s), until the actor's workflow completes the message. A wait
	// that runs out is not an error: Status says SendTimedOut.
	SendWait(ctx context.Context, queue string, body any, timeout time.Duration) (SendResult, error)
}

// SendOptions are the options of SendWith.
type SendOptions struct {
	// IdempotencyKey, if set, makes the send happen once: the receiving
	// actor records the key with the message, and a later send of the same
	// message with the same key queues nothing (the result says
	// Duplicate, with the first message's ID). An actor keeps its last
	// 1024 keys, each for 24 hours. So a send with a key may be sent again
	// after any error, also one that leaves its outcome unknown (the Go
	// client retries it as it does a read); the same key with another
	// message (queue or body) is ErrInvalidArgument. At most 256 bytes.
	IdempotencyKey string
	// Wait and Timeout wait for the message's completion, as SendWait
	// does. A duplicate waits for the first message's completion as the
	// first send did, queued or taken by the workflow (every sender that
	// waits gets it), or gets it at once if it came already: the
	// completion is kept with the key, as a Temporal Update's result is
	// with its update ID. So a waiting send whose wait broke (the caller
	// left, its connection or the actor's node died) may be sent again to
	// get its completion. Its result is SendEnqueued at once if the
	// workflow has ended with the message queued (WorkflowStatus says so,
	// as the first send's did) or taken and not completed, or if the
	// completion was too large to keep (over 64 KiB).
	Wait    bool
	Timeout time.Duration
	// RequireRunning refuses the send, before anything is queued or its
	// idempotency key recorded, unless the actor's workflow runs (or has
	// not started yet): to an actor whose workflow has ended (completed,
	// failed, cancelled) or whose type has none, the send fails with
	// rivet.ErrWorkflowFailed, reason workflow.ended, workflow.failed or
	// workflow.none, as Temporal fails a signal to a closed workflow.
	// Without it a send to an ended workflow is queued (its result's
	// WorkflowStatus says so) and waits until the workflow is retried;
	// Wait implies it (a waiting send is refused the same way).
	//
	// A duplicate (a send whose idempotency key the actor recorded, its
	// first send accepted) answers as a duplicate even if the workflow
	// ended since: its message is queued, and a refusal would say it was
	// not (a caller sending again after a broken connection would take it
	// for lost). Its result's WorkflowStatus says the workflow had ended,
	// as the first send's would have.
	//
	// Best effort at the edge, as WorkflowStatus is: a workflow that ends
	// as the message is queued, without receiving it, may leave it queued.
	// A node older than this option ignores it and queues the message.
	RequireRunning bool
}

// CallOptions are the options of OptionsCaller.CallWith.
type CallOptions struct {
	// IdempotencyKey, if set, makes the call run once: the called actor
	// records the key, a digest of the call and its result with the
	// action's change, and the same call sent again with the key gets
	// that result without running. An actor keeps its last 1024 keys,
	// each for 24 hours. So a keyed call may be sent again after an error
	// that leaves its outcome unknown (the Go client retries a broken
	// connection's UNAVAILABLE itself, as it does a read; a deadline or a
	// timed-out commit the caller sends again), and a workflow step that
	// calls an action with the step's key (StepCtx.IdempotencyKey: not
	// one of its own name alone, which a loop's iterations share) changes
	// the callee once however often the step runs. Only the callee's
	// state change is once: what its action does beyond it (an external
	// API's call, its own calls and sends) runs again if the action runs
	// again, and needs keys of its own. A call that failed records
	// nothing and runs again; the same key with another action or
	// arguments is ErrInvalidArgument; a result over 64 KiB is not kept
	// (the call sent again is ErrFailedPrecondition, saying it ran). At
	// most 256 bytes of UTF-8. Ignored for a read-only action.
	IdempotencyKey string
}

// OptionsCaller is what this module's handles offer beyond Call: a call
// with options. rivet.CallWith reaches it through any Handle.
type OptionsCaller interface {
	CallWith(ctx context.Context, action string, opts CallOptions, args ...any) (json.RawMessage, error)
}

// Querier is what this module's handles offer for read-only actions
// (rivet.Query, rivet.QueryArg): a call that the actor's node refuses,
// before it runs or creates anything, unless the action is read-only, and
// that may therefore be sent again after a break that would leave a plain
// call's outcome unknown (the Go client does so as it does its reads).
// rivet.CallQuery reaches it through any Handle, and says what such a
// retry does again.
type Querier interface {
	Query(ctx context.Context, action string, args ...any) (json.RawMessage, error)
}

// OnceSender is a Sender whose sends take options, among them an
// idempotency key (rivet.SendWith).
type OnceSender interface {
	SendWith(ctx context.Context, queue string, body any, opts SendOptions) (SendResult, error)
}

// Send statuses (SendResult.Status).
const (
	SendEnqueued  = "enqueued"
	SendCompleted = "completed"
	SendTimedOut  = "timed_out"
)

// The states of a message whose sender's wait ran out
// (SendResult.MessageState).
const (
	MessageQueued = "queued"
	MessageTaken  = "taken"
)

// SendResult says what became of a sent message.
type SendResult struct {
	MessageID uint64 `json:"message_id,omitempty"`
	// Status is SendEnqueued, or after SendWait SendCompleted or
	// SendTimedOut. After SendWait, SendEnqueued says that the message is
	// queued but its completion could not be waited for (its actor moved
	// to another node, or the node stopped): the workflow completes it all
	// the same. Do not send it again without an idempotency key (it would
	// be queued twice); a send with one is sent again, with the same key
	// and body, to wait for that completion and get its Response.
	Status string `json:"status"`
	// Response is the completion's JSON, with SendCompleted.
	Response json.RawMessage `json:"response,omitempty"`
	// WorkflowStatus is "completed", "failed" or "cancelled" if the actor's
	// workflow had ended when the message was queued: nothing takes the
	// message until the workflow is retried. Empty otherwise (best effort:
	// a workflow ending as the message is queued may not be seen as ended).
	WorkflowStatus string `json:"workflow_status,omitempty"`
	// MessageState, with SendTimedOut, is "queued" (the message is still
	// in its queue) or "taken" (the workflow received it and has not
	// completed it); empty from a node that does not say.
	MessageState string `json:"message_state,omitempty"`
	// Duplicate says that the send's idempotency key was used before:
	// nothing was queued, and MessageID is the first send's message. A
	// duplicate that waits waits for that message's completion, or gets
	// it at once if the workflow completed it already (SendOptions.Wait
	// says when it cannot). A send the Go
	// client retried after its connection broke says Duplicate if the first
	// attempt queued it: the node cannot tell that attempt from an earlier
	// send.
	Duplicate bool `json:"duplicate,omitempty"`
}
