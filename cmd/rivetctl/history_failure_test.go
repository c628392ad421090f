package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// history says what a step's failure was when no retry was made for it (a
// critical error, a timeout not retried, a Rollback), not "exhausted",
// which next to "1" in ATTEMPTS read as a retry policy used up (a user
// trial); retries used up, or a node that does not say, stay "exhausted".
// -o json keeps the status and carries the failure.
func TestHistorySaysWhatAFailureThatWasNotRetriedWas(t *testing.T) {
	f := servertest.NewFake()
	f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
		return runtime.History{
			WorkflowStatus: "failed",
			WorkflowError:  `workflow: step "c" failed (critical, 1 attempt): bad input`,
			Entries: []runtime.HistoryEntry{
				{Path: "c", Kind: "step", Status: "exhausted", Failure: "critical", Attempts: 1, Error: "bad input"},
				{Path: "t", Kind: "step", Status: "exhausted", Failure: "timeout", Attempts: 1, Error: "context deadline exceeded"},
				{Path: "r", Kind: "step", Status: "exhausted", Failure: "rollback", Attempts: 1, Error: "declined"},
				{Path: "x", Kind: "step", Status: "exhausted", Failure: "exhausted", Attempts: 4, Error: "api down"},
				{Path: "old", Kind: "step", Status: "exhausted", Attempts: 1, Error: "from an older node"},
			},
		}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})

	rivetctl(t, addr, "history", "a", "k").want(t, 0, `workflow  failed
error     workflow: step "c" failed (critical, 1 attempt): bad input
PATH  KIND  STATUS                       ATTEMPTS  OUTPUT / ERROR
c     step  critical error, not retried  1         error: bad input
t     step  timed out, not retried       1         error: context deadline exceeded
r     step  Rollback error, not retried  1         error: declined
x     step  exhausted                    4         error: api down
old   step  exhausted                    1         error: from an older node
`)

	r := rivetctl(t, addr, "-o", "json", "history", "a", "k")
	var h client.History
	if err := json.Unmarshal([]byte(r.stdout), &h); r.code != 0 || err != nil || len(h.Entries) != 5 {
		t.Fatalf("history -o json: exit %d, %v:\n%s", r.code, err, r.stdout)
	}
	for i, want := range []string{"critical", "timeout", "rollback", "exhausted", ""} {
		if e := h.Entries[i]; e.Status != "exhausted" || e.Failure != want {
			t.Errorf("-o json entry %s: status %q, failure %q; want exhausted, %q", e.Path, e.Status, e.Failure, want)
		}
	}
}
