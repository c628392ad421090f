package runtime

import (
	"context"
	"encoding/json"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/queuenames"
	"github.com/rivet-go/rivet/internal/sizes"
	"github.com/rivet-go/rivet/storage"
)

// stagedMessage is a message a turn queued on its own actor's queue
// (ActionCtx.Enqueue, StepCtx.Enqueue): written in the transaction of the
// turn's commit, with its state, so that a turn that fails queues nothing
// and one that commits cannot lose it (a Send through the actor's own
// handle is a write of its own, durable whatever the turn then does).
type stagedMessage struct {
	queue string
	body  json.RawMessage
}

// limitTurnMessages bounds the messages one turn enqueues: they share the
// turn's transaction (etcd's 128 operations) with its state and its
// scheduled calls, and count with the calls against limitTurnCalls.
// Their bodies share limitTurnBytes with the calls' arguments.
const limitTurnMessages = sizes.TurnMessages

// Enqueue stages body as a message of queue, checked as Send checks one,
// for the turn's commit. Called by the turn holder (Env.Enqueue).
func (s *turnSchedule) Enqueue(queue string, body any) error {
	if s.over() {
		return rivet.Errorf(rivet.ErrInternal, "actor %s: Enqueue was called after its turn ended (an ActionCtx or StepCtx kept past its turn)", s.a.describe())
	}
	if s.readOnly {
		// Before the activation's list is read: a query's turn may run
		// beside a step's body, which stages its own.
		return s.readOnlyErr("enqueue a message (it commits with the turn's changes, and a query commits none)")
	}
	a := s.a
	q, ok := a.spec.Queues[queue]
	if !ok {
		return rivet.Errorf(rivet.ErrUnknownQueue, "%s", queuenames.Unknown(a.spec.Name, queue, a.spec.Queues))
	}
	b, err := json.Marshal(body)
	if err != nil {
		return rivet.Errorf(rivet.ErrInvalidArgument, "message for queue %s does not marshal to JSON: %v", queue, err)
	}
	if len(b) > a.h.cfg.MaxMessageBytes {
		return rivet.Errorf(rivet.ErrTooLarge, "message for queue %s is %d bytes, the limit is %d", queue, len(b), a.h.cfg.MaxMessageBytes)
	}
	if err := a.h.guardUser(a.ref, "the message's decoder", func() error { return q.Validate(b) }); err != nil {
		return err
	}
	if len(a.staged) >= limitTurnMessages {
		return rivet.Errorf(rivet.ErrTooLarge, "enqueue on %s: one turn enqueues at most %d messages (they commit in one transaction)", queue, limitTurnMessages)
	}
	n := 0
	calls, bytes := a.schedChanges()
	if calls+len(a.staged) >= limitTurnCalls {
		// Counted with the calls: with a key's ops, expired keys'
		// deletes, the state and a wakeup, the turn fits etcd's 128.
		return rivet.Errorf(rivet.ErrTooLarge, "enqueue on %s: one turn schedules and cancels at most %d calls, with the messages it enqueues (they commit in one transaction)", queue, limitTurnCalls)
	}
	for _, m := range a.staged {
		bytes += len(m.body)
		if m.queue == queue {
			n++
		}
	}
	if bytes+len(b) > limitTurnBytes {
		return rivet.Errorf(rivet.ErrTooLarge, "enqueue on %s: the messages one turn enqueues and the calls it schedules have at most %d bytes in all (they commit in one transaction)", queue, limitTurnBytes)
	}
	// The workflow's count, not depth: a step's body stages while sends
	// run beside it (turnGate), which change depth without a lock. Those
	// sends check depth, which leaves out what a turn staged: the cap is
	// soft by up to limitTurnMessages, as a send beside the body may pass
	// it by the messages staged and not yet written.
	a.wf.notifyMu.Lock()
	depth := a.wf.pending[queue]
	a.wf.notifyMu.Unlock()
	if depth+n >= a.h.cfg.MaxQueueDepth {
		return rivet.Errorf(rivet.ErrQueueFull, "queue %s of %s holds %d messages, the limit (with the %d this turn enqueued)", queue, a.describe(), a.h.cfg.MaxQueueDepth, n)
	}
	// As every send, before an ID is taken: the actor's idempotency
	// keys may name IDs above nextSeq (their messages taken and pruned),
	// which a staged message must not take again. Once loaded, no
	// context is made for it.
	if !a.sendKeysLoaded() {
		ctx, cancel := context.WithTimeout(a.h.baseCtx, a.h.cfg.ActionTimeout)
		err = a.loadSendKeys(ctx) // ErrUnavailable
		cancel()
		if err != nil {
			return err
		}
	}
	a.staged = append(a.staged, stagedMessage{queue: queue, body: b})
	return nil
}

// stagedBytes is the size of the staged messages' bodies, which a turn's
// calls share limitTurnBytes with.
func (a *activation) stagedBytes() int {
	n := 0
	for _, m := range a.staged {
		n += len(m.body)
	}
	return n
}

// stagedMsgs returns the staged messages as memory will queue them, their
// IDs the next ones in order, without changing memory: a write refused
// then (too large) leaves the staged messages to restoreState. Their time
// is now, for the size of their writes only: beginStaged stamps them as
// they become visible to the workflow. Called by the turn holder.
func (a *activation) stagedMsgs() []msgRef {
	if len(a.staged) == 0 {
		return nil
	}
	now := time.Now().Round(0)
	seq := a.nextSeq.Load()
	msgs := make([]msgRef, 0, len(a.staged))
	for i, m := range a.staged {
		msgs = append(msgs, msgRef{seq: seq + uint64(i), queue: m.queue, body: m.body, at: now})
	}
	return msgs
}

// stagedWrites makes the writes of msgs (stagedMsgs), at their time: to
// the nanosecond, as a Send's (queueMessage), so that the workflow that
// takes one from memory sees the CreatedAt it would read back after a
// restart.
func (a *activation) stagedWrites(msgs []msgRef) []storage.Op {
	if len(msgs) == 0 {
		return nil
	}
	ops := make([]storage.Op, 0, len(msgs)+1)
	for _, m := range msgs {
		rec, _ := json.Marshal(newQueueMessage(m.body, m.at))
		ops = append(ops, storage.Put(queueKey(a.prefix, m.seq, m.queue), rec))
	}
	return ops
}

// beginStaged counts msgs pending, as Send does before it enqueues one
// (countArrivedLocked). Their writes are made after (stagedWrites). The
// extra ops it returns (a wakeup record, for a workflow that waits for
// messages only) go with them. The caller then calls stagedQueued or
// stagedDropped. Called by the turn holder.
func (a *activation) beginStaged(msgs []msgRef) []storage.Op {
	if len(msgs) == 0 || a.spec.Run == nil {
		return nil
	}
	ended := workflowEnded(a.workflowStatus().Status)
	a.mu.Lock()
	wake, w := a.countArrivedLocked(msgs, ended)
	a.stagedWake = w
	a.mu.Unlock()
	if wake.Key == "" {
		return nil
	}
	return []storage.Op{wake}
}

// countArrivedLocked counts msgs, a turn's messages to its workflow,
// arrived and pending, and stamps them (wfState.arriveAll): as they become
// visible to the workflow's receives, and not before, so that a receive
// that timed out had seen every message stamped before its deadline. If
// the workflow (not ended) waits for messages only, or for a later time,
// it returns the put of a wakeup record due at their time, which goes with
// their writes: a new owner runs the workflow if this node dies before it
// takes them. w is what uncountArrivedLocked puts back if those writes are
// refused. Called by the turn holder (Send, or a turn that staged
// messages: beginStaged), with mu held.
func (a *activation) countArrivedLocked(msgs []msgRef, ended bool) (wake storage.Op, w stagedWake) {
	a.wf.arrivals += uint64(len(msgs))
	now := a.wf.arriveAll(msgs).UnixMilli()
	if (a.wf.wakeAt == 0 || a.wf.wakeAt > now) && !ended {
		wb, _ := json.Marshal(wakeupRecord{At: now})
		wake = storage.Put(storage.WakeupKey(a.part, a.ref.Name, a.enc), wb)
		w = stagedWake{prev: a.wf.wakeAt, set: now}
		a.wf.wakeAt = now
	}
	return wake, w
}

// uncountArrivedLocked undoes countArrivedLocked's counts: the writes were
// refused (or never made), and the messages were never queued. But for
// arrivals, which only rises: a yield compares it before and after its
// record's write to find a send that raced it (yieldWorkflow), and a
// count taken back could meet a later send's and hide it (the failed
// send counted before the yield's first look, taken back, then a send
// during its write); a count that did not match a message costs a yield
// one wakeup more, which is harmless. Called by the turn holder, with mu
// held.
func (a *activation) uncountArrivedLocked(msgs []msgRef, w stagedWake) {
	for _, m := range msgs {
		a.wf.countPending(m.queue, -1)
	}
	// The wakeup record was not written either: memory must not believe
	// it was, or a later send (which writes one only before the time
	// memory has) would write none. A yield or a send since that moved
	// wakeAt wrote its own.
	if w.set != 0 && a.wf.wakeAt == w.set {
		a.wf.wakeAt = w.prev
	}
}

// takeStaged takes the staged messages out of the turn, once their
// writes go with its commit.
func (a *activation) takeStaged() {
	a.staged = nil
	for rp := a.restorePoint; rp != nil; rp = rp.prev {
		rp.staged = 0
	}
}

// stagedQueued puts the messages, their writes enqueued, in memory as a
// Send does: the workflow's Next takes them at once, ordered by their IDs
// with the Sends around them. Called by the turn holder.
func (a *activation) stagedQueued(msgs []msgRef) {
	if len(msgs) == 0 {
		return
	}
	a.nextSeq.Add(uint64(len(msgs)))
	for _, m := range msgs {
		a.depth[m.queue]++
	}
	if a.spec.Run == nil {
		return // no queues: nothing was staged
	}
	a.wf.notifyMu.Lock()
	a.wf.msgs = append(a.wf.msgs, msgs...)
	a.wf.notifyMu.Unlock()
	a.wf.messageArrived()
}

// stagedDropped undoes beginStaged's counts (but arrivals, which only
// rises: uncountArrivedLocked): the writes were refused, and the messages
// were never queued.
func (a *activation) stagedDropped(msgs []msgRef) {
	if a.spec.Run == nil || len(msgs) == 0 {
		return
	}
	a.mu.Lock()
	a.uncountArrivedLocked(msgs, a.stagedWake)
	a.stagedWake = stagedWake{}
	a.mu.Unlock()
}

// stagedWake is the wakeAt countArrivedLocked set (with a wakeup record)
// and the one before, for uncountArrivedLocked to put back.
type stagedWake struct{ prev, set int64 }
