package workflow_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/workflow"
)

// bareHost is a Host that only runs steps on its state and commits
// nothing: what a step allocates on it is the engine's own.
type bareHost struct{ state *rst }

func (*bareHost) Now() time.Time { return time.Unix(1e9, 0) }
func (*bareHost) Timer(time.Time) (<-chan time.Time, func()) {
	return make(chan time.Time), func() {}
}
func (h *bareHost) RunStep(_ context.Context, _ bool, fn func(workflow.StepEnv) []workflow.HistoryWrite) error {
	fn(workflow.StepEnv{State: h.state})
	return nil
}
func (*bareHost) Commit(context.Context, []workflow.HistoryWrite) error { return nil }
func (*bareHost) Client() caller.Client                                 { return nil }
func (*bareHost) Receive(context.Context, []string, int, func([]workflow.RawMessage) []workflow.HistoryWrite) ([]workflow.RawMessage, error) {
	return nil, nil
}
func (*bareHost) MessageNotify() <-chan struct{} { return nil }
func (*bareHost) Complete(context.Context, uint64, json.RawMessage, []workflow.HistoryWrite) error {
	return nil
}
func (*bareHost) Waiting(workflow.Wake)     {}
func (*bareHost) Actor() (string, []string) { return "bare", []string{"k"} }

// afterFuncHost is bareHost with timers as callbacks, as the runtime's
// host has them: a step attempt's context is then the engine's own, made
// without a goroutine or a timer.
type afterFuncHost struct{ bareHost }

func (*afterFuncHost) AfterFunc(time.Time, func()) func() bool { return func() bool { return true } }

// allocsPerStep is what one more step costs a run of step, in
// allocations: the least of a few runs of 400 steps, less that of 200.
func allocsPerStep(t *testing.T, step func(c *workflow.Ctx[rst], name string) error) float64 {
	t.Helper()
	return allocsPerStepOn(t, func() workflow.Host { return &bareHost{state: &rst{}} }, step)
}

// allocsPerStepOn is allocsPerStep on the hosts newHost makes.
func allocsPerStepOn(t *testing.T, newHost func() workflow.Host, step func(c *workflow.Ctx[rst], name string) error) float64 {
	t.Helper()
	names := make([]string, 400)
	for i := range names {
		names[i] = "s" + strconv.Itoa(i)
	}
	allocs := func(n int) uint64 {
		least := ^uint64(0)
		for range 5 {
			h := newHost()
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			out := workflow.Run(context.Background(), func(c *workflow.Ctx[rst]) error {
				for _, name := range names[:n] {
					if err := step(c, name); err != nil {
						return err
					}
				}
				return nil
			}, h, nil)
			runtime.ReadMemStats(&ms1)
			if out.Status != workflow.RunCompleted {
				t.Fatalf("outcome %+v", out)
			}
			least = min(least, ms1.Mallocs-ms0.Mallocs)
		}
		return least
	}
	return float64(allocs(400)-allocs(200)) / 200
}

// A step is every workflow's hot path (thousands a second on a node): what
// it allocates is budgeted, the engine's part measured on a host that
// does nothing. A step without a value (Ctx.Step, the usual one) keeps
// nothing of its value: the value a body made and decoded back
// (roundTrip), kept for the step to return, once cost every step a
// variable of its own, a step without a value too; its function, the
// closure Ctx.Step wrapped it in, its StepCtx and its first attempt's
// variables are one (13 before); the fn an attempt gives the host's
// RunStep is its thread's, made once (10 before).
// (A step with a value
// keeps it in one allocation, the one it is decoded into; not budgeted
// here, as the race detector, which turns off the allocator's packing of
// small objects, counts it differently.) A change that adds to every step
// must say why here, and raise the budget.
func TestAStepAllocatesWithinItsBudget(t *testing.T) {
	const budget = 9
	n := allocsPerStep(t, func(c *workflow.Ctx[rst], name string) error {
		return c.Step(name, func(s *workflow.StepCtx[rst]) error { s.State.N++; return nil })
	})
	// A fraction over: the garbage collector's own, now and then.
	if n > budget+0.5 {
		t.Errorf("Ctx.Step: %.2f allocations per step, the budget is %d", n, budget)
	}
}

// A step in a loop, one per iteration, as node's BenchmarkWorkflowSteps
// runs them, on a host whose timers are callbacks (the runtime's): the
// iteration's scope and Ctx are one allocation, the state an iteration
// between checkpoints returns is encoded into the buffer of the one
// before, a step's function, value, first StepCtx and first attempt's
// variables are one (stepBody), and an attempt's context goes with its
// other variables. (15.7 before those six were cut.) An attempt's fn for
// the host's RunStep is its thread's, an iteration's path is built with
// its first entry's, as that path's prefix, and an iteration's number
// past 99 no longer costs its own string, here and in the paths a prune
// deletes (9.7 before those three).
// A change that adds to every step must say why here, and raise the
// budget.
func TestALoopStepAllocatesWithinItsBudget(t *testing.T) {
	const budget = 6
	allocs := func(n int) uint64 {
		least := ^uint64(0)
		for range 5 {
			h := &afterFuncHost{bareHost{state: &rst{}}}
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			out := workflow.Run(context.Background(), loopOfSteps(n), h, nil)
			runtime.ReadMemStats(&ms1)
			if out.Status != workflow.RunCompleted {
				t.Fatalf("outcome %+v", out)
			}
			least = min(least, ms1.Mallocs-ms0.Mallocs)
		}
		return least
	}
	n := float64(allocs(400)-allocs(200)) / 200
	if n > budget+0.5 {
		t.Errorf("a step in a loop: %.2f allocations per iteration, the budget is %d", n, budget)
	}
}

// loopOfSteps is a workflow of a loop of n iterations of one step each,
// which changes the state: node's BenchmarkWorkflowSteps's stepper.
func loopOfSteps(n int) func(*workflow.Ctx[rst]) error {
	return func(c *workflow.Ctx[rst]) error {
		_, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "work"}, func(lc *workflow.Ctx[rst], i int) (int, error) {
			if i == n {
				return i, workflow.Break
			}
			return i + 1, lc.Step("step", func(s *workflow.StepCtx[rst]) error { s.State.N++; return nil })
		})
		return err
	}
}

// BenchmarkLoopStep is the engine's part of a step in a loop (one per
// iteration, as node's BenchmarkWorkflowSteps runs them), on a host that
// does nothing: b.N steps in runs of 50.
func BenchmarkLoopStep(b *testing.B) {
	b.ReportAllocs()
	for done := 0; done < b.N; {
		n := min(50, b.N-done)
		out := workflow.Run(context.Background(), loopOfSteps(n), &afterFuncHost{bareHost{state: &rst{}}}, nil)
		if out.Status != workflow.RunCompleted {
			b.Fatalf("outcome %+v", out)
		}
		done += n
	}
}

// BenchmarkNamedStep is the engine's part of a step named by its number,
// one after another (node's BenchmarkWorkflowSteps sequencer): b.N steps
// in runs of 50.
func BenchmarkNamedStep(b *testing.B) {
	names := make([]string, 50)
	for i := range names {
		names[i] = "step-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	for done := 0; done < b.N; {
		n := min(50, b.N-done)
		out := workflow.Run(context.Background(), func(c *workflow.Ctx[rst]) error {
			for _, name := range names[:n] {
				if _, err := workflow.Step(c, name, func(*workflow.StepCtx[rst]) (int, error) { return 1, nil }); err != nil {
					return err
				}
			}
			return nil
		}, &afterFuncHost{bareHost{state: &rst{}}}, nil)
		if out.Status != workflow.RunCompleted {
			b.Fatalf("outcome %+v", out)
		}
		done += n
	}
}
