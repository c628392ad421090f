// Package counter is the smallest useful actor: a durable count with an
// action that changes it and a query that reads it.
package counter

import "github.com/rivet-go/rivet"

// State is the counter's durable state.
type State struct {
	Count int `json:"count"`
}

// Actor is the "counter" actor: increment(by) returns the new count;
// getCount returns it.
var Actor = rivet.Actor[State]{
	Name: "counter",
	Actions: rivet.Actions[State]{
		"increment": rivet.Action(func(c *rivet.ActionCtx[State], by int) (int, error) {
			c.State.Count += by
			return c.State.Count, nil
		}),
		"getCount": rivet.Query(func(c *rivet.ActionCtx[State]) (int, error) {
			return c.State.Count, nil
		}),
	},
}
