package rivet

import (
	"context"
	"encoding/json"
	"time"

	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/workflow"
)

// Call runs an action through any Handle and decodes its result into R:
//
//	n, err := rivet.Call[int](ctx, client.GetOrCreate("counter", "main"), "increment", 5)
//
// A result that does not decode into R comes after the action ran (and
// committed): the error says so, is ErrFailedPrecondition with the reason
// client.result_undecodable (not ErrInternal, which read as the node's
// fault, nor anything a retry would cure: it would run the action again),
// and is workflow.Critical, so that a workflow step that made the call
// fails rather than retry it to the same mismatch.
func Call[R any](ctx context.Context, h Handle, action string, args ...any) (R, error) {
	raw, err := h.Call(ctx, action, args...)
	return decodeResult[R](action, raw, err)
}

// decodeResult decodes the result of action, which ran, into R.
func decodeResult[R any](action string, raw json.RawMessage, err error) (R, error) {
	var out R
	if err != nil {
		return out, err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, workflow.Critical(Reasonf(ErrFailedPrecondition, "client", "result_undecodable", "action %s ran, but its result does not decode into %T: %v", action, out, err))
	}
	return out, nil
}

// CallWith is Call with options, through any Handle of this module:
//
//	// Charged once, however often the step that makes the call runs.
//	receipt, err := rivet.CallWith[Receipt](s.Context(), s.Client().Get("payments", orderID), "charge",
//		rivet.CallOptions{IdempotencyKey: "order/" + orderID + "/charge"}, amount)
//
// caller.CallOptions says what a key does. A Handle that is not this
// module's (a test's fake) gets a plain Call without options, and is
// refused one with a key (ErrInvalidArgument), whose promise it could not
// keep: a fake for workflowtest implements caller.OptionsCaller.
func CallWith[R any](ctx context.Context, h Handle, action string, opts CallOptions, args ...any) (R, error) {
	oc, ok := h.(caller.OptionsCaller)
	if !ok {
		if opts != (CallOptions{}) {
			var out R
			return out, Errorf(ErrInvalidArgument, "a %T cannot make a call with options (an idempotency key): it has no CallWith", h)
		}
		raw, err := h.Call(ctx, action, args...)
		return decodeResult[R](action, raw, err)
	}
	raw, err := oc.CallWith(ctx, action, opts, args...)
	return decodeResult[R](action, raw, err)
}

// CallOptions are the options of CallWith.
type CallOptions = caller.CallOptions

// CallQuery runs a read-only action (one made with Query or QueryArg)
// through h and decodes its result into R. The node refuses any other
// action (ErrFailedPrecondition, reason actor.not_read_only) before it
// runs it, so a query may be sent again when a connection breaks during
// it, which a Call may not (its outcome is unknown: it may have run): the
// Go client retries it as it does a read, through a node's failover or a
// cut-off owner, and a node that forwards it to the actor's owner does
// too. A read-only action cannot change its actor's stored state, schedule
// or destroy; what else it does (a call of another actor's action, or of
// its own actor's that changes it, a send, a broadcast, a KeepAwake task)
// such a retry does again, so a query should do none of it, as a Temporal
// query handler should not. It is not retried after an error the node
// marked of unknown outcome (the query passed on what a call of its own
// got). A node older than read-only calls ignores the mark and runs any
// action it names: during a rolling upgrade from one, a query of an action
// that is not read-only could run twice.
//
//	n, err := rivet.CallQuery[int](ctx, client.Get("counter", "main"), "getCount")
func CallQuery[R any](ctx context.Context, h Handle, action string, args ...any) (R, error) {
	var out R
	q, ok := h.(caller.Querier)
	if !ok {
		return out, Errorf(ErrInvalidArgument, "a %T cannot make a read-only call: use its Call", h)
	}
	raw, err := q.Query(ctx, action, args...)
	return decodeResult[R](action, raw, err)
}

// MarshalArgs encodes call arguments as the JSON array the wire carries.
// A json.RawMessage argument is embedded as JSON (compacted), not quoted.
func MarshalArgs(args ...any) (json.RawMessage, error) {
	if len(args) == 0 {
		return json.RawMessage("[]"), nil
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, Errorf(ErrInvalidArgument, "arguments do not marshal to JSON: %v", err)
	}
	return b, nil
}

// SendResult says what became of a sent message (Enqueue, SendWait).
type SendResult = caller.SendResult

// SendOptions are the options of SendWith (an idempotency key; a wait).
type SendOptions = caller.SendOptions

// SendResult.Status and SendResult.MessageState values.
const (
	SendEnqueued  = caller.SendEnqueued
	SendCompleted = caller.SendCompleted
	SendTimedOut  = caller.SendTimedOut
	MessageQueued = caller.MessageQueued
	MessageTaken  = caller.MessageTaken
)

// Enqueue sends body to one of the actor's queues through h, as h.Send
// does, and says what became of the message: its ID, and whether the
// actor's workflow had already ended (then nothing takes it until the
// workflow is retried).
func Enqueue(ctx context.Context, h Handle, queue string, body any) (SendResult, error) {
	s, ok := h.(caller.Sender)
	if !ok {
		return SendResult{}, Errorf(ErrInvalidArgument, "a %T cannot say what became of a message: use its Send", h)
	}
	return s.Enqueue(ctx, queue, body)
}

// SendWait sends body to one of the actor's queues through h and waits,
// for at most timeout (0: 30 s), until the actor's workflow completes the
// message (Message.Complete), whose response the result carries. A wait
// that runs out is not an error: Status says SendTimedOut, and the
// message stays. From an actor, the wait ends before the caller's context
// does (a step's timeout, an action's), and the turn (or step) waits with
// the actor's turn held: the workflow that completes the message must not
// need this actor meanwhile. Waiting on an actor that a turn the send came
// from holds (the sender itself, or a caller up the chain, on any node)
// fails with ErrInvalidArgument: its workflow could take the message only
// after that turn, which waits for the send.
//
//	res, err := rivet.SendWait(ctx, c.Client().GetOrCreate("worker", id), "task", task, 10*time.Second)
func SendWait(ctx context.Context, h Handle, queue string, body any, timeout time.Duration) (SendResult, error) {
	s, ok := h.(caller.Sender)
	if !ok {
		return SendResult{}, Errorf(ErrInvalidArgument, "a %T cannot wait for a message's completion", h)
	}
	return s.SendWait(ctx, queue, body, timeout)
}

// SendWith sends body to one of the actor's queues through h with opts:
// with an idempotency key, the message is queued once however often it
// is sent (a step that runs again after a crash sends it again), and the
// result says Duplicate for every send after the first:
//
//	rivet.SendWith(ctx, step.Client().GetOrCreate("worker", id), "task", task,
//		rivet.SendOptions{IdempotencyKey: "order-" + orderID})
func SendWith(ctx context.Context, h Handle, queue string, body any, opts SendOptions) (SendResult, error) {
	s, ok := h.(caller.OnceSender)
	if !ok {
		return SendResult{}, Errorf(ErrInvalidArgument, "a %T cannot send with options", h)
	}
	return s.SendWith(ctx, queue, body, opts)
}
