package runtime_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/testactors"
	"github.com/rivet-go/rivet/runtime"
)

// Two calls one turn makes at once, which both call back into its actor,
// take turns there: the second waits until the first one's turn ended,
// while a call nested in the first one's turn re-enters it. Both used to
// run on the actor's state at the same time (sharing the chain was all it
// took to re-enter), and one's read-modify-write lost the other's.
func TestSiblingReentrantCallsTakeTurns(t *testing.T) {
	p := testactors.NewHubProbe()
	e := newEnv(t, counterReg(t, testactors.Hub(p), testactors.Spoke()), func(c *runtime.Config) { c.ActionTimeout = 20 * time.Second })
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
	first := waitEntered(t, p)
	// The other spoke's bump waits for the gate (a call that came from
	// the outer turn, not from the first bump's turn).
	deadline := time.Now().Add(10 * time.Second)
	for e.host.GateWaiters(runtime.Ref{Name: "hub", Key: []string{"h"}}) != 1 {
		select {
		case s := <-p.Entered:
			t.Fatalf("the bump from %s entered the hub while the one from %s was inside", s, first)
		case r := <-done:
			t.Fatalf("fanOut ended early: %d, %v", r.n, r.err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the second bump never waited for the hub's gate")
		}
	}
	p.Release <- struct{}{}
	second := waitEntered(t, p)
	if second == first {
		t.Fatalf("both bumps came from %s", first)
	}
	p.Release <- struct{}{}
	select {
	case r := <-done:
		if r.err != nil || r.n != 2 {
			t.Fatalf("fanOut = %d, %v; want 2 (each bump saw the other's change)", r.n, r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("fanOut did not end")
	}
	if most := p.Most(); most != 1 {
		t.Fatalf("%d bumps ran in the hub at once, want 1", most)
	}
	e.restart()
	if n := callInt(t, e.host, "hub", "h", "peek", false); n != 2 {
		t.Fatalf("stored n = %d, want 2", n)
	}
}

func waitEntered(t *testing.T, p *testactors.HubProbe) string {
	t.Helper()
	select {
	case s := <-p.Entered:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no bump entered the hub")
		return ""
	}
}

var deep = rivet.Actor[testactors.HubState]{
	Name: "deep",
	Actions: rivet.Actions[testactors.HubState]{
		"down": rivet.Action(func(c *rivet.ActionCtx[testactors.HubState], n int) (int, error) {
			c.State.N = n
			return rivet.Call[int](c.Context(), c.Client().Get("deep", c.Key()...), "down", n+1)
		}),
		"peek": rivet.Query(func(c *rivet.ActionCtx[testactors.HubState]) (int, error) { return c.State.N, nil }),
	},
}

// An actor that calls itself without end is stopped by the chain's depth,
// not by its deadline, and what its turns changed is discarded.
func TestACallChainHasADepthLimit(t *testing.T) {
	t.Parallel()
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

// tine's slow holds its actor for a while, whatever its context says.
var tine = rivet.Actor[testactors.HubState]{
	Name: "tine",
	Actions: rivet.Actions[testactors.HubState]{
		"slow": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (int, error) {
			time.Sleep(2 * time.Second)
			return 0, nil
		}),
	},
}

// fork calls one tine twice at once.
var fork = rivet.Actor[testactors.HubState]{
	Name: "fork",
	Actions: rivet.Actions[testactors.HubState]{
		"two": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (int, error) {
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range errs {
				wg.Go(func() { _, errs[i] = c.Client().GetOrCreate("tine", "t").Call(c.Context(), "slow") })
			}
			wg.Wait()
			return 0, errors.Join(errs...)
		}),
	},
}

// A call that runs out of time waiting for an actor that another call of
// its own chain holds says so: the wait is the chain's, not a slow actor's.
func TestAWaitForAnotherCallOfTheChainSaysSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, fork, tine), func(c *runtime.Config) { c.ActionTimeout = 500 * time.Millisecond })
	_, err := call(t, e.host, "fork", "f", "two", true)
	if !errors.Is(err, rivet.ErrTimeout) || !strings.Contains(err.Error(), "another call of this call chain holds") {
		t.Fatalf("two = %v, want the second call's deadline, naming the chain", err)
	}
}
