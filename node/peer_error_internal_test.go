package node

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// A call to another node's actor whose stream broke mid-call may have run:
// its caller is told the outcome is unknown, as a timeout, so that the
// calling actor's own client does not take it for a node's UNAVAILABLE and
// retry. An UNAVAILABLE the owner answered (an action that ran and failed
// on an actor it called) is that answer, not a broken hop.
func TestPeerErrorTellsABrokenHopFromAnAnswer(t *testing.T) {
	broke := peerError(status.Error(codes.Unavailable, "the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call"))
	if !errors.Is(broke, rivet.ErrTimeout) || !rivet.OutcomeUnknown(broke) || !strings.Contains(broke.Error(), "outcome is unknown") {
		t.Errorf("a broken hop: %v, want a timeout whose outcome is unknown", broke)
	}
	const msg = "action relay of relay [\"r\"] ran and failed as unavailable (its own error, or one of an actor it called)"
	st, _ := rpcerr.ToStatus(&rivet.Error{Kind: rivet.ErrUnavailable, Message: msg})
	answer := peerError(st.Err())
	if !errors.Is(answer, rivet.ErrUnavailable) || !rivet.OutcomeUnknown(answer) || answer.Error() != msg {
		t.Errorf("the owner's answer: %v, want UNAVAILABLE whose outcome is unknown, saying %q", answer, msg)
	}
}
