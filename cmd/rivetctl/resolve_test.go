package main

import (
	"strings"
	"testing"

	"github.com/rivet-go/rivet"
)

// A node address whose host does not resolve ran nothing: rivetctl says
// what is wrong with the address, and not that the command may have run
// (which would have the user look for the effects of a call never sent).
func TestAnAddressThatDoesNotResolveRanNothing(t *testing.T) {
	r := rivetctl(t, "nohost.invalid:6420", "--timeout", "1s", "call", "counter", "main", "increment", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "the host of nohost.invalid:6420 does not resolve") || strings.Contains(r.stderr, "may have run") {
		t.Errorf("exit %d, stderr %q; want exit 1, that the host does not resolve, without 'may have run'", r.code, r.stderr)
	}
}

// A port that closes connections at once fails the client's preface
// either reading the server's (EOF, or a reset) or, when the close comes
// first, writing its own (a broken pipe, gRPC's message then bare): each
// is what a TLS-only node dialed in plaintext does, and gets the hint.
// (That such a call did not run the client knows from gRPC, not from the
// text: TestACommandThatMayHaveRunSaysSo.)
func TestAConnectionClosedAtOnceHintsAtTLS(t *testing.T) {
	a := &app{addr: "127.0.0.1:6420"}
	for _, msg := range []string{
		`connection error: desc = "error reading server preface: EOF"`,
		`connection error: desc = "error reading server preface: read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer"`,
		"write tcp 127.0.0.1:53842->127.0.0.1:35607: write: broken pipe",
		"write tcp 127.0.0.1:53842->127.0.0.1:35607: write: connection reset by peer",
	} {
		err := &rivet.Error{Kind: rivet.ErrUnavailable, Message: msg}
		if hint := a.connectionHint(err); !strings.Contains(hint, "the node may serve TLS only") {
			t.Errorf("%q: hint %q, want that the node may serve TLS only", msg, hint)
		}
	}
	// Not a failure of a connection being made.
	for _, msg := range []string{"error reading from server: write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe", "transport is closing"} {
		if hint := a.connectionHint(&rivet.Error{Kind: rivet.ErrUnavailable, Message: msg}); hint != "" {
			t.Errorf("%q: hint %q, want none", msg, hint)
		}
	}
}
