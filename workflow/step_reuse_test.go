package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// sysHost runs steps on a goroutine of its own (as a node may), with the
// system clock (AfterFunc: the engine's own attempt context).
type sysHost struct {
	workflow.SystemClock
	mu    sync.Mutex
	turn  sync.Mutex
	state *rst
	hist  []workflow.HistoryWrite
}

func (h *sysHost) RunStep(_ context.Context, _ bool, fn func(workflow.StepEnv) []workflow.HistoryWrite) error {
	h.turn.Lock()
	defer h.turn.Unlock()
	done := make(chan []workflow.HistoryWrite)
	go func() { done <- fn(workflow.StepEnv{State: h.state}) }()
	ws := <-done
	h.mu.Lock()
	h.hist = append(h.hist, ws...)
	h.mu.Unlock()
	return nil
}
func (*sysHost) Commit(context.Context, []workflow.HistoryWrite) error { return nil }
func (*sysHost) Client() caller.Client                                 { return nil }
func (*sysHost) Receive(context.Context, []string, int, func([]workflow.RawMessage) []workflow.HistoryWrite) ([]workflow.RawMessage, error) {
	return nil, nil
}
func (*sysHost) MessageNotify() <-chan struct{} { return nil }
func (*sysHost) Complete(context.Context, uint64, json.RawMessage, []workflow.HistoryWrite) error {
	return nil
}
func (*sysHost) Waiting(workflow.Wake)     {}
func (*sysHost) Actor() (string, []string) { return "sys", []string{"k"} }

// A first attempt's body keeps its StepCtx and context on a goroutine
// that reads them on; retries must not touch either. (A step's first
// attempt shares one allocation with the step, stepBody: later attempts
// must get their own, since a body may keep its context past its end.)
func TestAKeptFirstAttemptIsNotReusedByItsRetries(t *testing.T) {
	for _, timeout := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprint(timeout), func(t *testing.T) {
			h := &sysHost{state: &rst{}}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var bad atomic.Value
			var attempts atomic.Int32
			out := workflow.Run(context.Background(), func(c *workflow.Ctx[rst]) error {
				return c.StepWith(workflow.StepOptions{Name: "s", MaxRetries: 3, Timeout: timeout, RetryOnTimeout: true, RetryBackoffBase: time.Millisecond}, func(s *workflow.StepCtx[rst]) error {
					n := attempts.Add(1)
					ctx := s.Context()
					if err := ctx.Err(); err != nil {
						bad.Store(fmt.Sprintf("attempt %d starts with its context done: %v", n, err))
					}
					if s.Attempt() != int(n) {
						bad.Store(fmt.Sprintf("attempt %d: Attempt() = %d", n, s.Attempt()))
					}
					if n <= 2 {
						wg.Add(1)
						go func(s *workflow.StepCtx[rst], ctx context.Context, n int) {
							defer wg.Done()
							for {
								select {
								case <-stop:
									return
								default:
								}
								if s.Attempt() != n || s.Context() != ctx {
									bad.Store(fmt.Sprintf("kept StepCtx of attempt %d changed: attempt %d", n, s.Attempt()))
								}
								<-ctx.Done()
								if ctx.Err() == nil {
									bad.Store(fmt.Sprintf("kept context of attempt %d no longer done", n))
								}
								_, _ = ctx.Deadline()
							}
						}(s, ctx, int(n))
						if timeout > 0 {
							<-ctx.Done()
							return ctx.Err()
						}
						return errors.New("again")
					}
					return nil
				})
			}, h, nil)
			close(stop)
			wg.Wait()
			if out.Status != workflow.RunCompleted {
				t.Fatalf("outcome %+v", out)
			}
			if v := bad.Load(); v != nil {
				t.Fatal(v)
			}
			if attempts.Load() != 3 {
				t.Fatalf("%d attempts", attempts.Load())
			}
		})
	}
}

// A loop's stored state is always its first state plus its iteration
// count (each iteration returns i+1), whichever iterations commit: an int
// state between checkpoints is encoded into the buffer of the one before,
// which must never be a buffer a recorded entry holds.
func TestALoopsRecordedStateIsNeverOverwritten(t *testing.T) {
	for crash := 2; crash < 12; crash++ {
		for _, after := range []bool{false, true} {
			clk := workflowtest.NewClock(time.Unix(1e9, 0))
			h := workflowtest.NewHost(rst{}, clk)
			h.CrashAt(crash, after)
			wf := func(c *workflow.Ctx[rst]) error {
				_, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "l", State: 1000, HistoryPruneInterval: 2}, func(lc *workflow.Ctx[rst], i int) (int, error) {
					if i == 1030 {
						return i, workflow.Break
					}
					if i%3 == 2 {
						return i + 1, lc.Step(fmt.Sprint("s"), func(s *workflow.StepCtx[rst]) error { s.State.N++; return nil })
					}
					return i + 1, nil
				})
				return err
			}
			for k := 0; k < 4; k++ {
				out := h.Run(context.Background(), wf)
				for _, e := range h.History() {
					if e.Path == "l" && e.Status != workflow.StatusCompleted {
						if want := fmt.Sprint(1000 + e.Iteration); string(e.State) != want {
							t.Fatalf("crash %d/%v: stored loop at iteration %d has state %s, want %s", crash, after, e.Iteration, e.State, want)
						}
					}
				}
				if out.Status == workflow.RunCompleted {
					break
				}
			}
		}
	}
}
