package server

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// A relayed subscription's owner that refuses it because it is stopping
// is not the node the subscriber reached: the refusal passes on as an
// UNAVAILABLE of the node's own, not node.stopping, which the client would
// retry at once on another address, that would relay it to the owner
// again.
func TestARelayedSubscriptionsStoppingOwnerIsNotTheRelaysRefusal(t *testing.T) {
	refusal, _ := rpcerr.ToStatus(rivet.Reasonf(rivet.ErrUnavailable, "node", "stopping", "node n1 is stopping"))
	st := status.Convert(relayError(refusal.Err(), false))
	if st.Code() != codes.Unavailable || !rpcerr.HasActorError(st) || rpcerr.RefusedStopping(st) {
		t.Fatalf("relayed: %v; want UNAVAILABLE with the node's detail, not node.stopping", st)
	}
}
