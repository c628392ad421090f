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
