package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A run that gets to a race late (evicted while it waited, back after the
// timeout's deadline) ranks a message by when it was sent, as the race
// would have gone on time: one sent after the deadline loses to the
// timeout and stays queued for the next receive; one sent before it wins.
func TestALateRunRanksARaceMessageByWhenItWasSent(t *testing.T) {
	wf := func(c *logCtx) error {
		winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
			{Name: "timeout", Run: func(c *logCtx) (int, error) { return 0, c.Sleep("nap", 5*time.Second) }},
			{Name: "bid", Run: func(c *logCtx) (int, error) {
				m, err := workflow.Next[job](c, "take", workflow.NextOptions{Names: []string{"bids"}})
				return m.Body.N, err
			}},
		})
		if err != nil {
			return err
		}
		return c.Step("rec", func(s *logStep) error { s.State.Log = append(s.State.Log, winner); return nil })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range []struct {
		name   string
		sent   time.Duration // after the race began, at t0
		want   string
		queued int
	}{
		{"sent after the deadline", 7 * time.Second, "timeout", 1},
		{"sent before the deadline", 2 * time.Second, "bid", 0},
	} {
		for i := range 100 {
			h := newHost(log{})
			out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{Stop: func(workflow.Wake) bool { return true }})
			if out.Status != workflow.RunYielded {
				t.Fatalf("%s, run %d: first run %+v", c.name, i, out)
			}
			h.Clock.Set(t0.Add(c.sent))
			h.Send("bids", job{7})
			h.Clock.Set(t0.Add(10 * time.Second)) // back after the deadline
			if out := drive(t, h, wf); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{c.want}) {
				t.Fatalf("%s, run %d: %+v, log %v, want [%s]", c.name, i, out, h.State().Log, c.want)
			}
			if n := len(h.Queue()); n != c.queued {
				t.Fatalf("%s, run %d: %d message(s) queued, want %d", c.name, i, n, c.queued)
			}
		}
	}
}

// A receive with a timeout that the run gets to late times out if its
// message was sent after the deadline, as it would have on time (the
// message stays queued); one sent before the deadline is taken, recorded
// at the time it was sent.
func TestALateRunTimesOutAReceiveWhoseMessageCameAfterTheDeadline(t *testing.T) {
	wf := func(c *logCtx) error {
		m, err := workflow.Next[job](c, "take", workflow.NextOptions{Names: []string{"bids"}, Timeout: 5 * time.Second})
		got := fmt.Sprint(m.Body.N)
		switch {
		case errors.Is(err, workflow.ErrTimeout):
			got = "timed out"
		case err != nil:
			return err
		}
		now := c.Now()
		return c.Step("rec", func(s *logStep) error {
			s.State.Log = append(s.State.Log, got, now.Sub(t0).String())
			return nil
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range []struct {
		name   string
		sent   time.Duration
		want   []string
		queued int
	}{
		{"sent after the deadline", 7 * time.Second, []string{"timed out", "5s"}, 1},
		{"sent before the deadline", 2 * time.Second, []string{"7", "2s"}, 0},
	} {
		h := newHost(log{})
		out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{Stop: func(workflow.Wake) bool { return true }})
		if out.Status != workflow.RunYielded {
			t.Fatalf("%s: first run %+v", c.name, out)
		}
		h.Clock.Set(t0.Add(c.sent))
		h.Send("bids", job{7})
		h.Clock.Set(t0.Add(10 * time.Second))
		if out := drive(t, h, wf); out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, c.want) {
			t.Errorf("%s: %+v, log %q, want %q", c.name, out, h.State().Log, c.want)
		}
		if n := len(h.Queue()); n != c.queued {
			t.Errorf("%s: %d message(s) queued, want %d", c.name, n, c.queued)
		}
	}
}
