package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet"
)

// A node address whose host does not resolve ran nothing: rivetctl says
// what is wrong with the address, and not that the command may have run
// (which would have the user look for the effects of a call never sent).
func TestAnAddressThatDoesNotResolveRanNothing(t *testing.T) {
	err := &rivet.Error{Kind: rivet.ErrUnavailable, Message: "name resolver error: produced zero addresses"}
	cmd := &cobra.Command{Annotations: map[string]string{sideEffectsAnnotation: "yes"}}
	if note := mayHaveRun(cmd, err); note != "" {
		t.Errorf("note %q, want none: the call was never sent", note)
	}
	a := &app{addr: "nohost.invalid:6420"}
	if hint := a.connectionHint(err); !strings.Contains(hint, "the host of nohost.invalid:6420 does not resolve") {
		t.Errorf("hint %q, want it to say that the host does not resolve", hint)
	}
}

// A port that closes connections at once fails the client's preface
// either reading the server's (EOF) or, when the close comes first,
// writing its own (a broken pipe, gRPC's message then bare). Neither
// connection became ready, so neither sent the call; a failure on a
// connection that was ready, which gRPC words otherwise, may have.
func TestAConnectionThatNeverBecameReadyRanNothing(t *testing.T) {
	cmd := &cobra.Command{Annotations: map[string]string{sideEffectsAnnotation: "yes"}}
	for msg, ranNothing := range map[string]bool{
		`connection error: desc = "error reading server preface: EOF"`:                      true,
		"write tcp 127.0.0.1:53842->127.0.0.1:35607: write: broken pipe":                    true,
		"write tcp 127.0.0.1:53842->127.0.0.1:35607: write: connection reset by peer":       true,
		"error reading from server: write tcp 127.0.0.1:1->127.0.0.1:2: write: broken pipe": false,
		"transport is closing":              false,
		"peer stream broke during the call": false,
	} {
		err := &rivet.Error{Kind: rivet.ErrUnavailable, Message: msg}
		if note := mayHaveRun(cmd, err); (note == "") != ranNothing {
			t.Errorf("%q: note %q; want a may-have-run note: %v", msg, note, !ranNothing)
		}
		a := &app{addr: "127.0.0.1:6420"}
		if hint := a.connectionHint(err); ranNothing && !strings.Contains(hint, "the node may serve TLS only") {
			t.Errorf("%q: hint %q, want that the node may serve TLS only", msg, hint)
		}
	}
}
