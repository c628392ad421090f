// Package sizes words the errors of payloads over their limits, the same
// wherever a node checks them: in its gRPC service, for a client's
// request, and in its runtime, for an actor's call to another actor,
// which it serves itself or sends to the actor's node.
package sizes

import (
	"fmt"

	"github.com/rivet-go/rivet"
)

const (
	kib = 1 << 10
	mib = 1 << 20
)

// A turn's writes (an action's, or a workflow step attempt's) go to etcd in
// one transaction, whose bounds (etcd's defaults: 128 operations, 1.5 MiB)
// its state and its other writes share: a turn enqueues at most
// TurnMessages messages on its actor's own queues (counted with the calls
// it schedules), whose bodies, with the calls' arguments, come to at most
// TurnBytes. A node's runtime and workflowtest's Host check the same.
const (
	TurnMessages = 32
	TurnBytes    = 256 << 10
)

// Check returns ErrTooLarge if a payload of n bytes is over its limit,
// with a message that says which payload (what), its size and the limit,
// so a user can act on it without reading the node's config.
func Check(what string, n, limit int) error {
	if n <= limit {
		return nil
	}
	return rivet.Errorf(rivet.ErrTooLarge, "%s too large: %s, the limit is %s", what, Text(n), Text(limit))
}

// Text prints a size in bytes and, when that helps, in KiB or MiB.
func Text(n int) string {
	switch {
	case n >= mib:
		return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/mib)
	case n >= kib:
		return fmt.Sprintf("%d bytes (%.1f KiB)", n, float64(n)/kib)
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}
