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
