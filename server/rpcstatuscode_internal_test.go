package server

import (
	"testing"

	"google.golang.org/grpc/codes"
)

// The owner's span of a forwarded call names its code as otelgrpc names
// it on the forwarding node's span: gRPC's canonical names (its
// doc/statuscodes.md), CANCELLED with two Ls, which Go's name has not.
func TestTheOwnersSpanNamesACodeAsOtelgrpcDoes(t *testing.T) {
	canonical := []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
		"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
		"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}
	for c, want := range canonical {
		if got := rpcStatusCode(codes.Code(c)); got != want {
			t.Errorf("code %d: %q, want %q", c, got, want)
		}
	}
}
