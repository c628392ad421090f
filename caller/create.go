package caller

import (
	"context"
	"time"
)

// Creator is what this module's clients offer beyond Client: a create of
// an actor with an input (its CreateState's), which fails if the actor
// exists, and says whether it made it. The Go client and the client an
// actor's code gets (an action's, a step's, a hook's, a task's) both
// implement it; rivet.Create and rivet.CreateWith reach it through any
// Client.
type Creator interface {
	// CreateWith creates the actor (name, key) with input (marshalled to
	// JSON; a json.RawMessage as it is; nil for none). An actor that
	// exists already is rivet.ErrAlreadyExists, unless opts say it was
	// this create's (CreateOptions.IdempotencyKey).
	CreateWith(ctx context.Context, name string, key []string, input any, opts CreateOptions) (CreateResult, error)
}

// CreateOptions are the options of a create (Creator.CreateWith).
type CreateOptions struct {
	// IdempotencyKey, if set, is stored with the actor the create makes,
	// in the same commit (one key per actor: the creating one's, kept as
	// long as the actor). A create of the actor with the same key and
	// input then succeeds again, with Duplicate set, and does not make
	// the actor's state again (CreateState): so a create whose outcome is
	// unknown (a connection that broke, a node that failed over) may be
	// sent again, as Temporal's StartWorkflow with its RequestId, and a
	// workflow step that creates an actor with the step's key
	// (StepCtx.IdempotencyKey) creates it once however often the step
	// runs. The same key with another input (compared as JSON values) is
	// rivet.ErrInvalidArgument; an actor created otherwise (without a
	// key, with another, or again after a destroy) is
	// rivet.ErrAlreadyExists, as without a key. At most 256 bytes of
	// UTF-8.
	IdempotencyKey string
}

// CreateResult is what a create says of the actor.
type CreateResult struct {
	ActorInfo
	// Duplicate says that a create with the same idempotency key and
	// input created the actor before (an earlier create, or this one's
	// first attempt if it was sent again after its connection broke):
	// nothing was created now.
	Duplicate bool `json:"duplicate,omitempty"`
}

// ActorInfo is what is known of an actor without activating it.
type ActorInfo struct {
	Name string   `json:"name"`
	Key  []string `json:"key"`
	// CreatedAt is zero if the node did not say.
	CreatedAt time.Time `json:"created_at"`
	Partition uint32    `json:"partition"`
	// Owner is the node that owns the actor's partition now ("" if none).
	Owner string `json:"owner"`
	// WorkflowError and WorkflowFailedAt are set in a list of failed
	// workflows (client.ListOptions.FailedWorkflows): the error, cut
	// to 1 KiB (Inspect has all of it), and when the workflow failed.
	WorkflowError    string    `json:"workflow_error,omitempty"`
	WorkflowFailedAt time.Time `json:"workflow_failed_at,omitzero"`
}
