package cluster

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
)

// eventBuffer is how many events Events holds for a consumer that falls
// behind; past it the oldest are dropped. It covers a burst such as a
// whole rack restarting, not a consumer that never reads.
const eventBuffer = 256

// forgetAfter is how long Members keeps listing a dead or left member, so
// that an operator can see what happened recently. memberlist itself forgets
// it sooner and silently (after GossipToTheDeadTime).
const forgetAfter = time.Minute

// view is this member's picture of the cluster. memberlist's event
// callbacks write it; Cluster's readers copy from it. memberlist keeps no
// record of dead members and reports no states, hence this map.
//
// The callbacks run with memberlist's node lock held, on memberlist's
// goroutines, so they must not block and must not call back into
// memberlist: they only take mu and do non-blocking sends.
type view struct {
	log     *zap.Logger
	changes chan struct{} // capacity 1: one pending notification stands for all
	events  chan Event    // capacity eventBuffer, oldest dropped when full
	dropped atomic.Uint64 // events dropped from events

	mu      sync.Mutex
	members map[string]*entry // by member ID
	// frozen is set once memberlist is shut down. Its goroutines do not all
	// exit at Shutdown (a suspicion timer may still fire), and the view of a
	// stopped member should not move.
	frozen bool
}

// entry is one member in the view.
type entry struct {
	Member
	leaving bool      // the member gossiped the leaving mark: its next departure is StateLeft
	since   time.Time // when State last changed; dead and left entries are forgotten after forgetAfter
}

var _ memberlist.EventDelegate = (*view)(nil)

func newView(log *zap.Logger) *view {
	return &view{
		log:     log,
		changes: make(chan struct{}, 1),
		events:  make(chan Event, eventBuffer),
		members: make(map[string]*entry),
	}
}

func (v *view) NotifyJoin(n *memberlist.Node)   { v.apply(EventJoined, n) }
func (v *view) NotifyUpdate(n *memberlist.Node) { v.apply(EventUpdated, n) }
func (v *view) NotifyLeave(n *memberlist.Node)  { v.apply(EventLeft, n) }

func (v *view) apply(kind EventKind, n *memberlist.Node) {
	wm := v.decodeMeta(n)
	now := time.Now()

	v.mu.Lock()
	defer v.mu.Unlock()
	if v.frozen {
		return
	}
	e, known := v.members[n.Name]
	if !known {
		e = &entry{}
		v.members[n.Name] = e
	}
	before := e.Member
	e.ID, e.GossipAddr, e.Meta, e.leaving = n.Name, n.Address(), wm.Meta, wm.Leaving
	switch kind {
	case EventJoined:
		e.State, e.since = StateAlive, now
	case EventUpdated:
		if !known || before.State != StateAlive {
			// memberlist sends updates only for members it holds alive,
			// but the view may have forgotten one that was dead for long.
			kind, e.State, e.since = EventJoined, StateAlive, now
		} else if e.Member == before {
			// Only the leaving mark changed: nothing a reader can see.
			return
		}
	case EventLeft:
		// memberlist's Node.State is not filled in (v0.7.0), so the mark
		// is the only way to tell a graceful leave from a failure.
		e.State = StateDead
		if e.leaving {
			e.State = StateLeft
		}
		e.since = now
	}
	v.forget(now)
	v.emit(Event{Kind: kind, Member: e.Member})
	select {
	case v.changes <- struct{}{}:
	default: // a notification is pending already; the reader will see this change too
	}
}

func (v *view) decodeMeta(n *memberlist.Node) wireMeta {
	var wm wireMeta
	if len(n.Meta) == 0 {
		return wm
	}
	if err := json.Unmarshal(n.Meta, &wm); err != nil {
		v.log.Warn("undecodable member metadata; is it a rivet node?",
			zap.String("member", n.Name), zap.String("addr", n.Address()), zap.Error(err))
		return wireMeta{}
	}
	return wm
}

// emit queues ev, dropping the oldest queued event if the buffer is full.
// v.mu is held, so emits do not race with each other; the consumer may be
// receiving concurrently, which can only make room.
func (v *view) emit(ev Event) {
	select {
	case v.events <- ev:
		return
	default:
	}
	select {
	case <-v.events:
		v.dropped.Add(1)
	default:
	}
	select {
	case v.events <- ev:
	default:
		v.dropped.Add(1) // unreachable: only emit sends, and it just made room
	}
}

// forget drops the dead and left members that have been gone for
// forgetAfter. v.mu is held.
func (v *view) forget(now time.Time) {
	for id, e := range v.members {
		if e.State != StateAlive && now.Sub(e.since) > forgetAfter {
			delete(v.members, id)
		}
	}
}

func (v *view) freeze() {
	v.mu.Lock()
	v.frozen = true
	v.mu.Unlock()
}

// snapshot returns copies of the members that keep says to, sorted by ID.
func (v *view) snapshot(keep func(*entry) bool) []Member {
	v.mu.Lock()
	if !v.frozen {
		v.forget(time.Now())
	}
	ms := make([]Member, 0, len(v.members))
	for _, e := range v.members {
		if keep(e) {
			ms = append(ms, e.Member)
		}
	}
	v.mu.Unlock()
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return ms
}
