package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type lateState struct {
	Log []string `json:"log"`
}

// lateLoser races a timeout against a call whose reply comes only once
// its branch has lost (work already running in a loser's step is not
// killed: it may still succeed).
func lateLoser(c *workflow.Ctx[lateState]) error {
	w, v, err := workflow.Race(c, "call-or-timeout", []workflow.RaceBranch[lateState, string]{
		{Name: "timeout", Run: func(c *workflow.Ctx[lateState]) (string, error) {
			return "timeout", c.Sleep("deadline", time.Second)
		}},
		{Name: "call", Run: func(c *workflow.Ctx[lateState]) (string, error) {
			return workflow.StepOpts(c, workflow.StepOptions{Name: "rpc", Timeout: workflow.NoTimeout}, func(s *workflow.StepCtx[lateState]) (string, error) {
				<-s.Context().Done() // the reply comes just as the race is lost
				return "late reply", nil
			})
		}},
	})
	if err != nil {
		return err
	}
	return c.Step("result", func(s *workflow.StepCtx[lateState]) error {
		s.State.Log = append(s.State.Log, "winner "+w+": "+v)
		return nil
	})
}

// runLate runs activations of lateLoser on h until it ends, moving the
// clock on whenever a timer waits (a step body that runs keeps the run
// from ever counting as blocked, so Drive could not).
func runLate(t *testing.T, h *workflowtest.Host[lateState]) workflow.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			if h.Clock.WaitTimers(ctx, 1) != nil {
				return
			}
			if ts := h.Clock.Timers(); len(ts) > 0 && ts[0].After(h.Clock.Now()) {
				h.Clock.Set(ts[0])
			}
			time.Sleep(time.Millisecond) // a fired timer leaves the list a moment later
		}
	}()
	for range 20 {
		out := h.Run(ctx, lateLoser)
		if out.Status != workflow.RunYielded {
			return out
		}
		if ctx.Err() != nil {
			break
		}
		h.Clock.Advance(time.Second) // a restart takes a while
	}
	t.Fatal("the workflow did not end")
	return workflow.Outcome{}
}

// A crash at any commit gives the race the winner the crash-free run
// chose. A loser's late success is not recorded: recorded, it could be
// durable before the race's decision, and a replay after a crash in
// between would pick it by its earlier time (found in review).
func TestARaceLosersLateSuccessCannotWinAfterACrash(t *testing.T) {
	base := newHost(lateState{})
	if out := runLate(t, base); out.Status != workflow.RunCompleted {
		t.Fatalf("crash-free run: %+v", out)
	}
	want := base.State().Log
	if len(want) != 1 || want[0] != "winner timeout: timeout" {
		t.Fatalf("crash-free run logged %q, want the timeout to win", want)
	}
	for k := 1; k <= base.Commits(); k++ {
		for _, after := range []bool{false, true} {
			h := newHost(lateState{})
			h.CrashAt(k, after)
			if out := runLate(t, h); out.Status != workflow.RunCompleted {
				t.Fatalf("crash at commit %d (after %v): %+v", k, after, out)
			}
			if got := h.State().Log; len(got) != 1 || got[0] != want[0] {
				t.Errorf("crash at commit %d (after %v): logged %q, crash-free %q", k, after, got, want)
			}
		}
	}
}
