package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type hookedState struct {
	Wakes  int `json:"wakes"`
	Sleeps int `json:"sleeps"`
	// Setups counts the one-time setups OnWake made (a scheduled call).
	Setups int `json:"setups"`
	// StepSaw is what the workflow's first step saw: the wakes so far and
	// whether it had vars.
	StepSaw     int  `json:"stepSaw"`
	StepHadVars bool `json:"stepHadVars"`
}

// hookVars is an activation's vars: Close records that the runtime closed
// them.
type hookVars struct {
	id     int
	closed atomic.Bool
}

func (v *hookVars) Close() error { v.closed.Store(true); return nil }

// hookProbe makes the hooked actor fail on demand and records what its
// hooks saw.
type hookProbe struct {
	failVars, failWake, panicWake, reenter atomic.Bool

	mu        sync.Mutex
	vars      []*hookVars
	destroyed []hookedState // the state each OnDestroy saw
}

func (p *hookProbe) allVars() []*hookVars {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*hookVars(nil), p.vars...)
}

type hookedView struct {
	hookedState
	VarsID int `json:"varsId"`
}

func hookedActor(p *hookProbe, withRun bool) rivet.Actor[hookedState] {
	a := rivet.Actor[hookedState]{
		Name: "hooked",
		CreateVars: func(c *rivet.ActionCtx[hookedState]) (any, error) {
			if p.failVars.Load() {
				return nil, errors.New("no connection")
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			v := &hookVars{id: len(p.vars) + 1}
			p.vars = append(p.vars, v)
			return v, nil
		},
		OnWake: func(c *rivet.ActionCtx[hookedState]) error {
			if p.panicWake.Load() {
				panic("wake panicked")
			}
			c.State.Wakes++
			if p.failWake.Load() {
				return errors.New("wake failed")
			}
			if c.Vars() == nil {
				return errors.New("OnWake ran without vars")
			}
			if c.State.Setups == 0 {
				// One-time setup: its effect commits with the flag.
				if _, err := c.Schedule().After(time.Hour, "get"); err != nil {
					return err
				}
				c.State.Setups++
			}
			if p.reenter.Load() {
				// Back into this actor, from its own first turn.
				if _, err := c.Client().Get("hooked", c.Key()...).Call(c.Context(), "get"); err != nil {
					return err
				}
			}
			return nil
		},
		OnSleep: func(c *rivet.ActionCtx[hookedState]) error {
			c.State.Sleeps++
			return nil
		},
		OnDestroy: func(c *rivet.ActionCtx[hookedState]) error {
			p.mu.Lock()
			p.destroyed = append(p.destroyed, *c.State)
			p.mu.Unlock()
			// It can still reach other actors.
			_, err := c.Client().GetOrCreate("counter", "audit").Call(c.Context(), "increment", 1)
			return err
		},
		Actions: rivet.Actions[hookedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (hookedView, error) {
				v := hookedView{hookedState: *c.State}
				if hv, ok := c.Vars().(*hookVars); ok {
					v.VarsID = hv.id
				}
				return v, nil
			}),
		},
	}
	if withRun {
		a.Run = func(ctx *workflow.Ctx[hookedState]) error {
			_, err := workflow.Step(ctx, "first", func(s *workflow.StepCtx[hookedState]) (int, error) {
				s.State.StepSaw = s.State.Wakes
				s.State.StepHadVars = s.Vars() != nil
				return 0, nil
			})
			if err != nil {
				return err
			}
			return ctx.Sleep("forever", time.Hour)
		}
	}
	return a
}

func getHooked(t *testing.T, h *runtime.Host, key string, create bool) (hookedView, error) {
	t.Helper()
	raw, err := call(t, h, "hooked", key, "get", create)
	if err != nil {
		return hookedView{}, err
	}
	var v hookedView
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("get: %s: %v", raw, err)
	}
	return v, nil
}

func mustGetHooked(t *testing.T, h *runtime.Host, key string, create bool) hookedView {
	t.Helper()
	v, err := getHooked(t, h, key, create)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// OnWake runs on every activation, OnSleep on every orderly deactivation
// (idle, and the host's stop), each committing its changes; each
// activation has vars of its own, closed once it leaves memory.
func TestHooksRunAroundEveryActivation(t *testing.T) {
	t.Parallel()
	p := &hookProbe{}
	e := newEnv(t, counterReg(t, hookedActor(p, false)), func(c *runtime.Config) { c.IdleTimeout = 50 * time.Millisecond })
	if v := mustGetHooked(t, e.host, "h", true); v.Wakes != 1 || v.Sleeps != 0 || v.Setups != 1 || v.VarsID != 1 {
		t.Fatalf("first activation: %+v, want 1 wake, 0 sleeps, 1 setup, vars 1", v)
	}
	waitFor(t, "the idle actor to sleep", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	waitFor(t, "the first vars to be closed", 10*time.Second, func() bool { return p.allVars()[0].closed.Load() })

	if v := mustGetHooked(t, e.host, "h", false); v.Wakes != 2 || v.Sleeps != 1 || v.Setups != 1 || v.VarsID != 2 {
		t.Fatalf("second activation: %+v, want 2 wakes, 1 sleep, still 1 setup, vars 2", v)
	}
	in, err := e.host.Inspect(ctx(t), runtime.Ref{Name: "hooked", Key: []string{"h"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Schedules) != 1 {
		t.Fatalf("scheduled calls = %d, want the one the one-time setup made", len(in.Schedules))
	}

	// A stop is an orderly sleep too.
	e.restart()
	if !p.allVars()[1].closed.Load() {
		t.Fatal("the host stopped without closing the vars of an actor in memory")
	}
	if v := mustGetHooked(t, e.host, "h", false); v.Wakes != 3 || v.Sleeps != 2 || v.VarsID != 3 {
		t.Fatalf("after a restart: %+v, want 3 wakes, 2 sleeps, vars 3", v)
	}
}

// A failing OnWake or CreateVars of an actor that exists (woken after a
// sleep, here a restart) fails the request that woke the actor and commits
// nothing; the actor stays, and the next request tries again. An actor
// whose hooks fail can still be destroyed. (A create whose hooks fail
// creates nothing: TestACreateWhoseHooksFailLeavesNoActor.)
func TestAFailingWakeFailsTheCallAndTheNextTriesAgain(t *testing.T) {
	t.Parallel()
	p := &hookProbe{}
	e := newEnv(t, counterReg(t, hookedActor(p, false)), nil)
	for _, key := range []string{"f", "g"} {
		if v := mustGetHooked(t, e.host, key, true); v.Wakes != 1 {
			t.Fatalf("created %s: %+v, want 1 wake", key, v)
		}
	}
	e.restart() // out of memory: the next request wakes them
	for _, tc := range []struct {
		name string
		flag *atomic.Bool
	}{{"OnWake error", &p.failWake}, {"OnWake panic", &p.panicWake}, {"CreateVars error", &p.failVars}} {
		tc.flag.Store(true)
		_, err := getHooked(t, e.host, "f", true)
		tc.flag.Store(false)
		if !errors.Is(err, rivet.ErrInternal) {
			t.Fatalf("%s: err = %v, want ErrInternal", tc.name, err)
		}
		if n := e.host.Stats().ActiveActors; n != 0 {
			t.Fatalf("%s: %d actors in memory after a failed wake", tc.name, n)
		}
		if _, err := e.host.Get(ctx(t), runtime.Ref{Name: "hooked", Key: []string{"f"}}); err != nil {
			t.Fatalf("%s: the actor whose wake failed: %v, want it kept", tc.name, err)
		}
	}
	// The vars the failed wakes made were closed.
	for _, v := range p.allVars() {
		waitFor(t, "the vars of a failed wake to be closed", 10*time.Second, v.closed.Load)
	}
	if v := mustGetHooked(t, e.host, "f", false); v.Wakes != 2 || v.Setups != 1 || v.Sleeps != 1 {
		t.Fatalf("after failed wakes: %+v, want the create's wake and one successful wake since", v)
	}
	if n := e.host.Stats().WakeHooksFailed; n != 3 {
		t.Fatalf("stats: %d wake hooks failed, want 3", n)
	}

	p.failWake.Store(true)
	ref := runtime.Ref{Name: "hooked", Key: []string{"g"}}
	if _, err := getHooked(t, e.host, "g", false); !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("err = %v, want ErrInternal", err)
	}
	if err := e.host.Destroy(ctx(t), ref); err != nil {
		t.Fatalf("destroy of an actor whose OnWake fails: %v", err)
	}
	p.failWake.Store(false)
	if _, err := getHooked(t, e.host, "g", false); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("after destroy: err = %v, want ErrNotFound", err)
	}
}

// OnWake comes before the workflow's first step, which sees its changes and
// the vars; a call from OnWake back into the actor re-enters instead of
// waiting for the activation it is part of.
func TestOnWakeRunsBeforeTheWorkflowAndMayReenter(t *testing.T) {
	t.Parallel()
	p := &hookProbe{}
	p.reenter.Store(true)
	e := newEnv(t, counterReg(t, hookedActor(p, true)), nil)
	mustGetHooked(t, e.host, "w", true)
	var v hookedView
	waitFor(t, "the first step", 10*time.Second, func() bool {
		v = mustGetHooked(t, e.host, "w", false)
		return v.StepSaw != 0
	})
	if v.StepSaw != 1 || !v.StepHadVars {
		t.Fatalf("the first step saw %d wakes, vars %v; want 1 and true", v.StepSaw, v.StepHadVars)
	}
}

// A partition handed to another node puts its actors to sleep (OnSleep
// commits before the next owner loads them); a destroy runs OnDestroy,
// which may call other actors, and closes the vars.
func TestOnSleepOnHandoffAndOnDestroy(t *testing.T) {
	t.Parallel()
	p := &hookProbe{}
	e := newEnv(t, counterReg(t, hookedActor(p, false)), nil)
	h2, own2 := secondHost(t, e)
	mustGetHooked(t, e.host, "m", true)
	part := placement.Partition("hooked", storage.EncodeKey([]string{"m"}), testPartitions)
	if err := e.host.Handoff(ctx(t), part); err != nil {
		t.Fatal(err)
	}
	if !p.allVars()[0].closed.Load() {
		t.Fatal("vars still open after the handoff")
	}
	if got, err := own2.Claim(ctx(t), []uint32{part}); err != nil || len(got) != 1 {
		t.Fatalf("claim after handoff: %v, %v", got, err)
	}
	if v := mustGetHooked(t, h2, "m", false); v.Wakes != 2 || v.Sleeps != 1 || v.VarsID != 2 {
		t.Fatalf("on the next owner: %+v, want 2 wakes, 1 sleep, vars 2", v)
	}

	// (On the first host, which owns the audit counter's partition.)
	mustGetHooked(t, e.host, "d", true)
	if err := e.host.Destroy(ctx(t), runtime.Ref{Name: "hooked", Key: []string{"d"}}); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	destroyed := append([]hookedState(nil), p.destroyed...)
	p.mu.Unlock()
	if len(destroyed) != 1 || destroyed[0].Wakes != 1 || destroyed[0].Setups != 1 {
		t.Fatalf("OnDestroy saw %+v, want one run on the actor's last state", destroyed)
	}
	waitFor(t, "the destroyed actor's vars to be closed", 10*time.Second, p.allVars()[2].closed.Load)
	if _, err := getHooked(t, e.host, "d", false); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("after destroy: err = %v, want ErrNotFound", err)
	}
	if n := callInt(t, e.host, "counter", "audit", "getCount", false); n != 1 {
		t.Fatalf("OnDestroy's call: audit count = %d, want 1", n)
	}
}

// A held load (CancelWorkflow of an actor not in memory) whose hooks fail
// does not leave an activation behind that serves without them: the next
// request wakes the actor again.
func TestAHeldLoadWhoseWakeFailedDoesNotServe(t *testing.T) {
	t.Parallel()
	p := &hookProbe{}
	e := newEnv(t, counterReg(t, hookedActor(p, true)), nil)
	ref := runtime.Ref{Name: "hooked", Key: []string{"c"}}
	mustGetHooked(t, e.host, "c", true)
	e.restart() // out of memory
	p.failVars.Store(true)
	_, _ = e.host.CancelWorkflow(ctx(t), ref, "")
	p.failVars.Store(false)
	if v := mustGetHooked(t, e.host, "c", false); v.VarsID == 0 {
		t.Fatalf("an action ran on an activation whose CreateVars failed: %+v", v)
	}
}

// A hook's rivet error of a kind that steers the runtime (NOT_FOUND: the
// actor is gone) is INTERNAL to the wakeup: it tries again, and the
// workflow runs on.
func TestAWakeErrorOfAnyKindDoesNotDropTheWakeup(t *testing.T) {
	t.Parallel()
	var fails atomic.Int32
	var stepRan atomic.Bool
	act := rivet.Actor[hookedState]{
		Name: "nfwake",
		OnWake: func(c *rivet.ActionCtx[hookedState]) error {
			if fails.Add(-1) >= 0 {
				return rivet.Errorf(rivet.ErrNotFound, "config actor not found")
			}
			return nil
		},
		Actions: rivet.Actions[hookedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (int, error) { return 0, nil }),
		},
		Run: func(ctx *workflow.Ctx[hookedState]) error {
			if err := ctx.Sleep("nap", 500*time.Millisecond); err != nil {
				return err
			}
			_, err := workflow.Step(ctx, "after", func(s *workflow.StepCtx[hookedState]) (int, error) {
				stepRan.Store(true)
				return 0, nil
			})
			return err
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, err := call(t, e.host, "nfwake", "k", "get", true); err != nil {
		t.Fatal(err)
	}
	fails.Store(1) // the wakeup's activation fails once
	e.restart()
	waitFor(t, "the workflow to wake after its OnWake failed once", 20*time.Second, stepRan.Load)
	if fails.Load() >= 0 {
		t.Fatal("OnWake never failed: the test tested nothing")
	}
	if _, err := call(t, e.host, "nfwake", "k", "get", false); err != nil {
		t.Fatal(err)
	}
	fails.Store(1)
	e.restart()
	if _, err := call(t, e.host, "nfwake", "k", "get", false); !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("a call whose wake failed with NOT_FOUND: %v, want ErrInternal", err)
	}
}

// Vars made by an activation that was evicted while CreateVars ran (a
// handoff that gave up waiting for it) are closed all the same.
func TestVarsOfAnActivationEvictedWhileWakingAreClosed(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var made atomic.Pointer[hookVars]
	act := rivet.Actor[hookedState]{
		Name: "slowvars",
		CreateVars: func(c *rivet.ActionCtx[hookedState]) (any, error) {
			close(entered)
			<-release
			v := &hookVars{id: 1}
			made.Store(v)
			return v, nil
		},
		Actions: rivet.Actions[hookedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (int, error) { return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	done := make(chan error, 1)
	go func() {
		_, err := call(t, e.host, "slowvars", "k", "get", true)
		done <- err
	}()
	<-entered
	part := placement.Partition("slowvars", storage.EncodeKey([]string{"k"}), testPartitions)
	hctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = e.host.Handoff(hctx, part) // gives up on the gate: evicts
	close(release)
	if err := <-done; !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("the call that woke an evicted activation: %v, want ErrUnavailable", err)
	}
	waitFor(t, "the evicted activation's vars to be closed", 10*time.Second, func() bool {
		v := made.Load()
		return v != nil && v.closed.Load()
	})
}

// During a handoff, OnSleep's calls to actors of the same partition fail at
// once (UNAVAILABLE) instead of waiting for a gate the handoff holds.
func TestOnSleepCallsIntoAPartitionBeingHandedOffFailFast(t *testing.T) {
	var unavailable atomic.Int32
	part := func(k string) uint32 {
		return placement.Partition("cyc", storage.EncodeKey([]string{k}), testPartitions)
	}
	k1, k2 := "a", ""
	for i := 0; i < 1000 && k2 == ""; i++ {
		if k := "b" + string(rune('a'+i%26)) + string(rune('a'+i/26)); part(k) == part(k1) {
			k2 = k
		}
	}
	other := map[string]string{k1: k2, k2: k1}
	var sleeping sync.WaitGroup
	sleeping.Add(2)
	act := rivet.Actor[hookedState]{
		Name: "cyc",
		// Far beyond the test's deadline: a handoff that waited for it
		// would fail the test.
		Options: rivet.Options{SleepTimeout: time.Hour},
		OnSleep: func(c *rivet.ActionCtx[hookedState]) error {
			sleeping.Done()
			sleeping.Wait() // both hold their gates
			_, err := c.Client().Get("cyc", other[c.Key()[0]]).Call(c.Context(), "get")
			if errors.Is(err, rivet.ErrUnavailable) {
				unavailable.Add(1)
			}
			return err
		},
		Actions: rivet.Actions[hookedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (int, error) { return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	for _, k := range []string{k1, k2} {
		if _, err := call(t, e.host, "cyc", k, "get", true); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.host.Handoff(ctx(t), part(k1)); err != nil {
		t.Fatal(err)
	}
	if n := unavailable.Load(); n != 2 {
		t.Fatalf("%d of the 2 OnSleep calls failed with UNAVAILABLE", n)
	}
}

// A stop whose deadline ends before a request does still closes the vars
// of the actors in memory that no turn holds.
func TestAStopPastItsDeadlineClosesVars(t *testing.T) {
	t.Parallel()
	p := &hookProbe{}
	entered, block := make(chan struct{}), make(chan struct{})
	blocker := rivet.Actor[hookedState]{
		Name: "blocker",
		Actions: rivet.Actions[hookedState]{
			"block": rivet.Action0(func(c *rivet.ActionCtx[hookedState]) (int, error) { close(entered); <-block; return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, hookedActor(p, false), blocker), nil)
	mustGetHooked(t, e.host, "idle", true)
	done := make(chan struct{})
	go func() { defer close(done); _, _ = call(t, e.host, "blocker", "b", "block", true) }()
	<-entered
	sctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := e.host.Stop(sctx)
	cancel()
	close(block)
	<-done
	if err == nil {
		t.Fatal("stop returned nil with a request still running past its deadline")
	}
	if !p.allVars()[0].closed.Load() {
		t.Fatal("the idle actor's vars were not closed by the stop")
	}
}

// A workflow's wakeup that fires while another request's wake of the actor
// fails (slowly: a dependency down) is not used up by it: the wakeup loads
// the actor itself, or is scheduled again, rather than leave the workflow
// asleep until some request comes. (The hook waits until the wakeup is in
// progress, not until it found the activation, which nothing shows; losing
// that race makes the test pass wrongly, never fail wrongly.)
func TestAWakeupDuringAFailingWakeIsNotLost(t *testing.T) {
	var block atomic.Bool
	var host atomic.Pointer[runtime.Host]
	ref := runtime.Ref{Name: "wkf", Key: []string{"k"}}
	act := rivet.Actor[hookedState]{
		Name: "wkf",
		OnWake: func(c *rivet.ActionCtx[hookedState]) error {
			if !block.CompareAndSwap(true, false) {
				return nil
			}
			h := host.Load()
			// The workflow's wakeup comes due while the hooks run.
			h.SetWakeClock(func() time.Time { return time.Now().Add(2 * time.Hour) })
			for {
				if _, ok := h.NextWakeup(ref); !ok {
					break // the timer took it
				}
				select {
				case <-c.Context().Done():
					return c.Context().Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
			// The wakeup is a request too: wait until it is in progress
			// beside the one that loaded the actor.
			for h.InFlight() < 2 {
				select {
				case <-c.Context().Done():
					return c.Context().Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
			return errors.New("dependency down")
		},
		Actions: rivet.Actions[hookedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (int, error) { return 0, nil }),
		},
		Run: func(ctx *workflow.Ctx[hookedState]) error {
			if err := ctx.Sleep("nap", time.Hour); err != nil {
				return err
			}
			_, err := workflow.Step(ctx, "after", func(s *workflow.StepCtx[hookedState]) (int, error) { return 0, nil })
			return err
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, err := call(t, e.host, "wkf", "k", "get", true); err != nil {
		t.Fatal(err)
	}
	// Asleep before the restart: a workflow stopped before its sleep was
	// recorded would be woken at once, by a wakeup that would then be the
	// request whose wake fails.
	waitFor(t, "the sleep to be recorded", 10*time.Second, func() bool {
		h, err := e.host.History(ctx(t), ref)
		return err == nil && len(h.Entries) == 1
	})
	e.restart() // out of memory; the wakeup (in 1 h) is loaded from storage
	host.Store(e.host)
	if _, ok := e.host.NextWakeup(ref); !ok {
		t.Fatal("no wakeup scheduled after the restart")
	}
	block.Store(true)
	if _, err := call(t, e.host, "wkf", "k", "get", false); !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("the call whose OnWake failed: %v, want ErrInternal", err)
	}
	waitFor(t, "the workflow to be in memory or its wakeup scheduled again", 5*time.Second, func() bool {
		_, sched := e.host.NextWakeup(ref)
		return sched || e.host.Stats().ActiveActors > 0
	})
}

// Two idle actors whose OnSleep calls the other: the reaper runs both hooks
// at once, and each call fails at once (UNAVAILABLE: the callee is going to
// sleep) instead of each waiting for the other's gate until SleepTimeout
// (an hour here, past the test's deadline).
func TestOnSleepsCallingEachOtherDoNotDeadlock(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	results := map[string]error{}
	var both sync.WaitGroup
	both.Add(2)
	other := map[string]string{"p1": "p2", "p2": "p1"}
	act := rivet.Actor[hookedState]{
		Name:    "pair",
		Options: rivet.Options{SleepTimeout: time.Hour, IdleTimeout: 300 * time.Millisecond},
		OnSleep: func(c *rivet.ActionCtx[hookedState]) error {
			k := c.Key()[0]
			mu.Lock()
			_, again := results[k]
			mu.Unlock()
			if again {
				return nil
			}
			both.Done()
			both.Wait() // both hooks run, each holding its actor's gate
			_, err := c.Client().Get("pair", other[k]).Call(c.Context(), "get")
			mu.Lock()
			results[k] = err
			mu.Unlock()
			return nil
		},
		Actions: rivet.Actions[hookedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (int, error) { return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, act), func(c *runtime.Config) { c.IdleTimeout = 300 * time.Millisecond })
	for _, k := range []string{"p1", "p2"} {
		if _, err := call(t, e.host, "pair", k, "get", true); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both OnSleep calls to return", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	// Returned at all, both: the first call fails at once; the second may
	// find its callee asleep already, and wake it.
	for k, err := range results {
		if err != nil && !errors.Is(err, rivet.ErrUnavailable) {
			t.Errorf("OnSleep of %s calling the other: %v, want ErrUnavailable or success", k, err)
		}
	}
}

// A handoff of an actor that requests wait for: the waiting turns are
// refused (UNAVAILABLE) without evicting it, and the handoff runs its
// OnSleep (pageviews' write-behind counts would be lost on every rebalance
// of a busy actor otherwise).
func TestAHandoffOfABusyActorRunsOnSleep(t *testing.T) {
	t.Parallel()
	var sleeps atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	act := rivet.Actor[hookedState]{
		Name:    "busy",
		OnSleep: func(c *rivet.ActionCtx[hookedState]) error { sleeps.Add(1); return nil },
		Actions: rivet.Actions[hookedState]{
			"block": rivet.Action0(func(c *rivet.ActionCtx[hookedState]) (int, error) { close(entered); <-release; return 0, nil }),
			"get":   rivet.Query(func(c *rivet.ActionCtx[hookedState]) (int, error) { return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	ref := runtime.Ref{Name: "busy", Key: []string{"b"}}
	if _, err := call(t, e.host, "busy", "b", "get", true); err != nil {
		t.Fatal(err)
	}
	r1 := make(chan error, 1)
	go func() { _, err := call(t, e.host, "busy", "b", "block", false); r1 <- err }()
	<-entered
	r2 := make(chan error, 1)
	go func() { _, err := call(t, e.host, "busy", "b", "get", false); r2 <- err }()
	waitFor(t, "the second request to wait for the gate", 10*time.Second, func() bool { return e.host.GateWaiters(ref) == 1 })
	part := placement.Partition("busy", storage.EncodeKey([]string{"b"}), testPartitions)
	hd := make(chan error, 1)
	go func() { hd <- e.host.Handoff(context.Background(), part) }()
	waitFor(t, "the handoff to wait for the gate", 10*time.Second, func() bool { return e.host.GateWaiters(ref) == 2 })
	close(release)
	if err := <-r1; err != nil {
		t.Fatal(err)
	}
	err2 := <-r2
	if err := <-hd; err != nil {
		t.Fatal(err)
	}
	if n := sleeps.Load(); n != 1 {
		t.Fatalf("OnSleep ran %d times in the handoff of a busy actor, want 1 (the queued request got %v)", n, err2)
	}
}

// One slow OnSleep holds up neither the deactivation of other idle actors
// nor the reaper's next passes.
func TestASlowOnSleepHoldsUpNoOtherDeactivation(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := rivet.Actor[hookedState]{
		Name:    "slowsleep",
		Options: rivet.Options{SleepTimeout: time.Hour},
		OnSleep: func(c *rivet.ActionCtx[hookedState]) error {
			once.Do(func() { close(entered) })
			select {
			case <-release:
			case <-c.Context().Done():
			}
			return nil
		},
		Actions: rivet.Actions[hookedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (int, error) { return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, slow), func(c *runtime.Config) { c.IdleTimeout = 200 * time.Millisecond })
	defer close(release)
	if _, err := call(t, e.host, "slowsleep", "s", "get", true); err != nil {
		t.Fatal(err)
	}
	<-entered
	callInt(t, e.host, "counter", "c", "getCount", true) // no hooks at all
	waitFor(t, "the idle counter to be deactivated while the slow OnSleep runs", 20*time.Second, func() bool {
		return e.host.Stats().ActiveActors == 1
	})
}

// During a handoff, an OnSleep may call its own actor (a re-entrant turn,
// which still writes on the claim being released): the call and the hook's
// own changes reach the next owner.
func TestOnSleepMayCallItsActorDuringAHandoff(t *testing.T) {
	var callErr atomic.Value
	act := rivet.Actor[hookedState]{
		Name: "selfsave",
		OnSleep: func(c *rivet.ActionCtx[hookedState]) error {
			_, err := c.Client().Get("selfsave", c.Key()...).Call(c.Context(), "save")
			callErr.Store(errBox{err})
			c.State.Sleeps++
			return nil
		},
		Actions: rivet.Actions[hookedState]{
			"save": rivet.Action0(func(c *rivet.ActionCtx[hookedState]) (int, error) { c.State.Setups++; return 0, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[hookedState]) (hookedState, error) { return *c.State, nil }),
		},
	}
	// With a Remote, as a node's host has: the call is served here, not
	// forwarded (this node still owns the partition in every table).
	remote := &countingRemote{}
	withRemote(t, remote)
	e := newEnv(t, counterReg(t, act), nil)
	h2, own2 := secondHost(t, e)
	if _, err := call(t, e.host, "selfsave", "m", "get", true); err != nil {
		t.Fatal(err)
	}
	part := placement.Partition("selfsave", storage.EncodeKey([]string{"m"}), testPartitions)
	if err := e.host.Handoff(ctx(t), part); err != nil {
		t.Fatal(err)
	}
	if got, err := own2.Claim(ctx(t), []uint32{part}); err != nil || len(got) != 1 {
		t.Fatalf("claim after handoff: %v, %v", got, err)
	}
	raw, err := call(t, h2, "selfsave", "m", "get", false)
	if err != nil {
		t.Fatal(err)
	}
	var st hookedState
	_ = json.Unmarshal(raw, &st)
	b, _ := callErr.Load().(errBox)
	if b.err != nil || st.Sleeps != 1 || st.Setups != 1 || remote.calls.Load() != 0 {
		t.Fatalf("OnSleep's call to its own actor during a handoff: %v (forwarded: %d); on the next owner %+v, want sleeps 1, setups 1", b.err, remote.calls.Load(), st)
	}
}

type errBox struct{ err error }

// The reaper leaves an actor alone until its wake is done, commit included:
// while a slow OnWake's writes land, the gate is free and the request that
// loaded the actor has not taken its turn yet, and putting the actor to
// sleep then ran OnSleep and a second OnWake before that request.
func TestAWakeSlowerThanTheIdleTimeoutIsNotReapedBeforeItsCall(t *testing.T) {
	t.Parallel()
	var slow atomic.Bool
	act := rivet.Actor[hookedState]{
		Name:    "slowwake",
		Options: rivet.Options{IdleTimeout: 200 * time.Millisecond},
		OnWake: func(c *rivet.ActionCtx[hookedState]) error {
			c.State.Wakes++
			if slow.Load() {
				time.Sleep(300 * time.Millisecond) // a wake longer than the idle timeout
			}
			return nil
		},
		OnSleep: func(c *rivet.ActionCtx[hookedState]) error { c.State.Sleeps++; return nil },
		Actions: rivet.Actions[hookedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (hookedState, error) { return *c.State, nil }),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	ref := runtime.Ref{Name: "slowwake", Key: []string{"k"}}
	if _, err := call(t, e.host, "slowwake", "k", "get", true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the idle actor to be put to sleep", 10*time.Second, func() bool { return e.host.GateWaiters(ref) == -1 })
	slow.Store(true)
	// The next wake's commit lands only after two of the reaper's passes
	// (a busy etcd).
	e.store.holdGate, e.store.holdEntered = make(chan struct{}), make(chan struct{})
	e.store.holdCommitSub.Store("slowwake")
	type result struct {
		st  hookedState
		err error
	}
	done := make(chan result, 1)
	go func() {
		raw, err := call(t, e.host, "slowwake", "k", "get", false)
		var st hookedState
		if err == nil {
			err = json.Unmarshal(raw, &st)
		}
		done <- result{st, err}
	}()
	<-e.store.holdEntered
	passes := e.host.ReapPasses()
	waitFor(t, "two passes of the reaper", 10*time.Second, func() bool { return e.host.ReapPasses() >= passes+2 })
	close(e.store.holdGate)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.st.Wakes != 2 || r.st.Sleeps != 1 {
		t.Fatalf("the call saw wakes=%d sleeps=%d, want 2 and 1: an OnSleep and another OnWake came between the wake and the call", r.st.Wakes, r.st.Sleeps)
	}
}

// nilClosed counts Close calls on a nil *nilVars.
var nilClosed atomic.Int32

type nilVars struct{}

func (v *nilVars) Close() error {
	if v == nil {
		nilClosed.Add(1)
	}
	return nil
}

func newNilVars() (*nilVars, error) { return nil, errors.New("no connection") }

// A CreateVars that fails after it opened something, and returns it with
// the error, gets it closed: no later activation would ever see it. The
// failing wake is a failed call, and the actor is not created. A nil
// pointer passed on from a failed constructor is left alone.
func TestVarsReturnedWithCreateVarsErrorAreClosed(t *testing.T) {
	var made atomic.Pointer[hookVars]
	act := rivet.Actor[hookedState]{
		Name: "halfvars",
		CreateVars: func(c *rivet.ActionCtx[hookedState]) (any, error) {
			if c.Key()[0] == "nil" {
				return newNilVars()
			}
			v := &hookVars{id: 1}
			made.Store(v)
			return v, errors.New("half made")
		},
		Actions: rivet.Actions[hookedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (int, error) { return 0, nil }),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, err := call(t, e.host, "halfvars", "k", "get", true); !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("a call whose CreateVars failed: %v, want ErrInternal", err)
	}
	if v := made.Load(); v == nil || !v.closed.Load() {
		t.Fatal("the vars CreateVars returned with its error were not closed")
	}
	if _, err := call(t, e.host, "halfvars", "nil", "get", true); !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("a call whose CreateVars failed: %v, want ErrInternal", err)
	}
	if n := nilClosed.Load(); n != 0 {
		t.Fatalf("a nil *nilVars returned with CreateVars' error was closed %d times", n)
	}
}
