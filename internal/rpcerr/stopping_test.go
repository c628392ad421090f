package rpcerr_test

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// A stopping node's refusal says so (node.stopping), for a client to retry
// it at once on another node; passed on by a node that is not stopping (a
// relayed subscription, an admin request sent on), it is an UNAVAILABLE of
// the kind's own reason, which the client retries with its backoff, with
// its message.
func TestAStoppingNodesRefusalIsItsOwnNotTheNodeThatPassesItOn(t *testing.T) {
	refusal, _ := rpcerr.ToStatus(rivet.Reasonf(rivet.ErrUnavailable, "node", "stopping", "node n1 is stopping"))
	if !rpcerr.RefusedStopping(refusal) {
		t.Fatalf("%v: not a stopping node's refusal", refusal)
	}
	passed := rpcerr.PassedOn(refusal)
	e := rpcerr.FromStatus(passed)
	if rpcerr.RefusedStopping(passed) || passed.Code() != codes.Unavailable || !rpcerr.HasActorError(passed) ||
		!errors.Is(e, rivet.ErrUnavailable) || e.Group != "actor" || e.Code != "unavailable" || e.Message != "node n1 is stopping" {
		t.Fatalf("passed on: %v (%s.%s); want UNAVAILABLE actor.unavailable, the node's message", passed, e.Group, e.Code)
	}
	other, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnavailable, "partition 3 is moving"))
	for _, st := range []*status.Status{other, status.New(codes.Unavailable, "connection refused"), status.New(codes.NotFound, "no")} {
		if rpcerr.RefusedStopping(st) || rpcerr.PassedOn(st) != st {
			t.Errorf("%v: taken for a stopping node's refusal", st)
		}
	}
}
