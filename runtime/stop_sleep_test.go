package runtime_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// A turn whose code ignores its context, still running at the stop's
// deadline, costs only its own actor its OnSleep: the other actors in
// memory, which no turn holds, still get theirs (users persist state
// there), committed, within the stop's deadline. The stuck actor's OnSleep
// does not run under its turn.
func TestAStuckTurnAtTheStopDeadlineLeavesOtherActorsTheirOnSleep(t *testing.T) {
	t.Parallel()
	p := &hookProbe{}
	entered, block := make(chan struct{}), make(chan struct{})
	var inTurn, sleptInTurn atomic.Bool
	blocker := rivet.Actor[hookedState]{
		Name: "blocker",
		OnSleep: func(c *rivet.ActionCtx[hookedState]) error {
			if inTurn.Load() {
				sleptInTurn.Store(true)
			}
			return nil
		},
		Actions: rivet.Actions[hookedState]{
			"block": rivet.Action0(func(c *rivet.ActionCtx[hookedState]) (int, error) {
				inTurn.Store(true)
				defer inTurn.Store(false)
				close(entered)
				<-block // not c.Context(): it ignores it
				return 0, nil
			}),
		},
	}
	e := newEnv(t, counterReg(t, hookedActor(p, false), blocker), nil)
	mustGetHooked(t, e.host, "idle", true)
	done := make(chan struct{})
	go func() { defer close(done); _, _ = call(t, e.host, "blocker", "b", "block", true) }()
	<-entered
	sctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	err := e.host.Stop(sctx)
	cancel()
	if err == nil {
		t.Error("stop returned nil with a request still running past its deadline")
	}
	if sleptInTurn.Load() {
		t.Error("the stuck actor's OnSleep ran while its turn did")
	}
	close(block)
	<-done
	if sleptInTurn.Load() {
		t.Error("the stuck actor's OnSleep ran while its turn did")
	}
	e.restart()
	if v := mustGetHooked(t, e.host, "idle", false); v.Sleeps != 1 {
		t.Fatalf("the idle actor's OnSleep committed %d times in the stop, want 1", v.Sleeps)
	}
}

// A host's stop returns soon after its deadline even when code it waits
// for ignores its context: an OnSleep hook, or a scheduled call (a
// request of the host's own, which its loops wait for). It leaves that
// code running (whose writes then fail to commit) instead of waiting for it
// as long as it runs, for ever if it never returns.
func TestAHostStopPastItsDeadlineDoesNotWaitForCodeThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// start brings the host to a stop where stuck code runs (or will
		// run: an OnSleep runs in the stop) and returns once it is.
		start func(t *testing.T, h *runtime.Host)
	}{
		{"OnSleep", func(t *testing.T, h *runtime.Host) {
			if _, err := call(t, h, "stuck", "k", "get", true); err != nil {
				t.Fatal(err)
			}
		}},
		{"scheduled call", func(t *testing.T, h *runtime.Host) {
			if _, err := call(t, h, "stuck", "k", "later", true); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entered, release := make(chan struct{}, 2), make(chan struct{})
			var releaseOnce sync.Once
			releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
			defer releaseAll()
			stuck := func() { entered <- struct{}{}; <-release } // ignores its context
			act := rivet.Actor[hookedState]{
				Name: "stuck",
				OnSleep: func(c *rivet.ActionCtx[hookedState]) error {
					if tc.name == "OnSleep" {
						stuck()
					}
					return nil
				},
				Actions: rivet.Actions[hookedState]{
					"get": rivet.Query(func(c *rivet.ActionCtx[hookedState]) (int, error) { return 0, nil }),
					"later": rivet.Action0(func(c *rivet.ActionCtx[hookedState]) (int, error) {
						_, err := c.Schedule().After(time.Millisecond, "block")
						return 0, err
					}),
					"block": rivet.Action0(func(c *rivet.ActionCtx[hookedState]) (int, error) { stuck(); return 0, nil }),
				},
			}
			e := newEnv(t, counterReg(t, act), nil)
			tc.start(t, e.host)
			if tc.name == "scheduled call" {
				select {
				case <-entered:
				case <-time.After(30 * time.Second):
					t.Fatal("the scheduled call did not run")
				}
			}
			const deadline = 300 * time.Millisecond
			stopped := make(chan error, 1)
			go func() {
				sctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				stopped <- e.host.Stop(sctx)
			}()
			select {
			case err := <-stopped:
				if err == nil {
					t.Error("the stop returned nil with code still running past its deadline")
				}
			case <-time.After(deadline + runtime.StopGrace + 20*time.Second):
				releaseAll()
				<-stopped
				t.Fatal("the stop was still waiting for code that ignores its context long after its deadline")
			}
			if tc.name == "OnSleep" {
				select {
				case <-entered:
				default:
					t.Error("the stop returned without running OnSleep")
				}
			}
			releaseAll()
		})
	}
}
