package rpcerr

import (
	"errors"

	"github.com/rivet-go/rivet"
)

// CreateRanBefore returns err, the final failure of a keyed create sent
// again after an attempt that broke off once it could have reached a node,
// marked as of unknown outcome if it is ALREADY_EXISTS: a node older than
// the idempotency key ignores it, so the actor that exists may be the one
// that attempt created. A node that knows the key answers such a repeat as
// the first create's duplicate, but who sends it cannot tell the nodes
// apart, and errs toward "may have". The Go client (Client.CreateWith) and
// a node forwarding an actor's create (node's remote.Create) share it.
// Any other err is returned as it is.
func CreateRanBefore(ranBefore bool, err error) error {
	if !ranBefore || !errors.Is(err, rivet.ErrAlreadyExists) {
		return err
	}
	return &createRanBeforeError{err: err}
}

// createRanBeforeError is CreateRanBefore's: errors.Is and As see err
// (rivet.ErrAlreadyExists); rivet.OutcomeUnknown is true.
type createRanBeforeError struct{ err error }

func (e *createRanBeforeError) Error() string {
	return e.err.Error() + "; an earlier attempt of this create, whose connection broke, may have created the actor (a node older than Create's idempotency key ignores it)"
}
func (e *createRanBeforeError) Unwrap() error { return e.err }

// OutcomeUnknown tells rivet.OutcomeUnknown that the create may have run.
func (e *createRanBeforeError) OutcomeUnknown() bool { return true }

// BusyRanBefore returns err, the final failure of a request sent again
// after an attempt that broke off once it could have reached a node
// (ranBefore), marked as of unknown outcome if it is a timeout that says
// the last attempt did not run (reason actor.busy, which
// rivet.OutcomeUnknown reads as known): the attempt before it may have. The
// Go client and a node forwarding an actor's call or send share it. Any
// other err is returned as it is.
func BusyRanBefore(ranBefore bool, err error) error {
	if !ranBefore || !errors.Is(err, rivet.ErrTimeout) || rivet.OutcomeUnknown(err) {
		return err
	}
	return &busyRanBeforeError{err: err}
}

// busyRanBeforeError is BusyRanBefore's: errors.Is and As see err;
// rivet.OutcomeUnknown is true.
type busyRanBeforeError struct{ err error }

func (e *busyRanBeforeError) Error() string {
	return e.err.Error() + "; an earlier attempt of this request, whose connection broke once it was sent, may have run (its outcome is unknown)"
}
func (e *busyRanBeforeError) Unwrap() error { return e.err }

// OutcomeUnknown tells rivet.OutcomeUnknown that an earlier attempt may
// have run.
func (e *busyRanBeforeError) OutcomeUnknown() bool { return true }
