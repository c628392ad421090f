package workflow_test

import (
	"context"
	"strings"
	"sync/atomic"
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
	// No timeouts on the steps: the clock the test moves has the sleeps'
	// timers only.
	return c.StepWith(workflow.StepOptions{Name: "result", Timeout: workflow.NoTimeout}, func(s *workflow.StepCtx[lateState]) error {
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

type joinRevState struct{}

// A join branch fails fatally (a panic: the workflow fails) while a
// sibling's Do step runs; the join cancels the sibling, whose step (a
// charge) succeeds all the same. Its success is recorded (only a race
// loser's is not), so the run after a fix does not charge again.
func TestAJoinSiblingsSuccessAfterTheJoinFailedIsRecorded(t *testing.T) {
	var charges atomic.Int32
	var panicNow atomic.Bool
	panicNow.Store(true)
	started := make(chan struct{}, 4)
	wf := func(c *workflow.Ctx[joinRevState]) error {
		_, err := workflow.Join(c, "j", workflow.Branches[joinRevState, string]{
			"boom": func(c *workflow.Ctx[joinRevState]) (string, error) {
				if panicNow.Load() {
					<-started
					panic("bug")
				}
				return "ok", nil
			},
			"charge": func(c *workflow.Ctx[joinRevState]) (string, error) {
				return workflow.DoOpts(c, workflow.StepOptions{Name: "charge", Timeout: workflow.NoTimeout}, func(d *workflow.DoCtx) (string, error) {
					charges.Add(1)
					started <- struct{}{}
					if panicNow.Load() {
						<-d.Context().Done() // the charge's reply comes as the sibling fails
					}
					return "charged", nil
				})
			},
		})
		return err
	}
	h := newHost(joinRevState{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := h.Run(ctx, wf)
	t.Logf("first run: %v %v", out.Status, out.Err)
	recorded := false
	for _, e := range h.History() {
		if strings.HasSuffix(e.Path, "charge") && e.Kind == workflow.KindStep {
			recorded = true
		}
	}
	panicNow.Store(false)
	out = h.Run(ctx, wf)
	t.Logf("second run: %v %v; charges=%d recorded=%v", out.Status, out.Err, charges.Load(), recorded)
	if !recorded || charges.Load() != 1 {
		t.Fatalf("the completed charge was not recorded (%v) and ran %d times", recorded, charges.Load())
	}
}
