package runtime

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// hotWindow is the window over which turnLoad counts an actor's recent
// turns: HotActors' rate is over the last one or two of them.
const hotWindow = 10 * time.Second

// turnLoad counts an activation's turns, so that an operator can find the
// actor a load goes to (HotActors; rivetctl hot): an on-call
// trial saw a node's calls slow down and its metrics name the actor type,
// and nothing named the key. In all since it came into memory, and per
// window of hotWindow (this one's and the one before) for a recent rate. A
// mutex rather than atomics: turns beside a step's body (sends, queries)
// run at once, and the window's turn over must not lose counts.
type turnLoad struct {
	mu        sync.Mutex
	since     time.Time // the first turn
	epoch     int64     // cur's window, unix nanoseconds / hotWindow
	cur, prev uint64
	turns     uint64
	waited    time.Duration // the turns' waits for the gate, all told
}

// add counts a turn that began at now, after waiting for the gate since
// waitBegan (zero: its wait is not known).
func (l *turnLoad) add(now, waitBegan time.Time) {
	var wait time.Duration
	if !waitBegan.IsZero() {
		wait = now.Sub(waitBegan)
	}
	e := now.UnixNano() / int64(hotWindow)
	l.mu.Lock()
	switch {
	case l.turns == 0:
		l.since = now
	case e <= l.epoch:
		// This window (or, by a few microseconds, the one before: turns
		// beside a step's body begin at once, and take the lock in any
		// order).
	case e == l.epoch+1:
		l.prev, l.cur = l.cur, 0
	default:
		l.prev, l.cur = 0, 0
	}
	l.epoch = max(l.epoch, e)
	l.cur++
	l.turns++
	l.waited += wait
	l.mu.Unlock()
}

// read returns the turns per second over the last one or two windows
// (the one now, from its start, and the whole one before it), and the
// totals since the first turn.
func (l *turnLoad) read(now time.Time) (perSecond float64, turns uint64, waited time.Duration, since time.Time) {
	e := now.UnixNano() / int64(hotWindow)
	l.mu.Lock()
	defer l.mu.Unlock()
	var recent uint64
	switch {
	case e <= l.epoch:
		// This window, or (a turn that began after now: HotActors
		// reads many actors against one now) the next.
		recent = l.cur + l.prev
	case e == l.epoch+1:
		recent = l.cur
	}
	span := hotWindow + time.Duration(now.UnixNano()%int64(hotWindow))
	if !l.since.IsZero() && now.Sub(l.since) < span {
		// In memory for less than the span: its rate over its time.
		span = max(now.Sub(l.since), time.Second)
	}
	return float64(recent) / span.Seconds(), l.turns, l.waited, l.since
}

// HotActor is an actor in memory and the load on it (Host.HotActors).
type HotActor struct {
	Ref       Ref
	Partition uint32
	// TurnsPerSecond is its turns (calls, sends, steps, receives) per
	// second over the last 10 to 20 s.
	TurnsPerSecond float64
	// Turns and Waited are its turns since it came into memory (Since),
	// and how long they waited for its gate all told (the turns before
	// them: contention; a workflow's steps and receives count their waits
	// where the Host has a WaitObserver, as a node's always does).
	Turns  uint64
	Waited time.Duration
	Since  time.Time
	// Waiting is the turns waiting for its gate now.
	Waiting int
}

// HotActors returns up to limit actors in memory on this node with the
// most turns per second lately, the busiest first (ties: the most waiting
// turns, then the longest waits): where a node's load goes, by key, which
// the metrics do not say (they are labelled by actor type only).
func (h *Host) HotActors(limit int) []HotActor {
	if limit <= 0 {
		return nil
	}
	h.mu.Lock()
	all := make([]*activation, 0, len(h.actors))
	for _, a := range h.actors {
		all = append(all, a)
	}
	h.mu.Unlock()
	now := time.Now()
	out := make([]HotActor, 0, min(limit, len(all)))
	for _, a := range all {
		rate, turns, waited, since := a.hot.read(now)
		if turns == 0 {
			continue
		}
		a.gate.mu.Lock()
		waiting := len(a.gate.waiters)
		a.gate.mu.Unlock()
		out = append(out, HotActor{Ref: a.ref, Partition: a.part, TurnsPerSecond: rate, Turns: turns, Waited: waited, Since: since, Waiting: waiting})
	}
	slices.SortFunc(out, func(x, y HotActor) int {
		return cmp.Or(cmp.Compare(y.TurnsPerSecond, x.TurnsPerSecond), cmp.Compare(y.Waiting, x.Waiting), cmp.Compare(y.Waited, x.Waited))
	})
	return out[:min(limit, len(out))]
}
