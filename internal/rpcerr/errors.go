package rpcerr

import (
	"context"
	"errors"
	"strings"
	"unicode"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/textcut"
)

// codeOfKind maps each kind to its status code. Order matters only for an
// error that matches several entries, which no sentinel does.
var codeOfKind = []struct {
	kind error
	code codes.Code
}{
	{rivet.ErrNotFound, codes.NotFound},
	{rivet.ErrUnknownActor, codes.NotFound},
	{rivet.ErrUnknownAction, codes.NotFound},
	{rivet.ErrUnknownQueue, codes.NotFound},
	{rivet.ErrUnknownEvent, codes.NotFound},
	{rivet.ErrAlreadyExists, codes.AlreadyExists},
	{rivet.ErrInvalidArgument, codes.InvalidArgument},
	{rivet.ErrTooLarge, codes.ResourceExhausted},
	{rivet.ErrQueueFull, codes.ResourceExhausted},
	{rivet.ErrUnavailable, codes.Unavailable},
	{rivet.ErrWorkflowFailed, codes.FailedPrecondition},
	{rivet.ErrFailedPrecondition, codes.FailedPrecondition},
	{rivet.ErrTimeout, codes.DeadlineExceeded},
	{rivet.ErrUnauthenticated, codes.Unauthenticated},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
	{rivet.ErrUser, codes.Unknown},
	{rivet.ErrInternal, codes.Internal},
}

// Code returns the status code for an error of the given kind (any error
// that wraps a rivet sentinel or a context error); Internal for anything
// else.
func Code(err error) codes.Code {
	for _, k := range codeOfKind {
		if errors.Is(err, k.kind) {
			return k.code
		}
	}
	return codes.Internal
}

// KindOf is the reverse of Code for a status that carries no ActorError
// detail (a proxy, grpc itself, or a server of another kind produced it):
// the most likely kind for the code. It loses information by nature, which
// is why servers attach the detail.
func KindOf(code codes.Code) error {
	switch code {
	case codes.NotFound:
		return rivet.ErrNotFound
	case codes.AlreadyExists:
		return rivet.ErrAlreadyExists
	case codes.InvalidArgument:
		return rivet.ErrInvalidArgument
	case codes.ResourceExhausted:
		return rivet.ErrTooLarge
	case codes.Unavailable:
		return rivet.ErrUnavailable
	case codes.FailedPrecondition:
		return rivet.ErrWorkflowFailed
	case codes.DeadlineExceeded:
		return rivet.ErrTimeout
	case codes.Canceled:
		return context.Canceled
	case codes.Unauthenticated:
		return rivet.ErrUnauthenticated
	default:
		return rivet.ErrInternal
	}
}

// OutcomeUnknownReason marks (in an errdetails.ErrorInfo) an UNAVAILABLE
// that a node passes on rather than gives: the request may have run.
const OutcomeUnknownReason = "OUTCOME_UNKNOWN"

// ToStatus converts err into the status a server returns, with an
// ActorError detail. A *rivet.Error (or an error wrapping a rivet sentinel)
// keeps its message: it was written for callers. Any other error is a bug or
// an unexpected failure whose text may leak internals, so its message is
// replaced with "internal error" and masked is true: the caller must log err
// itself, since the client will never see it.
//
// The status is bounded to fit a client's header list (Bound): a long
// message reaches the client cut, and large metadata left out.
func ToStatus(err error) (st *status.Status, masked bool) {
	st, masked = toStatus(err)
	return Bound(st), masked
}

func toStatus(err error) (st *status.Status, masked bool) {
	e, masked := asRivetError(err)
	// The detail's strings are proto strings, which must be UTF-8: an
	// actor's text that is not (made of bytes) would leave the detail
	// out, and with it the error's group and code.
	msg := textcut.Valid(e.Message)
	st = status.New(Code(e.Kind), msg)
	if errors.Is(e.Kind, rivet.ErrUnavailable) && e.Group == "" {
		// An UNAVAILABLE no node gives as its own answer (the request
		// may have run: rivet.OutcomeUnknown, an action passing on what
		// a call of its own got) goes without the ActorError that tells
		// clients the request did not run, and with a mark of its own,
		// so that its text (perhaps a dial error's) does not read as a
		// request never sent (NotSent) either.
		marked, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: OutcomeUnknownReason, Domain: "rivet"})
		if derr != nil {
			return st, masked
		}
		return marked, masked
	}
	withDetail, derr := st.WithDetails(&rivetv1.ActorError{
		Group:    textcut.Valid(e.Group),
		Code:     textcut.Valid(e.Code),
		Message:  msg,
		Metadata: e.Metadata,
	})
	if derr != nil {
		// Only a detail that fails to marshal gets here; the code and
		// message still reach the client.
		return st, masked
	}
	return withDetail, masked
}

func asRivetError(err error) (e *rivet.Error, masked bool) {
	switch {
	case errors.As(err, &e):
		return e, false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// A timeout, or a cancellation (rivet has no sentinel for it: it
		// is the caller's own doing, tested with errors.Is(err,
		// context.Canceled)), as rivet.AsError says.
		return rivet.AsError(err), false
	}
	// An error that is already a status (from a node-to-node call) is
	// taken back to its kind first, so that forwarding keeps it intact.
	if st, ok := status.FromError(err); ok {
		return FromStatus(st), false
	}
	e = rivet.AsError(err)
	if e.Kind == rivet.ErrInternal && !errors.Is(err, rivet.ErrInternal) {
		return rivet.Errorf(rivet.ErrInternal, "internal error"), true
	}
	return e, false
}

// FromStatus rebuilds the *rivet.Error a server sent: from its ActorError
// detail when there is one, otherwise from the code alone. Its Unwrap gives
// the sentinel kind, so errors.Is works as on the server.
func FromStatus(st *status.Status) *rivet.Error {
	for _, d := range st.Details() {
		ae, ok := d.(*rivetv1.ActorError)
		if !ok {
			continue
		}
		kind := rivet.KindByCode(ae.GetGroup(), ae.GetCode())
		if kind == rivet.ErrInternal && (ae.GetGroup() != "rivet" || ae.GetCode() != "internal_error") {
			// A (group, code) this build does not know, from a newer
			// server or for a cancellation: the status code still says
			// what kind of failure it is.
			kind = KindOf(st.Code())
		}
		msg := ae.GetMessage()
		if msg == "" {
			msg = st.Message()
		}
		var md []byte
		if len(ae.GetMetadata()) > 0 {
			md = ae.GetMetadata()
		}
		return &rivet.Error{Kind: kind, Group: ae.GetGroup(), Code: ae.GetCode(), Message: msg, Metadata: md}
	}
	// Group and Code stay empty: the node did not give them, and a made-up
	// "actor.unavailable" for a refused connection would mislead.
	return &rivet.Error{Kind: KindOf(st.Code()), Message: st.Message()}
}

// CodeName is the canonical upper-case name of a code, as the gRPC spec and
// other tools print it: NotFound -> NOT_FOUND.
func CodeName(c codes.Code) string {
	if c == codes.OK {
		return "OK"
	}
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// loggedError marks an error whose cause was logged in full, at error
// level, where it was made (Logged).
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// Logged returns err marked as logged where it was made, with its cause:
// the node's call log (the server's interceptor) then logs the call that
// ends with it at debug level, so that one failure is one error line.
func Logged(err error) error { return loggedError{err} }

// IsLogged reports whether err, or an error it wraps, was marked Logged.
func IsLogged(err error) bool {
	var l loggedError
	return errors.As(err, &l)
}
