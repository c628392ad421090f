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

// goneHost is a host whose first message is taken by someone else (a join
// sibling receiving from the same queue) between the driver's Queued and
// its Receive.
type goneHost struct {
	*workflowtest.Clock
	mu     sync.Mutex
	queue  []workflow.RawMessage
	taken  []workflow.RawMessage
	writes []workflow.HistoryWrite
	peeked bool
	notify chan struct{}
}

func (h *goneHost) Queued(names []string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) == 0 {
		return time.Time{}, false
	}
	first := h.queue[0].CreatedAt
	if !h.peeked {
		h.peeked = true
		h.queue = h.queue[1:] // taken by a sibling meanwhile
	}
	return first, true
}

func (h *goneHost) Receive(ctx context.Context, names []string, max int, record func([]workflow.RawMessage) []workflow.HistoryWrite) ([]workflow.RawMessage, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.queue) == 0 {
		return nil, nil
	}
	ms := h.queue[:1]
	ws := record(ms)
	if len(ws) == 0 {
		return nil, nil
	}
	h.writes = append(h.writes, ws...)
	h.taken = append(h.taken, ms...)
	h.queue = h.queue[1:]
	return ms, nil
}

func (h *goneHost) RunStep(ctx context.Context, _ bool, fn func(workflow.StepEnv) []workflow.HistoryWrite) error {
	return errors.New("no steps")
}

func (h *goneHost) Commit(ctx context.Context, ws []workflow.HistoryWrite) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.writes = append(h.writes, ws...)
	return nil
}

func (h *goneHost) Client() caller.Client          { return nil }
func (h *goneHost) MessageNotify() <-chan struct{} { return h.notify }
func (h *goneHost) Waiting(w workflow.Wake)        {}
func (h *goneHost) Actor() (string, []string)      { return "gone", []string{"k"} }
func (h *goneHost) Complete(context.Context, uint64, json.RawMessage, []workflow.HistoryWrite) error {
	return nil
}

// A receive ranks the messages it takes, not the one it peeked: if that
// one went to another taker first, the next one, sent after the receive's
// deadline, leaves it timed out (as it would have on time), rather than
// be taken and recorded at the peeked message's time, before it was sent.
func TestAReceiveRanksTheMessageItTakesNotTheOneItPeeked(t *testing.T) {
	h := &goneHost{Clock: workflowtest.NewClock(t0.Add(10 * time.Second)), notify: make(chan struct{})}
	h.queue = []workflow.RawMessage{
		{ID: 1, Queue: "q", Body: json.RawMessage(`{"n":1}`), CreatedAt: t0.Add(1 * time.Second)},
		{ID: 2, Queue: "q", Body: json.RawMessage(`{"n":2}`), CreatedAt: t0.Add(7 * time.Second)},
	}
	// The receive began at t0 with a 5 s timeout; the run is back at 10 s.
	hist := []workflow.Entry{{Path: "take", Seq: 1, Kind: workflow.KindMessage, Status: workflow.StatusPending, Deadline: t0.Add(5 * time.Second)}}
	out, got := nextWithin5s(h, hist)
	if out.Status != workflow.RunCompleted || got != "timed out" || len(h.taken) != 0 {
		var at time.Time
		for _, w := range h.writes {
			if w.Put != nil && w.Put.Path == "take" {
				at = w.Put.Time
			}
		}
		t.Fatalf("%+v: got %s (recorded at %s), %d taken; want timed out, none taken", out, got, at.Sub(t0), len(h.taken))
	}
}
