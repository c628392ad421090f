package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
)

// A turn whose code ignores its context, still running at the stop's
// deadline, costs only its own actor its OnSleep: the other actors in
// memory, which no turn holds, still get theirs (users persist state
// there), committed, within the stop's deadline. The stuck actor's OnSleep
// does not run under its turn.
func TestAStuckTurnAtTheStopDeadlineLeavesOtherActorsTheirOnSleep(t *testing.T) {
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
