package runtime_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// The history says which way a version gate went and what a Removed
// placeholder stands in for: an instance started before the gate was
// deployed recorded version 1 (the old path), one started after it the
// latest; an operator retires a gate only once no run in flight took 1.
func TestHistoryShowsVersionsAndRemovedKinds(t *testing.T) {
	t.Parallel()
	gate := func(gated bool) rivet.Actor[stepsState] {
		step := func(ctx *workflow.Ctx[stepsState], name string) error {
			return ctx.Step(name, func(*workflow.StepCtx[stepsState]) error { return nil })
		}
		return rivet.Actor[stepsState]{
			Name:   "gate",
			Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
			Run: func(ctx *workflow.Ctx[stepsState]) error {
				if err := step(ctx, "a"); err != nil {
					return err
				}
				if gated {
					if _, err := ctx.GetVersion("add-c", 2); err != nil {
						return err
					}
					if err := ctx.Removed("old-step", workflow.KindStep); err != nil {
						return err
					}
				}
				if err := step(ctx, "b"); err != nil {
					return err
				}
				_, err := workflow.Next[struct{}](ctx, "wait", workflow.NextOptions{Names: []string{"go"}})
				return err
			},
		}
	}
	e := newEnv(t, counterReg(t, gate(false)), nil)
	oldRef, newRef := runtime.Ref{Name: "gate", Key: []string{"old"}}, runtime.Ref{Name: "gate", Key: []string{"new"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), oldRef, nil); err != nil {
		t.Fatal(err)
	}
	entries := func(key string) map[string]runtime.HistoryEntry {
		h, err := e.host.History(ctx(t), runtime.Ref{Name: "gate", Key: []string{key}})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]runtime.HistoryEntry{}
		for _, he := range h.Entries {
			out[he.Path] = he
		}
		return out
	}
	waitFor(t, "the old instance to record b", 10*time.Second, func() bool { _, ok := entries("old")["b"]; return ok })
	e.reg = counterReg(t, gate(true))
	e.restart()
	// The old instance records its gate with its next commit, the receive.
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: oldRef, Queue: "go", Body: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.host.GetOrCreate(ctx(t), newRef, nil); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"old", "new"} {
		waitFor(t, key+" to record its gate", 10*time.Second, func() bool { _, ok := entries(key)["add-c"]; return ok })
	}
	for key, want := range map[string]int{"old": 1, "new": 2} {
		got := entries(key)
		if g := got["add-c"]; g.Kind != "version_check" || g.Version != want || g.Latest != 2 {
			t.Errorf("%s: add-c = %+v, want version %d of latest 2", key, g, want)
		}
		if g := got["old-step"]; g.Kind != "removed" || g.RemovedKind != "step" {
			t.Errorf("%s: old-step = %+v, want a removed step", key, g)
		}
	}
}
