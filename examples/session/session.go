// Package session shows an actor's durable timers (rivet.Scheduler): a
// session that expires when nobody touched it for its time to live, as in
// Rivet's schedule and Orleans' reminders. The expiry is a stored call of
// the actor's own action, so it happens even if the node restarts, crashes
// or hands the actor to another node meanwhile.
package session

import (
	"time"

	"github.com/rivet-go/rivet"
)

// State is the session's durable state.
type State struct {
	Active bool `json:"active"`
	// Touches counts the touches; Expired, the expiries.
	Touches int `json:"touches"`
	Expired int `json:"expired"`
	// ExpiresAt is when the session expires unless touched (unix ms);
	// ExpiredAt, when it last expired.
	ExpiresAt int64 `json:"expiresAt"`
	ExpiredAt int64 `json:"expiredAt"`
	// Expiry is the id of the pending expire call.
	Expiry string `json:"expiry"`
}

// Actor is "sessionActor": touch(ttlMs) keeps the session active for ttlMs
// more; the scheduled expire ends it; getState returns the state.
var Actor = rivet.Actor[State]{
	Name: "sessionActor",
	Actions: rivet.Actions[State]{
		"touch": rivet.Action(func(c *rivet.ActionCtx[State], ttlMs int64) (State, error) {
			if ttlMs <= 0 {
				return State{}, rivet.Errorf(rivet.ErrInvalidArgument, "touch: ttlMs must be positive, got %d", ttlMs)
			}
			if c.State.Expiry != "" {
				// The pending expiry is replaced by a later one. (It may
				// be running right now: then it is gone already.)
				if _, err := c.Schedule().Cancel(c.State.Expiry); err != nil {
					return State{}, err
				}
			}
			id, err := c.Schedule().After(time.Duration(ttlMs)*time.Millisecond, "expire")
			if err != nil {
				return State{}, err
			}
			s, _ := c.Schedule().Get(id)
			c.State.Active, c.State.Expiry, c.State.ExpiresAt = true, id, s.At.UnixMilli()
			c.State.Touches++
			return *c.State, nil
		}),
		"expire": rivet.Action0(func(c *rivet.ActionCtx[State]) (State, error) {
			if f, ok := c.Fired(); !ok || f.ID != c.State.Expiry {
				// Called by a client, or a stale expiry: nothing to do.
				return *c.State, nil
			}
			c.State.Active, c.State.Expiry = false, ""
			c.State.Expired++
			c.State.ExpiredAt = time.Now().UnixMilli()
			return *c.State, nil
		}),
		"getState": rivet.Query(func(c *rivet.ActionCtx[State]) (State, error) { return *c.State, nil }),
	},
}
