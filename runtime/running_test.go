package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

type reentState struct{ N int }

// RunningActions names the actions running now, whatever order their
// turns end in: here a re-entrant call outlives the call it re-entered
// (its caller's deadline ended the outer one first). One record per actor,
// put back by each turn as it ended, named the outer action for good and
// nothing while the inner one ran (a review's find).
func TestRunningActionsFollowTurnsEndingInAnyOrder(t *testing.T) {
	t.Parallel()
	innerIn, innerGo, innerDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	act := rivet.Actor[reentState]{
		Name: "reent",
		Actions: rivet.Actions[reentState]{
			"outer": rivet.Action0(func(c *rivet.ActionCtx[reentState]) (int, error) {
				cctx, cancel := context.WithTimeout(c.Context(), 100*time.Millisecond)
				defer cancel()
				_, _ = c.Client().Get("reent", c.Key()...).Call(cctx, "inner")
				return 0, nil
			}),
			"inner": rivet.Query(func(c *rivet.ActionCtx[reentState]) (int, error) {
				defer close(innerDone)
				close(innerIn)
				<-innerGo // ignores its context
				return 0, nil
			}),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	ref := runtime.Ref{Name: "reent", Key: []string{"k"}}
	t.Cleanup(func() {
		select {
		case <-innerGo:
		default:
			close(innerGo)
		}
	})
	if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "outer", CreateIfMissing: true}); err != nil {
		t.Fatalf("outer: %v", err)
	}
	<-innerIn
	if r, n := e.host.RunningActions(5); n != 1 || r[0].Action != "inner" {
		t.Fatalf("outer returned, inner still running: RunningActions %d %v; want inner alone", n, r)
	}
	close(innerGo)
	<-innerDone
	waitFor(t, "no action to run", 10*time.Second, func() bool { _, n := e.host.RunningActions(5); return n == 0 })
}
