package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// A Ctx is valid in the function it was given to. Kept and used after that
// function returned (a loop iteration's in a later iteration, a branch's
// after its join or race, a try block's after the block), it must fail the
// run with ErrInvalid naming the call and the scope: it wrote an entry
// into a scope that had ended (an iteration whose record the loop had
// moved past, a try block another replay finds changed), or failed with a
// race's "cancelled" for a join.
func TestACtxUsedAfterItsFunctionReturnedFailsTheRun(t *testing.T) {
	step := func(c *workflow.Ctx[rst], name string) error {
		return c.Step(name, func(s *workflow.StepCtx[rst]) error { s.State.N++; return nil })
	}
	cases := map[string]struct {
		fn    func(c *workflow.Ctx[rst]) error
		scope string
	}{
		"an earlier loop iteration's": {func(c *workflow.Ctx[rst]) error {
			var first *workflow.Ctx[rst]
			return c.Loop("l", func(c *workflow.Ctx[rst]) error {
				if first == nil {
					first = c
					return nil
				}
				if err := step(first, "late"); err != nil {
					return err
				}
				return workflow.Break
			})
		}, "l/~0"},
		"a try block's": {func(c *workflow.Ctx[rst]) error {
			var block *workflow.Ctx[rst]
			if _, err := c.Try("t", func(c *workflow.Ctx[rst]) error { block = c; return nil }); err != nil {
				return err
			}
			return step(block, "late")
		}, "t"},
		"a join branch's": {func(c *workflow.Ctx[rst]) error {
			var branch *workflow.Ctx[rst]
			if _, err := workflow.Join(c, "j", workflow.Branches[rst, int]{"x": func(c *workflow.Ctx[rst]) (int, error) { branch = c; return 0, nil }}); err != nil {
				return err
			}
			return step(branch, "late")
		}, "j/x"},
		"a race loser's": {func(c *workflow.Ctx[rst]) error {
			var loser *workflow.Ctx[rst]
			_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[rst, int]{
				{Name: "fast", Run: func(c *workflow.Ctx[rst]) (int, error) { return 1, nil }},
				{Name: "slow", Run: func(c *workflow.Ctx[rst]) (int, error) { loser = c; return 0, c.Sleep("z", time.Hour) }},
			})
			if err != nil {
				return err
			}
			return step(loser, "late")
		}, "r/slow"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHost(rst{})
			out := drive(t, h, tc.fn)
			if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrInvalid) {
				t.Fatalf("outcome %+v, want failed with ErrInvalid", out)
			}
			if msg := out.Err.Error(); !strings.Contains(msg, `"`+tc.scope+`/late"`) || !strings.Contains(msg, `"`+tc.scope+`"`) {
				t.Fatalf("error %q should name the call and the scope %q", msg, tc.scope)
			}
			for _, e := range h.History() {
				if strings.HasSuffix(e.Path, "/late") {
					t.Fatalf("an entry was recorded in a scope that had ended: %s", h.HistoryJSON())
				}
			}
		})
	}
}

// A primitive that a goroutine of the workflow's function started on its
// Ctx and that still runs when the function returns would record its entry
// after the workflow ended: the run fails instead of completing.
func TestAPrimitiveStillRunningWhenTheWorkflowReturnsFailsTheRun(t *testing.T) {
	h := newHost(rst{})
	started := make(chan struct{})
	done := make(chan error, 1)
	out := drive(t, h, func(c *workflow.Ctx[rst]) error {
		go func() {
			done <- c.Step("stray", func(s *workflow.StepCtx[rst]) error {
				close(started)
				<-s.Context().Done()
				return s.Context().Err()
			})
		}()
		<-started
		return nil
	})
	if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrInvalid) || !strings.Contains(out.Err.Error(), `step "stray" still runs`) {
		t.Fatalf("outcome %+v, want failed with ErrInvalid naming the step", out)
	}
	if err := <-done; err == nil {
		t.Fatal("the stray step returned nil")
	}
	if hist := h.History(); len(hist) != 0 {
		t.Fatalf("the stray step was recorded: %s", h.HistoryJSON())
	}
}

// A stray step (its Ctx's function returned while it ran) and the next step
// of the same thread run at once: each runs its own body, once, and only
// the next step is recorded. (An attempt hands the host's RunStep the
// thread's fn, which runs the attempt that holds it: the one that comes
// second must hand its own.)
func TestAStrayStepAndTheThreadsNextStepRunTheirOwnBodies(t *testing.T) {
	h := &recordingHost{bareHost: bareHost{state: &rst{}}}
	started, release := make(chan struct{}), make(chan struct{})
	var strayRuns, nextRuns atomic.Int32
	strayDone := make(chan error, 1)
	var tryErr, nextErr error
	out := workflow.Run(context.Background(), func(c *workflow.Ctx[rst]) error {
		_, tryErr = c.Try("block", func(tc *workflow.Ctx[rst]) error {
			go func() {
				strayDone <- tc.Step("stray", func(*workflow.StepCtx[rst]) error {
					if strayRuns.Add(1) == 1 {
						close(started)
						<-release
					}
					return nil
				})
			}()
			select {
			case <-started:
				return nil
			case err := <-strayDone:
				return fmt.Errorf("the stray step did not start its body: %w", err)
			case <-time.After(10 * time.Second):
				return errors.New("the stray step did not start its body")
			}
		})
		// The stray's attempt holds the thread's fn, its body blocked.
		nextErr = c.Step("next", func(*workflow.StepCtx[rst]) error { nextRuns.Add(1); return nil })
		close(release)
		return nil
	}, h, nil)
	if !errors.Is(tryErr, workflow.ErrInvalid) || nextErr != nil {
		t.Fatalf("try block: %v; next step: %v", tryErr, nextErr)
	}
	if err := <-strayDone; !errors.Is(err, workflow.ErrInvalid) {
		t.Fatalf("the stray step returned %v, want ErrInvalid", err)
	}
	if s, n := strayRuns.Load(), nextRuns.Load(); s != 1 || n != 1 {
		t.Fatalf("the stray's body ran %d times, the next step's %d, want once each (outcome %+v)", s, n, out)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.puts) != 1 || h.puts[0] != "next" {
		t.Fatalf("recorded %q, want the next step only", h.puts)
	}
}

// recordingHost is bareHost that notes the paths of the entries its steps
// record: it runs them at once, with no turn.
type recordingHost struct {
	bareHost
	mu   sync.Mutex
	puts []string
}

func (h *recordingHost) RunStep(_ context.Context, _ bool, fn func(workflow.StepEnv) []workflow.HistoryWrite) error {
	ws := fn(workflow.StepEnv{State: h.state})
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range ws {
		if w.Put != nil && w.Put.Kind == workflow.KindStep {
			h.puts = append(h.puts, w.Put.Path)
		}
	}
	return nil
}
