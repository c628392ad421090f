package workflow_test

import (
	"context"
	"testing"

	"github.com/rivet-go/rivet/workflow"
)

// tracingHost is a bareHost that counts its StepTracer's calls.
type tracingHost struct {
	bareHost
	on          bool
	traced, end int
}

func (h *tracingHost) Tracing() bool { return h.on }

func (h *tracingHost) TraceStep(ctx context.Context, path string, attempt int) (context.Context, func(error)) {
	h.traced++
	return ctx, func(error) { h.end++ }
}

var _ workflow.StepTracer = (*tracingHost)(nil)

// A host whose StepTracer says it traces gets a TraceStep, and its end,
// per step attempt; one that says it does not (a node with tracing off)
// gets no call at all, rather than one per step for nothing.
func TestAStepTracerIsCalledOnlyWhenItTraces(t *testing.T) {
	for _, on := range []bool{true, false} {
		h := &tracingHost{bareHost: bareHost{state: &rst{}}, on: on}
		out := workflow.Run(context.Background(), func(c *workflow.Ctx[rst]) error {
			for _, name := range []string{"a", "b"} {
				if err := c.Step(name, func(s *workflow.StepCtx[rst]) error { return nil }); err != nil {
					return err
				}
			}
			return nil
		}, h, nil)
		if out.Status != workflow.RunCompleted {
			t.Fatalf("outcome %+v", out)
		}
		want := 0
		if on {
			want = 2
		}
		if h.traced != want || h.end != want {
			t.Errorf("tracing %v: %d TraceStep calls, %d ends, want %d", on, h.traced, h.end, want)
		}
	}
}
