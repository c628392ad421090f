package runtime_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type stampsState struct {
	Stamps []int64 `json:"stamps"` // the CreatedAt of each message taken, in ns
}

// A message's CreatedAt is the millisecond it is stored with, whether the
// workflow takes it from memory, as it was sent, or reads it back after a
// restart: it used to have the sender's nanoseconds in the first case
// only, so code that computed with it (a deadline from it, a value in the
// state) saw another time after a restart.
func TestAMessageCreatedAtIsTheSameFromMemoryAndAfterARestart(t *testing.T) {
	t.Parallel()
	stamper := rivet.Actor[stampsState]{
		Name:   "stamper",
		Queues: rivet.Queues{"in": rivet.QueueOf[int](), "go": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[stampsState]) error {
			for i, name := range []string{"first", "second"} {
				if i == 1 {
					// The second message waits in its queue until "go".
					if _, err := workflow.Next[int](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}}); err != nil {
						return err
					}
				}
				m, err := workflow.Next[int](ctx, "take-"+name, workflow.NextOptions{Names: []string{"in"}})
				if err != nil {
					return err
				}
				if err := ctx.Step("stamp-"+name, func(s *workflow.StepCtx[stampsState]) error {
					s.State.Stamps = append(s.State.Stamps, m.CreatedAt.UnixNano())
					return nil
				}); err != nil {
					return err
				}
			}
			return nil
		},
	}
	e := newEnv(t, counterReg(t, stamper), nil)
	ref := runtime.Ref{Name: "stamper", Key: []string{"s"}}
	send := func(queue string) {
		t.Helper()
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: queue, Body: json.RawMessage(`1`), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	stamps := func() []int64 {
		var st stampsState
		if err := json.Unmarshal(inspect(t, e.host, "stamper", "s").State, &st); err != nil {
			t.Fatal(err)
		}
		return st.Stamps
	}
	send("in") // taken from memory
	waitFor(t, "the first message's stamp", 20*time.Second, func() bool { return len(stamps()) == 1 })
	send("in")
	e.restart() // the second is read back from storage
	send("go")
	waitFor(t, "the workflow's end", 20*time.Second, func() bool {
		return inspect(t, e.host, "stamper", "s").WorkflowStatus == runtime.WorkflowCompleted
	})
	for i, ns := range stamps() {
		if ns%int64(time.Millisecond) != 0 {
			t.Errorf("message %d: CreatedAt %s has nanoseconds its stored record has not", i+1, time.Unix(0, ns).UTC().Format(time.RFC3339Nano))
		}
	}
}
