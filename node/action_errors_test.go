package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/node/nodetest"
)

// An action that passes on an UNAVAILABLE (as one does that returns what a
// call of its own to a moving actor got) ran: the client must not take it
// for the node's "this request did not run" and run the action again,
// which would repeat what it did to other actors. It reaches the caller
// as UNAVAILABLE whose outcome is unknown.
func TestAnUnavailablePassedOnByAnActionIsNotRetried(t *testing.T) {
	type st struct{}
	relay := rivet.Actor[st]{
		Name: "relay",
		Actions: rivet.Actions[st]{
			"relay": rivet.Action(func(c *rivet.ActionCtx[st], key string) (int, error) {
				if _, err := rivet.Call[int](c.Context(), c.Client().GetOrCreate("counter", key), "increment", 1); err != nil {
					return 0, err
				}
				// What a call to an actor whose partition is moving
				// answers, passed on.
				return 0, rivet.Errorf(rivet.ErrUnavailable, "partition 3 of actor counter is not owned by node n2")
			}),
			"relayNotSent": rivet.Action(func(c *rivet.ActionCtx[st], key string) (int, error) {
				if _, err := rivet.Call[int](c.Context(), c.Client().GetOrCreate("counter", key), "increment", 1); err != nil {
					return 0, err
				}
				// What a call to an actor whose owner cannot be dialed
				// gets (its text reads as a request never sent), passed on.
				return 0, rpcerr.FromStatus(status.New(codes.Unavailable,
					`peer: request not sent: connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`))
			}),
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := nodetest.Start(t, t.TempDir(), counter.Actor, relay)
	for _, action := range []string{"relay", "relayNotSent"} {
		_, err := rivet.Call[int](ctx, c.Actor("relay", "r"), action, action)
		if !errors.Is(err, rivet.ErrUnavailable) || !rivet.OutcomeUnknown(err) {
			t.Errorf("%s's error: %v (outcome unknown %v), want UNAVAILABLE with its outcome unknown", action, err, rivet.OutcomeUnknown(err))
		}
		if n, err := rivet.Call[int](ctx, c.Get("counter", action), "getCount"); err != nil || n != 1 {
			t.Fatalf("one call of %s incremented its counter %d times (%v), want once", action, n, err)
		}
	}
}
