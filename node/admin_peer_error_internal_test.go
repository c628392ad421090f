package node

import (
	"testing"

	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// An admin request sent on to a node that refuses it because it is
// stopping gets that refusal, but not as node.stopping: the node that
// sent it on is not stopping, and a client that retried it at once on
// another address would have it sent on to the same node again.
func TestAnAdminRequestSentOnToAStoppingNodeIsNotRefusedAsStoppingHere(t *testing.T) {
	refusal, _ := rpcerr.ToStatus(rivet.Reasonf(rivet.ErrUnavailable, "node", "stopping", "node n1 is stopping"))
	err := adminPeerError(refusal.Err(), "ask node %s to drain", "n1")
	st, _ := rpcerr.ToStatus(err)
	if !rpcerr.HasActorError(st) || rpcerr.RefusedStopping(st) || status.Convert(st.Err()).Message() != "node n1 is stopping" {
		t.Fatalf("%v; want UNAVAILABLE node n1 is stopping, with the node's detail, not node.stopping", st)
	}
}
