package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/node/nodetest"
	"github.com/rivet-go/rivet/workflow"
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

// A test node (nodetest) logs nothing, so it tells the caller what an
// action's internal error says: "internal error (the node's log has the
// cause)" left a test nothing to read (a user trial).
func TestATestNodeSendsAnInternalErrorsText(t *testing.T) {
	type st struct{}
	broken := rivet.Actor[st]{
		Name: "broken",
		Actions: rivet.Actions[st]{
			"fail": rivet.Action(func(c *rivet.ActionCtx[st], _ int) (int, error) {
				return 0, errors.New("the ledger file is missing")
			}),
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := nodetest.Start(t, t.TempDir(), broken)
	_, err := rivet.Call[int](ctx, c.GetOrCreate("broken", "b"), "fail", 1)
	if !errors.Is(err, rivet.ErrInternal) || !strings.Contains(err.Error(), "the ledger file is missing") {
		t.Fatalf("error: %v; want an internal error with the action's text", err)
	}
}

type tallyState struct {
	N int `json:"n"`
}

// A result that does not decode into what rivet.Call asked for comes after
// the action ran: a workflow step that made the call fails at once
// (critical) rather than retry it, which ran the action again each time to
// the same mismatch (a user trial).
func TestAStepsCallWhoseResultDoesNotDecodeIsNotRetried(t *testing.T) {
	target := rivet.Actor[tallyState]{
		Name: "tally",
		Actions: rivet.Actions[tallyState]{
			"inc": rivet.Action(func(c *rivet.ActionCtx[tallyState], by int) (int, error) {
				c.State.N += by
				return c.State.N, nil
			}),
		},
	}
	caller := rivet.Actor[tallyState]{
		Name: "asker",
		Run: func(ctx *workflow.Ctx[tallyState]) error {
			return ctx.Step("ask", func(s *workflow.StepCtx[tallyState]) error {
				_, err := rivet.Call[string](s.Context(), s.Client().GetOrCreate("tally", "t"), "inc", 1)
				return err
			})
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, _ := nodetest.Start(t, t.TempDir(), target, caller)
	if _, err := c.Create(ctx, "asker", []string{"a"}, nil); err != nil {
		t.Fatal(err)
	}
	var h client.History
	waitUntil(t, "the workflow's failure", 30*time.Second, func() bool {
		var err error
		if h, err = c.Actor("asker", "a").History(ctx); err != nil {
			t.Fatal(err)
		}
		return h.WorkflowStatus == "failed"
	})
	if h.WorkflowStatus != "failed" || len(h.Entries) != 1 || h.Entries[0].Attempts != 1 || h.Entries[0].Failure != "critical" ||
		!strings.Contains(h.Entries[0].Error, "action inc ran, but its result does not decode into string") {
		t.Fatalf("history %+v; want the step failed critical after 1 attempt, saying the action ran", h)
	}
	if n, err := rivet.Call[int](ctx, c.Get("tally", "t"), "inc", 0); err != nil || n != 1 {
		t.Fatalf("the action ran %d times (%v), want once", n, err)
	}
}
