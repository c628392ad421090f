package rivet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/rivet-go/rivet/internal/errkind"
)

// Sentinel kinds of error. Every error a node returns wraps one of them
// (through *Error), on the node and, via the client package, in a remote
// caller: test with errors.Is.
var (
	// ErrNotFound: the actor does not exist (Get, a call without create, a
	// subscription).
	ErrNotFound = errors.New("actor not found")
	// ErrUnknownActor: no actor of that name is registered, on the node
	// that owns the actor's partition. If other nodes do register it (the
	// cluster's nodes register different types: a rolling deploy that adds
	// one, half done), the message names them; the error is the same
	// (NOT_FOUND actor.unknown_actor, not retried: a retry goes to the same
	// owner), see docs/deploy.md, "Adding or removing an actor type".
	ErrUnknownActor = errors.New("unknown actor")
	// ErrUnknownAction: the actor has no action of that name.
	ErrUnknownAction = errors.New("unknown action")
	// ErrUnknownQueue: the actor has no queue of that name.
	ErrUnknownQueue = errors.New("unknown queue")
	// ErrUnknownEvent: the actor declares no event of that name.
	ErrUnknownEvent = errors.New("unknown event")
	// ErrAlreadyExists: Create of a key that exists.
	ErrAlreadyExists = errors.New("actor already exists")
	// ErrInvalidArgument: malformed JSON, arguments of the wrong type, a bad
	// name or key.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrTooLarge: a payload, key or state over its limit.
	ErrTooLarge = errors.New("too large")
	// ErrQueueFull: the queue holds its limit of pending messages, the
	// actor its limit of scheduled calls (MaxSchedules), or an event
	// subscriber fell too far behind (or there are too many of them).
	ErrQueueFull = errors.New("queue full")
	// ErrUnavailable: the actor cannot be served right now (its partition is
	// moving, or the node is stopping). When a node says so, the request did
	// not run and retrying is safe (the Go client retries for up to 15 s
	// itself, a failover's length with room to spare); but an UNAVAILABLE
	// that no node said (a connection that broke mid-call, a node killed)
	// may come after the request ran: see OutcomeUnknown.
	ErrUnavailable = errors.New("unavailable")
	// ErrWorkflowFailed: the actor's workflow failed or diverged from its
	// history; see Inspect.
	ErrWorkflowFailed = errors.New("workflow failed")
	// ErrFailedPrecondition: a well-formed request the cluster's state
	// does not allow now (draining the last node that could take the
	// partitions); it may succeed once that state changes, not if only
	// sent again. gRPC FAILED_PRECONDITION, as ErrWorkflowFailed, which
	// is the workflow's own case of it.
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrTimeout: the operation's deadline passed; the request may have run
	// (OutcomeUnknown), but for one with reason actor.busy: it waited for
	// its actor's turn (the actor busy with other calls) and the node gave
	// up on it shortly before the deadline, before it ran, to say so in
	// time.
	ErrTimeout = errors.New("timed out")
	// ErrUnauthenticated: the node requires a bearer token (or another
	// one) and the call did not carry it.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrInternal: a bug or an unexpected failure; the node logs the cause.
	ErrInternal = errors.New("internal error")
	// ErrUser: an error an actor returned on purpose (see UserError); its
	// Code is the actor's own. On the wire it is gRPC UNKNOWN, with the code
	// in the status's ActorError detail (group "user").
	ErrUser = errors.New("user error")
)

// kinds lists every sentinel with its stable (group, code), the form an
// error takes on the wire.
var kinds = []struct {
	err         error
	group, code string
}{
	{ErrNotFound, "actor", "not_found"},
	{ErrUnknownActor, "actor", "unknown_actor"},
	{ErrUnknownAction, "actor", "unknown_action"},
	{ErrUnknownQueue, "queue", "unknown_queue"},
	{ErrUnknownEvent, "event", "unknown_event"},
	{ErrAlreadyExists, "actor", "duplicate_key"},
	{ErrInvalidArgument, "request", "invalid_argument"},
	{ErrTooLarge, "request", "too_large"},
	{ErrQueueFull, "queue", "full"},
	{ErrUnavailable, "actor", "unavailable"},
	{ErrWorkflowFailed, "workflow", "failed"},
	{ErrFailedPrecondition, "request", "failed_precondition"},
	{ErrTimeout, "actor", "timed_out"},
	{ErrUnauthenticated, "request", "unauthenticated"},
	{ErrInternal, "rivet", "internal_error"},
	{ErrUser, "user", ""},
}

// reasons are (group, code) pairs that some errors carry instead of their
// kind's own, to say more precisely what went wrong; each decodes as its
// kind (and a client that does not know it goes by the status code, which
// is the kind's).
var reasons = []struct {
	err         error
	group, code string
}{
	{ErrNotFound, "node", "not_found"},                          // no such node (drain)
	{ErrFailedPrecondition, "node", "last_eligible"},            // a drain of the last node that could take partitions
	{ErrFailedPrecondition, "node", "unsupported"},              // a node older than the admin request (rivetctl log-level)
	{ErrFailedPrecondition, "actor", "deadlock"},                // a call whose wait for an actor's turn would close a cycle of waits
	{ErrInternal, "actor", "query_changed_state"},               // a read-only action that changed its actor's state, under Config.CheckQueries (--check-queries, nodetest)
	{ErrFailedPrecondition, "actor", "not_read_only"},           // a read-only call (client Query, rivet.CallQuery) of an action not declared read-only
	{ErrFailedPrecondition, "client", "result_undecodable"},     // rivet.Call's result type does not fit the action's result (the action ran)
	{ErrWorkflowFailed, "workflow", "none"},                     // the actor has no workflow
	{ErrWorkflowFailed, "workflow", "not_ended"},                // a retry of a workflow that runs
	{ErrWorkflowFailed, "workflow", "not_failed"},               // a retry only if failed, of a completed or cancelled workflow
	{ErrWorkflowFailed, "workflow", "diverged"},                 // a plain retry of a completed or cancelled workflow whose history the code deployed now does not replay
	{ErrWorkflowFailed, "workflow", "ended"},                    // a cancel of a workflow that has ended; a waiting or RequireRunning send to one
	{ErrWorkflowFailed, "workflow", "ended_without_completing"}, // a send's wait on a workflow that completed or was cancelled without completing the message
	{ErrQueueFull, "schedule", "full"},                          // an actor's MaxSchedules scheduled calls
	{ErrQueueFull, "event", "overflow"},                         // a subscriber that fell behind its events
	{ErrQueueFull, "event", "subscribers"},                      // the node's or the actor's subscribers at their limit
	{ErrUnavailable, "storage", "no_space"},                     // etcd is out of space: writes are refused until an operator frees some (docs/deploy.md)
	{ErrUnavailable, "actor", "overloaded"},                     // a call that found MaxWaitingCalls turns waiting for its actor (it did not run)
	{ErrUnavailable, "node", "stopping"},                        // a call refused by the node it reached, which is stopping (it did not run; another node serves it)
	{ErrTimeout, "actor", "busy"},                               // a call whose wait for its actor's turn the node ended shortly before the call's deadline (it did not run: OutcomeUnknown is false)
}

// Reasonf returns an error of kind with the reason (group, code), one of
// those this package lists, rather than the kind's own pair. A pair it
// does not list goes out as the kind's own, so that an error is never lost
// over its reason; a test checks every literal pair in the module is listed.
func Reasonf(kind error, group, code, format string, args ...any) *Error {
	for _, r := range reasons {
		if r.err == kind && r.group == group && r.code == code {
			return &Error{Kind: kind, Group: group, Code: code, Message: fmt.Sprintf(format, args...)}
		}
	}
	return Errorf(kind, format, args...)
}

// The workflow package records a step's or branch's error as a
// *workflow.RecordedError, with the name of the kind the error matched, so
// that the recorded error matches that kind (errors.Is(recorded,
// ErrUnknownAction)) live and on replay; it cannot import this package,
// which imports it.
func init() {
	named := make([]errkind.Kind, len(kinds))
	for i, k := range kinds {
		named[i] = errkind.Kind{Err: k.err, Name: k.group}
		if k.code != "" {
			named[i].Name += "." + k.code
		}
	}
	errkind.Set(named)
}

// Kinds returns every sentinel kind, in a fixed order.
func Kinds() []error {
	out := make([]error, len(kinds))
	for i, k := range kinds {
		out[i] = k.err
	}
	return out
}

// Error is an error with a kind (one of the sentinels), a stable group and
// code, and a message for people. Metadata is optional JSON. Over the wire
// the message is cut to about 1 KiB and metadata that does not fit left
// out (see UserError).
type Error struct {
	Kind     error
	Group    string
	Code     string
	Message  string
	Metadata json.RawMessage
}

func (e *Error) Error() string { return e.Message }

// ErrorCode returns the error's code. Workflows record it with the message,
// so that a step's failure keeps its code across replay.
func (e *Error) ErrorCode() string { return e.Code }

// Unwrap returns the kind, so that errors.Is(err, ErrNotFound) works.
func (e *Error) Unwrap() error { return e.Kind }

// Errorf returns an *Error of the given kind with a formatted message.
func Errorf(kind error, format string, args ...any) *Error {
	g, c := codeOf(kind)
	return &Error{Kind: kind, Group: g, Code: c, Message: fmt.Sprintf(format, args...)}
}

// UserError returns an error for an actor to return on purpose: it reaches
// the caller with its code, message and metadata (errors.As to *Error),
// where any other error from an action is masked as ErrInternal, a bare
// sentinel (return ErrNotFound, or fmt.Errorf("...: %w", ErrNotFound))
// too: use Errorf for one of this package's kinds. A *Error the action
// wraps reaches callers alone, on any node, without the wrapper's text or
// types (but for one of ErrUnavailable, which the node rewrites as an
// outcome unknown: the action ran). On the
// wire its gRPC code is UNKNOWN (an application's own error), its reason
// "user.<code>" in the error's detail.
//
// An error goes over gRPC in HTTP/2 trailers, which clients bound (8 KiB
// for grpc-java), so a node sends each within about 4 KiB: a message over
// about 1 KiB (percent-encoded, so a third of that for non-ASCII text)
// reaches remote callers cut on a character, ending "... (cut: N bytes in
// all)", and metadata that does not fit beside it is left out, which the
// message says. Keep messages short, and put no bulk in metadata.
// Metadata that does not encode to JSON is left out too, and the message
// says that as well (it was dropped without a word).
func UserError(code, message string, metadata any) *Error {
	var md json.RawMessage
	if metadata != nil {
		b, err := json.Marshal(metadata)
		if err != nil {
			// Not the encoder's words: they may be an actor's own
			// MarshalJSON's, which callers are not to see.
			message += " (metadata left out: it does not encode to JSON)"
		} else {
			md = b
		}
	}
	return &Error{Kind: ErrUser, Group: "user", Code: code, Message: message, Metadata: md}
}

// KindByCode returns the sentinel of a (group, code) pair as produced by
// Errorf, and ErrUser for group "user"; ErrInternal if none matches.
func KindByCode(group, code string) error {
	if group == "user" {
		return ErrUser
	}
	for _, k := range kinds {
		if k.group == group && k.code == code {
			return k.err
		}
	}
	for _, r := range reasons {
		if r.group == group && r.code == code {
			return r.err
		}
	}
	return ErrInternal
}

// AsError returns err as an *Error: itself if it is one, or wrapped as the
// first sentinel it matches, or as ErrInternal. A context's end is what a
// node answers for it: context.DeadlineExceeded is ErrTimeout
// (actor.timed_out), context.Canceled keeps its kind, as rivet.canceled
// (a user trial's error mapper called an idle subscription's deadline an
// internal error). A nil err is nil: no error (a user trial's error
// mapper, called on every result, met a nil pointer dereference).
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Kind: ErrTimeout, Group: "actor", Code: "timed_out", Message: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Kind: context.Canceled, Group: "rivet", Code: "canceled", Message: err.Error()}
	}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return &Error{Kind: k.err, Group: k.group, Code: k.code, Message: err.Error()}
		}
	}
	return &Error{Kind: ErrInternal, Group: "rivet", Code: "internal_error", Message: err.Error()}
}

func codeOf(kind error) (group, code string) {
	for _, k := range kinds {
		if k.err == kind {
			return k.group, k.code
		}
	}
	return "rivet", "internal_error"
}

// OutcomeUnknown reports whether a request that failed with err may have
// run all the same, its effects durable: its deadline ran out (ErrTimeout,
// or the caller's context ended), or its connection broke mid-call (an
// ErrUnavailable no node said: its Group is empty). Sent again, a request
// with side effects (an action that changes state, a Send, a Create) may
// then run twice; read what it would have changed first, or make it
// idempotent (a Send carrying its own ID that the workflow checks). Every
// other error means the request did not run, or ran and failed (an action's
// own error leaves the state as it was), with two exceptions. A Call or
// CallWith whose result does not decode into R (ErrFailedPrecondition,
// reason client.result_undecodable) ran and committed: sent again, it runs
// again. And a Send that waits for its completion queues the message
// durably before it waits, so a wait that ends in an error (the workflow
// ended without completing it, ErrWorkflowFailed saying "without
// completing message N"; the actor was destroyed, ErrNotFound) leaves it
// sent. A waiting Send refused before it queued anything, because the
// workflow had ended already, says "has no running workflow to complete
// the message".
// An ErrTimeout with reason actor.busy is not unknown either: the node
// ended the call's wait for its actor's turn before it began, shortly
// before its deadline, to say so while the caller still listens.
// An error that knows its request never reached a node (the Go client's,
// when no attempt got a connection: a method RequestNotSent() bool that
// returns true) is not unknown, whatever its kind. An error that knows an
// earlier attempt of its request may have run (a method OutcomeUnknown()
// bool that returns true: the Go client's ALREADY_EXISTS for a keyed Create
// it sent again after a broken connection, from a node older than the key,
// which ignores it; an actor.busy answer to a retry after an attempt whose
// connection broke once it was sent) is unknown, whatever its kind.
func OutcomeUnknown(err error) bool {
	if err == nil {
		return false
	}
	var ns interface{ RequestNotSent() bool }
	if errors.As(err, &ns) && ns.RequestNotSent() {
		return false
	}
	var ou interface{ OutcomeUnknown() bool }
	if errors.As(err, &ou) && ou.OutcomeUnknown() {
		return true
	}
	if notRun(err) {
		return false
	}
	if errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var e *Error
	return errors.As(err, &e) && errors.Is(e.Kind, ErrUnavailable) && e.Group == ""
}

// notRun reports whether err is a node's answer that a call's deadline
// came before the call ran: it waited for its actor's turn until shortly
// before the deadline (actor.busy).
func notRun(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == ErrTimeout && e.Group == "actor" && e.Code == "busy"
}
