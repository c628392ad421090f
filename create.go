package rivet

import (
	"context"

	"github.com/rivet-go/rivet/caller"
)

// ActorInfo is what is known of an actor without activating it (what
// Create says of the actor it made).
type ActorInfo = caller.ActorInfo

// CreateOptions are the options of CreateWith (an idempotency key).
type CreateOptions = caller.CreateOptions

// CreateResult is what CreateWith says of the actor: its info, and
// whether an earlier create with the same idempotency key made it.
type CreateResult = caller.CreateResult

// Create creates the actor (name, key) with input (its CreateState's,
// marshalled to JSON; a json.RawMessage as it is; nil for none) through
// any Client of this module: an actor's (c.Client() in an action or hook,
// step.Client() in a workflow step, a KeepAwake task's), as Rivet's
// c.client().child.create([key], {input}), or the Go client's. The
// actor's workflow, if its type has one, starts as with a client's
// create. It fails with ErrAlreadyExists if the actor exists, and with
// ErrUnknownActor if no node registers the name.
//
//	info, err := rivet.Create(ctx, c.Client(), "order", []string{orderID}, OrderInput{Items: items})
//
// A create whose outcome is unknown (an error of ErrTimeout, or a hop to
// the actor's node that broke) cannot tell, sent again, its own actor
// from one another create made: CreateWith with an idempotency key can.
//
// From an actor's code, it returns when ctx ends, wherever the new actor
// lives, and waits for no other turn, but it waits for the new actor's
// CreateVars and OnWake, which run on a call chain of their own: one that
// calls back into the creator waits for the creator's turn, which waits
// for it, until ctx ends (and its call fails). Call the creator back
// from the new actor's workflow, actions or KeepAwake tasks.
func Create(ctx context.Context, c Client, name string, key []string, input any) (ActorInfo, error) {
	res, err := CreateWith(ctx, c, name, key, input, CreateOptions{})
	return res.ActorInfo, err
}

// CreateWith is Create with options: with an idempotency key, a create
// sent again (with the same key and input) after an outcome it did not
// hear succeeds with Duplicate set rather than ErrAlreadyExists, and does
// not run CreateState again; so a workflow step that creates a child with
// its step's key creates it once however often the step runs (Temporal's
// child workflow start):
//
//	res, err := rivet.CreateWith(s.Context(), s.Client(), "shipment", []string{orderID}, input,
//		rivet.CreateOptions{IdempotencyKey: s.IdempotencyKey("ship")})
//
// caller.CreateOptions says what a key does. A Client that is not this
// module's (a test's fake without caller.Creator; workflowtest's
// FakeClient has it) is refused with ErrInvalidArgument.
func CreateWith(ctx context.Context, c Client, name string, key []string, input any, opts CreateOptions) (CreateResult, error) {
	cr, ok := c.(caller.Creator)
	if !ok {
		return CreateResult{}, Errorf(ErrInvalidArgument, "a %T cannot create an actor with an input: it has no CreateWith (caller.Creator)", c)
	}
	return cr.CreateWith(ctx, name, key, input, opts)
}
