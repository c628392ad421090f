package rpcerr_test

import (
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/internal/rpcerr"
)

// A status marked outcome unknown keeps its mark however it is cut: without
// it, an UNAVAILABLE whose text is a dial error's ("connection refused",
// from a call the action made itself) reads as a request never sent, which
// clients retry even for calls with side effects that may have run.
func TestBoundKeepsTheOutcomeUnknownMark(t *testing.T) {
	st := status.New(codes.Unavailable, "call to the payments service: connection refused")
	st, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: rpcerr.OutcomeUnknownReason, Domain: "rivet"},
		&errdetails.DebugInfo{Detail: strings.Repeat("d", 10_000)}, // passed on from elsewhere
	)
	if err != nil {
		t.Fatal(err)
	}
	if !marked(st) || rpcerr.NotSent(st) {
		t.Fatalf("before the cut: outcome unknown %v, not sent %v", marked(st), rpcerr.NotSent(st))
	}
	b := rpcerr.Bound(st)
	if n := rpcerr.TrailerSize(b); n > rpcerr.MaxTrailerBytes {
		t.Errorf("%d bytes of trailers, over %d", n, rpcerr.MaxTrailerBytes)
	}
	if !marked(b) || rpcerr.NotSent(b) {
		t.Errorf("cut: details %v, outcome unknown %v, not sent %v; want the mark kept (and so not 'not sent')", b.Details(), marked(b), rpcerr.NotSent(b))
	}
}

// marked reports whether st carries the outcome-unknown mark.
func marked(st *status.Status) bool {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == rpcerr.OutcomeUnknownReason {
			return true
		}
	}
	return false
}
