package rpcerr_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/internal/rpcerr"
)

// A call gRPC could not even pick a connection for, because the node
// address's host did not resolve, never left the client: it is not sent,
// as a refused connection is, and so safe to retry and not "may have run".
func TestAnAddressThatDoesNotResolveIsNotSent(t *testing.T) {
	for _, msg := range []string{
		"name resolver error: produced zero addresses",                                          // gRPC's dns resolver, NXDOMAIN
		"name resolver error: dns: A record lookup error: lookup x on 10.0.0.1:53: i/o timeout", // a failing DNS server
		`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`,
	} {
		if !rpcerr.NotSent(status.New(codes.Unavailable, msg)) {
			t.Errorf("NotSent(UNAVAILABLE %q) = false, want true", msg)
		}
	}
	// Said by a node (or an action's text): not a dial failure of ours.
	if rpcerr.NotSent(status.New(codes.Unavailable, "the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call")) {
		t.Error("NotSent of a broken stream = true, want false")
	}
}
