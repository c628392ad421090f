package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// lateSendHost is a host whose first look at the queues (Queued) finds
// none, and which a message reaches just after that look, stamped then
// (as MessagePeeker asks: no earlier than a Now read before the look),
// while the clock passes the receive's deadline.
type lateSendHost struct {
	*workflowtest.Clock
	deadline time.Time
	mu       sync.Mutex
	queue    []workflow.RawMessage
	taken    []workflow.RawMessage
	looked   bool
	notify   chan struct{}
}

func (h *lateSendHost) Queued(names []string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.looked {
		h.looked = true
		// After the look: the send is counted and stamped a second
		// after the look began, and the deadline passes.
		h.Clock.Advance(time.Second)
		h.queue = append(h.queue, workflow.RawMessage{ID: 1, Queue: "q", Body: json.RawMessage(`{"n":1}`), CreatedAt: h.Clock.Now()})
		h.Clock.Set(h.deadline)
		return time.Time{}, false
	}
	if len(h.queue) == 0 {
		return time.Time{}, false
	}
	return h.queue[0].CreatedAt, true
}

func (h *lateSendHost) Receive(ctx context.Context, names []string, max int, record func([]workflow.RawMessage) []workflow.HistoryWrite) ([]workflow.RawMessage, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) == 0 {
		return nil, nil
	}
	ms := h.queue[:1]
	if len(record(ms)) == 0 {
		return nil, nil
	}
	h.taken = append(h.taken, ms...)
	h.queue = h.queue[1:]
	return ms, nil
}

func (h *lateSendHost) RunStep(ctx context.Context, _ bool, fn func(workflow.StepEnv) []workflow.HistoryWrite) error {
	return errors.New("no steps")
}

func (h *lateSendHost) Commit(context.Context, []workflow.HistoryWrite) error { return nil }
func (h *lateSendHost) Client() caller.Client                                 { return nil }
func (h *lateSendHost) MessageNotify() <-chan struct{}                        { return h.notify }
func (h *lateSendHost) Waiting(w workflow.Wake)                               {}
func (h *lateSendHost) Actor() (string, []string)                             { return "late", []string{"k"} }
func (h *lateSendHost) Complete(context.Context, uint64, json.RawMessage, []workflow.HistoryWrite) error {
	return nil
}

// nextWithin5s runs a workflow that takes one message of queue q with a
// 5 s timeout (receive "take") on h over hist, and says what it got: "timed
// out", or the message's time since t0.
func nextWithin5s(h workflow.Host, hist []workflow.Entry) (workflow.Outcome, string) {
	var got string
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := workflow.Run(ctx, func(c *workflow.Ctx[log]) error {
		m, err := workflow.Next[job](c, "take", workflow.NextOptions{Names: []string{"q"}, Timeout: 5 * time.Second})
		switch {
		case errors.Is(err, workflow.ErrTimeout):
			got = "timed out"
		case err != nil:
			return err
		default:
			got = m.CreatedAt.Sub(t0).String()
		}
		return nil
	}, h, hist)
	return out, got
}

// A receive times out only on a look that began at or after its deadline:
// a message that a look just before the deadline missed, stamped before
// the deadline, is taken, not timed out on. The driver read the clock
// after the look, saw the deadline passed and timed out, leaving behind a
// message stamped before the deadline; a replay that found the timeout
// unrecorded ranked that message on time and took it.
func TestAReceiveTimesOutOnlyOnALookThatBeganAtItsDeadline(t *testing.T) {
	h := &lateSendHost{Clock: workflowtest.NewClock(t0), deadline: t0.Add(5 * time.Second), notify: make(chan struct{})}
	out, got := nextWithin5s(h, nil)
	if out.Status != workflow.RunCompleted || got != "1s" || len(h.taken) != 1 {
		t.Fatalf("%+v: got %s, %d taken; want the message sent at 1s taken", out, got, len(h.taken))
	}
}

// A message stamped at a receive's very deadline came too late for it: a
// look at the deadline that missed it times the receive out (the host
// stamps a message no earlier than a Now read before a look that misses
// it, which may be the same instant), so a replay that finds the timeout
// unrecorded must time out too, not take it as on time.
func TestAMessageStampedAtAReceivesDeadlineCameTooLate(t *testing.T) {
	h := &lateSendHost{Clock: workflowtest.NewClock(t0.Add(10 * time.Second)), looked: true, notify: make(chan struct{})}
	h.queue = []workflow.RawMessage{{ID: 1, Queue: "q", Body: json.RawMessage(`{"n":1}`), CreatedAt: t0.Add(5 * time.Second)}}
	// The receive began at t0 with a 5 s timeout; the run is back at 10 s.
	hist := []workflow.Entry{{Path: "take", Seq: 1, Kind: workflow.KindMessage, Status: workflow.StatusPending, Deadline: t0.Add(5 * time.Second)}}
	out, got := nextWithin5s(h, hist)
	if out.Status != workflow.RunCompleted || got != "timed out" || len(h.taken) != 0 {
		t.Fatalf("%+v: got %s, %d taken; want timed out, none taken", out, got, len(h.taken))
	}
}
