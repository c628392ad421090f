package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
	"github.com/rivet-go/rivet/workflow"
)

// history --raw writes a history export, which decodes into the actor, the
// workflow's status and each entry as recorded; history without it still
// lists the entries.
func TestHistoryRawWritesAnExport(t *testing.T) {
	f := servertest.NewFake()
	f.HistoryFunc = func(_ context.Context, _ runtime.Ref, opts runtime.HistoryOptions) (runtime.History, error) {
		h := runtime.History{WorkflowStatus: "sleeping", Entries: []runtime.HistoryEntry{
			{Path: "a", Kind: "step", Status: "completed", Attempts: 1, Output: json.RawMessage(`{"n":1}`)},
			{Path: "wait", Kind: "sleep", Status: "pending"},
		}}
		if opts.Raw {
			h.Entries[0].Entry, h.Entries[0].Output = json.RawMessage(`{"path":"a","seq":1,"kind":"step","status":"completed","attempts":1,"output":{"n":1}}`), nil
			h.Entries[1].Entry = json.RawMessage(`{"path":"wait","seq":2,"kind":"sleep","status":"pending","deadline":"2026-01-02T04:04:05Z"}`)
		}
		return h, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})

	r := rivetctl(t, addr, "history", "job", "j", "--raw")
	if r.code != 0 {
		t.Fatalf("history --raw: exit %d: %s", r.code, r.stderr)
	}
	x, err := workflow.DecodeHistoryExport([]byte(r.stdout))
	if err != nil {
		t.Fatalf("history --raw wrote no export (%v):\n%s", err, r.stdout)
	}
	h, err := x.History()
	if err != nil {
		t.Fatal(err)
	}
	if x.Actor != "job" || len(x.Key) != 1 || x.Key[0] != "j" || x.WorkflowStatus != "sleeping" || len(h) != 2 ||
		h[0].Path != "a" || h[0].Seq != 1 || string(h[0].Output) != `{"n":1}` || h[1].Deadline.IsZero() {
		t.Fatalf("export %+v with entries %+v", x, h)
	}

	if r := rivetctl(t, addr, "history", "job", "j"); r.code != 0 || !strings.Contains(r.stdout, "wait  sleep  pending") {
		t.Fatalf("history: exit %d:\n%s", r.code, r.stdout)
	}
}
