package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// Event subscriptions (rivet.Broadcaster): an actor's events go to the
// subscribers its owner node holds, once the writes of the turn that
// broadcast them are durable, in the order the turns end. Nothing is stored:
// a subscription lives on the node that owned the actor's partition when it
// was made, and ends (UNAVAILABLE) when the partition leaves the node; the
// subscriber subscribes again, wherever the actor is then, and may have
// missed events in between (the Go client says so).

// Limits of the node's subscriptions.
const (
	// SubscriberBuffer and SubscriberBytes bound the events waiting for a
	// subscriber, in events and in bytes of their data, before its
	// subscription ends (ErrQueueFull, "event"/"overflow"): a slow
	// subscriber must not hold up the actor, or the others, or hold the
	// node's memory. A subscriber that keeps up holds nothing. What its
	// sender has taken (Take) and not yet sent does not count: a server
	// sending a batch to a subscriber that does not read holds up to as
	// much again, so it may be up to twice the bound behind.
	SubscriberBuffer = 1024
	SubscriberBytes  = 8 << 20
	// MaxSubscribersPerActor and MaxSubscribers bound the subscriptions
	// of one actor and of the node.
	MaxSubscribersPerActor = 1000
	MaxSubscribers         = 100_000
)

// subscriptionCheck is how often the node looks for subscriptions whose
// partition it no longer serves under their claim (a lease lost, a
// re-fence); a handoff ends them at once.
const subscriptionCheck = 250 * time.Millisecond

// Subscription is one subscriber's stream of an actor's events.
type Subscription struct {
	hub   *eventHub
	node  string
	id    string
	part  uint32
	token int64
	names map[string]bool // nil: every event
	// queue and bytes are the events published and not yet taken,
	// guarded by hub.mu; ready holds a token while queue may be
	// non-empty.
	queue []rivet.Event
	bytes int
	ready chan struct{}
	done  chan struct{}
	err   error // set before done closes
}

// NodeID is the node that holds the subscription.
func (s *Subscription) NodeID() string { return s.node }

// Ready has a value when events may be waiting: Take them.
func (s *Subscription) Ready() <-chan struct{} { return s.ready }

// Take returns the events published and not taken yet, oldest first
// (appended to buf), also once the subscription has ended. An event's Data
// is shared with the actor's other subscribers, not copied for each: read
// it, do not modify it.
func (s *Subscription) Take(buf []rivet.Event) []rivet.Event {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	buf = append(buf, s.queue...)
	clear(s.queue)
	s.queue, s.bytes = s.queue[:0], 0
	if cap(s.queue) > 64 {
		s.queue = nil // a burst's array goes with the burst
	}
	return buf
}

// Done is closed when the subscription has ended; Take what it still
// holds, then Err says why.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Err says why the subscription ended, once Done is closed: nil after
// Close; rivet.ErrUnavailable when the actor's partition left this node or
// the node stopped (subscribe again); rivet.ErrQueueFull when more than
// SubscriberBuffer events (or SubscriberBytes) waited to be taken;
// rivet.ErrNotFound when the actor was destroyed.
func (s *Subscription) Err() error {
	<-s.done
	return s.err
}

// Close ends the subscription.
func (s *Subscription) Close() { s.hub.end(s, nil) }

// eventHub holds the node's subscriptions, by actor.
type eventHub struct {
	mu   sync.Mutex
	subs map[string]map[*Subscription]struct{} // by activation id
	n    int
	// published counts events handed to subscribers; overflowed, the
	// subscriptions ended because their subscriber fell behind.
	published, overflowed uint64
}

func newEventHub() *eventHub { return &eventHub{subs: map[string]map[*Subscription]struct{}{}} }

// count is the subscriptions of one actor.
func (e *eventHub) count(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.subs[id])
}

func (e *eventHub) add(s *Subscription) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n >= MaxSubscribers {
		return rivet.Reasonf(rivet.ErrQueueFull, "event", "subscribers", "this node holds %d event subscriptions, its limit", e.n)
	}
	m := e.subs[s.id]
	if len(m) >= MaxSubscribersPerActor {
		return rivet.Reasonf(rivet.ErrQueueFull, "event", "subscribers", "actor %s has %d event subscribers, the limit", s.id, len(m))
	}
	if m == nil {
		m = map[*Subscription]struct{}{}
		e.subs[s.id] = m
	}
	m[s] = struct{}{}
	e.n++
	return nil
}

// end ends s with err, if it has not ended.
func (e *eventHub) end(s *Subscription, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.endLocked(s, err)
}

func (e *eventHub) endLocked(s *Subscription, err error) {
	m := e.subs[s.id]
	if _, ok := m[s]; !ok {
		return
	}
	delete(m, s)
	if len(m) == 0 {
		delete(e.subs, s.id)
	}
	e.n--
	s.err = err
	close(s.done)
}

// endIf ends, with err, every subscription for which match is true.
func (e *eventHub) endIf(match func(s *Subscription) bool, err func(s *Subscription) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.subs {
		for s := range m {
			if match(s) {
				e.endLocked(s, err(s))
			}
		}
	}
}

// publish hands the actor's events to its subscribers, in order. It never
// blocks: a subscriber too far behind is dropped.
func (e *eventHub) publish(id string, evs []rivet.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for s := range e.subs[id] {
		n := 0
		for _, ev := range evs {
			if s.names != nil && !s.names[ev.Name] {
				continue
			}
			s.queue = append(s.queue, ev)
			s.bytes += len(ev.Data) + len(ev.Name)
			n++
		}
		if n == 0 {
			continue
		}
		if len(s.queue) > SubscriberBuffer || s.bytes > SubscriberBytes {
			e.overflowed++
			e.endLocked(s, rivet.Reasonf(rivet.ErrQueueFull, "event", "overflow",
				"this subscriber fell more than %d events (or %d MiB) behind actor %s: subscribe again (events were missed)", SubscriberBuffer, SubscriberBytes>>20, id))
			s.queue, s.bytes = nil, 0
			continue
		}
		e.published += uint64(n)
		select {
		case s.ready <- struct{}{}:
		default:
		}
	}
}

func (e *eventHub) counts() (subscribers int, published, overflowed uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n, e.published, e.overflowed
}

// Subscribe subscribes to the events of an actor this node serves, all of
// them if names is empty. The actor must exist (rivet.ErrNotFound). Every
// event broadcast after Subscribe returns reaches the subscription, until
// it ends; see Subscription.Err.
func (h *Host) Subscribe(ctx context.Context, ref Ref, names []string) (*Subscription, error) {
	if err := h.begin(); err != nil {
		return nil, err
	}
	defer h.end()
	sp, err := h.spec(ref)
	if err != nil {
		return nil, err
	}
	if len(sp.Events) == 0 {
		return nil, rivet.Errorf(rivet.ErrUnknownEvent, "actor %s declares no events", sp.Name)
	}
	var filter map[string]bool
	for _, n := range names {
		if _, ok := sp.Events[n]; !ok {
			return nil, rivet.Errorf(rivet.ErrUnknownEvent, "actor %s has no event %q (it has %s)", sp.Name, n, knownNames(sp.Events))
		}
		if filter == nil {
			filter = map[string]bool{}
		}
		filter[n] = true
	}
	enc, part, err := h.place(ref)
	if err != nil {
		return nil, err
	}
	if _, _, _, err := h.peek(ctx, ref, false); err != nil {
		return nil, notCreated(err)
	}
	token, ok := h.own.Token(part)
	if !ok {
		return nil, h.notOwned(part, "")
	}
	s := &Subscription{
		hub: h.events, node: h.cfg.NodeID, id: ref.Name + "/" + enc, part: part, token: token, names: filter,
		ready: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if err := h.events.add(s); err != nil {
		return nil, err
	}
	// What ends subscriptions may have run between the looks above and
	// the add, and found nothing to end: look again now that it is in.
	// The partition may have left (the checker would end it within
	// subscriptionCheck, but a subscriber must not start on a claim
	// already gone), the node may be stopping (its checker ends every
	// subscription once, first thing), or the actor may have been
	// destroyed (Destroy ends its subscriptions after the delete).
	if tok, ok := h.own.Token(part); !ok || tok != token {
		h.events.end(s, nil)
		return nil, h.notOwned(part, "")
	}
	if h.isStopping() {
		h.events.end(s, nil)
		return nil, rivet.Errorf(rivet.ErrUnavailable, "node %s is stopping", h.cfg.NodeID)
	}
	if _, _, _, err := h.peek(ctx, ref, false); err != nil {
		h.events.end(s, nil)
		return nil, notCreated(err)
	}
	return s, nil
}

// notCreated says, of a missing actor, that subscribing does not create it.
func notCreated(err error) error {
	var re *rivet.Error
	if errors.As(err, &re) && re.Kind == rivet.ErrNotFound {
		return rivet.Errorf(rivet.ErrNotFound, "%s (subscribing does not create it: call it, or create it, first)", re.Message)
	}
	return err
}

// checkSubscriptions ends the subscriptions whose partition claim this
// node no longer holds, until the host stops (when it ends them all).
// Owned by Host.loops.
func (h *Host) checkSubscriptions() {
	defer h.loops.Done()
	tick := time.NewTicker(subscriptionCheck)
	defer tick.Stop()
	for {
		select {
		case <-h.stopCh:
			h.endSubscriptions(func(*Subscription) bool { return true }, "node %s is stopping")
			return
		case <-tick.C:
			// One look per partition, not per subscription: an actor
			// may have a thousand subscribers.
			held := map[uint32]int64{}
			h.endSubscriptions(func(s *Subscription) bool {
				tok, seen := held[s.part]
				if !seen {
					t, ok := h.own.Token(s.part)
					if !ok {
						t = -1
					}
					held[s.part], tok = t, t
				}
				return tok != s.token
			}, "the actor's partition left node %s")
		}
	}
}

// endSubscriptions ends the matching subscriptions with UNAVAILABLE, whose
// message is why (with the node's ID for its %s) and that subscribing again
// finds the actor where it is now.
func (h *Host) endSubscriptions(match func(*Subscription) bool, why string) {
	h.events.endIf(match, func(*Subscription) error {
		return rivet.Errorf(rivet.ErrUnavailable, why+": subscribe again (events may have been missed)", h.cfg.NodeID)
	})
}

// turnEvents collects the events of one turn (an action, a scheduled call,
// or a step's attempt), published or dropped with its changes to the
// state (finishTurnEvents).
//
// A turn's events describe the actor's memory as the turn changed it, so
// they go out with the commit that makes those changes durable, and not
// at all if they are discarded. Re-entrant turns (a call back into the
// actor from one of its turns, on the same call chain) share the memory of
// the turns they re-entered, still open: a read-only one saw their changes
// before they were written, so its events go with the innermost's; a
// state-changing one commits their changes so far with its own, so their
// events so far go with its commit, outermost first.
type turnEvents struct {
	a      *activation
	chain  string      // the root of its chain
	step   bool        // a step's attempt
	parent *turnEvents // the chain's turn in the actor it re-entered (nil: none)
	// Guarded by a.evMu: a turn's events take those of its nested turns,
	// which may end on other goroutines.
	n   int
	evs []rivet.Event
	// tasks are the turn's KeepAwake functions: they go as its events go,
	// but start as soon as they are handed out (finishTurnEvents), while
	// the turn holds the gate (tasks.go). holdTasks: a wake's hook, whose
	// tasks wait for the whole wake (a re-entrant write does not take
	// them).
	tasks     []taskFn
	holdTasks bool
	// ended: the turn is over (Broadcast fails, its events were
	// published, dropped or handed on).
	ended bool
}

// beginTurnEvents starts collecting the events of a turn on chain. Called
// by the turn holder as the turn begins; finishTurnEvents must follow.
func (a *activation) beginTurnEvents(chain string, step bool) *turnEvents {
	return a.beginTurnEventsIn(new(turnEvents), chain, step)
}

// beginTurnEventsIn is beginTurnEvents with t, zero, as the turn's events:
// a step's turn allocates them with the rest of what its body gets.
func (a *activation) beginTurnEventsIn(t *turnEvents, chain string, step bool) *turnEvents {
	// By the chain's root: its turns in the actor nest (turnGate), the
	// innermost open one is the parent.
	*t = turnEvents{a: a, chain: chainRoot(chain), step: step}
	a.evMu.Lock()
	defer a.evMu.Unlock()
	t.parent = openTurn(a.chainTop.get(t.chain))
	a.chainTop.set(t.chain, t)
	return t
}

// chainTops maps a chain's root to its innermost open turn. The gate lets
// one chain at a time into an actor, so it holds one entry or two (a turn
// that outlived the chains it re-entered): a slice searched costs less
// than a map, whose insert and delete every workflow step paid.
type chainTops []chainTop

type chainTop struct {
	chain string
	t     *turnEvents
}

func (c chainTops) get(chain string) *turnEvents {
	for _, e := range c {
		if e.chain == chain {
			return e.t
		}
	}
	return nil
}

func (c *chainTops) set(chain string, t *turnEvents) {
	for i := range *c {
		if (*c)[i].chain == chain {
			(*c)[i].t = t
			return
		}
	}
	*c = append(*c, chainTop{chain, t})
}

func (c *chainTops) del(chain string) {
	for i, e := range *c {
		if e.chain == chain {
			last := len(*c) - 1
			(*c)[i] = (*c)[last]
			(*c)[last] = chainTop{}
			*c = (*c)[:last]
			return
		}
	}
}

// openTurn is t or its nearest ancestor still open (nil: none). Called with
// evMu held.
func openTurn(t *turnEvents) *turnEvents {
	for t != nil && t.ended {
		t = t.parent
	}
	return t
}

// finishTurnEvents ends t. kept says that the turn's changes to the state
// stay (it succeeded; for a step's attempt, its record is committed even
// if it failed: the state rolls forward), wrote that it queued a write of
// the state as memory holds it. Called by the turn holder as the turn
// ends, after its writes are queued.
func (a *activation) finishTurnEvents(t *turnEvents, kept, wrote bool) {
	a.evMu.Lock()
	open := openTurn(t.parent)
	if a.chainTop.get(t.chain) == t {
		if open == nil {
			a.chainTop.del(t.chain)
		} else {
			a.chainTop.set(t.chain, open)
		}
	}
	var out []rivet.Event
	var tasks []taskFn
	switch {
	case !kept:
		// Its own changes are discarded, and its events with them.
	case open == nil:
		// A root turn, or one that outlived the turns it re-entered.
		out, tasks = t.evs, t.tasks
	case wrote:
		// Its commit writes the changes of the open turns it re-entered
		// too: their events so far go with it, outermost first.
		var chain []*turnEvents
		for p := open; p != nil; p = openTurn(p.parent) {
			chain = append(chain, p)
		}
		// The tasks of a wake's hook (holdTasks), and of every turn
		// inside it, this one's included, wait on the outermost such
		// hook: the wake may still fail.
		hold := -1
		for i := len(chain) - 1; i >= 0 && hold < 0; i-- {
			if chain[i].holdTasks {
				hold = i
			}
		}
		for i := len(chain) - 1; i >= 0; i-- {
			out = append(out, chain[i].evs...)
			chain[i].evs = nil
			switch {
			case hold < 0 || i > hold:
				tasks = append(tasks, chain[i].tasks...)
				chain[i].tasks = nil
			case i < hold:
				chain[hold].tasks = append(chain[hold].tasks, chain[i].tasks...)
				chain[i].tasks = nil
			}
		}
		out = append(out, t.evs...)
		if hold >= 0 {
			chain[hold].tasks = append(chain[hold].tasks, t.tasks...)
		} else {
			tasks = append(tasks, t.tasks...)
		}
	default:
		// It read their changes, not written yet: it goes with them.
		open.evs = append(open.evs, t.evs...)
		open.tasks = append(open.tasks, t.tasks...)
		open.n += t.n
	}
	t.evs, t.tasks, t.ended = nil, nil, true
	a.evMu.Unlock()
	a.publishEvents(out)
	// At once, with the gate still held by the turn's chain: counted
	// before the reaper, a handoff or a stop can look (they take the
	// gate), so none of them misses a task on its way.
	a.startTasks(tasks)
}

// Broadcast implements rivet.Broadcaster.
func (t *turnEvents) Broadcast(name string, data any) error {
	sp := t.a.spec
	ev, ok := sp.Events[name]
	if !ok {
		return t.bug(rivet.Errorf(rivet.ErrInternal, "actor %s broadcast event %q, which it does not declare in its Events (it has %s)", sp.Name, name, knownNames(sp.Events)))
	}
	if err := ev.Check(data); err != nil {
		return t.bug(err)
	}
	// Checked whether anyone listens or not: an action must not succeed
	// or fail by whether someone watches it.
	b, err := json.Marshal(data)
	if err != nil {
		return t.bug(rivet.Errorf(rivet.ErrInternal, "event %q of actor %s does not marshal to JSON: %v", name, sp.Name, err))
	}
	if limit := t.a.h.cfg.MaxResultBytes; len(b) > limit {
		return t.bug(rivet.Errorf(rivet.ErrTooLarge, "event %q of actor %s is %d bytes, the limit is %d", name, sp.Name, len(b), limit))
	}
	t.a.evMu.Lock()
	defer t.a.evMu.Unlock()
	if t.ended {
		return rivet.Errorf(rivet.ErrInternal, "actor %s broadcast event %q after its turn ended (an ActionCtx or StepCtx kept past its turn)", sp.Name, name)
	}
	if t.n >= rivet.MaxEventsPerTurn {
		return t.bug(rivet.Errorf(rivet.ErrTooLarge, "actor %s broadcast more than %d events in one turn", sp.Name, rivet.MaxEventsPerTurn))
	}
	t.n++
	// Kept only if someone listens now: one subscribing later hears
	// what is broadcast after it subscribed.
	if t.a.h.events.count(t.a.id) > 0 {
		t.evs = append(t.evs, rivet.Event{Name: name, Data: b})
	}
	return nil
}

// bug returns err, a mistake in the actor's code, as a step's critical
// failure when the turn is a step's: retrying the attempt would make it
// again.
func (t *turnEvents) bug(err error) error {
	if t.step {
		return workflow.Critical(err)
	}
	return err
}

// pendingEvents are a turn's events waiting for its writes (version v).
type pendingEvents struct {
	v   uint64
	evs []rivet.Event
}

// publishEvents publishes events once every write queued so far is
// durable, after the events published before. Called by the turn holder
// as a turn ends (finishTurnEvents).
func (a *activation) publishEvents(evs []rivet.Event) {
	if len(evs) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failed != nil {
		// Its writes will not commit: the turn did not happen. Unless
		// the failure's outcome is unknown: then it may have, and its
		// events are lost all the same (dropLocked).
		a.dropLocked(true)
		return
	}
	if len(a.pendingEvents) == 0 && a.committed >= a.version {
		a.h.events.publish(a.id, evs)
		return
	}
	a.pendingEvents = append(a.pendingEvents, pendingEvents{v: a.version, evs: evs})
}

// releaseEventsLocked publishes the pending events whose writes are now
// durable, or drops them all if a commit failed. Called with mu held.
func (a *activation) releaseEventsLocked() {
	if a.failed != nil {
		a.dropLocked(len(a.pendingEvents) > 0)
		a.pendingEvents = nil
		return
	}
	n := 0
	for n < len(a.pendingEvents) && a.pendingEvents[n].v <= a.committed {
		a.h.events.publish(a.id, a.pendingEvents[n].evs)
		n++
	}
	if n > 0 {
		rest := copy(a.pendingEvents, a.pendingEvents[n:])
		clear(a.pendingEvents[rest:])
		a.pendingEvents = a.pendingEvents[:rest]
	}
}

// dropLocked is for events dropped because a commit failed (a.failed). A
// commit whose outcome is unknown may still have applied, and a reply
// waiting on it may learn so from storage (waitDurable): its turns then
// happened, and their events are lost all the same. So the actor's
// subscriptions end (UNAVAILABLE): a subscriber knows that it may have
// missed events (the Go client resubscribes and reports a Gap), rather than
// go on as if it had heard of every change. Called with mu held.
func (a *activation) dropLocked(events bool) {
	if !events || !storage.OutcomeUnknown(a.failed) {
		return
	}
	id, what := a.id, a.describe()
	a.h.events.endIf(func(s *Subscription) bool { return s.id == id }, func(*Subscription) error {
		return rivet.Errorf(rivet.ErrUnavailable, "actor %s: a write of its turns had an unknown outcome, and their events were dropped: subscribe again (events may have been missed)", what)
	})
}
