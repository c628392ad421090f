package workflow_test

import (
	"bytes"
	"encoding/json"
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

// A history export, a user's file, is refused with an error or read
// whole, never a panic; and a document it reads, written back out
// (with each entry as the engine encodes it), reads as the same history:
// what `rivetctl history --raw` writes and workflowtest.Replay reads
// loses and changes nothing on the way.
func FuzzDecodeHistoryExport(f *testing.F) {
	f.Add([]byte(exportHead + `"entries": [
		{"path": "a", "seq": 1, "kind": "step", "status": "completed", "attempts": 1, "output": {"n": 1}},
		{"path": "wait", "seq": 2, "kind": "sleep", "status": "pending", "deadline": "2026-01-02T04:04:05Z"}]}`))
	f.Add([]byte(exportHead + `"entries": [{"path": "l", "seq": 1, "kind": "loop", "status": "pending", "iteration": 3, "state": [1, 2], "slots": 2},
		{"path": "l/~2/s", "seq": 1, "try_places": [2, 1], "kind": "step", "status": "failed", "error": {"message": "x\u00e9", "code": "c", "timeout": true}},
		{"path": "r", "seq": 2, "kind": "race", "status": "completed", "winner": "b", "branches": {"b": {"status": "completed", "output": "\u003c"}}},
		{"path": "m", "seq": 3, "kind": "message", "status": "completed", "messages": [{"id": 7, "queue": "q", "body": {}, "created_at": "2026-01-02T03:04:05+01:00", "completed": true}]}]}`))
	f.Add([]byte(exportHead + `"entries": [{"PATH": "a", "Kind": "step", "status": "completed", "path": "b\ud800"}]}`))
	f.Add([]byte(exportHead + `"entries": [{"path": "a\xff", "kind": "step", "status": "completed", "time": "0001-01-01T00:00:00Z"}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		x, err := workflow.DecodeHistoryExport(doc)
		if err != nil {
			if x != nil {
				t.Fatalf("an error (%v) with an export", err)
			}
			if !strings.HasPrefix(err.Error(), "workflow: ") {
				t.Fatalf("error %q does not say where it is from", err)
			}
			return
		}
		h, err := x.History()
		if err != nil {
			t.Fatalf("decoded, then History: %v", err)
		}
		y := *x
		y.Entries = nil
		for i := range h {
			b, err := workflow.MarshalEntry(&h[i])
			if err != nil {
				t.Fatalf("entry %d (%+v) decoded but does not encode: %v", i, h[i], err)
			}
			y.Entries = append(y.Entries, b)
		}
		if y.Entries == nil {
			y.Entries = []json.RawMessage{}
		}
		out, err := json.Marshal(&y)
		if err != nil {
			t.Fatalf("decoded export %+v does not encode: %v", x, err)
		}
		x2, err := workflow.DecodeHistoryExport(out)
		if err != nil {
			t.Fatalf("re-encoded export does not decode: %v\n%s", err, out)
		}
		h2, err := x2.History()
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(h)
		b, _ := json.Marshal(h2)
		x.Entries, x2.Entries = nil, nil
		c, _ := json.Marshal(x)
		d, _ := json.Marshal(x2)
		if !bytes.Equal(a, b) || !bytes.Equal(c, d) {
			t.Fatalf("export changed on a round trip:\n%s\n%s\nentries:\n%s\n%s", c, d, a, b)
		}
	})
}
