package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// evil is text that a terminal would act on: clear the screen, set the
// window's title, go back to the start of the line, an 8-bit CSI (U+009B),
// DEL, a bidi override and a line and a tab that would shift a table.
const evil = "\x1b[2J\x1b]0;pwned\x07\r\u009b31m\x7f\u202e\n\tend"

// evilJSON is a JSON string holding, raw, what JSON lets a string hold
// raw: C1 controls, DEL, bidi overrides.
const evilJSON = `"a` + "\u009b31m\x7f\u202e\u2028" + `b"`

// wantPrintable fails unless s is text a terminal only shows: every
// character prints, is a space, or ends a line.
func wantPrintable(t *testing.T, what, s string) {
	t.Helper()
	for i, r := range s {
		if r != ' ' && r != '\n' && !shows(r) {
			t.Errorf("%s: character %U at byte %d does not print, in:\n%s", what, r, i, s)
			return
		}
	}
}

// Text from the node (a workflow's error, a history entry, an event, a
// member's name, an error message) is the actor code's, any client's or the
// node's: printed as it came, an escape sequence in it reached the
// operator's terminal (cleared the screen, set its title, rewrote a line).
// rivetctl escapes what does not print, as it does in keys, in text and in
// JSON alike.
func TestUntrustedTextIsEscaped(t *testing.T) {
	f := servertest.NewFake()
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	info := runtime.ActorInfo{Ref: runtime.Ref{Name: "counter", Key: []string{"main"}}, CreatedAt: when, Owner: "node" + evil,
		WorkflowError: "failed" + evil, WorkflowFailedAt: when}
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		return nil, rivet.UserError("bad", "boom"+evil, nil)
	}
	f.SendFunc = func(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
		return runtime.SendResult{Status: runtime.SendCompleted, MessageID: 1, Response: json.RawMessage(evilJSON)}, nil
	}
	f.InspectFunc = func(context.Context, runtime.Ref) (runtime.Inspection, error) {
		return runtime.Inspection{Info: info, State: json.RawMessage(`{"s":` + evilJSON + `}`), WorkflowStatus: "failed", WorkflowError: "failed" + evil,
			Queues: []runtime.QueueDepth{{Queue: "q" + evil, Depth: 1}}, Events: []string{"ev" + evil},
			Schedules: []rivet.ScheduledCall{{ID: "id" + evil, Action: "act" + evil, Args: json.RawMessage(`[` + evilJSON + `]`), At: when,
				Cron: "cron" + evil, LastRun: when, LastError: "last" + evil}}}, nil
	}
	f.ListFunc = func(context.Context, runtime.ListOptions) (runtime.ListResult, error) {
		return runtime.ListResult{Actors: []runtime.ActorInfo{info}}, nil
	}
	f.HistoryFunc = func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
		return runtime.History{WorkflowStatus: "failed", WorkflowError: "failed" + evil, Entries: []runtime.HistoryEntry{
			{Path: "step" + evil, Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(evilJSON), Winner: "w" + evil},
			{Path: "other", Kind: "step", Status: "failed", Attempts: 1, Error: "err" + evil, ErrorCode: "code" + evil},
		}}, nil
	}
	f.MemberList = []runtime.Member{{NodeID: "node" + evil, GRPCAddr: "addr" + evil, GossipAddr: "g" + evil, State: "alive" + evil, StartedAt: when}}
	f.PartitionTable = []runtime.PartitionOwner{{Partition: 0, Owner: "node" + evil}}
	f.NodeStats.NodeID = "node" + evil
	f.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		return servertest.NewEvents(nil, rivet.Event{Name: "ev" + evil, Data: json.RawMessage(evilJSON)}), nil
	}
	addr := servertest.Start(t, f, servertest.Config{})

	for _, cmd := range [][]string{
		{"call", "counter", "main", "act"},
		{"send", "--wait", "counter", "main", "q", "1"},
		{"state", "counter", "main"},
		{"inspect", "counter", "main"},
		{"actors"},
		{"actors", "--failed"},
		{"history", "counter", "main"},
		{"members"},
		{"partitions"},
		{"stats"},
		{"schedule", "list", "counter", "main"},
		{"watch", "counter", "main", "--count", "1"},
	} {
		for _, output := range []string{"text", "json"} {
			r := rivetctl(t, addr, append([]string{"-o", output}, cmd...)...)
			what := strings.Join(cmd, " ") + " -o " + output
			if r.stdout == "" && r.stderr == "" {
				t.Errorf("%s: no output (exit %d)", what, r.code)
			}
			wantPrintable(t, what+": stdout", r.stdout)
			wantPrintable(t, what+": stderr", r.stderr)
			if output == "text" && strings.Contains(r.stdout+r.stderr, "pwned") && !strings.Contains(r.stdout+r.stderr, `\u001b]0;pwned\u0007`) {
				t.Errorf("%s: the escape sequence is not shown escaped:\n%s%s", what, r.stdout, r.stderr)
			}
		}
	}
}

// A payload's JSON stays JSON once escaped: a script may read the
// indented text of call or state with jq. JSON may end in any of its
// whitespace (a tab, a '\r'), which json.Indent keeps; escaped as in a
// string, it made the text invalid JSON.
func TestAPayloadEndingInWhitespaceStaysJSON(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		return json.RawMessage(`{"a":` + evilJSON + "}\t\r\n"), nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	for _, output := range []string{"text", "json"} {
		r := rivetctl(t, addr, "-o", output, "call", "counter", "main", "act")
		if r.code != 0 {
			t.Fatalf("-o %s: exit %d: %s", output, r.code, r.stderr)
		}
		wantPrintable(t, "-o "+output, r.stdout)
		var v struct{ A string }
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.A != "a\u009b31m\x7f\u202e\u2028b" {
			t.Errorf("-o %s: %q is not the payload's JSON: %v, %q", output, r.stdout, err, v.A)
		}
	}
}

// The zero width joiners that emoji sequences and several scripts need
// are text, not escapes: printed as they came, as other text is; a bidi
// override, the format character that reorders a line, is escaped.
func TestJoinersPrintAsText(t *testing.T) {
	for _, s := range []string{"👩\u200d💻", "می\u200cخواهم"} {
		if got := printable(s); got != s {
			t.Errorf("printable(%q) = %q, want it unchanged", s, got)
		}
		if got := string(printableJSON([]byte(`"` + s + `"`))); got != `"`+s+`"` {
			t.Errorf("printableJSON of %q = %s, want it unchanged", s, got)
		}
	}
	if got := printable("a\u202eb"); got != `a\u202eb` {
		t.Errorf("printable of a bidi override = %q, want it escaped", got)
	}
}
