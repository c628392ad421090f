package runtime_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// mpState is a state whose MarshalJSON panics while Panic is set.
type mpState struct {
	N     int
	Panic bool
}

func (s mpState) MarshalJSON() ([]byte, error) {
	if s.Panic {
		panic("mpState does not encode")
	}
	type plain mpState
	return json.Marshal(plain(s))
}

// A scheduled call whose change to the state panics as it is encoded
// (its MarshalJSON, after the action returned) is used up as one whose
// state does not marshal is, its change dropped: the panic was taken for
// a failure to run it, which was retried for ever, and the actor's later
// calls never ran. A recurring call's next run says how this one failed.
func TestAScheduledCallWhoseStateEncodingPanicsIsUsedUp(t *testing.T) {
	var runs atomic.Int32
	a := rivet.Actor[mpState]{
		Name: "mpSched",
		Actions: rivet.Actions[mpState]{
			"arm": rivet.Action0(func(c *rivet.ActionCtx[mpState]) (bool, error) {
				if _, err := c.Schedule().After(0, "bad"); err != nil {
					return false, err
				}
				_, err := c.Schedule().After(50*time.Millisecond, "inc")
				return err == nil, err
			}),
			"every": rivet.Action0(func(c *rivet.ActionCtx[mpState]) (string, error) {
				return c.Schedule().Every("b", time.Second, "bad")
			}),
			"bad": rivet.Action0(func(c *rivet.ActionCtx[mpState]) (int, error) {
				runs.Add(1)
				c.State.N, c.State.Panic = 100, true
				return 0, nil
			}),
			"inc": rivet.Action0(func(c *rivet.ActionCtx[mpState]) (int, error) { c.State.N++; return c.State.N, nil }),
			"get": rivet.Query(func(c *rivet.ActionCtx[mpState]) (int, error) { return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if _, err := call(t, e.host, "mpSched", "once", "arm", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the later scheduled call to run", 15*time.Second, func() bool {
		raw, err := callWithin(t, e.host, 2*time.Second, "mpSched", "once", "get")
		return err == nil && string(raw) == "1"
	})
	if ins := inspect(t, e.host, "mpSched", "once"); len(ins.Schedules) != 0 {
		t.Fatalf("scheduled calls left %+v, want none (the one whose state panicked used up)", ins.Schedules)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the call whose state panicked ran %d times, want once", n)
	}
	waitFor(t, "the used-up call counted", 10*time.Second, func() bool { return e.host.Stats().SchedulesFailed >= 1 })

	callString(t, e.host, "mpSched", "every", "every", true)
	waitFor(t, "the recurring call's run used up", 15*time.Second, func() bool { return e.host.Stats().SchedulesFailed >= 2 })
	ins := inspect(t, e.host, "mpSched", "every")
	if len(ins.Schedules) != 1 || !strings.Contains(ins.Schedules[0].LastError, "does not marshal") || !strings.Contains(ins.Schedules[0].LastError, "panicked") {
		t.Fatalf("after a failed run: %+v, want the next run, saying its state's encoding panicked", ins.Schedules)
	}
	if n := callInt(t, e.host, "mpSched", "every", "get", false); n != 0 {
		t.Fatalf("state after the failed run N = %d, want 0 (its change dropped)", n)
	}
}

// A workflow step whose change to the state panics as it is encoded fails
// the run, naming the state, as one whose state does not marshal does: the
// panic evicted the actor, and its workflow ran the step again from
// storage, and panicked again, for ever.
func TestAStepWhoseStateEncodingPanicsFailsTheRun(t *testing.T) {
	var runs atomic.Int32
	a := rivet.Actor[mpState]{
		Name: "mpStep",
		Run: func(c *workflow.Ctx[mpState]) error {
			return c.Step("bad", func(s *workflow.StepCtx[mpState]) error {
				runs.Add(1)
				s.State.N, s.State.Panic = 100, true
				return nil
			})
		},
		Actions: rivet.Actions[mpState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[mpState]) (int, error) { return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	ref := runtime.Ref{Name: "mpStep", Key: []string{"w"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 15*time.Second, func() bool {
		return inspect(t, e.host, "mpStep", "w").WorkflowStatus == runtime.WorkflowFailed
	})
	ins := inspect(t, e.host, "mpStep", "w")
	if !strings.Contains(ins.WorkflowError, "state of mpStep") || !strings.Contains(ins.WorkflowError, "panicked") {
		t.Fatalf("workflow error %q, want one naming the state, whose encoding panicked", ins.WorkflowError)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the step ran %d times, want once", n)
	}
	if n := callInt(t, e.host, "mpStep", "w", "get", false); n != 0 {
		t.Fatalf("state after the failed step N = %d, want 0 (its change dropped)", n)
	}
}
