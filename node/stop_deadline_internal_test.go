package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
)

// A stop whose deadline ends while a call runs an action that ignores its
// context (blocked on I/O without a timeout) returns soon after its
// deadline, as SIGTERM's ShutdownTimeout promises, rather than wait for
// the action for as long as it runs: the gRPC server waited for its
// handler (GracefulStop, and Stop with WaitForHandlers). The caller is
// told the outcome is unknown, and the node starts again on its data.
func TestAStopPastItsDeadlineDoesNotWaitForAnActionThatIgnoresItsContext(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	releaseCall := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseCall()
	type st struct{ N int }
	reg, err := rivet.Setup(rivet.Actor[st]{
		Name: "stuck",
		Actions: rivet.Actions[st]{
			"block": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				c.State.N++
				entered <- struct{}{}
				<-release // not c.Context(): it ignores it
				return c.State.N, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil }),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func() (*Node, *client.Client) {
		cfg := DefaultLocalConfig(dir)
		cfg.HTTPAddr = "-"
		cfg.Logger = zap.NewNop()
		n, err := Start(ctx, cfg, reg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer scancel()
			_ = n.Stop(sctx) // idempotent: the first stop's error
		})
		c, err := client.New(n.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return n, c
	}
	n, c := start()
	called := make(chan error, 1)
	go func() {
		_, err := rivet.Call[int](ctx, c.GetOrCreate("stuck", "s"), "block")
		called <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the action did not start")
	}

	const deadline = 50 * time.Millisecond
	stopped := make(chan error, 1)
	t0 := time.Now()
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), deadline)
		defer scancel()
		stopped <- n.Stop(sctx)
	}()
	select {
	case err := <-stopped:
		if err == nil {
			t.Error("the stop returned nil with a call still running past its deadline")
		}
	case <-time.After(deadline + runtime.StopGrace + 10*time.Second):
		releaseCall()
		<-stopped
		t.Fatalf("the stop (deadline %v) was still waiting for the action %v later", deadline, time.Since(t0))
	}
	if err := <-called; err == nil || !rivet.OutcomeUnknown(err) {
		t.Errorf("the call cut off by the stop = %v, want an error of unknown outcome (no retry)", err)
	}
	releaseCall()

	_, c2 := start()
	// The cut-off turn's change was never committed.
	if n, err := rivet.Call[int](ctx, c2.Get("stuck", "s"), "get"); err != nil || n != 0 {
		t.Fatalf("after the restart: get = %d, %v; want 0 (the cut-off turn's write not committed)", n, err)
	}
}
