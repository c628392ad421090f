package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// No step runs after the one that asked to destroy the actor: its effects
// (an email, a charge) would happen for an actor that is going away.
func TestNoStepRunsAfterAStepsDestroy(t *testing.T) {
	t.Parallel()
	var after atomic.Int64
	act := rivet.Actor[alarmState]{
		Name: "sdafter",
		Actions: rivet.Actions[alarmState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (alarmState, error) { return *c.State, nil }),
		},
		Run: func(ctx *workflow.Ctx[alarmState]) error {
			if _, err := workflow.Step(ctx, "finish", func(s *workflow.StepCtx[alarmState]) (int, error) {
				return 0, s.Destroy()
			}); err != nil {
				return err
			}
			for i := range 3 {
				if _, err := workflow.Step(ctx, "after"+string(rune('a'+i)), func(s *workflow.StepCtx[alarmState]) (int, error) {
					after.Add(1) // an effect: an email, a charge
					s.State.Count++
					return 0, nil
				}); err != nil {
					return err
				}
			}
			return ctx.Sleep("linger", time.Hour)
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, err := call(t, e.host, "sdafter", "s", "get", true); err != nil && !errors.Is(err, rivet.ErrNotFound) {
		t.Fatal(err)
	}
	waitFor(t, "the step's destroy", 20*time.Second, func() bool {
		_, err := e.host.Get(ctx(t), runtime.Ref{Name: "sdafter", Key: []string{"s"}})
		return errors.Is(err, rivet.ErrNotFound)
	})
	if n := after.Load(); n > 0 {
		t.Errorf("%d steps ran after the step that destroyed the actor", n)
	}
}

// A stored destroy of an actor not in memory runs as Destroy does, which
// goes on when the actor's hooks fail (loading it as any turn does would
// retry for ever).
//
// Tests that share it do not run in parallel with each other (see
// TestMain).
var wakerFails atomic.Bool

var waker = rivet.Actor[alarmState]{
	Name: "waker",
	Actions: rivet.Actions[alarmState]{
		"add": rivet.Action(func(c *rivet.ActionCtx[alarmState], n int) (int, error) {
			c.State.Count += n
			return c.State.Count, nil
		}),
		"quit": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			return 0, c.Destroy()
		}),
		// quitAfterAdd schedules an add due a second before it asks to
		// be destroyed: its stored call sorts before the destroy.
		"quitAfterAdd": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			if _, err := c.Schedule().At(time.Now().Add(-time.Second), "add", 1); err != nil {
				return 0, err
			}
			return 0, c.Destroy()
		}),
	},
	OnWake: func(c *rivet.ActionCtx[alarmState]) error {
		if wakerFails.Load() {
			return errors.New("dependency down")
		}
		return nil
	},
}

func TestAStoredDestroyRunsWhenTheActorsWakeFails(t *testing.T) {
	storedDestroyRunsThoughWakeFails(t, "quit")
}

// storedDestroyRunsThoughWakeFails has a waker ask to be destroyed with
// action quit, restarts the node with its OnWake failing, and waits for
// the destroy to have run all the same.
func storedDestroyRunsThoughWakeFails(t *testing.T, quit string) {
	e := newEnv(t, counterReg(t, waker), nil)
	ref := runtime.Ref{Name: "waker", Key: []string{quit}}
	callInt(t, e.host, "waker", quit, "add", true, 1)
	e.host.SetWakeClock(func() time.Time { return time.Now().Add(-time.Hour) }) // not before the restart
	callInt(t, e.host, "waker", quit, quit, false)
	wakerFails.Store(true)
	defer wakerFails.Store(false)
	e.restart()
	waitFor(t, "the stored destroy", 20*time.Second, func() bool {
		_, err := e.host.Get(ctx(t), ref)
		return errors.Is(err, rivet.ErrNotFound)
	})
}

// So it does with an overdue call stored before it: the destroy comes
// first (no call runs after the request), not a load that fails.
func TestAStoredDestroyAfterAnOverdueCallRunsWhenTheActorsWakeFails(t *testing.T) {
	t.Parallel()
	storedDestroyRunsThoughWakeFails(t, "quitAfterAdd")
}

// OnWake and OnSleep may destroy their actor; OnDestroy asking again
// changes nothing.
func TestHooksMayDestroyTheirActor(t *testing.T) {
	t.Parallel()
	var wakes, destroys atomic.Int64
	act := rivet.Actor[alarmState]{
		Name:    "selfhooks",
		Options: rivet.Options{IdleTimeout: 300 * time.Millisecond},
		Actions: rivet.Actions[alarmState]{
			"add": rivet.Action(func(c *rivet.ActionCtx[alarmState], n int) (int, error) {
				c.State.Count += n
				return c.State.Count, nil
			}),
		},
		OnWake: func(c *rivet.ActionCtx[alarmState]) error {
			wakes.Add(1)
			if c.State.Count == 7 {
				return c.Destroy()
			}
			return nil
		},
		OnSleep: func(c *rivet.ActionCtx[alarmState]) error {
			if c.State.Count == 5 {
				return c.Destroy()
			}
			return nil
		},
		OnDestroy: func(c *rivet.ActionCtx[alarmState]) error {
			destroys.Add(1)
			return c.Destroy()
		},
	}
	e := newEnv(t, counterReg(t, act), func(c *runtime.Config) { c.IdleTimeout = 300 * time.Millisecond })
	gone := func(k string) func() bool {
		return func() bool {
			_, err := e.host.Get(ctx(t), runtime.Ref{Name: "selfhooks", Key: []string{k}})
			return errors.Is(err, rivet.ErrNotFound)
		}
	}
	// OnSleep (the reaper) asks.
	callInt(t, e.host, "selfhooks", "s", "add", true, 5)
	waitFor(t, "OnSleep's destroy", 20*time.Second, gone("s"))
	// OnDestroy asks again while destroyed by an operator: nothing left.
	callInt(t, e.host, "selfhooks", "d", "add", true, 1)
	if err := e.host.Destroy(ctx(t), runtime.Ref{Name: "selfhooks", Key: []string{"d"}}); err != nil {
		t.Fatal(err)
	}
	if !gone("d")() {
		t.Fatal("not destroyed")
	}
	// OnWake asks: a restart, then the next call wakes it.
	callInt(t, e.host, "selfhooks", "w", "add", true, 7)
	e.restart()
	_, _ = call(t, e.host, "selfhooks", "w", "add", false, 0)
	waitFor(t, "OnWake's destroy", 20*time.Second, gone("w"))
	if n := destroys.Load(); n != 3 {
		t.Fatalf("OnDestroy ran %d times for 3 destroys", n)
	}
	if wakes.Load() < 3 {
		t.Fatalf("%d wakes", wakes.Load())
	}
}

// Calls made once a destroy was asked for get NOT_FOUND, as after it: not
// answers whose writes the destroy then deletes.
func TestCallsAfterADestroyRequestAreNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	for i := range 10 {
		k := "k" + string(rune('a'+i))
		callInt(t, e.host, "alarm", k, "add", true, 1)
		callInt(t, e.host, "alarm", k, "quit", false, false)
		if _, err := call(t, e.host, "alarm", k, "add", false, 1); !errors.Is(err, rivet.ErrNotFound) {
			t.Fatalf("a call after quit returned: %v, want ErrNotFound", err)
		}
	}
}

// No scheduled call runs after the actor asked to be destroyed, not even
// one due before the request (overdue: the actor was busy, or just loaded):
// it takes no more calls, as it takes no requests. One due at the
// request's time sorted after the destroy and never ran; one due a moment
// earlier ran, an effect of an actor going away.
func TestNoScheduledCallRunsAfterADestroyRequest(t *testing.T) {
	t.Parallel()
	var marks atomic.Int64
	type st struct{ N int }
	quitter := rivet.Actor[st]{
		Name: "quitter",
		Actions: rivet.Actions[st]{
			// quitAfter schedules mark ms from now (a past time if
			// negative), then asks to be destroyed.
			"quitAfter": rivet.Action(func(c *rivet.ActionCtx[st], ms int) (int, error) {
				if _, err := c.Schedule().At(time.Now().Add(time.Duration(ms)*time.Millisecond), "mark"); err != nil {
					return 0, err
				}
				return 0, c.Destroy()
			}),
			"mark": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				marks.Add(1)
				return 0, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil }),
		},
	}
	e := newEnv(t, counterReg(t, quitter), nil)
	for i, ms := range []int{-1000, 0} {
		k := string(rune('a' + i))
		callInt(t, e.host, "quitter", k, "get", true)
		callInt(t, e.host, "quitter", k, "quitAfter", false, ms)
		waitFor(t, "the destroy", 10*time.Second, func() bool {
			_, err := call(t, e.host, "quitter", k, "get", false)
			return errors.Is(err, rivet.ErrNotFound)
		})
		if n := marks.Load(); n != 0 {
			t.Fatalf("a call due %d ms from the destroy request ran %d time(s) after it", ms, n)
		}
	}
}

// A destroy does not wait for a workflow step in flight to end on its own
// (its timeout can be minutes, or none): the step's context is cancelled,
// as a workflow cancel's is, and the actor is gone at once. Before, the
// destroy waited for the step's turn until its caller's deadline, and
// failed.
func TestDestroyStopsAStepInFlight(t *testing.T) {
	t.Parallel()
	var started, sawCancel atomic.Int64
	release := make(chan struct{})
	defer close(release)
	e := newEnv(t, counterReg(t, cancelActor(&started, &sawCancel, release)), nil)
	ref := runtime.Ref{Name: "cancelme", Key: []string{"d"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the blocking step to start", 10*time.Second, func() bool { return started.Load() == 1 })
	dctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	if err := e.host.Destroy(dctx, ref); err != nil {
		t.Fatalf("destroy of an actor whose step is in flight: %v", err)
	}
	if sawCancel.Load() != 1 {
		t.Fatalf("the step in flight saw its context cancelled %d times, want 1", sawCancel.Load())
	}
	if ks := actorKeys(t, e, "cancelme", "d"); len(ks) > 0 {
		t.Fatalf("stored after the destroy: %v", ks)
	}
	if _, err := e.host.Get(ctx(t), ref); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("get after the destroy: %v, want ErrNotFound", err)
	}
}

// A destroy whose turn never comes (an action holds it past the caller's
// deadline) fails, and the run it stopped on the way (a Do step, which
// holds no turn) runs again: nothing is left in memory without a run.
func TestADestroyThatTimesOutLeavesTheWorkflowRunning(t *testing.T) {
	t.Parallel()
	var started atomic.Int64
	release := make(chan struct{})
	holding := make(chan struct{}, 1)
	act := rivet.Actor[cancelState]{
		Name: "dwait",
		Run: func(ctx *workflow.Ctx[cancelState]) error {
			_, err := workflow.DoOpts(ctx, workflow.StepOptions{Name: "wait", Timeout: workflow.NoTimeout}, func(d *workflow.DoCtx) (int, error) {
				started.Add(1)
				select {
				case <-release:
					return 1, nil
				case <-d.Context().Done():
					return 0, d.Context().Err()
				}
			})
			return err
		},
		Actions: rivet.Actions[cancelState]{"slow": rivet.Action(func(c *rivet.ActionCtx[cancelState], ms int) (int, error) {
			holding <- struct{}{}
			time.Sleep(time.Duration(ms) * time.Millisecond)
			return ms, nil
		})},
	}
	e := newEnv(t, counterReg(t, act), nil)
	ref := runtime.Ref{Name: "dwait", Key: []string{"w"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the step to start", 10*time.Second, func() bool { return started.Load() == 1 })
	slow := make(chan error, 1)
	go func() { _, err := call(t, e.host, "dwait", "w", "slow", false, 1000); slow <- err }()
	<-holding
	dctx, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	defer cancel()
	if err := e.host.Destroy(dctx, ref); err == nil {
		t.Fatal("the destroy took a turn the slow action held")
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to run its step again", 15*time.Second, func() bool { return started.Load() == 2 })
	close(release)
	waitFor(t, "the workflow to complete", 15*time.Second, func() bool {
		return inspect(t, e.host, "dwait", "w").WorkflowStatus == runtime.WorkflowCompleted
	})
}
