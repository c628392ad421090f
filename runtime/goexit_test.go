package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	rt "github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A step body that calls runtime.Goexit (t.Fatal in a test's actor does)
// ends the goroutine that holds the actor's turn: the turn must be given
// back, its change to the state dropped, and the workflow failed with an
// error that names the step, not the actor left with its turn taken (every
// later call waiting until its deadline) and its workflow never ending.
func TestAStepBodyThatCallsGoexitFailsTheWorkflowAndFreesTheTurn(t *testing.T) {
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name: "goexits",
		Run: func(c *workflow.Ctx[st]) error {
			return c.Step("exits", func(s *workflow.StepCtx[st]) error {
				s.State.N = 100
				runtime.Goexit()
				return nil
			})
		},
		Actions: rivet.Actions[st]{
			"inc": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N++; return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if _, _, err := e.host.GetOrCreate(ctx(t), rt.Ref{Name: "goexits", Key: []string{"k"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 10*time.Second, func() bool {
		return inspect(t, e.host, "goexits", "k").WorkflowStatus == rt.WorkflowFailed
	})
	if msg := inspect(t, e.host, "goexits", "k").WorkflowError; !strings.Contains(msg, "Goexit") || !strings.Contains(msg, `"exits"`) {
		t.Fatalf("workflow error %q should say the step called runtime.Goexit", msg)
	}
	cctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	raw, err := e.host.Call(cctx, rt.CallRequest{Ref: rt.Ref{Name: "goexits", Key: []string{"k"}}, Action: "inc"})
	if err != nil {
		t.Fatalf("a call after the step's Goexit: %v", err)
	}
	if string(raw) != "1" {
		t.Fatalf("inc = %s, want 1 (the cut-off step's change dropped)", raw)
	}
}

// goexits runs fn on a goroutine of its own, as a request's handler runs,
// since fn may end it with the actor's runtime.Goexit, and waits for that
// goroutine to end; it returns fn's error, and whether fn returned at all.
func goexits(t *testing.T, what string, fn func() error) (err error, returned bool) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = fn()
		returned = true
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: still running after 20s", what)
	}
	return err, returned
}

// callWithin is call (creating the actor if need be) bounded by d, well below the action timeout: an actor
// whose turn is held by a goroutine that ended answers no call before its
// deadline.
func callWithin(t *testing.T, h *rt.Host, d time.Duration, name, key, action string) (json.RawMessage, error) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx(t), d)
	defer cancel()
	return h.Call(cctx, rt.CallRequest{Ref: rt.Ref{Name: name, Key: []string{key}}, Action: action, CreateIfMissing: true})
}

// An action that calls runtime.Goexit (t.Fatal in a test's actor) ends the
// goroutine of its request: no answer can come back on it, but the actor's
// turn must not go with it. The next call is served at once, on the state
// as last committed, whether the action changed the state or only read it.
func TestAnActionThatCallsGoexitLeavesTheActorServing(t *testing.T) {
	type st struct{ N int }
	a := rivet.Actor[st]{
		Name: "gxAction",
		Actions: rivet.Actions[st]{
			"inc":  rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N++; return c.State.N, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil }),
			"exit": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N = 100; runtime.Goexit(); return 0, nil }),
			"peek": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { runtime.Goexit(); return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if n := callInt(t, e.host, "gxAction", "k", "inc", true); n != 1 {
		t.Fatalf("inc = %d, want 1", n)
	}
	for i, action := range []string{"exit", "peek"} {
		if err, returned := goexits(t, action, func() error { _, err := call(t, e.host, "gxAction", "k", action, false); return err }); returned && err == nil {
			t.Fatalf("%s: answered with no error", action)
		}
		raw, err := callWithin(t, e.host, 5*time.Second, "gxAction", "k", "inc")
		if err != nil {
			t.Fatalf("a call after %s's Goexit: %v", action, err)
		}
		if want := fmt.Sprint(i + 2); string(raw) != want {
			t.Fatalf("inc after %s's Goexit = %s, want %s (its change dropped)", action, raw, want)
		}
	}
}

// gxHooks is an actor whose hooks call runtime.Goexit while their flag is
// set, after changing the state.
type gxHooks struct {
	vars, wake, sleep, destroy atomic.Bool
	sleeps, destroys           atomic.Int32 // OnSleep and OnDestroy runs
}

func (p *gxHooks) actor() rivet.Actor[gxState] {
	exit := func(on *atomic.Bool, c *rivet.ActionCtx[gxState]) {
		if on.Load() {
			c.State.N = 100
			runtime.Goexit()
		}
	}
	return rivet.Actor[gxState]{
		Name:       "gxHooks",
		CreateVars: func(c *rivet.ActionCtx[gxState]) (any, error) { exit(&p.vars, c); return nil, nil },
		OnWake:     func(c *rivet.ActionCtx[gxState]) error { exit(&p.wake, c); return nil },
		OnSleep:    func(c *rivet.ActionCtx[gxState]) error { p.sleeps.Add(1); exit(&p.sleep, c); return nil },
		OnDestroy:  func(c *rivet.ActionCtx[gxState]) error { p.destroys.Add(1); exit(&p.destroy, c); return nil },
		Actions: rivet.Actions[gxState]{
			"inc": rivet.Action0(func(c *rivet.ActionCtx[gxState]) (int, error) { c.State.N++; return c.State.N, nil }),
		},
	}
}

type gxState struct{ N int }

// A CreateVars or OnWake that calls runtime.Goexit runs on a goroutine of
// the runtime's, not the request's: the wake fails as if the hook had
// panicked (the request is answered, a create taken back), and the actor is
// not left with its gate held by the wake (every later call waiting out its
// deadline).
func TestAWakeHookThatCallsGoexitFailsTheWake(t *testing.T) {
	p := &gxHooks{}
	e := newEnv(t, counterReg(t, p.actor()), nil)
	for _, tc := range []struct {
		name string
		flag *atomic.Bool
	}{{"CreateVars", &p.vars}, {"OnWake", &p.wake}} {
		for _, create := range []bool{true, false} {
			tc.flag.Store(true)
			err, returned := goexits(t, tc.name, func() error { _, err := call(t, e.host, "gxHooks", tc.name, "inc", true); return err })
			tc.flag.Store(false)
			if !returned || !errors.Is(err, rivet.ErrInternal) {
				t.Fatalf("%s (create %v): returned %v, err %v; want ErrInternal", tc.name, create, returned, err)
			}
			raw, err := callWithin(t, e.host, 5*time.Second, "gxHooks", tc.name, "inc")
			if err != nil {
				t.Fatalf("a call after %s's Goexit (create %v): %v", tc.name, create, err)
			}
			// A create is taken back, and this call creates the actor
			// again; a wake of the actor that exists (after the restart)
			// leaves its state as committed.
			want := "2"
			if create {
				want = "1"
			}
			if string(raw) != want {
				t.Fatalf("inc after %s's Goexit (create %v) = %s, want %s", tc.name, create, raw, want)
			}
			if create {
				e.restart() // out of memory: the next round wakes what exists
			} else if err := e.host.Destroy(ctx(t), rt.Ref{Name: "gxHooks", Key: []string{tc.name}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// An OnSleep or OnDestroy that calls runtime.Goexit fails as if it had
// panicked: the actor sleeps (its change dropped) or is destroyed all the
// same, and the goroutine that ran it (the reaper's, the request's) goes
// on.
func TestASleepOrDestroyHookThatCallsGoexitFailsOnlyTheHook(t *testing.T) {
	p := &gxHooks{}
	e := newEnv(t, counterReg(t, p.actor()), func(c *rt.Config) { c.IdleTimeout = 100 * time.Millisecond })
	p.sleep.Store(true)
	if n := callInt(t, e.host, "gxHooks", "s", "inc", true); n != 1 {
		t.Fatalf("inc = %d, want 1", n)
	}
	waitFor(t, "the idle actor to sleep", 10*time.Second, func() bool { return p.sleeps.Load() == 1 && e.host.Stats().ActiveActors == 0 })
	if raw, err := callWithin(t, e.host, 5*time.Second, "gxHooks", "s", "inc"); err != nil || string(raw) != "2" {
		t.Fatalf("inc after OnSleep's Goexit = %s, %v; want 2 (its change dropped)", raw, err)
	}
	// The reaper survived it.
	waitFor(t, "the idle actor to sleep again", 10*time.Second, func() bool { return p.sleeps.Load() == 2 && e.host.Stats().ActiveActors == 0 })
	p.sleep.Store(false)

	ref := rt.Ref{Name: "gxHooks", Key: []string{"d"}}
	callInt(t, e.host, "gxHooks", "d", "inc", true)
	p.destroy.Store(true)
	err, returned := goexits(t, "destroy", func() error { return e.host.Destroy(ctx(t), ref) })
	if !returned || err != nil {
		t.Fatalf("destroy whose OnDestroy called Goexit: returned %v, err %v; want it destroyed all the same", returned, err)
	}
	if _, err := e.host.Get(ctx(t), ref); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("after the destroy: %v, want ErrNotFound", err)
	}
}

// A CreateState that calls runtime.Goexit fails the create as one that
// panics does: the load never finished, and every later request waited
// out its deadline for it.
func TestACreateStateThatCallsGoexitFailsTheCreate(t *testing.T) {
	a := rivet.Actor[gxState]{
		Name: "gxCreate",
		CreateState: func(in json.RawMessage) (gxState, error) {
			if string(in) == `"exit"` {
				runtime.Goexit()
			}
			return gxState{N: 10}, nil
		},
		Actions: rivet.Actions[gxState]{
			"inc": rivet.Action0(func(c *rivet.ActionCtx[gxState]) (int, error) { c.State.N++; return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	ref := rt.Ref{Name: "gxCreate", Key: []string{"k"}}
	err, returned := goexits(t, "create", func() error { _, err := e.host.Create(ctx(t), ref, json.RawMessage(`"exit"`)); return err })
	if !returned || !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("create whose CreateState called Goexit: returned %v, err %v; want ErrInternal", returned, err)
	}
	if raw, err := callWithin(t, e.host, 5*time.Second, "gxCreate", "k", "inc"); err != nil || string(raw) != "11" {
		t.Fatalf("inc after the failed create = %s, %v; want 11", raw, err)
	}
}

// A scheduled call whose action calls runtime.Goexit is used up as one
// that panics is, its change dropped: the wakeup worker that ran it, the
// actor and its later calls go on.
func TestAScheduledActionThatCallsGoexitIsUsedUp(t *testing.T) {
	a := rivet.Actor[gxState]{
		Name: "gxSched",
		Actions: rivet.Actions[gxState]{
			"arm": rivet.Action0(func(c *rivet.ActionCtx[gxState]) (bool, error) {
				if _, err := c.Schedule().After(0, "exit"); err != nil {
					return false, err
				}
				_, err := c.Schedule().After(50*time.Millisecond, "inc")
				return err == nil, err
			}),
			"exit": rivet.Action0(func(c *rivet.ActionCtx[gxState]) (int, error) { c.State.N = 100; runtime.Goexit(); return 0, nil }),
			"inc":  rivet.Action0(func(c *rivet.ActionCtx[gxState]) (int, error) { c.State.N++; return c.State.N, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[gxState]) (int, error) { return c.State.N, nil }),
			"left": rivet.Query(func(c *rivet.ActionCtx[gxState]) (int, error) { return len(c.Schedule().List()), nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if _, err := call(t, e.host, "gxSched", "k", "arm", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the later scheduled call to run", 15*time.Second, func() bool {
		raw, err := callWithin(t, e.host, 2*time.Second, "gxSched", "k", "get")
		return err == nil && string(raw) == "1"
	})
	if n := callInt(t, e.host, "gxSched", "k", "left", false); n != 0 {
		t.Fatalf("%d scheduled calls left, want none (the one that called Goexit used up)", n)
	}
}

// A call whose action called runtime.Goexit got no reply: the Observer
// (rivet_calls_total, the call-duration histograms) must count it as
// failed, not as a call that succeeded.
func TestACallWhoseActionCallsGoexitIsObservedAsFailed(t *testing.T) {
	obs := &recordObserver{}
	a := rivet.Actor[gxState]{
		Name: "gxObserved",
		Actions: rivet.Actions[gxState]{
			"exit": rivet.Action0(func(c *rivet.ActionCtx[gxState]) (int, error) { runtime.Goexit(); return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), func(c *rt.Config) { c.Observer = obs })
	if _, returned := goexits(t, "exit", func() error { _, err := call(t, e.host, "gxObserved", "k", "exit", true); return err }); returned {
		t.Fatal("the call returned")
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.calls != 1 || len(obs.failures) != 1 || !errors.Is(obs.failures[0], rivet.ErrInternal) {
		t.Fatalf("observer saw %d calls, failures %v; want 1 call, failed with ErrInternal", obs.calls, obs.failures)
	}
}

// closeGoexits is vars whose Close calls runtime.Goexit.
type closeGoexits struct{ closed chan struct{} }

func (v *closeGoexits) Close() error { close(v.closed); runtime.Goexit(); return nil }

// Vars whose Close calls runtime.Goexit (t.Fatal in a test's vars) fail
// the close as a panicking Close does: it ran on the reaper's goroutine
// (or a stop's, or a request's), which ended there, with the actor half
// put to sleep, and no idle actor slept again.
func TestVarsWhoseCloseCallsGoexitDoNotStopTheReaper(t *testing.T) {
	t.Parallel()
	vars := make(chan *closeGoexits, 4)
	a := rivet.Actor[gxState]{
		Name: "gxClose",
		CreateVars: func(*rivet.ActionCtx[gxState]) (any, error) {
			v := &closeGoexits{closed: make(chan struct{})}
			vars <- v
			return v, nil
		},
		Actions: rivet.Actions[gxState]{"inc": rivet.Action0(func(c *rivet.ActionCtx[gxState]) (int, error) { c.State.N++; return c.State.N, nil })},
	}
	e := newEnv(t, counterReg(t, a), func(c *rt.Config) { c.IdleTimeout = 50 * time.Millisecond })
	for round := range 2 {
		callInt(t, e.host, "gxClose", "k", "inc", true)
		v := <-vars
		waitFor(t, fmt.Sprintf("the idle actor's vars to close (round %d)", round), 10*time.Second, func() bool {
			select {
			case <-v.closed:
				return e.host.Stats().ActiveActors == 0
			default:
				return false
			}
		})
	}
	if n := callInt(t, e.host, "gxClose", "k", "inc", false); n != 3 {
		t.Fatalf("inc after two sleeps = %d, want 3", n)
	}
}

// gxResult is an action's result whose MarshalJSON calls runtime.Goexit.
type gxResult struct{}

func (gxResult) MarshalJSON() ([]byte, error) { runtime.Goexit(); return nil, nil }

// gxEncoded is a state whose MarshalJSON calls runtime.Goexit while Exit is
// set.
type gxEncoded struct {
	N    int
	Exit bool
}

func (s gxEncoded) MarshalJSON() ([]byte, error) {
	if s.Exit {
		runtime.Goexit()
	}
	type plain gxEncoded
	return json.Marshal(plain(s))
}

// An action that returned, but whose result's (or state's) MarshalJSON
// calls runtime.Goexit, ends its request's goroutine after the action: its
// change to the state was never committed, and must not be left in memory
// for the next turn to read, and commit.
func TestAnActionWhoseEncodingCallsGoexitLeavesItsChangeUncommitted(t *testing.T) {
	a := rivet.Actor[gxEncoded]{
		Name: "gxEncode",
		Actions: rivet.Actions[gxEncoded]{
			"inc":       rivet.Action0(func(c *rivet.ActionCtx[gxEncoded]) (int, error) { c.State.N++; return c.State.N, nil }),
			"badResult": rivet.Action0(func(c *rivet.ActionCtx[gxEncoded]) (gxResult, error) { c.State.N = 100; return gxResult{}, nil }),
			"badState":  rivet.Action0(func(c *rivet.ActionCtx[gxEncoded]) (int, error) { c.State.N, c.State.Exit = 100, true; return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if n := callInt(t, e.host, "gxEncode", "k", "inc", true); n != 1 {
		t.Fatalf("inc = %d, want 1", n)
	}
	for i, action := range []string{"badResult", "badState"} {
		if err, returned := goexits(t, action, func() error { _, err := call(t, e.host, "gxEncode", "k", action, false); return err }); returned && err == nil {
			t.Fatalf("%s: answered with no error", action)
		}
		raw, err := callWithin(t, e.host, 5*time.Second, "gxEncode", "k", "inc")
		if err != nil {
			t.Fatalf("a call after %s's Goexit: %v", action, err)
		}
		if want := fmt.Sprint(i + 2); string(raw) != want {
			t.Fatalf("inc after %s's Goexit = %s, want %s (its change dropped)", action, raw, want)
		}
	}
}

// A scheduled call whose change to the state does not encode (its
// MarshalJSON calls runtime.Goexit, after the action returned) is used up
// as one whose state does not marshal is: the wakeup that ran it, the
// actor, its later calls and scheduled calls go on, the change dropped.
func TestAScheduledCallWhoseStateEncodingCallsGoexitIsUsedUp(t *testing.T) {
	a := rivet.Actor[gxEncoded]{
		Name: "gxSchedEncode",
		Actions: rivet.Actions[gxEncoded]{
			"arm": rivet.Action0(func(c *rivet.ActionCtx[gxEncoded]) (bool, error) {
				if _, err := c.Schedule().After(0, "exit"); err != nil {
					return false, err
				}
				_, err := c.Schedule().After(50*time.Millisecond, "inc")
				return err == nil, err
			}),
			"exit": rivet.Action0(func(c *rivet.ActionCtx[gxEncoded]) (int, error) { c.State.N, c.State.Exit = 100, true; return 0, nil }),
			"inc":  rivet.Action0(func(c *rivet.ActionCtx[gxEncoded]) (int, error) { c.State.N++; return c.State.N, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[gxEncoded]) (int, error) { return c.State.N, nil }),
			"left": rivet.Query(func(c *rivet.ActionCtx[gxEncoded]) (int, error) { return len(c.Schedule().List()), nil }),
		},
	}
	e := newEnv(t, counterReg(t, a), nil)
	if _, err := call(t, e.host, "gxSchedEncode", "k", "arm", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the later scheduled call to run", 15*time.Second, func() bool {
		raw, err := callWithin(t, e.host, 2*time.Second, "gxSchedEncode", "k", "get")
		return err == nil && string(raw) == "1"
	})
	if n := callInt(t, e.host, "gxSchedEncode", "k", "left", false); n != 0 {
		t.Fatalf("%d scheduled calls left, want none (the one whose state called Goexit used up)", n)
	}
}

// gxDecodeExit makes the next decode of a gxDecoded call runtime.Goexit.
var gxDecodeExit atomic.Bool

// gxDecoded is a state whose UnmarshalJSON calls runtime.Goexit once after
// gxDecodeExit is set, and whose MarshalJSON panics while Panic is set.
type gxDecoded struct {
	N     int
	Panic bool
}

func (s *gxDecoded) UnmarshalJSON(b []byte) error {
	if gxDecodeExit.CompareAndSwap(true, false) {
		runtime.Goexit()
	}
	type plain gxDecoded
	return json.Unmarshal(b, (*plain)(s))
}

func (s gxDecoded) MarshalJSON() ([]byte, error) {
	if s.Panic {
		panic("state does not marshal")
	}
	type plain gxDecoded
	return json.Marshal(plain(s))
}

// A failed turn's change is discarded by decoding the state again. A
// decoder that calls runtime.Goexit there ends the goroutine that discards
// it: that of a request, of the wakeup running a scheduled call, of a
// workflow's step, of the reaper after an OnSleep that called Goexit. It
// must take with it neither the actor's gate (every later call waiting
// out its deadline), nor the wakeup's timer, marked running (no later
// scheduled call of the actor ran), nor the reaper; nor leave the change
// in memory for the next turn. The actor is reloaded, as one whose state
// no longer decodes is.
func TestADecoderThatCallsGoexitDiscardingAFailedTurnLeavesTheActorServing(t *testing.T) {
	var once atomic.Bool // the next fail, panic, step or OnSleep sets gxDecodeExit
	exitOnce := func() {
		if once.CompareAndSwap(true, false) {
			gxDecodeExit.Store(true)
		}
	}
	var sleeps atomic.Int32
	var sleepExit atomic.Bool
	actions := rivet.Actions[gxDecoded]{
		"fail": rivet.Action0(func(c *rivet.ActionCtx[gxDecoded]) (int, error) {
			c.State.N = 100
			exitOnce()
			return 0, errors.New("failed")
		}),
		"panic": rivet.Action0(func(c *rivet.ActionCtx[gxDecoded]) (int, error) {
			if once.Load() { // its first run only: it is run again
				c.State.N, c.State.Panic = 100, true
				exitOnce()
			}
			return 0, nil
		}),
		"arm": rivet.Action(func(c *rivet.ActionCtx[gxDecoded], action string) (bool, error) {
			if _, err := c.Schedule().After(0, action); err != nil {
				return false, err
			}
			_, err := c.Schedule().After(50*time.Millisecond, "inc")
			return err == nil, err
		}),
		"inc": rivet.Action0(func(c *rivet.ActionCtx[gxDecoded]) (int, error) { c.State.N++; return c.State.N, nil }),
		"get": rivet.Query(func(c *rivet.ActionCtx[gxDecoded]) (int, error) { return c.State.N, nil }),
	}
	a := rivet.Actor[gxDecoded]{Name: "gxDecode", Actions: actions}
	wf := rivet.Actor[gxDecoded]{
		Name: "gxDecodeStep",
		Run: func(c *workflow.Ctx[gxDecoded]) error {
			return c.Step("exits", func(s *workflow.StepCtx[gxDecoded]) error {
				s.State.N = 100
				exitOnce()
				runtime.Goexit()
				return nil
			})
		},
		Actions: actions,
	}
	sl := rivet.Actor[gxDecoded]{
		Name: "gxDecodeSleep",
		OnSleep: func(c *rivet.ActionCtx[gxDecoded]) error {
			sleeps.Add(1)
			if sleepExit.Load() {
				c.State.N = 100
				exitOnce()
				runtime.Goexit()
			}
			return nil
		},
		Actions: actions,
	}
	t.Cleanup(func() { gxDecodeExit.Store(false) })
	e := newEnv(t, counterReg(t, a, wf, sl), func(c *rt.Config) { c.IdleTimeout = 200 * time.Millisecond })

	// A request.
	if n := callInt(t, e.host, "gxDecode", "r", "inc", true); n != 1 {
		t.Fatalf("inc = %d, want 1", n)
	}
	once.Store(true)
	if err, returned := goexits(t, "fail", func() error { _, err := call(t, e.host, "gxDecode", "r", "fail", false); return err }); returned && err == nil {
		t.Fatal("fail: answered with no error")
	}
	if raw, err := callWithin(t, e.host, 5*time.Second, "gxDecode", "r", "inc"); err != nil || string(raw) != "2" {
		t.Fatalf("inc after the failed call = %s, %v; want 2 (its change dropped)", raw, err)
	}

	// A scheduled call that fails, or whose state does not marshal (a
	// panic, which the turn recovers from); each is run again once its
	// actor is reloaded, without the Goexit.
	for _, action := range []string{"fail", "panic"} {
		key := "s-" + action
		// Set before the call is scheduled: it may run at once.
		once.Store(true)
		if _, err := e.host.Call(ctx(t), rt.CallRequest{Ref: rt.Ref{Name: "gxDecode", Key: []string{key}}, Action: "arm", Args: json.RawMessage(fmt.Sprintf("[%q]", action)), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the later scheduled call to run after "+action, 20*time.Second, func() bool {
			raw, err := callWithin(t, e.host, 2*time.Second, "gxDecode", key, "get")
			return err == nil && string(raw) == "1"
		})
	}

	// A step.
	once.Store(true)
	if _, _, err := e.host.GetOrCreate(ctx(t), rt.Ref{Name: "gxDecodeStep", Key: []string{"w"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the step's decoder to run", 10*time.Second, func() bool { return !once.Load() && !gxDecodeExit.Load() })
	if raw, err := callWithin(t, e.host, 5*time.Second, "gxDecodeStep", "w", "inc"); err != nil || string(raw) != "1" {
		t.Fatalf("inc after the step = %s, %v; want 1", raw, err)
	}

	// The reaper.
	sleepExit.Store(true)
	once.Store(true)
	callInt(t, e.host, "gxDecodeSleep", "z", "inc", true)
	waitFor(t, "the idle actor to sleep", 10*time.Second, func() bool { return sleeps.Load() == 1 && e.host.Stats().ActiveActors == 0 })
	sleepExit.Store(false)
	if raw, err := callWithin(t, e.host, 5*time.Second, "gxDecodeSleep", "z", "inc"); err != nil || string(raw) != "2" {
		t.Fatalf("inc after OnSleep = %s, %v; want 2", raw, err)
	}
	waitFor(t, "the idle actor to sleep again (the reaper alive)", 10*time.Second, func() bool { return sleeps.Load() == 2 && e.host.Stats().ActiveActors == 0 })
}

// A step body that calls runtime.Goexit has its change discarded by
// decoding the state again; a decoder that calls runtime.Goexit there too
// drops the activation. A call that found the activation before that, and
// waits for the step's turn, must get it once the step has ended (and
// then go to the actor loaded again), not wait on the dropped
// activation's gate until its deadline. Under load the step test above
// hit this too: its call could find the activation between the decoder's
// Goexit and the eviction.
func TestACallWaitingForAStepWhoseDiscardCallsGoexitIsServed(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	first.Store(true)
	wf := rivet.Actor[gxDecoded]{
		Name: "gxDecodeWait",
		Run: func(c *workflow.Ctx[gxDecoded]) error {
			return c.Step("exits", func(s *workflow.StepCtx[gxDecoded]) error {
				s.State.N = 100
				if first.CompareAndSwap(true, false) {
					close(started)
					select {
					case <-release:
					case <-time.After(30 * time.Second):
					}
					gxDecodeExit.Store(true)
				}
				runtime.Goexit()
				return nil
			})
		},
		Actions: rivet.Actions[gxDecoded]{
			"inc": rivet.Action0(func(c *rivet.ActionCtx[gxDecoded]) (int, error) { c.State.N++; return c.State.N, nil }),
		},
	}
	t.Cleanup(func() { gxDecodeExit.Store(false) })
	e := newEnv(t, counterReg(t, wf), nil)
	if _, _, err := e.host.GetOrCreate(ctx(t), rt.Ref{Name: "gxDecodeWait", Key: []string{"w"}}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the step did not start within 20s")
	}
	type answer struct {
		raw json.RawMessage
		err error
	}
	done := make(chan answer, 1)
	go func() {
		raw, err := callWithin(t, e.host, 20*time.Second, "gxDecodeWait", "w", "inc")
		done <- answer{raw, err}
	}()
	waitFor(t, "the call to wait for the step's turn", 20*time.Second, func() bool {
		for _, h := range e.host.HotActors(100) {
			if h.Ref.Name == "gxDecodeWait" && h.Waiting > 0 {
				return true
			}
		}
		return false
	})
	close(release)
	select {
	case r := <-done:
		if r.err != nil || string(r.raw) != "1" {
			t.Fatalf("inc = %s, %v; want 1 (the step's change dropped)", r.raw, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call got no answer within 30s")
	}
	if gxDecodeExit.Load() {
		t.Fatal("the state's decoder never ran")
	}
}
