package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

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
				{Path: "big", Kind: "step", Status: "exhausted", Failure: "critical", Attempts: 1, Error: "the state of a would be 2000000 bytes", ErrorCode: "too_large"},
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
big   step  too large, not retried       1         error (too_large): the state of a would be 2000000 bytes
t     step  timed out, not retried       1         error: context deadline exceeded
r     step  Rollback error, not retried  1         error: declined
x     step  exhausted                    4         error: api down
old   step  exhausted                    1         error: from an older node
`)

	r := rivetctl(t, addr, "-o", "json", "history", "a", "k")
	var h client.History
	if err := json.Unmarshal([]byte(r.stdout), &h); r.code != 0 || err != nil || len(h.Entries) != 6 {
		t.Fatalf("history -o json: exit %d, %v:\n%s", r.code, err, r.stdout)
	}
	for i, want := range []string{"critical", "critical", "timeout", "rollback", "exhausted", ""} {
		if e := h.Entries[i]; e.Status != "exhausted" || e.Failure != want {
			t.Errorf("-o json entry %s: status %q, failure %q; want exhausted, %q", e.Path, e.Status, e.Failure, want)
		}
	}
}

// history shows an entry's error of several lines (a join's, errors.Join's)
// as inspect shows the workflow's, its lines trimmed and joined by "; ",
// and a received body sent over several lines on one, compacted: before,
// each newline became a space, and a join's branch errors ran together.
func TestHistoryShowsMultiLineErrorsAsInspectDoes(t *testing.T) {
	f := servertest.NewFake()
	f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
		return runtime.History{
			WorkflowStatus: "failed",
			WorkflowError:  "join failed:\n  a: boom\n  b: bust",
			Entries: []runtime.HistoryEntry{
				{Path: "in", Kind: "message", Status: "completed", Output: json.RawMessage(`[{"queue":"q","body":{` + "\n" + `  "n": 1` + "\n" + `}}]`)},
				{Path: "j", Kind: "join", Status: "failed", Error: "join failed:\n  a: boom\n  b: bust"},
				{Path: "s", Kind: "step", Status: "completed", Attempts: 1, HasRollback: true, RollbackError: "undo failed\nsecond line", RollbackAttempts: 1},
			},
		}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "history", "a", "k").want(t, 0, `workflow  failed
error     join failed:; a: boom; b: bust
PATH  KIND     STATUS                      ATTEMPTS  OUTPUT / ERROR
in    message  completed                   0         q: {"n":1}
j     join     failed                      0         error: join failed:; a: boom; b: bust
s     step     completed, rollback failed  1         rollback error: undo failed; second line
`)
}

// history says a step whose last attempt failed and that will run again
// after its backoff is "failed, retrying": "failed" alone, beside its
// attempts, read as the step's end (a user trial). A workflow that ended
// (cancelled during the backoff) runs it no more: "failed".
func TestHistorySaysAStepWaitingToRunAgainIsRetrying(t *testing.T) {
	for _, tc := range []struct{ workflow, want string }{
		{"sleeping", "failed, retrying"},
		{"running", "failed, retrying"},
		{"cancelled", "failed"},
	} {
		f := servertest.NewFake()
		f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
			return runtime.History{
				WorkflowStatus: tc.workflow,
				Entries:        []runtime.HistoryEntry{{Path: "charge", Kind: "step", Status: "failed", Attempts: 2, Error: "card service down"}},
			}, nil
		}
		addr := servertest.Start(t, f, servertest.Config{})
		r := rivetctl(t, addr, "history", "a", "k")
		if r.code != 0 || !strings.Contains(r.stdout, "charge  step  "+tc.want+"  2") {
			t.Errorf("workflow %s: exit %d, history:\n%s\nwant the step %q", tc.workflow, r.code, r.stdout, tc.want)
		}
	}
}

// history shows a step's error whole: it was cut at 80 characters, just
// where a wrapped Go error has its cause (a user trial: "dial tcp
// 10.0.0.5:443: connect: ..." hid "connection refused"). One longer than
// the column's bound keeps its start and its end; -o json has it whole.
func TestHistoryShowsAStepsErrorWhole(t *testing.T) {
	const trial = "POST https://psp.internal/v1/charges: dial tcp 10.0.0.5:443: connect: connection refused"
	huge := "join failed: " + strings.Repeat("branch x: timeout; ", 100) + "last: connect: connection refused"
	f := servertest.NewFake()
	f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
		return runtime.History{
			WorkflowStatus: "sleeping",
			Entries: []runtime.HistoryEntry{
				{Path: "charge-card", Kind: "step", Status: "failed", Attempts: 9, Error: trial},
				{Path: "fan", Kind: "join", Status: "failed", Error: huge},
			},
		}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	r := rivetctl(t, addr, "history", "payment", "p-1001")
	if r.code != 0 || !strings.Contains(r.stdout, "failed, retrying  9         error: "+trial+"\n") {
		t.Fatalf("exit %d, history:\n%s\nwant the step's whole error", r.code, r.stdout)
	}
	var fan string
	for l := range strings.Lines(r.stdout) {
		if strings.HasPrefix(l, "fan ") {
			fan = strings.TrimRight(l, "\n")
		}
	}
	_, col, _ := strings.Cut(fan, "error: ")
	col = "error: " + col
	if n := utf8.RuneCountInString(col); n != 400 || !strings.HasPrefix(col, "error: join failed: branch x") || !strings.HasSuffix(col, "last: connect: connection refused") || !strings.Contains(col, "…") {
		t.Errorf("a long error's column (%d characters): %q; want 400, its start and its end with … between", n, col)
	}
	j := rivetctl(t, addr, "-o", "json", "history", "payment", "p-1001")
	if j.code != 0 || !strings.Contains(j.stdout, `"error":"`+trial+`"`) || !strings.Contains(j.stdout, strings.Repeat("branch x: timeout; ", 100)) {
		t.Errorf("-o json: exit %d, %s; want both errors whole", j.code, j.stdout)
	}
}
