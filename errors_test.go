package rivet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

func TestOutcomeUnknown(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"the node said unavailable", rivet.Errorf(rivet.ErrUnavailable, "partition moving"), false},
		{"a broken connection", &rivet.Error{Kind: rivet.ErrUnavailable, Message: "connection reset"}, true},
		{"a timeout", rivet.Errorf(rivet.ErrTimeout, "outcome unknown"), true},
		{"the caller's deadline, wrapped", fmt.Errorf("call: %w", context.DeadlineExceeded), true},
		{"the caller cancelled", context.Canceled, true},
		{"not found", rivet.Errorf(rivet.ErrNotFound, "no such actor"), false},
		{"an actor's own error", rivet.UserError("order.closed", "closed", nil), false},
		{"any other error", errors.New("boom"), false},
		{"marked not sent", markedErr{rivet.Errorf(rivet.ErrTimeout, "deadline"), "RequestNotSent"}, false},
		{"marked unknown", fmt.Errorf("create: %w", markedErr{rivet.Errorf(rivet.ErrAlreadyExists, "exists"), "OutcomeUnknown"}), true},
	} {
		if got := rivet.OutcomeUnknown(c.err); got != c.want {
			t.Errorf("%s: OutcomeUnknown(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

// markedErr is err with a method named mark that returns true, as the Go
// client marks an error whose request did not run (RequestNotSent) or may
// have run in an earlier attempt (OutcomeUnknown).
type markedErr struct {
	err  error
	mark string
}

func (e markedErr) Error() string        { return e.err.Error() }
func (e markedErr) Unwrap() error        { return e.err }
func (e markedErr) RequestNotSent() bool { return e.mark == "RequestNotSent" }
func (e markedErr) OutcomeUnknown() bool { return e.mark == "OutcomeUnknown" }

// Metadata that does not encode to JSON is left out of a user error, and
// its message says so: it was dropped without a word (a user trial).
func TestAUserErrorSaysItsMetadataDidNotEncode(t *testing.T) {
	e := rivet.UserError("bad_input", "no carrier", map[string]any{"ch": make(chan int)})
	if e.Metadata != nil || !strings.Contains(e.Message, "no carrier (metadata left out: it does not encode to JSON") {
		t.Fatalf("error %q, metadata %s; want the message to say the metadata was left out", e.Message, e.Metadata)
	}
	if e := rivet.UserError("bad_input", "no carrier", map[string]int{"n": 1}); string(e.Metadata) != `{"n":1}` || e.Message != "no carrier" {
		t.Fatalf("error %q, metadata %s; want the metadata kept and the message as given", e.Message, e.Metadata)
	}
}

// resultHandle is a Handle whose actions all answer result.
type resultHandle struct {
	rivet.Handle
	result string
}

func (h resultHandle) Call(context.Context, string, ...any) (json.RawMessage, error) {
	return json.RawMessage(h.result), nil
}

// A result that does not decode into what Call asks for is the caller's
// mismatch, after the action ran: FAILED_PRECONDITION with its own reason,
// and critical in a step, not the node's internal error that a retry
// (running the action again) might be taken to cure (a user trial).
func TestACallWhoseResultDoesNotDecodeSaysTheActionRan(t *testing.T) {
	_, err := rivet.Call[string](context.Background(), resultHandle{result: `5`}, "restock", 1)
	var e *rivet.Error
	if !errors.As(err, &e) || !errors.Is(err, rivet.ErrFailedPrecondition) || e.Group+"."+e.Code != "client.result_undecodable" ||
		!errors.As(err, new(*workflow.CriticalError)) || !strings.Contains(err.Error(), "action restock ran, but its result does not decode into string") {
		t.Fatalf("Call of a result that does not decode: %v; want FAILED_PRECONDITION client.result_undecodable, critical, saying it ran", err)
	}
}

// A context's end is mapped as a node answers it, not as an internal
// error: an error mapper built on AsError (an HTTP API's) logged an idle
// subscription's deadline as internal_error (a user trial).
func TestAsErrorOfAContextsEnd(t *testing.T) {
	for _, c := range []struct {
		err               error
		kind              error
		group, code, text string
	}{
		{context.DeadlineExceeded, rivet.ErrTimeout, "actor", "timed_out", "context deadline exceeded"},
		{fmt.Errorf("next event: %w", context.DeadlineExceeded), rivet.ErrTimeout, "actor", "timed_out", "next event: context deadline exceeded"},
		{context.Canceled, context.Canceled, "rivet", "canceled", "context canceled"},
		{errors.New("disk on fire"), rivet.ErrInternal, "rivet", "internal_error", "disk on fire"},
	} {
		e := rivet.AsError(c.err)
		if e.Kind != c.kind || e.Group != c.group || e.Code != c.code || e.Message != c.text || !errors.Is(e, c.kind) {
			t.Errorf("AsError(%v) = %+v; want kind %v, %s.%s, %q", c.err, e, c.kind, c.group, c.code, c.text)
		}
	}
}

// No error is no *Error: an error mapper that calls AsError on every
// result (a user trial's) does not panic on a nil one.
func TestAsErrorOfNilIsNil(t *testing.T) {
	if e := rivet.AsError(nil); e != nil {
		t.Fatalf("AsError(nil) = %+v, want nil", e)
	}
}

// A recorded error matches the kind its Kind names, and only that: the
// names are the kinds' (group, code) on the wire, which every build must
// keep (a history recorded by one build is replayed by the next), so they
// are spelt out here; the code plays no part (an entry recorded before
// kinds were kept matches none, whatever its code, as then).
func TestRecordedErrorMatchesTheKindItNames(t *testing.T) {
	names := map[error]string{
		rivet.ErrNotFound:           "actor.not_found",
		rivet.ErrUnknownActor:       "actor.unknown_actor",
		rivet.ErrUnknownAction:      "actor.unknown_action",
		rivet.ErrUnknownQueue:       "queue.unknown_queue",
		rivet.ErrUnknownEvent:       "event.unknown_event",
		rivet.ErrAlreadyExists:      "actor.duplicate_key",
		rivet.ErrInvalidArgument:    "request.invalid_argument",
		rivet.ErrTooLarge:           "request.too_large",
		rivet.ErrQueueFull:          "queue.full",
		rivet.ErrUnavailable:        "actor.unavailable",
		rivet.ErrWorkflowFailed:     "workflow.failed",
		rivet.ErrFailedPrecondition: "request.failed_precondition",
		rivet.ErrTimeout:            "actor.timed_out",
		rivet.ErrUnauthenticated:    "request.unauthenticated",
		rivet.ErrInternal:           "rivet.internal_error",
		rivet.ErrUser:               "user",
	}
	recs := []workflow.RecordedError{
		{Code: "unknown_action"},
		{RivetKind: "actor.deadlock"}, // a reason's pair is no kind's name
		{RivetKind: "mine.x"},
	}
	want := []error{nil, nil, nil}
	for _, k := range rivet.Kinds() {
		if names[k] == "" {
			t.Fatalf("kind %v: no name here", k)
		}
		recs = append(recs, workflow.RecordedError{RivetKind: names[k], Code: "deadlock"})
		want = append(want, k)
	}
	for i, rec := range recs {
		for _, k := range rivet.Kinds() {
			if got := errors.Is(&rec, k); got != (k == want[i]) {
				t.Errorf("errors.Is(%+v, %v) = %v", rec, k, got)
			}
		}
	}
}
