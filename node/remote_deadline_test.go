package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/testactors"
)

// An actor's call to an actor of another node that gets no answer before
// the caller's deadline says which actor, on which node, it waited for:
// it said only "context deadline exceeded", as if the calling action had
// been slow itself.
func TestACallToAnotherNodeThatRunsOutOfTimeNamesTheActor(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	holder := rivet.Actor[testactors.HubState]{
		Name: "holder",
		Actions: rivet.Actions[testactors.HubState]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (string, error) {
				<-release // whatever its context says
				return "held", nil
			}),
		},
	}
	caller := rivet.Actor[testactors.HubState]{
		Name: "caller",
		Actions: rivet.Actions[testactors.HubState]{
			"callWithin": rivet.Action2(func(c *rivet.ActionCtx[testactors.HubState], key string, ms int) (string, error) {
				ctx, cancel := context.WithTimeout(c.Context(), time.Duration(ms)*time.Millisecond)
				defer cancel()
				_, err := c.Client().GetOrCreate("holder", key).Call(ctx, "hold")
				if err == nil {
					return "", errors.New("hold answered")
				}
				return fmt.Sprintf("%v|%s", errors.Is(err, rivet.ErrTimeout), err), nil
			}),
		},
	}
	reg, err := rivet.Setup(holder, caller)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/remote-deadline/")
	callerKey := keysOn(na, "caller", "caller", 1)[0]
	holderKey := keysOn(nb, "holder", "holder", 1)[0]
	c, err := client.New(na.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg, err := rivet.Call[string](ctx, c.GetOrCreate("caller", callerKey), "callWithin", holderKey, 300)
	if err != nil {
		t.Fatal(err)
	}
	want := `no answer from holder ["` + holderKey + `"] on node ` + nb.ID()
	// "true|": an ErrTimeout (DEADLINE_EXCEEDED), as before.
	if !strings.HasPrefix(msg, "true|") || !strings.Contains(msg, want) || !strings.Contains(msg, "before the caller's deadline") {
		t.Fatalf("the call's error: %q, want it to say %q", msg, want)
	}
}
