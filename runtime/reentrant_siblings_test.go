package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
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
	if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "257 calls deep, the limit is 256") {
		t.Fatalf("endless recursion: %v, want the chain's depth limit (256)", err)
	}
	if n := callInt(t, e.host, "deep", "d", "peek", false); n != 0 {
		t.Fatalf("n = %d after the failed chain, want 0", n)
	}
}

// Config.MaxCallDepth sets the chain's depth limit (Dapr's reentrancy has
// its maxStackDepth): an application whose chains are shallow can stop a
// runaway one early.
func TestACallChainDepthLimitIsConfigured(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, deep), func(c *runtime.Config) { c.ActionTimeout = time.Minute; c.MaxCallDepth = 8 })
	_, err := call(t, e.host, "deep", "d", "down", true, 0)
	if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "9 calls deep, the limit is 8") {
		t.Fatalf("endless recursion: %v, want the chain's depth limit (8)", err)
	}
	if n := callInt(t, e.host, "deep", "d", "peek", false); n != 0 {
		t.Fatalf("n = %d after the failed chain, want 0", n)
	}
}

// chainProbe orders the two calls of fork's turn: the first holds tine
// (entered) until the second's wait for it is over (waited). Left to the
// scheduler, either call could be the one that waits.
type chainProbe struct {
	entered chan struct{}
	waited  chan struct{}
}

func newChainProbe() *chainProbe {
	return &chainProbe{entered: make(chan struct{}, 1), waited: make(chan struct{})}
}

// tine's slow holds its actor until the other call's wait for it ended,
// whatever its context says: released at its own deadline, the gate could
// be taken by the waiter before it noticed that deadline.
func tine(p *chainProbe) rivet.Actor[testactors.HubState] {
	return rivet.Actor[testactors.HubState]{
		Name: "tine",
		Actions: rivet.Actions[testactors.HubState]{
			"slow": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (int, error) {
				p.entered <- struct{}{}
				select {
				case <-p.waited:
				case <-time.After(20 * time.Second):
					return 0, rivet.Errorf(rivet.ErrFailedPrecondition, "the waiting call never returned")
				}
				return 0, nil
			}),
		},
	}
}

// waiterDeadline is the waiting call's own deadline: it is not what is
// asserted (only that the wait ends there, naming the chain), but it must
// outlast a loaded machine's scheduling delays until the wait begins, or the
// call could run out of time before it reaches the gate.
const waiterDeadline = 2 * time.Second

// fork calls one tine twice at once: the second call starts once the
// first holds tine, and two returns the second's error by itself. Both
// errors joined, the caller would get the first rivet error of the join
// alone (actionError), the holder's when it came first.
func fork(p *chainProbe) rivet.Actor[testactors.HubState] {
	return rivet.Actor[testactors.HubState]{
		Name: "fork",
		Actions: rivet.Actions[testactors.HubState]{
			"two": rivet.Action0(func(c *rivet.ActionCtx[testactors.HubState]) (int, error) {
				tn := c.Client().GetOrCreate("tine", "t")
				held := make(chan error, 1)
				go func() {
					_, err := tn.Call(c.Context(), "slow")
					held <- err
				}()
				select {
				case <-p.entered:
				case err := <-held:
					return 0, rivet.Errorf(rivet.ErrFailedPrecondition, "the first call ended before it held tine: %v", err)
				case <-c.Context().Done():
					return 0, rivet.Errorf(rivet.ErrFailedPrecondition, "the first call never held tine")
				}
				wctx, cancel := context.WithTimeout(c.Context(), waiterDeadline)
				defer cancel()
				_, waitErr := tn.Call(wctx, "slow")
				close(p.waited)
				if err := <-held; err != nil {
					return 0, rivet.Errorf(rivet.ErrFailedPrecondition, "the call holding tine failed: %v (the waiting one: %v)", err, waitErr)
				}
				return 0, waitErr
			}),
		},
	}
}

// A call that runs out of time waiting for an actor that another call of
// its own chain holds says so: the wait is the chain's, not a slow actor's.
func TestAWaitForAnotherCallOfTheChainSaysSo(t *testing.T) {
	t.Parallel()
	p := newChainProbe()
	// The action timeout bounds the setup (two actors created) and the
	// holding call, not the wait, which ends at the waiter's own deadline.
	e := newEnv(t, counterReg(t, fork(p), tine(p)), func(c *runtime.Config) { c.ActionTimeout = 20 * time.Second })
	_, err := call(t, e.host, "fork", "f", "two", true)
	if !errors.Is(err, rivet.ErrTimeout) || !strings.Contains(err.Error(), "another call of this call chain holds") {
		t.Fatalf("two = %v, want the second call's deadline, naming the chain", err)
	}
}
