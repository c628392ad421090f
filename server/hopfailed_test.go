package server_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/server"
)

// A forwarded request's failure counts as the hop's (a node's
// rivet_forward_failures_total) when the request was never sent or its
// connection broke, never when the owner answered, even with UNAVAILABLE:
// the owner counted that one.
func TestHopFailedTellsTheHopFromTheOwnersAnswer(t *testing.T) {
	answered, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnavailable, "partition 3 is moving"))
	for _, c := range []struct {
		what string
		st   *status.Status
		want bool
	}{
		{"never sent", status.New(codes.Unavailable, "peer: "+rpcerr.NotSentMark+": connection refused"), true},
		{"a stream that broke", status.New(codes.Unavailable, "the stream to the actor's owner at 127.0.0.1:6430 broke during the forwarded call"), true},
		{"the owner's UNAVAILABLE", answered, false},
		{"the owner's INTERNAL", status.New(codes.Internal, "internal error"), false},
		{"the caller's deadline", status.New(codes.DeadlineExceeded, "context deadline exceeded"), false},
	} {
		if got := server.HopFailed(c.st); got != c.want {
			t.Errorf("%s (%v): HopFailed %v, want %v", c.what, c.st.Err(), got, c.want)
		}
	}
}
