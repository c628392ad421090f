// Package caller holds the two small interfaces through which code calls
// actors: Client (find an actor) and Handle (call it). Actions and workflow
// steps get a Client bound to their node and call chain; the gRPC client
// package implements the same interfaces, so code that calls actors reads
// the same in both places. It is a leaf package so that rivet and workflow
// can both use it without importing each other.
package caller

import (
	"context"
	"encoding/json"
)

// Client finds actors by name and key.
type Client interface {
	// GetOrCreate returns a handle whose calls create the actor if it does
	// not exist (the original engine's getOrCreate).
	GetOrCreate(name string, key ...string) Handle
	// Get returns a handle whose calls fail with rivet.ErrNotFound if the
	// actor does not exist; it never creates.
	Get(name string, key ...string) Handle
}

// Handle calls one actor. Handles are cheap and stateless: the key is
// resolved on every call.
type Handle interface {
	// Call runs an action with args (each marshalled to JSON) and returns
	// its JSON result.
	Call(ctx context.Context, action string, args ...any) (json.RawMessage, error)
	// Send appends body (marshalled to JSON) to one of the actor's queues
	// and returns once the message is durable.
	Send(ctx context.Context, queue string, body any) error
}
