package workflow_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A pending race replayed after a crash keeps the queue-message claim of the
// branch whose history holds received messages: a branch with nothing to
// replay must not take the claim with a message that came since, win, and
// drop the holder's tree (the only record of its message) with it.
func TestARaceReplayedKeepsTheMessageHoldersClaim(t *testing.T) {
	branch := func(name, queue string, pause time.Duration) workflow.RaceBranch[log, int] {
		return workflow.RaceBranch[log, int]{Name: name, Run: func(c *logCtx) (int, error) {
			// Work before the receive: it lets the other branch go live
			// first, the interleaving that lost the message.
			time.Sleep(pause)
			m, err := workflow.Next[job](c, "take", workflow.NextOptions{Names: []string{queue}})
			if err != nil {
				return 0, err
			}
			return m.Body.N, c.Step("handle", func(s *logStep) error {
				s.State.Log = append(s.State.Log, fmt.Sprintf("%s handled %d", name, m.Body.N))
				return nil
			})
		}}
	}
	wf := func(c *logCtx) error {
		winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
			branch("a", "qa", 20*time.Millisecond),
			branch("b", "qb", 0),
		})
		if err != nil {
			return err
		}
		return c.Step("rec", func(s *logStep) error { s.State.Log = append(s.State.Log, "winner "+winner); return nil })
	}
	h := newHost(log{})
	h.Send("qa", job{1})
	// Commits: 1 the race's entry, 2 a's receive, 3 a's step, 4 the
	// decision: the crash loses it.
	h.CrashAt(4, false)
	if out := h.Run(context.Background(), wf); out.Status != workflow.RunYielded {
		t.Fatalf("run that crashes: %+v", out)
	}
	h.Send("qb", job{2}) // arrives while the actor is down
	if out := drive(t, h, wf); out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if want := []string{"a handled 1", "winner a"}; !reflect.DeepEqual(h.State().Log, want) {
		t.Errorf("log %q, want %q (the run without the crash)", h.State().Log, want)
	}
	recorded := strings.Contains(h.HistoryJSON(), `"id":1,`)
	queued := false
	for _, m := range h.Queue() {
		queued = queued || m.ID == 1
	}
	if !recorded && !queued {
		t.Errorf("message 1 is neither queued nor recorded in the history: lost (queue %+v)", h.Queue())
	}
}

// A race between sleeps is won by the earlier deadline also when the run
// gets there after both deadlines passed: woken late, or replayed after a
// crash lost the decision.
func TestARaceOfSleepsIsWonByTheEarlierDeadlineWhenWokenLate(t *testing.T) {
	wf := func(c *logCtx) error {
		winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
			{Name: "late", Run: func(c *logCtx) (int, error) { return 2, c.Sleep("nap", 2*time.Second) }},
			{Name: "early", Run: func(c *logCtx) (int, error) { return 1, c.Sleep("nap", time.Second) }},
		})
		if err != nil {
			return err
		}
		return c.Step("rec", func(s *logStep) error { s.State.Log = append(s.State.Log, winner); return nil })
	}
	want := []string{"early"}
	h := newHost(log{})
	if out := drive(t, h, wf); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, want) {
		t.Fatalf("without a crash: %+v, log %v", out, h.State().Log)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		name  string
		first func(h *workflowtest.Host[log]) workflow.Outcome
	}{
		{"a crash loses the decision", func(h *workflowtest.Host[log]) workflow.Outcome {
			// Commits: 1 the race's entry, 2-3 the deadlines, 4 the decision.
			h.CrashAt(4, false)
			out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{MaxActivations: 1})
			return out
		}},
		{"evicted while asleep", func(h *workflowtest.Host[log]) workflow.Outcome {
			out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{Stop: func(workflow.Wake) bool { return true }})
			return out
		}},
	} {
		h := newHost(log{})
		if out := c.first(h); out.Status != workflow.RunYielded {
			t.Fatalf("%s: first run %+v", c.name, out)
		}
		h.Clock.Set(t0.Add(10 * time.Second)) // back long after both deadlines
		if out := drive(t, h, wf); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, want) {
			t.Errorf("%s: %+v, log %v, want %v", c.name, out, h.State().Log, want)
		}
	}
}
