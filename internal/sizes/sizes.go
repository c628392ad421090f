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
