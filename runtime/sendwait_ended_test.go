package runtime_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A send that waits on a workflow that takes the message and then ends
// without completing it says how the workflow ended: one that completed
// is no failure (reason workflow.ended_without_completing, no dangling
// ": none" for the error it does not have); one that failed says so, with
// its error (workflow.failed).
func TestSendWaitOnAWorkflowThatEndsWithoutCompletingIt(t *testing.T) {
	t.Parallel()
	taker := func(name string, fail bool) rivet.Actor[stepsState] {
		return rivet.Actor[stepsState]{
			Name:   name,
			Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
			Run: func(ctx *workflow.Ctx[stepsState]) error {
				if _, err := workflow.Next[struct{}](ctx, "take"); err != nil {
					return err
				}
				if fail {
					return errors.New("boom")
				}
				return nil // the message is never completed
			},
			Actions: rivet.Actions[stepsState]{"getState": rivet.Query(getState)},
		}
	}
	e := newEnv(t, counterReg(t, taker("ender", false), taker("failer", true)), nil)
	for _, c := range []struct {
		name, reason  string
		want, notWant []string
	}{
		{"ender", "workflow.ended_without_completing", []string{"ended (completed) without completing message"}, []string{"none", "failed"}},
		{"failer", "workflow.failed", []string{"failed without completing message", ": boom"}, []string{"none"}},
	} {
		ref := runtime.Ref{Name: c.name, Key: []string{"x"}}
		if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, c.name+"'s workflow to wait for the message", 10*time.Second, func() bool {
			return inspect(t, e.host, c.name, "x").WorkflowStatus == runtime.WorkflowSleeping
		})
		_, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`{}`), Wait: true})
		var re *rivet.Error
		if !errors.Is(err, rivet.ErrWorkflowFailed) || !errors.As(err, &re) {
			t.Fatalf("%s: send --wait = %v, want ErrWorkflowFailed", c.name, err)
		}
		if got := re.Group + "." + re.Code; got != c.reason {
			t.Errorf("%s: reason %s, want %s (%v)", c.name, got, c.reason, err)
		}
		for _, w := range c.want {
			if !strings.Contains(re.Message, w) {
				t.Errorf("%s: message %q, want it to say %q", c.name, re.Message, w)
			}
		}
		for _, w := range c.notWant {
			if strings.Contains(re.Message, w) {
				t.Errorf("%s: message %q says %q", c.name, re.Message, w)
			}
		}
	}
}
