package runtime_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// Tests that share these do not run in parallel with each other (see
// TestMain).
var (
	racedA1, racedA2, racedB1, racedB2 atomic.Int64
	racedAHealthy                      atomic.Bool
)

type racedState struct {
	Winner string `json:"winner"`
	Value  int    `json:"value"`
}

// raced races two branches: each completes a first step, then runs a
// second that fails for good (a's until healthy, b's always), so the race
// fails. After the race, a step records its winner and value.
var raced = rivet.Actor[racedState]{
	Name: "raced",
	Run: func(ctx *workflow.Ctx[racedState]) error {
		branch := func(first, second *atomic.Int64, name string, healthy func() bool) func(*workflow.Ctx[racedState]) (int, error) {
			return func(c *workflow.Ctx[racedState]) (int, error) {
				v, err := workflow.Step(c, name+"1", func(*workflow.StepCtx[racedState]) (int, error) {
					first.Add(1)
					return 10, nil
				})
				if err != nil {
					return 0, err
				}
				w, err := workflow.StepOpts(c, workflow.StepOptions{Name: name + "2", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[racedState]) (int, error) {
					second.Add(1)
					if !healthy() {
						return 0, errors.New(name + " is down")
					}
					return 1, nil
				})
				return v + w, err
			}
		}
		winner, v, err := workflow.Race(ctx, "r", []workflow.RaceBranch[racedState, int]{
			{Name: "a", Run: branch(&racedA1, &racedA2, "a", racedAHealthy.Load)},
			{Name: "b", Run: branch(&racedB1, &racedB2, "b", func() bool { return false })},
		})
		if err != nil {
			return err
		}
		return ctx.Step("after", func(s *workflow.StepCtx[racedState]) error {
			s.State.Winner, s.State.Value = winner, v
			return nil
		})
	},
	Actions: rivet.Actions[racedState]{"getState": rivet.Query(func(c *rivet.ActionCtx[racedState]) (racedState, error) { return *c.State, nil })},
}

// A retry without --from after a race failed (every branch completed a
// step, then failed) runs again only what failed: the race goes back to
// pending, each branch's failed step is deleted, and the steps that
// completed replay from their records instead of running (and doing their
// side effects) a second time. The race then completes when a branch
// succeeds.
func TestRetryAfterAFailedRaceRunsOnlyTheFailedSteps(t *testing.T) {
	for _, c := range []*atomic.Int64{&racedA1, &racedA2, &racedB1, &racedB2} {
		c.Store(0)
	}
	racedAHealthy.Store(false)
	e := newEnv(t, counterReg(t, raced), nil)
	ref := runtime.Ref{Name: "raced", Key: []string{"k"}}
	createUntilFailed(t, e, ref)
	if a1, a2, b1, b2 := racedA1.Load(), racedA2.Load(), racedB1.Load(), racedB2.Load(); a1 != 1 || a2 != 1 || b1 != 1 || b2 != 1 {
		t.Fatalf("before the retry: a1 ran %d times, a2 %d, b1 %d, b2 %d; want 1 each", a1, a2, b1, b2)
	}
	racedAHealthy.Store(true)
	removed, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if err != nil || removed != 2 {
		t.Fatalf("retry: removed %d, %v; want 2 (r/a/a2 and r/b/b2 only)", removed, err)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "raced", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	if a1, a2, b1 := racedA1.Load(), racedA2.Load(), racedB1.Load(); a1 != 1 || a2 != 2 || b1 != 1 {
		t.Fatalf("after the retry: a1 ran %d times, a2 %d, b1 %d; want 1, 2, 1", a1, a2, b1)
	}
	if b2 := racedB2.Load(); b2 < 1 || b2 > 2 {
		t.Fatalf("after the retry: b2 ran %d times, want 1 or 2 (cancelled or failed once more)", b2)
	}
	if raw, _ := call(t, e.host, "raced", "k", "getState", false); string(raw) != `{"winner":"a","value":11}` {
		t.Fatalf("state after retry = %s, want a's win with 11", raw)
	}
	hist, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range hist.Entries {
		if en.Path == "r" && en.Status != "completed" {
			t.Fatalf("race entry after the retry: %+v", en)
		}
	}
}

// retry --from an entry of a failed race's branch is taken: the race goes
// back to pending, the other branch's failure goes too, and the branch's
// steps before the entry replay.
func TestRetryFromInsideAFailedRace(t *testing.T) {
	for _, c := range []*atomic.Int64{&racedA1, &racedA2, &racedB1, &racedB2} {
		c.Store(0)
	}
	racedAHealthy.Store(false)
	e := newEnv(t, counterReg(t, raced), nil)
	ref := runtime.Ref{Name: "raced", Key: []string{"f"}}
	createUntilFailed(t, e, ref)
	racedAHealthy.Store(true)
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "r/a/a2"); err != nil {
		t.Fatalf("retry --from r/a/a2: %v", err)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "raced", "f").WorkflowStatus == runtime.WorkflowCompleted
	})
	if a1, a2, b1 := racedA1.Load(), racedA2.Load(), racedB1.Load(); a1 != 1 || a2 != 2 || b1 != 1 {
		t.Fatalf("after the retry: a1 ran %d times, a2 %d, b1 %d; want 1, 2, 1", a1, a2, b1)
	}
	if raw, _ := call(t, e.host, "raced", "f", "getState", false); string(raw) != `{"winner":"a","value":11}` {
		t.Fatalf("state after retry = %s, want a's win with 11", raw)
	}
}

var (
	racedMsgA2, racedMsgB2 atomic.Int64
	racedMsgAHealthy       atomic.Bool
)

type racedMsgState struct {
	Winner string `json:"winner"`
	Body   int    `json:"body"`
}

// racedMsg races two branches that each take a message from a queue of
// their own, then run a step that fails for good (a's until healthy, b's
// always).
var racedMsg = rivet.Actor[racedMsgState]{
	Name:   "racedMsg",
	Queues: rivet.Queues{"qa": rivet.QueueOf[int](), "qb": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[racedMsgState]) error {
		branch := func(name string, runs *atomic.Int64, healthy func() bool) func(*workflow.Ctx[racedMsgState]) (int, error) {
			return func(c *workflow.Ctx[racedMsgState]) (int, error) {
				m, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"q" + name}})
				if err != nil {
					return 0, err
				}
				return workflow.StepOpts(c, workflow.StepOptions{Name: "use", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[racedMsgState]) (int, error) {
					runs.Add(1)
					if !healthy() {
						return 0, errors.New(name + " is down")
					}
					return m.Body, nil
				})
			}
		}
		winner, v, err := workflow.Race(ctx, "r", []workflow.RaceBranch[racedMsgState, int]{
			{Name: "a", Run: branch("a", &racedMsgA2, racedMsgAHealthy.Load)},
			{Name: "b", Run: branch("b", &racedMsgB2, func() bool { return false })},
		})
		if err != nil {
			return err
		}
		return ctx.Step("after", func(s *workflow.StepCtx[racedMsgState]) error {
			s.State.Winner, s.State.Body = winner, v
			return nil
		})
	},
	Actions: rivet.Actions[racedMsgState]{"getState": rivet.Query(func(c *rivet.ActionCtx[racedMsgState]) (racedMsgState, error) { return *c.State, nil })},
}

// The messages the branches of a failed race took stay taken through its
// retry (their receives, completed, replay): the branch that wins keeps
// its message, and the loser's goes back to its queue with the loser's
// history, once, as when the race was decided the first time.
func TestRetryAfterAFailedRaceKeepsItsBranchesMessages(t *testing.T) {
	racedMsgA2.Store(0)
	racedMsgB2.Store(0)
	racedMsgAHealthy.Store(false)
	e := newEnv(t, counterReg(t, racedMsg), nil)
	ref := runtime.Ref{Name: "racedMsg", Key: []string{"m"}}
	for q, body := range map[string]string{"qa": "7", "qb": "9"} {
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: q, Body: []byte(body), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "racedMsg", "m").WorkflowStatus == runtime.WorkflowFailed
	})
	depth := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, q := range inspect(t, e.host, "racedMsg", "m").Queues {
			out[q.Queue] = q.Depth
		}
		return out
	}
	if d := depth(); d["qa"] != 0 || d["qb"] != 0 {
		t.Fatalf("queues before the retry: %v, want both messages taken", d)
	}
	racedMsgAHealthy.Store(true)
	removed, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if err != nil || removed != 2 {
		t.Fatalf("retry: removed %d, %v; want 2 (r/a/use and r/b/use)", removed, err)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "racedMsg", "m").WorkflowStatus == runtime.WorkflowCompleted
	})
	if raw, _ := call(t, e.host, "racedMsg", "m", "getState", false); string(raw) != `{"winner":"a","body":7}` {
		t.Fatalf("state after retry = %s, want a's win with its message's 7", raw)
	}
	if d := depth(); d["qa"] != 0 || d["qb"] != 1 {
		t.Fatalf("queues after the retry: %v, want a's message taken and b's back in qb", d)
	}
	if a2 := racedMsgA2.Load(); a2 != 2 {
		t.Fatalf("a's step ran %d times, want 2", a2)
	}
}
