package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

type seededState struct {
	Seed string `json:"seed"`
}

// seeded keeps its create input.
var seeded = rivet.Actor[seededState]{
	Name: "seeded",
	CreateState: func(in json.RawMessage) (seededState, error) {
		var s seededState
		err := json.Unmarshal(in, &s)
		return s, err
	},
	Actions: rivet.Actions[seededState]{
		"seed": rivet.Query(func(c *rivet.ActionCtx[seededState]) (string, error) { return c.State.Seed, nil }),
	},
}

// seedOutcome is what sower's sow action says of its create.
type seedOutcome struct {
	Result  rivet.CreateResult `json:"result"`
	Exists  bool               `json:"exists"`
	Invalid bool               `json:"invalid"`
}

type sowArgs struct {
	Key, Seed, IDKey string
}

// sower creates seeded actors with an input.
var sower = rivet.Actor[noState]{
	Name: "sower",
	Actions: rivet.Actions[noState]{
		"sow": rivet.Action(func(c *rivet.ActionCtx[noState], a sowArgs) (seedOutcome, error) {
			res, err := rivet.CreateWith(c.Context(), c.Client(), "seeded", []string{a.Key}, seededState{Seed: a.Seed}, rivet.CreateOptions{IdempotencyKey: a.IDKey})
			switch {
			case errors.Is(err, rivet.ErrAlreadyExists):
				return seedOutcome{Exists: true}, nil
			case errors.Is(err, rivet.ErrInvalidArgument):
				return seedOutcome{Invalid: true}, nil
			}
			return seedOutcome{Result: res}, err
		}),
	},
}

// An actor on node a creates an actor that node b owns, with an input
// (through a's Remote and the peer stream's Create): b's CreateState gets
// the input, the answer names b as the owner, a keyed create sent again is
// the first one's duplicate, the key with another input is
// INVALID_ARGUMENT, and an unkeyed one is ALREADY_EXISTS.
func TestAnActorCreatesAnActorOnAnotherNode(t *testing.T) {
	reg, err := rivet.Setup(seeded, sower)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/actorcreate/")
	c, err := client.New(na.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	from := c.GetOrCreate("sower", keysOn(na, "sower", "s", 1)[0])
	to := keysOn(nb, "seeded", "k", 1)[0]
	sow := func(a sowArgs) seedOutcome {
		t.Helper()
		out, err := rivet.Call[seedOutcome](ctx, from, "sow", a)
		if err != nil {
			t.Fatalf("sow %+v: %v", a, err)
		}
		return out
	}

	first := sow(sowArgs{Key: to, Seed: "wheat", IDKey: "sow-" + to})
	if r := first.Result; first.Exists || r.Duplicate || r.Name != "seeded" || len(r.Key) != 1 || r.Key[0] != to || r.Owner != nb.ID() || r.CreatedAt.IsZero() {
		t.Fatalf("first keyed create = %+v, want seeded [%s] created on %s", first, to, nb.ID())
	}
	if seed, err := rivet.CallQuery[string](ctx, c.Get("seeded", to), "seed"); err != nil || seed != "wheat" {
		t.Fatalf("the created actor's seed = %q, %v; want the create's input wheat", seed, err)
	}
	again := sow(sowArgs{Key: to, Seed: "wheat", IDKey: "sow-" + to})
	if !again.Result.Duplicate || !again.Result.CreatedAt.Equal(first.Result.CreatedAt) {
		t.Fatalf("the keyed create again = %+v, want the duplicate of %+v", again, first)
	}
	if other := sow(sowArgs{Key: to, Seed: "barley", IDKey: "sow-" + to}); !other.Invalid {
		t.Fatalf("the key with another input = %+v, want INVALID_ARGUMENT", other)
	}
	if seed, err := rivet.CallQuery[string](ctx, c.Get("seeded", to), "seed"); err != nil || seed != "wheat" {
		t.Fatalf("the actor's seed after the refused create = %q, %v; want wheat", seed, err)
	}
	if plain := sow(sowArgs{Key: to, Seed: "wheat"}); !plain.Exists {
		t.Fatalf("an unkeyed create of it = %+v, want ALREADY_EXISTS", plain)
	}
}
