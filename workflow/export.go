package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// HistoryExportFormat is the Format of a HistoryExport document. A change
// to the document that an older reader would misread gets a new one.
const HistoryExportFormat = "rivet.workflow.history/v1"

// HistoryExport is a workflow's history as a node recorded it, exported to
// check changed code against the real histories of runs in flight before
// deploying it (Temporal's replayer): `rivetctl history ACTOR KEY --raw`,
// or the client's ActorHandle.ExportHistory, write one, and
// workflowtest.Replay runs code against it. It is a JSON document:
//
//	{"format": "rivet.workflow.history/v1", "actor": "job", "key": ["a"],
//	 "workflow_status": "sleeping", "exported_at": "2026-12-04T05:20:38Z",
//	 "entries": [{"path": "a", "seq": 1, "kind": "step", ...}, ...]}
//
// It holds the history only, not the actor's state (a replay runs no step
// body, so it needs none) nor its queued messages (a replay takes none).
type HistoryExport struct {
	// Format is HistoryExportFormat.
	Format string `json:"format"`
	// Actor and Key are the actor's type name and key, what the workflow
	// reads with Ctx.Name and Ctx.Key.
	Actor string   `json:"actor"`
	Key   []string `json:"key"`
	// WorkflowStatus is the workflow's status when it was exported
	// (running, sleeping, completed, failed, cancelled); WorkflowError is
	// its error, if it failed.
	WorkflowStatus string `json:"workflow_status"`
	WorkflowError  string `json:"workflow_error,omitempty"`
	// ExportedAt is when the history was read. A replay's clock stands
	// still there: a recorded sleep that ends later is where it stops.
	ExportedAt time.Time `json:"exported_at,omitzero"`
	// Entries are the recorded entries, each as the engine encodes it (an
	// Entry's JSON, MarshalEntry), in the history's order.
	Entries []json.RawMessage `json:"entries"`
}

// DecodeHistoryExport reads a HistoryExport document and checks it whole:
// its format, its actor, and that each entry decodes into an Entry with a
// valid path, a known kind and status, and a path no other entry has. A
// document that is none (rivetctl history -o json's listing, which lacks
// the recorded entries, or a cut file) is an error saying what is wrong
// with it, never an empty history.
func DecodeHistoryExport(data []byte) (*HistoryExport, error) {
	var x HistoryExport
	if err := json.Unmarshal(data, &x); err != nil {
		return nil, fmt.Errorf("workflow: not a history export: %w", err)
	}
	switch {
	case x.Format == "":
		return nil, errors.New(`workflow: not a history export: it has no "format" (rivetctl history -o json lists a history; rivetctl history --raw exports one)`)
	case x.Format != HistoryExportFormat:
		return nil, fmt.Errorf("workflow: history export of format %q; this build reads %q", x.Format, HistoryExportFormat)
	case x.Actor == "":
		return nil, errors.New("workflow: history export names no actor")
	case x.Entries == nil:
		return nil, errors.New(`workflow: history export has no "entries"`)
	}
	if _, err := x.History(); err != nil {
		return nil, err
	}
	return &x, nil
}

// History returns the export's entries decoded, checked as
// DecodeHistoryExport checks them.
func (x *HistoryExport) History() ([]Entry, error) {
	entries := make([]Entry, len(x.Entries))
	for i, raw := range x.Entries {
		e := &entries[i]
		if raw = bytes.TrimSpace(raw); len(raw) == 0 || raw[0] != '{' {
			return nil, fmt.Errorf("workflow: history export: entry %d is not a JSON object", i)
		}
		if err := json.Unmarshal(raw, e); err != nil {
			return nil, fmt.Errorf("workflow: history export: entry %d does not decode: %w", i, err)
		}
		if err := validPath(e.Path); err != nil {
			return nil, fmt.Errorf("workflow: history export: entry %d: %w", i, err)
		}
		if !knownKind(e.Kind) {
			return nil, fmt.Errorf("workflow: history export: entry %d (%q) has kind %q, which this build does not know", i, e.Path, e.Kind)
		}
		if !knownStatus(e.Status) {
			return nil, fmt.Errorf("workflow: history export: entry %d (%q) has status %q, which this build does not know", i, e.Path, e.Status)
		}
	}
	if _, err := NewHistory(entries); err != nil {
		return nil, fmt.Errorf("workflow: history export: %w", err)
	}
	return entries, nil
}

func knownKind(k Kind) bool {
	switch k {
	case KindStep, KindLoop, KindSleep, KindMessage, KindRollbackCheckpoint, KindJoin, KindRace, KindRemoved, KindVersionCheck, KindJoinOutputs, KindHeldBranch:
		return true
	}
	return false
}

func knownStatus(s Status) bool {
	switch s {
	case StatusPending, StatusCompleted, StatusFailed, StatusExhausted, StatusCancelled:
		return true
	}
	return false
}
