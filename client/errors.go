package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/optjson"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// fromStatus turns a failed call's status into the error the caller sees:
// the *rivet.Error the node sent. When the caller's own context ended the
// call, the error also matches ctx.Err(), so that both
// errors.Is(err, context.DeadlineExceeded) and
// errors.Is(err, rivet.ErrTimeout) hold.
func fromStatus(ctx context.Context, st *status.Status) error {
	e := rpcerr.FromStatus(st)
	if st.Code() != codes.Canceled && st.Code() != codes.DeadlineExceeded {
		return e
	}
	cause := ctx.Err()
	if d, ok := ctx.Deadline(); cause == nil && ok && !time.Now().Before(d) {
		// The node saw the deadline (it travels with the call) and reset
		// the stream a moment before the local timer fired: it is still
		// the caller's deadline that ended the call.
		cause = context.DeadlineExceeded
	}
	if cause != nil {
		if e.Group == "" && cause == context.DeadlineExceeded {
			// Not the node's words but the transport's, for how the
			// stream ended when the deadline passed: about half the time
			// "stream terminated by RST_STREAM with error code: CANCEL"
			// (the node, which knows the deadline too, reset the stream
			// first), which reads as a network failure in a log or an
			// API's error body (a user trial). It was the deadline.
			e = &rivet.Error{Kind: rivet.ErrTimeout, Message: cause.Error()}
		}
		return withCause(e, cause)
	}
	return e
}

// marshalFailure starts the message of gRPC's status for a request the
// client could not encode (rpc_util.go): it is never sent.
const marshalFailure = "grpc: error while marshaling: "

// unencodable returns the error of a request gRPC refused to encode: a
// string that is not UTF-8 (an actor name, a key, an action, a reason).
// gRPC makes it INTERNAL, which says a node failed; it is the caller's bad
// input, as a node says of a request that does not decode (INVALID_ARGUMENT).
// Nil for any other status, and for a node's answer that gRPC could not
// encode, which a node reports in the same words: req is encoded again
// (this runs only for such a status) to tell them apart.
func unencodable(st *status.Status, req any) error {
	m, ok := strings.CutPrefix(st.Message(), marshalFailure)
	if st.Code() != codes.Internal || len(st.Proto().GetDetails()) > 0 || !ok {
		return nil
	}
	msg, isMsg := req.(proto.Message)
	if !isMsg {
		return nil
	}
	if _, err := proto.Marshal(msg); err == nil {
		return nil
	}
	return rivet.Errorf(rivet.ErrInvalidArgument, "the request does not encode (%s): its strings, such as the actor's name and key, must be UTF-8", m)
}

// notSentIf returns err marked as the failure of a request that never
// reached a node (rivet.OutcomeUnknown false: it did not run), if notSent.
func notSentIf(notSent bool, err error) error {
	if !notSent || err == nil {
		return err
	}
	return &notSentError{err: err}
}

// notSentError is the failure of a call none of whose attempts reached a
// node (see attempt): whatever it says (a deadline, a connection that
// broke as it was made), the request did not run.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// RequestNotSent tells rivet.OutcomeUnknown that the request did not run.
func (e *notSentError) RequestNotSent() bool { return true }

// retriedError is a call's final failure after an attempt that could not
// reach a node: err is what the caller gets (errors.Is and As see it
// alone), before that attempt's failure (EarlierFailure).
type retriedError struct {
	err    error
	before error
}

func (e *retriedError) Error() string { return e.err.Error() }
func (e *retriedError) Unwrap() error { return e.err }

// EarlierFailure returns, for a call whose deadline ended it after an
// attempt that could not reach the node (UNAVAILABLE from the transport:
// refused, reset, not TLS), that attempt's failure; nil otherwise. It
// says why the node did not answer, where err says only that time ran
// out (and that the last attempt may have run).
func EarlierFailure(err error) error {
	var re *retriedError
	if errors.As(err, &re) {
		return re.before
	}
	return nil
}

// withCause returns err, also matching cause (a context error) in
// errors.Is. Its text is err's alone, which already says what happened.
func withCause(err, cause error) error {
	if errors.Is(err, cause) {
		return err
	}
	return &causedError{err: err, cause: cause}
}

type causedError struct {
	err   error
	cause error
}

func (e *causedError) Error() string   { return e.err.Error() }
func (e *causedError) Unwrap() []error { return []error{e.err, e.cause} }

// Code returns the gRPC status code an error from this package stands for,
// for callers that report errors in gRPC's terms (rivetctl does).
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	return rpcerr.Code(err)
}

// marshalArgs encodes call arguments as the JSON array the wire carries. A
// json.RawMessage argument is sent byte for byte (once checked to be JSON),
// so that what a CLI user typed is what the actor gets.
func marshalArgs(args []any) (json.RawMessage, error) {
	if len(args) == 0 {
		return json.RawMessage("[]"), nil
	}
	var b []byte
	for i, a := range args {
		v, err := optjson.Encode(fmt.Sprintf("argument %d", i+1), a)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			b = append(b, '[')
		} else {
			b = append(b, ',')
		}
		b = append(b, v...)
	}
	return append(b, ']'), nil
}
