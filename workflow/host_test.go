package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

func TestHostErrors(t *testing.T) {
	diskFull := errors.New("disk full")
	wf := func(c *logCtx) error {
		for i := 0; i < 3; i++ {
			if err := note(c, fmt.Sprint("s", i)); err != nil {
				return err
			}
		}
		return nil
	}
	// An error that does not wrap ErrEvicted fails the workflow.
	h := newHost(log{})
	h.FailCommit = func(n int) error {
		if n == 2 {
			return diskFull
		}
		return nil
	}
	out := h.Run(context.Background(), wf)
	if out.Status != workflow.RunFailed || !errors.Is(out.Err, diskFull) {
		t.Fatalf("outcome %+v", out)
	}
	// One that wraps it stops the run: it yields, to be run again at once.
	h = newHost(log{})
	lost := fmt.Errorf("partition lost: %w", workflow.ErrEvicted)
	h.FailCommit = func(n int) error {
		if n == 2 {
			return lost
		}
		return nil
	}
	out = h.Run(context.Background(), wf)
	if out.Status != workflow.RunYielded || !errors.Is(out.Err, lost) || !out.Wake.At.Equal(t0) {
		t.Fatalf("outcome %+v", out)
	}
	h.FailCommit = nil
	if out := drive(t, h, wf); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"s0", "s1", "s2"}) {
		t.Fatalf("rerun %+v %v", out, h.State().Log)
	}
}

// TestEvictionDuringJoin: evicting a run whose branches all wait yields
// with the earliest deadline, what it is the deadline of (a sleep), and
// every queue any branch waits on.
func TestEvictionDuringJoin(t *testing.T) {
	h := newHost(log{})
	wf := func(c *logCtx) error {
		_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
			"a": func(c *logCtx) (int, error) { return 0, c.Sleep("nap", time.Hour) },
			"b": func(c *logCtx) (int, error) { return 0, c.Sleep("nap", time.Minute) },
			"c": func(c *logCtx) (int, error) {
				m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"x", "y"}})
				return m.Body.N, err
			},
		})
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-h.Wakes(); cancel() }()
	out := h.Run(ctx, wf)
	cancel()
	want := workflow.Wake{At: t0.Add(time.Minute), AtReason: workflow.WakeSleep, Queues: []string{"x", "y"}}
	if out.Status != workflow.RunYielded || !reflect.DeepEqual(out.Wake, want) || !errors.Is(out.Err, context.Canceled) {
		t.Fatalf("outcome %+v", out)
	}
	// Nothing of the join's outcome was recorded; the sleeps' deadlines were.
	if e := entryAt(t, h.History(), "j"); e.Status != workflow.StatusPending {
		t.Fatalf("join %+v", e)
	}
	entryAt(t, h.History(), "j/a/nap")
	h.Send("y", job{1})
	if out := drive(t, h, wf); out.Status != workflow.RunCompleted || !h.Clock.Now().Equal(t0.Add(time.Hour)) {
		t.Fatalf("resumed %+v at %v", out, h.Clock.Now())
	}
}
