package runtime_test

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// An action that edits the key it got from c.Key (sorting it, reusing it
// as a buffer), or a caller the key of the info GetOrCreate returned,
// changes its own copy, not the actor's identity: later calls, its
// scheduled calls and its own view of its key still address the actor it
// is.
func TestAnActionEditingItsKeyDoesNotChangeTheActor(t *testing.T) {
	t.Parallel()
	type st struct {
		N    int
		Seen []string
	}
	type view struct {
		N    int
		Key  []string
		Seen []string
	}
	a := rivet.Actor[st]{
		Name: "keyEdit",
		Actions: rivet.Actions[st]{
			"scramble": rivet.Action0(func(c *rivet.ActionCtx[st]) (bool, error) {
				k := c.Key()
				for i := range k {
					k[i] = "other"
				}
				_, err := c.Schedule().After(0, "tick")
				return true, err
			}),
			"tick": rivet.Action0(func(c *rivet.ActionCtx[st]) (bool, error) {
				c.State.N++
				c.State.Seen = c.Key()
				return true, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[st]) (view, error) {
				return view{N: c.State.N, Key: c.Key(), Seen: c.State.Seen}, nil
			}),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	info, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "keyEdit", Key: []string{"a"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	info.Ref.Key[0] = "info"
	if _, err := call(t, e.host, "keyEdit", "a", "scramble", false); err != nil {
		t.Fatal(err)
	}
	get := func() view {
		t.Helper()
		raw, err := call(t, e.host, "keyEdit", "a", "get", false)
		if err != nil {
			t.Fatal(err)
		}
		var v view
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := get(); !slices.Equal(v.Key, []string{"a"}) {
		t.Fatalf("after the edit the actor sees its key as %q, want [a]", v.Key)
	}
	deadline := time.Now().Add(10 * time.Second)
	v := get()
	for ; v.N == 0 && time.Now().Before(deadline); v = get() {
		time.Sleep(5 * time.Millisecond)
	}
	if v.N != 1 || !slices.Equal(v.Seen, []string{"a"}) {
		t.Fatalf("scheduled call: ran %d times seeing key %q, want once seeing [a]", v.N, v.Seen)
	}
	for _, k := range []string{"other", "info"} {
		if _, err := e.host.Get(ctx(t), runtime.Ref{Name: "keyEdit", Key: []string{k}}); !errors.Is(err, rivet.ErrNotFound) {
			t.Fatalf("Get of the key %s written over the actor's: %v, want ErrNotFound", k, err)
		}
	}
}

// The state Inspect returns is the caller's: editing it in place changes
// neither what the actor holds nor what a failed turn puts back.
func TestEditingInspectedStateDoesNotChangeTheActor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t), nil)
	if n := callInt(t, e.host, "counter", "k", "increment", true, 5); n != 5 {
		t.Fatalf("increment = %d", n)
	}
	ref := runtime.Ref{Name: "counter", Key: []string{"k"}}
	ins, err := e.host.Inspect(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if !ins.Active {
		t.Fatal("the actor is not in memory: the test reads the activation's state")
	}
	for i, c := range ins.State {
		if c == '5' {
			ins.State[i] = '7'
		}
	}
	// Fails (an overflow), so the turn puts the state back.
	if _, err := call(t, e.host, "counter", "k", "increment", false, math.MaxInt); err == nil {
		t.Fatal("an increment that overflows succeeded")
	}
	if n := callInt(t, e.host, "counter", "k", "getCount", false); n != 5 {
		t.Fatalf("count after a failed turn = %d, want 5", n)
	}
	if ins, err = e.host.Inspect(ctx(t), ref); err != nil || string(ins.State) != `{"count":5}` {
		t.Fatalf("Inspect: %s, %v; want {\"count\":5}", ins.State, err)
	}
}
