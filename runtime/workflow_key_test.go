package runtime_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type keyState struct {
	Outside []string `json:"outside"`
	Step    []string `json:"step"`
	Do      []string `json:"do"`
	Name    string   `json:"name"`
	After   []string `json:"after"`
}

// A workflow reads its actor's name and key (Ctx.Key, StepCtx.Key,
// DoCtx.Key), outside its steps and in them, a multi-part key whole, and
// the same after a restart, in the activation that replays it: a hook no
// longer has to copy rivet.ActionCtx.Key into the state for it.
func TestAWorkflowReadsItsActorsKey(t *testing.T) {
	a := rivet.Actor[keyState]{
		Name:   "keyed",
		Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
		Run: func(c *workflow.Ctx[keyState]) error {
			outside := c.Key()
			doKey, err := workflow.Do(c, "do", func(d *workflow.DoCtx) ([]string, error) { return d.Key(), nil })
			if err != nil {
				return err
			}
			if err := c.Step("record", func(s *workflow.StepCtx[keyState]) error {
				s.State.Outside, s.State.Step, s.State.Do, s.State.Name = outside, s.Key(), doKey, s.Name()
				return nil
			}); err != nil {
				return err
			}
			if _, err := workflow.Next[struct{}](c, "wait-go"); err != nil {
				return err
			}
			after := c.Key()
			return c.Step("after", func(s *workflow.StepCtx[keyState]) error {
				s.State.After = after
				return nil
			})
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	key := []string{"eu", "west/1", "42"}
	ref := runtime.Ref{Name: "keyed", Key: key}
	state := func() keyState {
		t.Helper()
		ins, err := e.host.Inspect(ctx(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		var s keyState
		if len(ins.State) > 0 {
			if err := json.Unmarshal(ins.State, &s); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	if _, err := e.host.Create(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first steps", 10*time.Second, func() bool { return state().Name != "" })
	if s := state(); s.Name != "keyed" || !slices.Equal(s.Outside, key) || !slices.Equal(s.Step, key) || !slices.Equal(s.Do, key) {
		t.Fatalf("state %+v, want name keyed and key %q everywhere", s, key)
	}

	// A new activation replays the steps and reads the key again.
	e.restart()
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to complete", 10*time.Second, func() bool {
		ins, err := e.host.Inspect(ctx(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		return ins.WorkflowStatus == runtime.WorkflowCompleted
	})
	if s := state(); !slices.Equal(s.After, key) {
		t.Fatalf("after a restart: state %+v, want key %q", s, key)
	}
}
