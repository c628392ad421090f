package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

// An action that ran and failed because an actor it called was
// unavailable fails the same way whichever node its caller reached: a
// client that called through a node other than the owner's, or an actor
// on another node, sees what a client of the owner's node sees (the same
// code, outcome unknown, the action's own message), not that the hop to
// the owner broke off, which it did not.
func TestAnActionFailedOnAnUnavailableActorReadsTheSameThroughAnotherNode(t *testing.T) {
	type st struct{}
	const passedOn = "partition 3 of actor counter is not owned by node n2"
	relay := rivet.Actor[st]{
		Name: "relay",
		Actions: rivet.Actions[st]{
			"relay": rivet.Action(func(c *rivet.ActionCtx[st], _ string) (int, error) {
				// What a call to an actor whose partition is moving
				// answers, passed on.
				return 0, rivet.Errorf(rivet.ErrUnavailable, passedOn)
			}),
		},
	}
	// outer calls the relay given, and passes its error on.
	outer := rivet.Actor[st]{
		Name: "outer",
		Actions: rivet.Actions[st]{
			"outer": rivet.Action(func(c *rivet.ActionCtx[st], relayKey string) (int, error) {
				return rivet.Call[int](c.Context(), c.Client().GetOrCreate("relay", relayKey), "relay", "")
			}),
		},
	}
	reg, err := rivet.Setup(relay, outer)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/fwdunavail/")
	relayKey := keysOn(na, "relay", "relay", 1)[0]
	outerOnA := keysOn(na, "outer", "outer", 1)[0]
	outerOnB := keysOn(nb, "outer", "outer", 1)[0]
	ca := dial(t, na)
	cb := dial(t, nb)

	check := func(what string, err error, want string) {
		t.Helper()
		if !errors.Is(err, rivet.ErrUnavailable) || !rivet.OutcomeUnknown(err) {
			t.Errorf("%s: %v (outcome unknown %v), want UNAVAILABLE with its outcome unknown", what, err, rivet.OutcomeUnknown(err))
		}
		if strings.Contains(err.Error(), "broke off") {
			t.Errorf("%s: %v, says the hop to the owner broke off, which it did not", what, err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to say %q", what, err, want)
		}
	}
	call := func(c *client.Client, name, key, action, input string) error {
		_, err := rivet.Call[int](ctx, c.GetOrCreate(name, key), action, input)
		return err
	}

	direct := call(ca, "relay", relayKey, "relay", "")
	check("a client of the relay's node", direct, passedOn)
	check("a client of another node", call(cb, "relay", relayKey, "relay", ""), passedOn)

	local := call(ca, "outer", outerOnA, "outer", relayKey)
	check("an actor on the relay's node", local, passedOn)
	for _, c := range []struct {
		what string
		via  *client.Client
	}{{"an actor on another node", cb}, {"an actor on another node, called through the relay's node", ca}} {
		err := call(c.via, "outer", outerOnB, "outer", relayKey)
		check(c.what, err, passedOn)
		// The same words as the local call's, but for the outer
		// actor's key.
		if got, want := err.Error(), strings.ReplaceAll(local.Error(), outerOnA, outerOnB); got != want {
			t.Errorf("%s: %q, want what an actor on the relay's node gets: %q", c.what, got, want)
		}
	}
	if got := call(cb, "relay", relayKey, "relay", ""); got.Error() != direct.Error() {
		t.Errorf("a client of another node: %q, want what a client of the relay's node gets: %q", got, direct)
	}
}
