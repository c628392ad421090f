package runtime_test

import (
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// An operator cancels the recurring call of an actor that cannot wake
// (its OnWake fails, say its database is gone): the call is what keeps
// waking it, every interval, for ever, and rivetctl schedule cancel is
// documented as the stop for a call the actor's code cannot cancel.
func TestAnOperatorCancelsTheCallOfAnActorThatCannotWake(t *testing.T) {
	t.Parallel()
	var failWake atomic.Bool
	type st struct {
		Runs int `json:"runs"`
	}
	act := rivet.Actor[st]{
		Name:    "brokenwake",
		Options: rivet.Options{IdleTimeout: 50 * time.Millisecond},
		OnWake: func(c *rivet.ActionCtx[st]) error {
			if failWake.Load() {
				return errors.New("its database is gone")
			}
			return nil
		},
		Actions: rivet.Actions[st]{
			"start": rivet.Action0(func(c *rivet.ActionCtx[st]) (string, error) {
				return c.Schedule().Every("r", time.Second, "run")
			}),
			"run": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				c.State.Runs++
				return c.State.Runs, nil
			}),
		},
	}
	e := newEnv(t, counterReg(t, act), func(c *runtime.Config) { c.IdleTimeout = 50 * time.Millisecond })
	id := callString(t, e.host, "brokenwake", "a", "start", true)
	waitFor(t, "the actor's sleep", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	failWake.Store(true)
	waitFor(t, "a failed wake", 10*time.Second, func() bool { return e.host.Stats().WakeHooksFailed > 0 })
	ref := runtime.Ref{Name: "brokenwake", Key: []string{"a"}}
	ok, err := e.host.CancelScheduledCall(ctx(t), ref, id)
	if err != nil || !ok {
		t.Fatalf("cancel %s of an actor that cannot wake: %v %v, want cancelled", id, ok, err)
	}
	if in := inspect(t, e.host, "brokenwake", "a"); len(in.Schedules) != 0 {
		t.Fatalf("stored calls after the cancel: %+v", in.Schedules)
	}
	// Nothing wakes it any more: no timer of the cancelled call tries
	// again (its backoff's next try is within 2 s).
	n := e.host.Stats().WakeHooksFailed
	time.Sleep(2500 * time.Millisecond) // absence: cannot flake
	if m := e.host.Stats().WakeHooksFailed; m != n {
		t.Fatalf("%d more failed wakes after the cancel", m-n)
	}
}

// An operator's cancel of a call of an actor not in memory, whose
// workflow sleeps, leaves the workflow to go on at its time.
func TestAnOperatorsCancelLeavesASleepingWorkflowToGoOn(t *testing.T) {
	t.Parallel()
	act := rivet.Actor[alarmState]{
		Name:    "napper",
		Options: rivet.Options{IdleTimeout: 50 * time.Millisecond},
		Actions: rivet.Actions[alarmState]{
			"add": rivet.Action(func(c *rivet.ActionCtx[alarmState], n int) (int, error) {
				c.State.Count += n
				return c.State.Count, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (alarmState, error) { return *c.State, nil }),
		},
		Run: func(ctx *workflow.Ctx[alarmState]) error {
			if _, err := workflow.Step(ctx, "plan", func(s *workflow.StepCtx[alarmState]) (string, error) {
				return s.Schedule().After(time.Hour, "add", 100)
			}); err != nil {
				return err
			}
			if err := ctx.Sleep("nap", 2*time.Second); err != nil {
				return err
			}
			_, err := workflow.Step(ctx, "done", func(s *workflow.StepCtx[alarmState]) (int, error) {
				s.State.Count = 7
				return 7, nil
			})
			return err
		},
	}
	e := newEnv(t, counterReg(t, act), func(c *runtime.Config) { c.IdleTimeout = 50 * time.Millisecond })
	if _, err := call(t, e.host, "napper", "n", "get", true); err != nil {
		t.Fatal(err)
	}
	var id string
	waitFor(t, "the planned call", 10*time.Second, func() bool {
		if in := inspect(t, e.host, "napper", "n"); len(in.Schedules) == 1 {
			id = in.Schedules[0].ID
		}
		return id != ""
	})
	waitFor(t, "the actor's sleep", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	ok, err := e.host.CancelScheduledCall(ctx(t), runtime.Ref{Name: "napper", Key: []string{"n"}}, id)
	if err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	waitFor(t, "the workflow's last step", 20*time.Second, func() bool { return alarmCount(t, e.host, "napper", "n") == 7 })
	if in := inspect(t, e.host, "napper", "n"); len(in.Schedules) != 0 {
		t.Fatalf("stored calls: %+v", in.Schedules)
	}
}

func alarmCount(t *testing.T, h *runtime.Host, name, key string) int {
	raw, err := call(t, h, name, key, "get", false)
	if err != nil {
		t.Fatal(err)
	}
	var st alarmState
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	return st.Count
}
