package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// NextOptions shape a receive.
type NextOptions struct {
	// Names are the queues to take from; empty: the actor's queues whose
	// declared type (rivet.QueueOf) is the receive's message type (or a
	// pointer to it, or it a pointer to theirs) and its untyped queues, or
	// every queue if the type is json.RawMessage or an interface (switch
	// on Message.Name), or if no queue declares it. A name that is none of
	// the actor's queues fails the receive (ErrInvalid), as a send to it is
	// refused: it would wait for ever.
	Names []string
	// Count is the most messages NextBatch takes (default 1). It never
	// waits to fill a batch: it takes what is there, once at least one
	// message is.
	Count int
	// Timeout bounds the wait, measured from the first call (recorded, so
	// not reset by replays). 0: wait forever. A run that gets here after
	// the deadline (woken late, replayed after a crash) times out if the
	// first message was sent at or after the deadline, as it would have on
	// time.
	Timeout time.Duration
	// Completable requires every message taken to be completed (with
	// Message.Complete) before this branch of the workflow receives again.
	Completable bool
}

// Message is a message taken from a queue.
type Message[T any] struct {
	ID uint64
	// Name is the queue the message came from.
	Name      string
	Body      T
	CreatedAt time.Time

	ref *msgRef
}

// msgRef finds a received message's record again, to complete it.
type msgRef struct {
	t     *thread
	path  string
	index int
	id    uint64
	// done: this run completed the message (a Complete returned nil).
	// Made anew by each run's receive, so that a replay's first Complete
	// finds it unset, as the first run's did, and its second finds it
	// set; copies of the Message share it.
	done bool
}

// Next takes one message, waiting for it; name is the history entry's name,
// not a queue's (opts.Names picks queues; without them, the queues of T):
//
//	msg, err := workflow.Next[Reminder](ctx, "wait-reminder")
//
// To wait on queues of several types at once, receive json.RawMessage
// and switch on msg.Name.
// With a timeout it returns an error matching ErrTimeout if none came.
func Next[T, S any](c *Ctx[S], name string, opts ...NextOptions) (Message[T], error) {
	var o NextOptions
	switch len(opts) {
	case 0:
	case 1:
		o = opts[0]
	default:
		return Message[T]{}, fmt.Errorf("%w: Next %q: at most one NextOptions", ErrInvalid, name)
	}
	if o.Count > 1 {
		return Message[T]{}, fmt.Errorf("%w: Next %q takes one message; use NextBatch for %d", ErrInvalid, name, o.Count)
	}
	if o.Count == 0 { // a negative count is refused, as NextBatch's is
		o.Count = 1
	}
	ms, path, err := receive[T](c, name, o)
	if err != nil {
		return Message[T]{}, err
	}
	if len(ms) == 0 {
		return Message[T]{}, fmt.Errorf("workflow: %q: no message within %s: %w", path, o.Timeout, ErrTimeout)
	}
	return ms[0], nil
}

// NextBatch takes up to opts.Count messages (default 1), waiting until at
// least one is there. With a timeout it returns an empty slice if none came.
func NextBatch[T, S any](c *Ctx[S], name string, opts NextOptions) ([]Message[T], error) {
	ms, _, err := receive[T](c, name, opts)
	return ms, err
}

func receive[T, S any](c *Ctx[S], name string, o NextOptions) ([]Message[T], string, error) {
	if o.Count == 0 {
		o.Count = 1
	}
	if len(o.Names) == 0 {
		if qt, ok := c.x.t.r.host.(QueueTyper); ok {
			o.Names = queuesOf(reflect.TypeFor[T](), qt.QueueTypes())
		}
	}
	if o.Count < 0 || o.Timeout < 0 {
		return nil, "", fmt.Errorf("%w: receive %q: negative count or timeout", ErrInvalid, name)
	}
	path, e, err := c.x.receive(name, o)
	if err != nil {
		return nil, path, err
	}
	out := make([]Message[T], len(e.Messages))
	var refs []*msgRef
	for i, m := range e.Messages {
		var body T
		if err := json.Unmarshal(m.Body, &body); err != nil {
			return nil, path, fmt.Errorf("workflow: %q: message %d from queue %q does not decode into %T: %w", path, m.ID, m.Queue, body, err)
		}
		ref := &msgRef{t: c.x.t, path: path, index: i, id: m.ID}
		out[i] = Message[T]{ID: m.ID, Name: m.Queue, Body: body, CreatedAt: m.CreatedAt, ref: ref}
		// Tracked even when the history says it was completed: until
		// this run reaches the Complete call, the code has not completed
		// it, and replays must behave as the first run did.
		if o.Completable {
			refs = append(refs, ref)
		}
	}
	c.x.t.uncompleted = append(c.x.t.uncompleted, refs...)
	return out, path, nil
}

// rawMessage is the type of a body taken as it is.
var rawMessage = reflect.TypeFor[json.RawMessage]()

// queuesOf returns the queues of types whose messages a receive of t
// without names takes: those declaring t, and those declaring any body at
// all (json.RawMessage, an interface). Taken from every queue, a
// Next[Checkout] took a message of a Confirm queue and decoded it, its
// fields all unknown, into an empty Checkout that the workflow went on
// with (a user trial). nil (every queue) if t is itself open, or if no
// queue declares t: a receive into a type of its own, which the queues'
// messages decode into, went on as before.
func queuesOf(t reflect.Type, types map[string]reflect.Type) []string {
	open := func(t reflect.Type) bool { return t == nil || t == rawMessage || t.Kind() == reflect.Interface }
	// A *Checkout and a Checkout carry the same JSON.
	elem := func(t reflect.Type) reflect.Type {
		if t != nil && t.Kind() == reflect.Pointer {
			return t.Elem()
		}
		return t
	}
	if len(types) == 0 || open(elem(t)) {
		return nil
	}
	var names []string
	declared := false
	for name, qt := range types {
		switch {
		case elem(qt) == elem(t):
			declared = true
			names = append(names, name)
		case open(elem(qt)):
			names = append(names, name)
		}
	}
	if !declared {
		return nil
	}
	slices.Sort(names)
	return names
}

// receive takes messages into the entry at name: replays it, or waits
// until messages come (taking them and recording them in one commit) or the
// deadline passes.
func (x *cx) receive(name string, o NextOptions) (string, *Entry, error) {
	if err := x.begin("receive", name); err != nil {
		return "", nil, err
	}
	defer x.end()
	t, r := x.t, x.t.r
	if n := len(t.uncompleted); n > 0 {
		return "", nil, fmt.Errorf("%w: %d message(s), the first %d received at %q", ErrNotCompleted, n, t.uncompleted[0].id, t.uncompleted[0].path)
	}
	path, seq, err := x.sc.claim("receive", name)
	if err != nil {
		return "", nil, err
	}
	e, err := r.visit(x.sc, path, KindMessage)
	if err != nil {
		return path, nil, err
	}
	if e != nil && e.Status == StatusCompleted {
		if tookMessages(e) {
			// Messages it took and completed are owed to no one: in the
			// first run, the branch held the claim for them only until it
			// completed them, before anything a replay runs live.
			t.claimReplayed()
		}
		t.advance(e.Time)
		return path, e, nil
	}
	if qc, ok := r.host.(QueueChecker); ok && len(o.Names) > 0 {
		if err := qc.CheckQueues(o.Names); err != nil {
			return path, nil, fmt.Errorf("%w: receive %q: %v", ErrInvalid, path, err)
		}
	}
	t.goLive()
	var deadline time.Time
	switch {
	case e != nil:
		deadline = e.Deadline
	case o.Timeout > 0:
		deadline = r.now().Add(o.Timeout)
		pe := &Entry{Path: path, Seq: seq, TryPlaces: x.sc.tryPlaces, Kind: KindMessage, Status: StatusPending, Deadline: deadline}
		if err := t.commit(HistoryWrite{Put: pe}); err != nil {
			return path, nil, err
		}
	}
	for {
		// Taken before looking, so that a message sent after the look
		// still wakes the wait below.
		notify := r.host.MessageNotify()
		// The time is read before the look too: a message the look
		// missed is stamped no earlier than that (MessagePeeker), so a
		// receive that times out had seen every message sent before its
		// deadline. Read after the look, a message sent between the two
		// (the deadline passing meanwhile) was stamped before the
		// deadline and not taken, and a replay that found the timeout
		// unrecorded took it.
		var now time.Time
		if !deadline.IsZero() {
			now = r.now()
		}
		got, err := x.take(path, seq, deadline, o)
		if err != nil || got != nil {
			return path, got, err
		}
		if !deadline.IsZero() && !now.Before(deadline) {
			// Timed out. Recording it may wait for the next commit: if
			// it is lost, the replay looks again and may find a
			// message, which is as good an outcome.
			done := &Entry{Path: path, Seq: seq, TryPlaces: x.sc.tryPlaces, Kind: KindMessage, Status: StatusCompleted, Deadline: deadline, Time: t.endedAt(deadline)}
			t.record(HistoryWrite{Put: done})
			t.advance(done.Time)
			return path, done, nil
		}
		if err := t.wait(waitFor{at: deadline, reason: WakeReceive, notify: notify, names: o.Names}); err != nil {
			return path, nil, err
		}
	}
}

// take takes the messages that are there, if any, recording them at path
// in the same commit; nil if there were none (or, in a race, if another
// branch held the right to take messages until the deadline passed).
func (x *cx) take(path string, seq int, deadline time.Time, o NextOptions) (*Entry, error) {
	t, r := x.t, x.t.r
	// came is when the first message came, if after the receive began:
	// the run got here late (woken late, replayed after a crash), and the
	// receive ranks as it would have on time, by that time.
	var came time.Time
	unknown := false // a message is there, the host does not know since when
	if p, ok := r.host.(MessagePeeker); ok {
		first, queued := p.Queued(o.Names)
		if !queued {
			return nil, nil
		}
		came, unknown = t.cameLate(first), first.IsZero()
	}
	for {
		if !came.IsZero() {
			if !deadline.IsZero() && !came.Before(deadline) {
				// On time, the receive timed out before it came (at its
				// deadline: a look then that missed a message saw none
				// stamped before it, see receive).
				return nil, nil
			}
			if err := t.awaitEarlier(came); err != nil {
				return nil, err
			}
		}
		got, late, err := x.takeOnce(path, seq, deadline, o, came, unknown)
		if err == errRetake {
			continue
		}
		if err != nil || got != nil || late.IsZero() {
			return got, err
		}
		// The host did not know when the message came (Queued said
		// zero): ranked by its time now, as above.
		came = late
	}
}

// errRetake is takeOnce's word that it took nothing because a race's
// finisher outran the receive, and that it may take again now.
var errRetake = errors.New("workflow: take again")

// cameLate returns at, when a message came, if it came after t's receive
// began (zero otherwise, and for an unknown time).
func (t *thread) cameLate(at time.Time) time.Time {
	if at = at.Round(0); at.After(t.now) {
		return at
	}
	return time.Time{}
}

// takeOnce is take's attempt, the messages' time already ranked if came is
// set. If it is not, and the messages came while the run was behind (see
// take), it takes them only if their time ranks first; if not it returns
// that time as late, to be ranked. unknown says that a message is queued
// whose time the host does not know yet.
func (x *cx) takeOnce(path string, seq int, deadline time.Time, o NextOptions, came time.Time, unknown bool) (got *Entry, late time.Time, err error) {
	t, r := x.t, x.t.r
	release, err := t.claim(deadline)
	if err != nil || release == nil {
		return nil, time.Time{}, err
	}
	var batch []HistoryWrite
	outrun := false
	switch {
	case !came.IsZero():
		// Recorded at came, which it holds a later finisher to.
		t.setFloor(came, true)
	case unknown:
		// It may have come at any time since the receive began: a
		// finisher waits until the host tells, in the turn.
	default:
		// What the receive takes is recorded at the time it takes it,
		// after now: it does not hold a race's finisher meanwhile (it
		// may wait for the actor's turn, held by a step of another
		// branch).
		t.setFloor(time.Time{}, false)
	}
	defer func() { t.setFloor(t.now, true) }()
	msgs, err := r.host.Receive(t.ctx, o.Names, o.Count, func(ms []RawMessage) []HistoryWrite {
		if t.lostARace() {
			// Decided while this branch waited for the turn (its claim
			// only looked, see race.claimTaken): a loser takes nothing.
			return nil
		}
		at := t.stamp()
		if len(ms) > 0 {
			// Ranked by the messages taken: the one Queued saw may
			// have gone to another taker (a join sibling) meanwhile,
			// and the first one here come later.
			c := t.cameLate(ms[0].CreatedAt)
			if c.IsZero() && t.ranksBehind(t.now, raceSlot.outrunLocked) {
				// There when the receive began: ranked at t.now. A
				// sibling that finished the race before then, or may
				// still (catching up), has it, however late its
				// goroutine looks (it waited, say, for a claim given
				// back just now): take nothing until that is decided.
				outrun = true
				return nil
			}
			if !c.IsZero() && (came.IsZero() || c.After(came)) && (!deadline.IsZero() && !c.Before(deadline) || t.ranksBehind(c, raceSlot.outrankedLocked)) {
				late = c
				return nil
			}
			if !c.IsZero() && c.Before(at) {
				at = c
			}
		}
		got = &Entry{Path: path, Seq: seq, TryPlaces: x.sc.tryPlaces, Kind: KindMessage, Status: StatusCompleted, Deadline: deadline, Time: at}
		for _, m := range ms {
			got.Messages = append(got.Messages, RecordedMessage{RawMessage: m})
		}
		t.r.markEntry(got)
		batch = AppendWrites(append([]HistoryWrite(nil), t.pending...), HistoryWrite{Put: got})
		return batch
	})
	switch {
	case err != nil:
		release(nil)
		return nil, time.Time{}, t.hostErr(err)
	case len(msgs) == 0:
		release(nil)
		if t.lostARace() {
			return nil, time.Time{}, ErrCancelled
		}
		if outrun {
			if err := t.awaitOutrun(t.now); err != nil {
				return nil, time.Time{}, err
			}
			return nil, time.Time{}, errRetake
		}
		return nil, late, nil
	case got == nil:
		release(nil)
		return nil, time.Time{}, t.hostErr(fmt.Errorf("the host's Receive returned %d messages without recording them", len(msgs)))
	}
	if len(t.races) == 0 {
		t.committed(batch) // no claim to apply it with (claim)
	}
	release(batch)
	t.advance(got.Time)
	return got, time.Time{}, nil
}

// Complete answers the message's sender (if it waits) with response, which
// must marshal to JSON, and records that the message was completed; on
// replay, a completion the history holds is not sent again. Call it from the branch of the workflow
// that received the message, once the message is handled: in a race, a
// branch whose messages are all completed holds the race no more, and may
// lose it before it does anything more (see Race).
//
// A message is completed once: a second Complete of it (or of a copy of
// the Message) in the same run fails with ErrInvalid, its response sent
// to no one (the sender has the first). A Complete that failed (a response
// that does not marshal) did not complete it: call it again.
func (m Message[T]) Complete(response any) error {
	if m.ref == nil {
		return fmt.Errorf("%w: Complete of a message that no workflow received", ErrInvalid)
	}
	return m.ref.complete(response)
}

func (ref *msgRef) complete(response any) error {
	t, r := ref.t, ref.t.r
	if t.forked.Load() {
		// The receiving branch is blocked in a join or race: its state
		// belongs to its goroutine.
		return fmt.Errorf("%w: Complete of message %d while the branch that received it runs a join or race", ErrEntryInProgress, ref.id)
	}
	if t.ended.Load() {
		// Its branch's context is cancelled now, and a replay of the
		// settled join or race would not run the branch again to get the
		// message back: without this, the caller got ErrCancelled, "race
		// lost", even after a join.
		return fmt.Errorf("%w: Complete of message %d received at %q after its join or race branch ended: complete it in that branch", ErrInvalid, ref.id, ref.path)
	}
	if err := t.stopped(true); err != nil {
		return err
	}
	if ref.done {
		return fmt.Errorf("%w: Complete of message %d received at %q: it was completed already (a message is completed once; this response is sent to no one)", ErrInvalid, ref.id, ref.path)
	}
	// Marshalled on replay too, where the response goes nowhere: a
	// Complete whose response does not marshal fails there as it did
	// live, and so the next Complete finds the message as it did live.
	b, err := json.Marshal(response)
	if err != nil {
		return fmt.Errorf("workflow: completion of message %d does not marshal to JSON: %w", ref.id, err)
	}
	r.mu.Lock()
	e := r.hist.Get(ref.path)
	r.mu.Unlock()
	if e == nil || ref.index >= len(e.Messages) || e.Messages[ref.index].ID != ref.id {
		return fmt.Errorf("%w: Complete of message %d: its receive entry %q is gone (a pruned loop iteration?)", ErrInvalid, ref.id, ref.path)
	}
	// Completed once it is: a Complete that fails here leaves it owed,
	// so that the next receive still refuses to go on without it.
	completed := func() {
		t.uncompleted = slices.DeleteFunc(t.uncompleted, func(o *msgRef) bool { return o.path == ref.path && o.id == ref.id })
	}
	if e.Messages[ref.index].Completed {
		completed()
		ref.done = true
		return nil
	}
	completed()
	ne := e.clone()
	ne.Messages[ref.index].Completed = true
	r.markEntry(ne)
	batch := AppendWrites(append([]HistoryWrite(nil), t.pending...), HistoryWrite{Put: ne})
	t.goLive()
	if err := r.host.Complete(t.ctx, ref.id, b, batch); err != nil {
		return t.hostErr(err)
	}
	t.committed(batch)
	ref.done = true
	if len(t.races) > 0 && !tookMessages(ne) {
		// Its last message owed completed, its branch holds the races
		// it runs under no more (an entry that still holds one keeps
		// them, and spares the look).
		r.mu.Lock()
		t.dropClaimsLocked()
		r.mu.Unlock()
	}
	return nil
}
