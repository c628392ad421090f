package runtime

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// RunningAction is an action running now, for a stop that it holds up.
type RunningAction struct {
	Ref    Ref
	Action string
	// Since is when its call reached this node.
	Since time.Time
}

func (r RunningAction) String() string {
	return fmt.Sprintf("%s %s %s (running %s)", r.Ref.Name, keyString(r.Ref.Key), r.Action, time.Since(r.Since).Round(time.Millisecond))
}

// runningEntry is an action running in an actor's turn (setAction).
type runningEntry struct {
	token  uint64
	action string
	since  time.Time
}

// setAction records that a turn of the actor runs action, whose call
// reached the node at since, and returns the token that endAction takes
// to forget it. The slice is reused: no allocation once it has grown.
func (a *activation) setAction(action string, since time.Time) uint64 {
	a.actionMu.Lock()
	defer a.actionMu.Unlock()
	a.actionToken++
	a.actions = append(a.actions, runningEntry{a.actionToken, action, since})
	return a.actionToken
}

// endAction forgets the action setAction recorded under token.
func (a *activation) endAction(token uint64) {
	a.actionMu.Lock()
	defer a.actionMu.Unlock()
	for i, e := range a.actions {
		if e.token == token {
			a.actions = slices.Delete(a.actions, i, i+1)
			return
		}
	}
}

// RunningActions returns up to limit of the actions running now in the
// actors in memory, those running longest first, and how many there are
// in all: a stop whose deadline came with calls still running names what
// held it (an action that ignores its context).
func (h *Host) RunningActions(limit int) (longest []RunningAction, total int) {
	h.mu.Lock()
	acts := make([]*activation, 0, len(h.actors)+len(h.retiring))
	for _, a := range h.actors {
		acts = append(acts, a)
	}
	for _, a := range h.retiring {
		acts = append(acts, a)
	}
	h.mu.Unlock()
	var all []RunningAction
	for _, a := range acts {
		a.actionMu.Lock()
		for _, e := range a.actions {
			all = append(all, RunningAction{Ref: a.ref, Action: e.action, Since: e.since})
		}
		a.actionMu.Unlock()
	}
	slices.SortFunc(all, func(x, y RunningAction) int { return cmp.Compare(x.Since.UnixNano(), y.Since.UnixNano()) })
	return all[:min(limit, len(all))], len(all)
}
