package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

type hubState struct {
	N int `json:"n"`
}

// The hub's bump lets a test hold it inside the actor: it reports itself
// on hubEntered and waits on hubRelease.
var (
	hubEntered = make(chan string, 4)
	hubRelease = make(chan struct{}, 4)
	hubInside  atomic.Int32
	hubMost    atomic.Int32
)

// hub fans a call out to spokes at once, from one turn; each spoke calls
// the hub back (bump), and bump calls its spoke, which calls the hub again
// (peek): a call nested in a re-entrant turn.
var hub = rivet.Actor[hubState]{
	Name: "hub",
	Actions: rivet.Actions[hubState]{
		"fanOut": rivet.Action(func(c *rivet.ActionCtx[hubState], spokes []string) (int, error) {
			var wg sync.WaitGroup
			errs := make([]error, len(spokes))
			for i, s := range spokes {
				wg.Go(func() {
					_, errs[i] = c.Client().GetOrCreate("spoke", s).Call(c.Context(), "poke", c.Key()[0])
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return 0, err
			}
			return c.State.N, nil
		}),
		"bump": rivet.Action(func(c *rivet.ActionCtx[hubState], spoke string) (int, error) {
			n := hubInside.Add(1)
			defer hubInside.Add(-1)
			for {
				most := hubMost.Load()
				if n <= most || hubMost.CompareAndSwap(most, n) {
					break
				}
			}
			seen, err := rivet.Call[int](c.Context(), c.Client().Get("spoke", spoke), "echo", c.Key()[0])
			if err != nil {
				return 0, fmt.Errorf("nested call: %w", err)
			}
			hubEntered <- spoke
			select {
			case <-hubRelease:
			case <-c.Context().Done():
				return 0, c.Context().Err()
			}
			c.State.N = seen + 1 // a read-modify-write: two at once would lose one
			return c.State.N, nil
		}),
		"peek": rivet.Query(func(c *rivet.ActionCtx[hubState]) (int, error) { return c.State.N, nil }),
	},
}

var spoke = rivet.Actor[hubState]{
	Name: "spoke",
	Actions: rivet.Actions[hubState]{
		"poke": rivet.Action(func(c *rivet.ActionCtx[hubState], hubKey string) (int, error) {
			return rivet.Call[int](c.Context(), c.Client().Get("hub", hubKey), "bump", c.Key()[0])
		}),
		"echo": rivet.Action(func(c *rivet.ActionCtx[hubState], hubKey string) (int, error) {
			return rivet.Call[int](c.Context(), c.Client().Get("hub", hubKey), "peek")
		}),
	},
}

// Two calls one turn makes at once, which both call back into its actor,
// take turns there: the second waits until the first one's turn ended,
// while a call nested in the first one's turn re-enters it. Both used to
// run on the actor's state at the same time (sharing the chain was all it
// took to re-enter), and one's read-modify-write lost the other's.
func TestSiblingReentrantCallsTakeTurns(t *testing.T) {
	e := newEnv(t, counterReg(t, hub, spoke), func(c *runtime.Config) { c.ActionTimeout = 20 * time.Second })
	hubInside.Store(0)
	hubMost.Store(0)
	if n := callInt(t, e.host, "hub", "h", "peek", true); n != 0 {
		t.Fatalf("hub starts at %d", n)
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		raw, err := call(t, e.host, "hub", "h", "fanOut", false, []string{"s1", "s2"})
		var n int
		if err == nil {
			err = json.Unmarshal(raw, &n)
		}
		done <- result{n, err}
	}()
	first := waitEntered(t)
	// The other spoke's bump waits for the gate (a call that came from
	// the outer turn, not from the first bump's turn).
	deadline := time.Now().Add(10 * time.Second)
	for e.host.GateWaiters(runtime.Ref{Name: "hub", Key: []string{"h"}}) != 1 {
		select {
		case s := <-hubEntered:
			t.Fatalf("the bump from %s entered the hub while the one from %s was inside", s, first)
		case r := <-done:
			t.Fatalf("fanOut ended early: %d, %v", r.n, r.err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the second bump never waited for the hub's gate")
		}
	}
	hubRelease <- struct{}{}
	second := waitEntered(t)
	if second == first {
		t.Fatalf("both bumps came from %s", first)
	}
	hubRelease <- struct{}{}
	select {
	case r := <-done:
		if r.err != nil || r.n != 2 {
			t.Fatalf("fanOut = %d, %v; want 2 (each bump saw the other's change)", r.n, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("fanOut did not end")
	}
	if most := hubMost.Load(); most != 1 {
		t.Fatalf("%d bumps ran in the hub at once, want 1", most)
	}
	e.restart()
	if n := callInt(t, e.host, "hub", "h", "peek", false); n != 2 {
		t.Fatalf("stored n = %d, want 2", n)
	}
}

func waitEntered(t *testing.T) string {
	t.Helper()
	select {
	case s := <-hubEntered:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no bump entered the hub")
		return ""
	}
}

var deep = rivet.Actor[hubState]{
	Name: "deep",
	Actions: rivet.Actions[hubState]{
		"down": rivet.Action(func(c *rivet.ActionCtx[hubState], n int) (int, error) {
			c.State.N = n
			return rivet.Call[int](c.Context(), c.Client().Get("deep", c.Key()...), "down", n+1)
		}),
		"peek": rivet.Query(func(c *rivet.ActionCtx[hubState]) (int, error) { return c.State.N, nil }),
	},
}

// An actor that calls itself without end is stopped by the chain's depth,
// not by its deadline, and what its turns changed is discarded.
func TestACallChainHasADepthLimit(t *testing.T) {
	e := newEnv(t, counterReg(t, deep), func(c *runtime.Config) { c.ActionTimeout = time.Minute })
	if n := callInt(t, e.host, "deep", "d", "peek", true); n != 0 {
		t.Fatalf("deep starts at %d", n)
	}
	_, err := call(t, e.host, "deep", "d", "down", false, 0)
	if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "calls deep") {
		t.Fatalf("endless recursion: %v, want the chain's depth limit", err)
	}
	if n := callInt(t, e.host, "deep", "d", "peek", false); n != 0 {
		t.Fatalf("n = %d after the failed chain, want 0", n)
	}
}
