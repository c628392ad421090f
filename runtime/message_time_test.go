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

// A message's CreatedAt is when it was sent, to the nanosecond, whether
// the workflow takes it from memory, as it was sent, or reads it back after
// a restart: it once had the sender's nanoseconds in the first case only,
// so code that computed with it (a deadline from it, a value in the state)
// saw another time after a restart; then it was the millisecond in both,
// before the send began, and a message sent just after a receive's
// deadline, within its millisecond, ranked before it: a replay of the
// receive, which had timed out, took it.
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
	// sent are the times just before and just after each send to "in".
	var sent [][2]time.Time
	send := func(queue string) {
		t.Helper()
		if queue == "in" {
			// Sent early in a millisecond: its start is a time before the
			// send that only a stamp to the nanosecond ranks after.
			for i := 0; i < 10000 && time.Now().Nanosecond()%int(time.Millisecond) > 100*int(time.Microsecond); i++ {
				time.Sleep(10 * time.Microsecond)
			}
			sent = append(sent, [2]time.Time{time.Now()})
		}
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: queue, Body: json.RawMessage(`1`), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
		if queue == "in" {
			sent[len(sent)-1][1] = time.Now()
		}
	}
	stamps := func() []int64 {
		var st stampsState
		if err := json.Unmarshal(inspect(t, e.host, "stamper", "s").State, &st); err != nil {
			t.Fatal(err)
		}
		return st.Stamps
	}
	// Created first: the send that creates it would take long enough to
	// reach another millisecond.
	if _, err := e.host.Create(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	send("in") // taken from memory
	waitFor(t, "the first message's stamp", 20*time.Second, func() bool { return len(stamps()) == 1 })
	send("in")
	e.restart() // the second is read back from storage
	send("go")
	waitFor(t, "the workflow's end", 20*time.Second, func() bool {
		return inspect(t, e.host, "stamper", "s").WorkflowStatus == runtime.WorkflowCompleted
	})
	got := stamps()
	if len(got) != len(sent) {
		t.Fatalf("%d stamps for %d messages", len(got), len(sent))
	}
	for i, ns := range got {
		at, w := time.Unix(0, ns), sent[i]
		if at.Before(w[0]) || at.After(w[1]) {
			t.Errorf("message %d (%s): CreatedAt %s, want a time within its send, %s to %s", i+1, []string{"from memory", "read back"}[i],
				at.UTC().Format(time.RFC3339Nano), w[0].UTC().Format(time.RFC3339Nano), w[1].UTC().Format(time.RFC3339Nano))
		}
	}
}
