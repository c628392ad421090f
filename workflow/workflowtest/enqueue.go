package workflowtest

import (
	"encoding/json"
	"reflect"
	"sync"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/jsonnull"
	"github.com/rivet-go/rivet/internal/sizes"
	"github.com/rivet-go/rivet/workflow"
)

// StepCtx.Enqueue, as a node does it (runtime/enqueue.go): checked at the
// call, staged with the attempt, and queued only by the commit of the
// attempt's record (an ephemeral step that enqueued commits at once, as a
// node does every step), with the next IDs in the order staged, waking the
// run as a Send does. An
// attempt abandoned, refused by the limits, or whose commit does not apply
// (CrashAt before it, FailCommit) queues nothing; a failed attempt's
// messages are queued, as its state is (roll-forward).

// The bounds of one attempt's messages, a node's: they share its commit's
// transaction.
const (
	limitTurnMessages = sizes.TurnMessages
	limitTurnBytes    = sizes.TurnBytes
)

// stagedMessage is a message an attempt enqueued, for its commit.
type stagedMessage struct {
	queue string
	body  json.RawMessage
}

// stepMessages stages one attempt's messages (workflow.Enqueuer) until its
// commit.
type stepMessages[S any] struct {
	h *Host[S]
	a *activation[S]

	mu   sync.Mutex
	msgs []stagedMessage
	over bool // the attempt's body has returned
}

var _ workflow.Enqueuer = (*stepMessages[struct{}])(nil)

// Enqueue stages body as a message of queue, with a node's checks and
// errors: ErrUnknownQueue for a queue the host's Queues (or QueueTypes)
// does not name, ErrInvalidArgument for a body that does not marshal or
// does not decode into its queue's type, ErrTooLarge past MaxMessageBytes
// or past an attempt's 32 messages (256 KiB in all), ErrQueueFull at
// MaxQueueDepth counting what the attempt staged.
func (m *stepMessages[S]) Enqueue(queue string, body any) error {
	h := m.h
	m.mu.Lock()
	over := m.over
	m.mu.Unlock()
	if over { // first, as a node checks it
		return m.overErr()
	}
	if err := h.checkQueues([]string{queue}); err != nil {
		return rivet.Errorf(rivet.ErrUnknownQueue, "%s", err.Error())
	}
	b, err := json.Marshal(body)
	if err != nil {
		return rivet.Errorf(rivet.ErrInvalidArgument, "message for queue %s does not marshal to JSON: %v", queue, err)
	}
	if lim := h.MaxMessageBytes; lim > 0 && len(b) > lim {
		return rivet.Errorf(rivet.ErrTooLarge, "message for queue %s is %d bytes, the limit is %d", queue, len(b), lim)
	}
	if err := h.checkBody(queue, b); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.over {
		return m.overErr()
	}
	if len(m.msgs) >= limitTurnMessages {
		return rivet.Errorf(rivet.ErrTooLarge, "enqueue on %s: one turn enqueues at most %d messages (they commit in one transaction)", queue, limitTurnMessages)
	}
	n, size := 0, len(b)
	for _, s := range m.msgs {
		size += len(s.body)
		if s.queue == queue {
			n++
		}
	}
	if size > limitTurnBytes {
		return rivet.Errorf(rivet.ErrTooLarge, "enqueue on %s: the messages one turn enqueues and the calls it schedules have at most %d bytes in all (they commit in one transaction)", queue, limitTurnBytes)
	}
	if lim := h.MaxQueueDepth; lim > 0 {
		h.mu.Lock()
		depth := 0
		for _, q := range h.queue {
			if q.Queue == queue {
				depth++
			}
		}
		h.mu.Unlock()
		if depth+n >= lim {
			return rivet.Errorf(rivet.ErrQueueFull, "queue %s of %s holds %d messages, the limit (with the %d this turn enqueued)", queue, h.Name, lim, n)
		}
	}
	m.msgs = append(m.msgs, stagedMessage{queue: queue, body: b})
	return nil
}

func (m *stepMessages[S]) overErr() error {
	return rivet.Errorf(rivet.ErrInternal, "actor %s: Enqueue was called after its step's attempt ended (a StepCtx kept past its turn)", m.h.Name)
}

// end closes the attempt to Enqueue and returns what it staged (nil if
// drop: its changes are discarded).
func (m *stepMessages[S]) end(drop bool) []stagedMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.over = true
	msgs := m.msgs
	m.msgs = nil
	if drop {
		return nil
	}
	return msgs
}

// queueStagedLocked queues msgs, staged by the attempt a commit applies,
// with the next IDs, in order, and wakes the run as a Send does.
func (a *activation[S]) queueStagedLocked(msgs []stagedMessage) {
	if len(msgs) == 0 {
		return
	}
	h := a.h
	now := h.Clock.Now()
	for _, s := range msgs {
		h.queue = append(h.queue, workflow.RawMessage{ID: h.nextID, Queue: s.queue, Body: s.body, CreatedAt: now})
		h.nextID++
	}
	close(h.notify)
	h.notify = make(chan struct{})
}

// checkBody refuses a body that queue's declared type (QueueTypes) does
// not take, as a node's rivet.QueueOf does: one that does not decode into
// it, and JSON null for a type that has no null (jsonnull.Refuse, the
// node's own rule), which would reach the workflow as a zero value nobody
// sent.
func (h *Host[S]) checkBody(queue string, b []byte) error {
	t := h.QueueTypes[queue]
	if t == nil {
		return nil
	}
	if msg, ok := jsonnull.Refuse(b, t); !ok {
		return rivet.Errorf(rivet.ErrInvalidArgument, "message for queue %s: %s", queue, msg)
	}
	if err := json.Unmarshal(b, reflect.New(t).Interface()); err != nil {
		return rivet.Errorf(rivet.ErrInvalidArgument, "message for queue %s does not decode into its type %v: %v", queue, t, err)
	}
	return nil
}
