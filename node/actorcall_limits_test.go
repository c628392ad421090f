package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// passOn's call and send pass a payload of N bytes to the target actor,
// and answer the error they got.
type passOnArgs struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

var passOn = rivet.Actor[noState]{
	Name: "passon",
	Actions: rivet.Actions[noState]{
		"call": rivet.QueryArg(func(c *rivet.ActionCtx[noState], a passOnArgs) (int, error) {
			// Arguments of a.N bytes: the JSON array of one string.
			return rivet.Call[int](c.Context(), c.Client().GetOrCreate("sink", a.Key), "take", strings.Repeat("a", a.N-4))
		}),
		"send": rivet.QueryArg(func(c *rivet.ActionCtx[noState], a passOnArgs) (int, error) {
			// A body of a.N bytes: a JSON string.
			_, err := rivet.Enqueue(c.Context(), c.Client().GetOrCreate("sink", a.Key), "q", strings.Repeat("a", a.N-2))
			return 0, err
		}),
	},
}

var sink = rivet.Actor[noState]{
	Name:   "sink",
	Queues: rivet.Queues{"q": rivet.QueueOf[string](), "never": rivet.QueueOf[int]()},
	Run: func(c *workflow.Ctx[noState]) error {
		_, err := workflow.Next[int](c, "wait", workflow.NextOptions{Names: []string{"never"}})
		return err
	},
	Actions: rivet.Actions[noState]{
		"take": rivet.QueryArg(func(c *rivet.ActionCtx[noState], s string) (int, error) { return len(s), nil }),
	},
}

// An actor's call or send to another actor with a payload over its limit
// fails the same way whether the other actor is on the caller's node or on
// another: with the words a client's call gets. The arguments of a call
// to an actor of the same node had no limit at all, so that a call that
// worked in a test of one node failed in a cluster, once the actors were
// apart; a message over its limit was worded apart.
func TestAnActorsOversizedCallFailsAlikeWhereverItsActorIs(t *testing.T) {
	reg, err := rivet.Setup(passOn, sink)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/actorcall-limits/")
	from := dial(t, na).GetOrCreate("passon", keysOn(na, "passon", "p", 1)[0])
	here, there := keysOn(na, "sink", "s", 1)[0], keysOn(nb, "sink", "s", 1)[0]
	for _, c := range []struct {
		action string
		limit  int
		want   string
	}{
		{"call", 4 << 20, "action arguments too large: 4194305 bytes (4.0 MiB), the limit is 4194304 bytes (4.0 MiB)"},
		{"send", 64 << 10, "message body too large: 65537 bytes (64.0 KiB), the limit is 65536 bytes (64.0 KiB)"},
	} {
		for _, at := range []struct{ where, key string }{{"on its node", here}, {"on another node", there}} {
			if _, err := rivet.Call[int](ctx, from, c.action, passOnArgs{Key: at.key, N: c.limit}); err != nil {
				t.Errorf("%s at the limit to an actor %s: %v", c.action, at.where, err)
			}
			_, err := rivet.Call[int](ctx, from, c.action, passOnArgs{Key: at.key, N: c.limit + 1})
			if !errors.Is(err, rivet.ErrTooLarge) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s over the limit to an actor %s: %v; want ErrTooLarge, %q", c.action, at.where, err, c.want)
			}
		}
	}
}
