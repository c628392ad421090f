package rpcerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
)

// Every kind survives ToStatus then FromStatus, with and without the
// detail (a status without one keeps at least its code).
func TestRoundTrip(t *testing.T) {
	for _, kind := range append(rivet.Kinds(), context.Canceled, context.DeadlineExceeded) {
		st, masked := ToStatus(fmt.Errorf("wrapped: %w", kind))
		if masked {
			t.Errorf("%v was masked", kind)
		}
		back := FromStatus(st)
		want := kind
		if kind == context.DeadlineExceeded {
			want = rivet.ErrTimeout
		}
		if !errors.Is(back, want) {
			t.Errorf("%v came back as %v (%v)", kind, back.Kind, back)
		}
		// A bare UNKNOWN is gRPC's "no idea", not an actor's own error.
		bare := FromStatus(status.New(st.Code(), "x"))
		if Code(bare) != st.Code() && st.Code() != codes.Unknown {
			t.Errorf("%v: a bare %v came back as %v", kind, st.Code(), Code(bare))
		}
	}
}

func TestMasking(t *testing.T) {
	st, masked := ToStatus(errors.New("secret path"))
	if !masked || st.Code() != codes.Internal || st.Message() != "internal error" {
		t.Errorf("got %v, masked %v", st, masked)
	}
	// A status from another node keeps its kind and message.
	peer, _ := ToStatus(rivet.Errorf(rivet.ErrQueueFull, "queue q is full"))
	st, masked = ToStatus(fmt.Errorf("forward: %w", peer.Err()))
	if masked || st.Code() != codes.ResourceExhausted || !errors.Is(FromStatus(st), rivet.ErrQueueFull) {
		t.Errorf("forwarded: %v, masked %v", st, masked)
	}
}

func TestCodeName(t *testing.T) {
	for c, want := range map[codes.Code]string{
		codes.OK: "OK", codes.NotFound: "NOT_FOUND", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
		codes.ResourceExhausted: "RESOURCE_EXHAUSTED", codes.Unknown: "UNKNOWN",
	} {
		if got := CodeName(c); got != want {
			t.Errorf("CodeName(%v) = %s, want %s", c, got, want)
		}
	}
}

// An error with a finer reason than its kind's keeps it across the wire,
// and decodes as its kind.
func TestAReasonSurvivesTheWire(t *testing.T) {
	for _, tc := range []struct {
		kind        error
		group, code string
		status      codes.Code
	}{
		{rivet.ErrNotFound, "node", "not_found", codes.NotFound},
		{rivet.ErrWorkflowFailed, "workflow", "none", codes.FailedPrecondition},
		{rivet.ErrWorkflowFailed, "workflow", "not_ended", codes.FailedPrecondition},
		{rivet.ErrWorkflowFailed, "workflow", "not_failed", codes.FailedPrecondition},
		{rivet.ErrFailedPrecondition, "node", "last_eligible", codes.FailedPrecondition},
		{rivet.ErrFailedPrecondition, "actor", "deadlock", codes.FailedPrecondition},
		{rivet.ErrFailedPrecondition, "actor", "not_read_only", codes.FailedPrecondition},
	} {
		st, _ := ToStatus(rivet.Reasonf(tc.kind, tc.group, tc.code, "m"))
		back := FromStatus(st)
		if st.Code() != tc.status || !errors.Is(back, tc.kind) || back.Group != tc.group || back.Code != tc.code {
			t.Errorf("%s.%s: %v came back as %v %s.%s", tc.group, tc.code, st.Code(), back.Kind, back.Group, back.Code)
		}
	}
	// A pair not listed falls back to the kind's own.
	if e := rivet.Reasonf(rivet.ErrNotFound, "node", "gone", "m"); e.Group != "actor" || e.Code != "not_found" {
		t.Errorf("an unlisted reason: %s.%s, want actor.not_found", e.Group, e.Code)
	}
}

// An UNAVAILABLE a node gives as its own answer ("this request did not
// run") carries the ActorError that clients retry on; one without a group
// (the request may have run: an action passing on what a call of its own
// got) goes without it, comes back as rivet.OutcomeUnknown, and never reads
// as a request not sent, whatever its text.
func TestOnlyANodesOwnUnavailableSaysNotRun(t *testing.T) {
	own, _ := ToStatus(rivet.Errorf(rivet.ErrUnavailable, "partition moving"))
	if !HasActorError(own) {
		t.Error("the node's own UNAVAILABLE has no ActorError")
	}
	if rivet.OutcomeUnknown(FromStatus(own)) {
		t.Error("the node's own UNAVAILABLE came back as outcome unknown")
	}
	mayHaveRun, _ := ToStatus(&rivet.Error{Kind: rivet.ErrUnavailable, Message: "ran, then failed: " + NotSentMark + ": Error while dialing"})
	if mayHaveRun.Code() != codes.Unavailable || HasActorError(mayHaveRun) {
		t.Errorf("an UNAVAILABLE without a group: %v, ActorError %v; want UNAVAILABLE without one", mayHaveRun.Code(), HasActorError(mayHaveRun))
	}
	if NotSent(mayHaveRun) {
		t.Error("an UNAVAILABLE that may come after the request ran reads as not sent")
	}
	if back := FromStatus(mayHaveRun); !errors.Is(back, rivet.ErrUnavailable) || !rivet.OutcomeUnknown(back) {
		t.Errorf("came back as %v (outcome unknown %v)", back, rivet.OutcomeUnknown(back))
	}
	if !NotSent(status.New(codes.Unavailable, "connection error: Error while dialing: connection refused")) {
		t.Error("a dial refused does not read as not sent")
	}
}
