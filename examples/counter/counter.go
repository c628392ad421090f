// Package counter is the smallest useful actor: a durable count with an
// action that changes it, a query that reads it, and an event that tells
// subscribers of each change (Rivet's quickstart counter).
package counter

import (
	"math"

	"github.com/rivet-go/rivet"
)

// State is the counter's durable state.
type State struct {
	Count int `json:"count"`
}

// Actor is the "counter" actor: increment(by) returns the new count and
// broadcasts it as the event newCount; getCount returns it. An increment
// that would take the count past an int's range is refused
// (ErrInvalidArgument) and changes nothing: Go's addition would wrap
// around, to a count nobody made.
var Actor = rivet.Actor[State]{
	Name: "counter",
	Actions: rivet.Actions[State]{
		"increment": rivet.Action(func(c *rivet.ActionCtx[State], by int) (int, error) {
			if n := c.State.Count; by > 0 && n > math.MaxInt-by || by < 0 && n < math.MinInt-by {
				return 0, rivet.Errorf(rivet.ErrInvalidArgument, "increment by %d: the count %d would go past the limits of an int (%d to %d); it stays %d", by, n, math.MinInt, math.MaxInt, n)
			}
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
