// Package rivet is what a user writes actors with: a name, a typed durable
// state, typed queues and actions, registered in a Registry that a node
// hosts (see package node, and cmd/node for the reference node).
//
// An actor is addressed by (name, key). Each actor processes one turn (an
// action) at a time, so its state needs no locks. A state change is durable
// before the action's reply leaves the node: a reply the caller has seen
// is never lost, even if the node is killed right after.
//
//	type CounterState struct{ Count int `json:"count"` }
//
//	var Counter = rivet.Actor[CounterState]{
//		Name: "counter",
//		Actions: rivet.Actions[CounterState]{
//			"increment": rivet.Action(func(c *rivet.ActionCtx[CounterState], by int) (int, error) {
//				c.State.Count += by
//				return c.State.Count, nil
//			}),
//			"getCount": rivet.Query(func(c *rivet.ActionCtx[CounterState]) (int, error) {
//				return c.State.Count, nil
//			}),
//		},
//	}
//
// Errors that callers test for are the sentinels of this package (ErrNotFound,
// ErrUnknownAction, ...), matched with errors.Is on both sides of the wire:
// the Go client turns gRPC status codes back into them. An action returns
// them as an *Error (Errorf, UserError): a bare sentinel it returns reaches
// callers as ErrInternal. In a workflow, the
// *workflow.RecordedError of a step's failure (TryStep, Try, a JoinError,
// a RaceError) matches the sentinel its error matched, live and on replay; an error of a
// type of the workflow's own that wraps none of them matches none.
package rivet
