package rpcerr

import (
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
)

// NotSentMark is in the message of a node-to-node failure that happened
// before the request left the node (server.PeerConn says so).
const NotSentMark = "request not sent"

// NotSent reports whether a failed call never reached its server: a bare
// UNAVAILABLE from dialing (gRPC sends nothing on a connection it has not
// made), or one a peer stream marked with NotSentMark. A status with a
// detail came from a node (an ActorError, or ToStatus's mark of an
// UNAVAILABLE that may come after the request ran), and its text perhaps
// from an action, so it never qualifies.
func NotSent(st *status.Status) bool {
	if st.Code() != codes.Unavailable || len(st.Proto().GetDetails()) > 0 {
		return false
	}
	m := st.Message()
	// "name resolver error" is gRPC's picker failing a call before any
	// connection: the address's host did not resolve (to no address).
	for _, s := range []string{NotSentMark, "Error while dialing", "connection refused", "no such host", "name resolver error", "authentication handshake failed"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// HasActorError reports whether st carries an ActorError detail: a node
// produced it.
func HasActorError(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*rivetv1.ActorError); ok {
			return true
		}
	}
	return false
}

// RefusedStopping reports whether st is the refusal of a node that is
// stopping, of a call that reached it (reason node.stopping): it ran
// nothing, and another node serves the call. The owner's refusal of a
// forwarded request is not one: another node would forward it there again.
func RefusedStopping(st *status.Status) bool {
	if st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if ae, ok := d.(*rivetv1.ActorError); ok {
			return ae.GetGroup() == "node" && ae.GetCode() == "stopping"
		}
	}
	return false
}

// PassedOn returns st as a node passes on another node's answer (a relayed
// subscription's, an admin request's sent on): a refusal of a node that is
// stopping (RefusedStopping) becomes one of its kind's own reason, as the
// owner's host refuses a request forwarded to it. The node passing it on
// is not stopping, and a client that retried it at once on another
// address would be sent to the stopping node again. Any other status is
// st.
func PassedOn(st *status.Status) *status.Status {
	if !RefusedStopping(st) {
		return st
	}
	out, _ := ToStatus(rivet.Errorf(rivet.ErrUnavailable, "%s", FromStatus(st).Message))
	return out
}

// MarkedOutcomeUnknown reports whether st is an UNAVAILABLE a node answered
// with ToStatus's mark (an action passing on what a call of its own got):
// the node's answer, not a connection that broke.
func MarkedOutcomeUnknown(st *status.Status) bool {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == OutcomeUnknownReason {
			return true
		}
	}
	return false
}
