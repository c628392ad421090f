package workflow_test

import (
	"strings"
	"testing"

	"github.com/rivet-go/rivet/workflow"
)

const exportHead = `{"format": "rivet.workflow.history/v1", "actor": "job", "key": ["a"], "workflow_status": "sleeping", "exported_at": "2026-01-02T03:04:05Z", `

// A history export decodes to its actor and its entries, as recorded.
func TestAHistoryExportDecodes(t *testing.T) {
	x, err := workflow.DecodeHistoryExport([]byte(exportHead + `"entries": [
		{"path": "a", "seq": 1, "kind": "step", "status": "completed", "attempts": 1, "output": {"n": 1}},
		{"path": "wait", "seq": 2, "kind": "sleep", "status": "pending", "deadline": "2026-01-02T04:04:05Z"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := x.History()
	if err != nil {
		t.Fatal(err)
	}
	if x.Actor != "job" || len(x.Key) != 1 || x.Key[0] != "a" || x.WorkflowStatus != "sleeping" || len(h) != 2 ||
		h[0].Path != "a" || string(h[0].Output) != `{"n": 1}` || h[1].Kind != workflow.KindSleep || h[1].Deadline.IsZero() {
		t.Fatalf("decoded %+v, entries %+v", x, h)
	}
}

// A document that is not a whole, valid export is refused saying what is
// wrong with it, never read as an empty or partial history.
func TestAMalformedHistoryExportIsRefusedSayingWhy(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{``, "not a history export"},
		{exportHead + `"entries": [{"path": "a", "kind": "st`, "not a history export"},
		{`{"workflow_status": "sleeping", "entries": [{"path": "a", "kind": "step", "status": "completed"}]}`, "rivetctl history --raw"},
		{`{"format": "rivet.workflow.history/v9", "actor": "job", "entries": []}`, `format "rivet.workflow.history/v9"`},
		{`{"format": "rivet.workflow.history/v1", "entries": []}`, "names no actor"},
		{`{"format": "rivet.workflow.history/v1", "actor": "job"}`, `no "entries"`},
		{exportHead + `"entries": ["a"]}`, "entry 0 is not a JSON object"},
		{exportHead + `"entries": [null]}`, "entry 0 is not a JSON object"},
		{exportHead + `"entries": [{"path": "a", "kind": "step", "status": "completed", "attempts": "one"}]}`, "entry 0 does not decode"},
		{exportHead + `"entries": [{"path": "a//b", "kind": "step", "status": "completed"}]}`, "empty segment"},
		{exportHead + `"entries": [{"kind": "step", "status": "completed"}]}`, "empty path"},
		{exportHead + `"entries": [{"path": "a", "kind": "teleport", "status": "completed"}]}`, `kind "teleport"`},
		{exportHead + `"entries": [{"path": "a", "kind": "step", "status": "done"}]}`, `status "done"`},
		{exportHead + `"entries": [{"path": "a", "kind": "step", "status": "completed"}, {"path": "a", "kind": "sleep", "status": "pending"}]}`, `two entries at "a"`},
	} {
		x, err := workflow.DecodeHistoryExport([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.70s...: %+v, %v; want an error saying %q", c.doc, x, err, c.want)
		}
	}
}
