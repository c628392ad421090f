package workflowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// everyKind records an entry of each kind: a version gate, a step, a
// try block, a loop with a state that prunes, a receive with a timeout,
// a sleep, a join and a race.
func everyKind(c *workflow.Ctx[tally]) error {
	if _, err := c.GetVersion("v", 2); err != nil {
		return err
	}
	if _, err := workflow.Step(c, "a", func(*workflow.StepCtx[tally]) (int, error) { return 1, nil }); err != nil {
		return err
	}
	if _, err := c.Try("t", func(c *workflow.Ctx[tally]) error { return c.Step("in", count) }); err != nil {
		return err
	}
	if _, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 2, HistorySize: 1},
		func(c *workflow.Ctx[tally], i int) (int, error) {
			if i >= 4 {
				return i, workflow.Break
			}
			return i + 1, c.Step("s", count)
		}); err != nil {
		return err
	}
	if _, err := workflow.Next[int](c, "m", workflow.NextOptions{Timeout: time.Minute}); err != nil && !errors.Is(err, workflow.ErrTimeout) {
		return err
	}
	if err := c.Sleep("z", time.Hour); err != nil {
		return err
	}
	if _, err := workflow.Join(c, "j", workflow.Branches[tally, int]{
		"x": func(c *workflow.Ctx[tally]) (int, error) { return 1, c.Step("s", count) },
		"y": func(c *workflow.Ctx[tally]) (int, error) { return 2, nil },
	}); err != nil {
		return err
	}
	_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[tally, int]{
		{Name: "p", Run: func(c *workflow.Ctx[tally]) (int, error) { return 1, c.Sleep("w", time.Minute) }},
		{Name: "q", Run: func(c *workflow.Ctx[tally]) (int, error) { return 2, nil }},
	})
	return err
}

// everyKindHistory is a history of everyKind up to its race, with a
// loop that keeps its iterations in slots.
const everyKindHistory = `{"format": "rivet.workflow.history/v1", "actor": "job", "key": ["a"], "exported_at": "2026-01-02T05:04:05Z", "entries": [
		{"path": "v", "seq": 1, "kind": "version_check", "status": "completed", "version": 2, "latest": 2},
		{"path": "a", "seq": 2, "kind": "step", "status": "completed", "attempts": 1, "output": 1},
		{"path": "t/in", "seq": 1, "try_places": [3], "kind": "step", "status": "completed", "attempts": 1},
		{"path": "l", "seq": 4, "kind": "loop", "status": "pending", "iteration": 3, "pruned_before": 2, "state": 3, "slots": 2},
		{"path": "l/~2/s", "seq": 1, "kind": "step", "status": "completed", "attempts": 1},
		{"path": "l/~3/s", "seq": 1, "kind": "step", "status": "completed", "attempts": 1},
		{"path": "m", "seq": 5, "kind": "message", "status": "completed", "deadline": "2026-01-02T03:05:05Z", "messages": [{"id": 1, "queue": "m", "body": 7, "created_at": "2026-01-02T03:04:05Z"}]},
		{"path": "z", "seq": 6, "kind": "sleep", "status": "completed", "deadline": "2026-01-02T04:05:05Z"},
		{"path": "j", "seq": 7, "kind": "join", "status": "completed", "branches": {"x": {"status": "completed", "output": 1}, "y": {"status": "completed", "output": 2}}},
		{"path": "j/x/s", "seq": 1, "kind": "step", "status": "completed", "attempts": 1},
		{"path": "r", "seq": 8, "kind": "race", "status": "pending", "branches": {"p": {"status": "pending"}}},
		{"path": "r/p/w", "seq": 1, "kind": "sleep", "status": "pending", "deadline": "2026-01-02T05:05:05Z"}]}`

// Replay of any history export a user hands it (`rivetctl history
// --raw`, edited or cut, or of other code) ends, with nil or an error,
// and never panics or hangs: it is the check run before a deploy, and
// the node's own engine is what it runs.
func FuzzReplay(f *testing.F) {
	x := export(f, everyKind)
	b, err := json.Marshal(x)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(everyKindHistory))
	f.Add([]byte(`{"format": "rivet.workflow.history/v1", "actor": "job", "key": ["a"], "entries": [
		{"path": "v", "seq": 1, "kind": "version_check", "status": "completed", "version": 9, "latest": -2},
		{"path": "a", "seq": 2, "kind": "step", "status": "failed", "error": {"message": "x"}, "attempts": -1},
		{"path": "t/in", "seq": 1, "try_places": [0, -1, 7], "kind": "step", "status": "completed"},
		{"path": "l", "seq": 4, "kind": "loop", "status": "pending", "iteration": -3, "pruned_before": 9, "state": "x", "slots": -1},
		{"path": "l/~-3/s", "seq": 1, "kind": "step", "status": "completed"},
		{"path": "j", "seq": 7, "kind": "join", "status": "failed", "branches": {"x": {"status": "failed", "failed_at": "j/x/nope"}}},
		{"path": "r", "seq": 8, "kind": "race", "status": "completed", "winner": "zz"},
		{"path": "m", "seq": 5, "kind": "message", "status": "completed", "messages": [{"id": 1, "queue": "q", "body": "no"}]}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		x, err := workflow.DecodeHistoryExport(doc)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		workflowtest.Replay(ctx, x, everyKind)
		if ctx.Err() != nil {
			t.Fatalf("Replay did not end in 10 s:\n%s", doc)
		}
	})
}

// fields are the entry fields FuzzReplayEdits sets.
var fields = []string{"path", "seq", "try_places", "kind", "status", "time", "attempts", "output", "error", "failure",
	"has_rollback", "rollback_done", "rollback_settled", "rollback_attempts", "deadline", "iteration", "pruned_before",
	"state", "slots", "messages", "branches", "winner", "removed_kind", "version", "latest"}

// Replay of a history that a user edited (two fields of its entries set
// to any JSON, or left out) ends with nil or an error, never a panic or
// a hang: FuzzReplay's mutations of bytes mostly make documents that do
// not decode, these are histories that do, whose values no run of the
// code recorded.
func FuzzReplayEdits(f *testing.F) {
	f.Add(uint8(3), uint8(15), []byte(`-1`), uint8(4), uint8(1), []byte(`0`))
	f.Add(uint8(3), uint8(18), []byte(`1`), uint8(5), uint8(0), []byte(`"l/~9/s"`))
	f.Add(uint8(8), uint8(20), []byte(`{"x": {"status": "failed", "failed_at": "j/x/s"}}`), uint8(8), uint8(4), []byte(`"failed"`))
	f.Add(uint8(10), uint8(22), []byte(`"q"`), uint8(10), uint8(4), []byte(`"completed"`))
	f.Add(uint8(6), uint8(19), []byte(`[]`), uint8(0), uint8(23), []byte(`3`))
	f.Add(uint8(2), uint8(2), []byte(`[1, 1, 1]`), uint8(1), uint8(8), []byte(`{"message": "", "timeout": true}`))
	var x struct {
		Entries []map[string]json.RawMessage `json:"entries"`
	}
	if err := json.Unmarshal([]byte(everyKindHistory), &x); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, i1, f1 uint8, v1 []byte, i2, f2 uint8, v2 []byte) {
		entries := make([]map[string]json.RawMessage, len(x.Entries))
		for i, e := range x.Entries {
			entries[i] = map[string]json.RawMessage{}
			for k, v := range e {
				entries[i][k] = v
			}
		}
		for _, ed := range []struct {
			i, f uint8
			v    []byte
		}{{i1, f1, v1}, {i2, f2, v2}} {
			e := entries[int(ed.i)%len(entries)]
			if name := fields[int(ed.f)%len(fields)]; json.Valid(ed.v) {
				e[name] = ed.v
			} else {
				delete(e, name)
			}
		}
		raw, err := json.Marshal(entries)
		if err != nil {
			return
		}
		doc := `{"format": "rivet.workflow.history/v1", "actor": "job", "key": ["a"], "exported_at": "2026-01-02T05:04:05Z", "entries": ` + string(raw) + `}`
		hx, err := workflow.DecodeHistoryExport([]byte(doc))
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		workflowtest.Replay(ctx, hx, everyKind)
		if ctx.Err() != nil {
			t.Fatalf("Replay did not end in 10 s:\n%s", doc)
		}
	})
}
