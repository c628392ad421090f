package runtime_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A graceful stop finishes the turns in flight, calls those turns make to
// actors of this node included: back into their own actor along their
// chain (A -> B -> A, B here too) and into an actor not in memory yet, and
// their sends and creates.
// The host refused them as new requests (UNAVAILABLE "node is stopping"),
// so a re-entrant call chain in flight at a SIGTERM failed, and its
// caller was told it may have run (a trial ported from Dapr, whose
// reentrant calls a drain lets finish). Calls of other callers are still
// refused.
func TestAStopLetsTheTurnsInFlightCallActorsOfTheirNode(t *testing.T) {
	t.Parallel()
	type st struct {
		N   int      `json:"n"`
		Log []string `json:"log"`
	}
	entered, proceed := make(chan struct{}), make(chan struct{})
	outer := rivet.Actor[st]{
		Name: "outer",
		Actions: rivet.Actions[st]{
			"go": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				c.State.Log = append(c.State.Log, "go")
				close(entered)
				<-proceed
				n, err := rivet.Call[int](c.Context(), c.Client().GetOrCreate("inner", "b"), "bounce", c.Key()[0])
				if err != nil {
					return 0, err
				}
				c.State.N += n
				if err := c.Client().GetOrCreate("box", "m").Send(c.Context(), "q", 7); err != nil {
					return 0, err
				}
				if _, err := rivet.Create(c.Context(), c.Client(), "box", []string{"new"}, nil); err != nil {
					return 0, err
				}
				return c.State.N, nil
			}),
			"back": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				c.State.Log = append(c.State.Log, "back")
				return 10, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[st]) (st, error) { return *c.State, nil }),
		},
	}
	inner := rivet.Actor[st]{
		Name: "inner",
		Actions: rivet.Actions[st]{
			"bounce": rivet.Action(func(c *rivet.ActionCtx[st], key string) (int, error) {
				n, err := rivet.Call[int](c.Context(), c.Client().GetOrCreate("outer", key), "back")
				if err != nil {
					return 0, err
				}
				c.State.N += n
				return n + 1, nil
			}),
		},
	}
	box := rivet.Actor[st]{
		Name:   "box",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[st]) error {
			msg, err := workflow.Next[int](ctx, "take")
			if err != nil {
				return err
			}
			return ctx.Step("keep", func(s *workflow.StepCtx[st]) error { s.State.N = msg.Body; return nil })
		},
		Actions: rivet.Actions[st]{
			"get": rivet.Query(func(c *rivet.ActionCtx[st]) (st, error) { return *c.State, nil }),
		},
	}
	e := newEnv(t, counterReg(t, outer, inner, box), nil)
	done := make(chan error, 1)
	go func() { _, err := call(t, e.host, "outer", "a", "go", true); done <- err }()
	<-entered
	stopped := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- e.host.Stop(sctx)
	}()
	// Stopping: a client's call is refused.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := call(t, e.host, "counter", "c", "increment", true, 1)
		if errors.Is(err, rivet.ErrUnavailable) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host did not start stopping: a call got %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(proceed)
	if err := <-done; err != nil {
		t.Fatalf("the call in flight at the stop: %v, want its answer", err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	e.restart()
	raw, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "outer", Key: []string{"a"}}, Action: "get"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"n":11,"log":["go","back"]}`; string(raw) != want {
		t.Fatalf("outer after the stop: %s, want %s", raw, want)
	}
	// The message sent in the stop is queued: the workflow takes it.
	deadline = time.Now().Add(20 * time.Second)
	for {
		raw, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "box", Key: []string{"m"}}, Action: "get"})
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) == `{"n":7,"log":null}` {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("box after the stop: %s, want the message sent in the stop taken", raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := e.host.Get(ctx(t), runtime.Ref{Name: "box", Key: []string{"new"}}); err != nil {
		t.Fatalf("the actor created in the stop: %v", err)
	}
}

// Once a stop has stopped waiting for the turns in flight (its deadline
// came), the calls of a turn still running are refused again, as a new
// request's: the stop has gone past its drain, and goes on to its last
// sweep of the actors in memory (their vars' Close) and to the release
// of the partitions. Let in, a call from such a turn loaded an actor after
// that sweep: its vars stayed open for ever, and its turns ran on a host
// whose commits all fail.
func TestAStopPastItsDeadlineRefusesTheCallsOfATurnStillRunning(t *testing.T) {
	t.Parallel()
	p := &hookProbe{}
	entered, proceed := make(chan struct{}), make(chan struct{})
	lateErr := make(chan error, 2)
	blocker := rivet.Actor[hookedState]{
		Name: "blocker",
		Actions: rivet.Actions[hookedState]{
			// Ignores its context: it outlives the stop.
			"block": rivet.Action0(func(c *rivet.ActionCtx[hookedState]) (int, error) {
				close(entered)
				<-proceed
				_, err := c.Client().Get("late", "k").Call(c.Context(), "get")
				lateErr <- err
				_, err = c.Client().Get("counter", "c").Call(c.Context(), "increment", 1)
				lateErr <- err
				return 0, nil
			}),
		},
	}
	e, opened := newLateEnv(t, p, nil, blocker)
	// In memory at the stop, with no vars to close.
	if n := callInt(t, e.host, "counter", "c", "increment", true, 1); n != 1 {
		t.Fatalf("counter: %d, want 1", n)
	}
	done := make(chan struct{})
	go func() { defer close(done); _, _ = call(t, e.host, "blocker", "b", "block", true) }()
	<-entered
	stopPastDeadline(t, e)
	close(proceed)
	if err := <-lateErr; !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("a call made after the stop gave up on its turn: %v, want UNAVAILABLE", err)
	}
	// Into an actor in memory: refused as not run, not run into a commit
	// that fails (its caller told the outcome is unknown).
	if err := <-lateErr; !errors.Is(err, rivet.ErrUnavailable) || rivet.OutcomeUnknown(err) {
		t.Fatalf("a call made after the stop gave up on its turn, into an actor in memory: %v, want UNAVAILABLE, not run", err)
	}
	<-done
	noVarsLeftOpen(t, p, opened)
}

// slowArg's decoding waits for slowArgRelease: a call with it, admitted
// before a stop, reaches its actor's load only once the test says.
type slowArg struct{}

// slowArgRelease is set by the one test that uses slowArg, which does not
// run in parallel.
var slowArgRelease chan struct{}

func (a *slowArg) UnmarshalJSON([]byte) error { <-slowArgRelease; return nil }

// Nor does a request admitted before the stop load an actor once the stop
// has stopped waiting for it (its deadline came): its arguments were
// decoded, before the actor's load, past the stop's last sweep of the
// actors in memory, and the actor loaded then kept its vars open.
func TestARequestPastTheStopDeadlineLoadsNoActor(t *testing.T) {
	p := &hookProbe{}
	e, opened := newLateEnv(t, p, rivet.Actions[hookedState]{
		"slow": rivet.Action(func(c *rivet.ActionCtx[hookedState], _ slowArg) (int, error) { return 0, nil }),
	})
	slowArgRelease = make(chan struct{})
	done := make(chan error, 1)
	go func() { _, err := call(t, e.host, "late", "k", "slow", true, 1); done <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for e.host.InFlight() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the call did not begin")
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopPastDeadline(t, e)
	close(slowArgRelease)
	if err := <-done; !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("the request past the stop's deadline: %v, want UNAVAILABLE", err)
	}
	noVarsLeftOpen(t, p, opened)
}

// newLateEnv is a host of actor "late", whose loads record their vars in
// p, with its action "get" and more, and of others. "late" "k" exists and
// is not in memory: a call loads it without writing anything. It returns
// how many vars had been opened by then.
func newLateEnv(t *testing.T, p *hookProbe, more rivet.Actions[hookedState], others ...rivet.Definition) (*env, int) {
	t.Helper()
	late := rivet.Actor[hookedState]{
		Name: "late",
		CreateVars: func(c *rivet.ActionCtx[hookedState]) (any, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			v := &hookVars{id: len(p.vars) + 1}
			p.vars = append(p.vars, v)
			return v, nil
		},
		Actions: rivet.Actions[hookedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (int, error) { return c.State.Wakes, nil }),
		},
	}
	maps.Copy(late.Actions, more)
	e := newEnv(t, counterReg(t, append([]rivet.Definition{late}, others...)...), nil)
	if _, err := call(t, e.host, "late", "k", "get", true); err != nil {
		t.Fatal(err)
	}
	e.restart()
	return e, len(p.allVars())
}

// stopPastDeadline stops e's host with a deadline that the request the
// test holds running outlives, and fails unless the stop says so.
func stopPastDeadline(t *testing.T, e *env) {
	t.Helper()
	sctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := e.host.Stop(sctx); err == nil {
		t.Fatal("stop returned nil with a request still running past its deadline")
	}
}

// noVarsLeftOpen fails if any of the vars p recorded after the first
// opened is still open: an actor was loaded after the stop's last sweep.
func noVarsLeftOpen(t *testing.T, p *hookProbe, opened int) {
	t.Helper()
	for _, v := range p.allVars()[opened:] {
		if !v.closed.Load() {
			t.Fatal("an actor was loaded after the stop, its vars left open")
		}
	}
}
