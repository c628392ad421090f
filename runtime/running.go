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

// setAction records that the actor's turn runs action, whose call reached
// the node at since ("" when it returned), and returns what it replaces:
// the action it re-entered, to be put back once it returns.
func (a *activation) setAction(action string, since time.Time) (prev string, prevSince time.Time) {
	a.actionMu.Lock()
	prev, prevSince = a.action, a.actionSince
	a.action, a.actionSince = action, since
	a.actionMu.Unlock()
	return prev, prevSince
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
		if a.action != "" {
			all = append(all, RunningAction{Ref: a.ref, Action: a.action, Since: a.actionSince})
		}
		a.actionMu.Unlock()
	}
	slices.SortFunc(all, func(x, y RunningAction) int { return cmp.Compare(x.Since.UnixNano(), y.Since.UnixNano()) })
	return all[:min(limit, len(all))], len(all)
}
