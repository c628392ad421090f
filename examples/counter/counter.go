// Package counter is the smallest useful actor: a durable count with an
// action that changes it, a query that reads it, and an event that tells
// subscribers of each change (Rivet's quickstart counter).
package counter

import "github.com/rivet-go/rivet"

// State is the counter's durable state.
type State struct {
	Count int `json:"count"`
}

// Actor is the "counter" actor: increment(by) returns the new count and
// broadcasts it as the event newCount; getCount returns it.
var Actor = rivet.Actor[State]{
	Name: "counter",
	Actions: rivet.Actions[State]{
		"increment": rivet.Action(func(c *rivet.ActionCtx[State], by int) (int, error) {
			c.State.Count += by
			if err := c.Broadcast("newCount", c.State.Count); err != nil {
				return 0, err
			}
			return c.State.Count, nil
		}),
		"getCount": rivet.Query(func(c *rivet.ActionCtx[State]) (int, error) {
			return c.State.Count, nil
		}),
	},
	Events: rivet.Events{"newCount": rivet.EventOf[int]()},
}
