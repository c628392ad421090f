package runtime

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type turnHoldState struct {
	Winner string `json:"winner"`
}

// A race {timeout, bid, step that holds the turn until its branch loses}:
// a bid that came just before the step took the turn leaves the receive
// waiting for the turn, which the step keeps until the race is decided.
// The timeout's finisher, held by the receive (the bid came first),
// cancels the step, which can no longer win, rather than wait for it (it
// has no timeout: the race never ended).
func TestARaceReceiveWaitingForATurnAStepHoldsDoesNotStallTheRace(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	racer := rivet.Actor[turnHoldState]{
		Name:   "turnHold",
		Queues: rivet.Queues{"bids": rivet.QueueOf[int]()},
		Run: func(c *workflow.Ctx[turnHoldState]) error {
			winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[turnHoldState, string]{
				{Name: "timeout", Run: func(c *workflow.Ctx[turnHoldState]) (string, error) {
					return "timeout", c.Sleep("nap", 2*time.Second)
				}},
				{Name: "slow", Run: func(c *workflow.Ctx[turnHoldState]) (string, error) {
					<-gate
					return workflow.StepOpts(c, workflow.StepOptions{Name: "s", Timeout: workflow.NoTimeout}, func(s *workflow.StepCtx[turnHoldState]) (string, error) {
						<-s.Context().Done() // holds the turn until the branch loses
						return "", s.Context().Err()
					})
				}},
				{Name: "bid", Run: func(c *workflow.Ctx[turnHoldState]) (string, error) {
					_, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"bids"}})
					return "bid", err
				}},
			})
			if err != nil {
				return err
			}
			return c.Step("rec", func(s *workflow.StepCtx[turnHoldState]) error { s.State.Winner = winner; return nil })
		},
	}
	reg, err := rivet.Setup(racer)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, stop := memHostOn(t, reg, store)
	defer stop(ctx)
	ref := Ref{Name: "turnHold", Key: []string{"k"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the race waits
	h.sendWaitHook = func(a *activation) {
		// In the send's turn: the step asks for the turn before the
		// receive hears of the message.
		close(gate)
		time.Sleep(200 * time.Millisecond)
	}
	go h.Send(ctx, SendRequest{Ref: ref, Queue: "bids", Body: json.RawMessage(`7`), Wait: true, Timeout: 500 * time.Millisecond})
	start := time.Now()
	var ins Inspection
	for ins.WorkflowStatus != WorkflowCompleted && ins.WorkflowStatus != WorkflowFailed {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("the race did not end in 15s: %+v", ins)
		}
		time.Sleep(20 * time.Millisecond)
		ictx, icancel := context.WithTimeout(ctx, time.Second)
		if got, err := h.Inspect(ictx, ref); err == nil {
			ins = got
		} else if ictx.Err() == nil {
			t.Fatal(err)
		}
		icancel()
	}
	// Read again: readActor reads the state before the status, so the
	// read that saw the end may hold the state from before it.
	if ins, err = h.Inspect(ctx, ref); err != nil {
		t.Fatal(err)
	}
	// The bid came before the timeout's deadline: it ranks first.
	if ins.WorkflowStatus != WorkflowCompleted || string(ins.State) != `{"winner":"bid"}` {
		t.Fatalf("workflow %s (%s), state %s; want completed with the bid", ins.WorkflowStatus, ins.WorkflowError, ins.State)
	}
}
