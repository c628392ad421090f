package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
)

// A stop whose deadline comes while an action that ignores its context
// runs names it in its warning: the actor, its key, the action and how
// long it ran (a user trial: the warning said only that "calls" were left
// running, and the operator had to guess which).
func TestAStopThatRanOutOfTimeNamesTheActionsLeftRunning(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	releaseCall := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseCall()
	type st struct{ N int }
	reg, err := rivet.Setup(rivet.Actor[st]{
		Name: "stuckReport",
		Actions: rivet.Actions[st]{
			"report": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				entered <- struct{}{}
				<-release // not c.Context(): it ignores it
				return 0, nil
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	core, logs := observer.New(zapcore.WarnLevel)
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.HTTPAddr = "-"
	cfg.Logger = zap.New(core)
	n, err := Start(ctx, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = n.Stop(sctx)
	})
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	called := make(chan error, 1)
	go func() {
		_, err := c.GetOrCreate("stuckReport", "doc2").Call(ctx, "report")
		called <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the action did not start")
	}
	sctx, scancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer scancel()
	if err := n.Stop(sctx); err == nil {
		t.Error("the stop returned nil with a call still running past its deadline")
	}
	releaseCall()
	<-called
	found := logs.FilterMessage("the stop ran out of time with calls still running whose actions ignore their context: leaving them").All()
	if len(found) != 1 {
		t.Fatalf("%d warnings of calls left running, want 1; all: %+v", len(found), logs.All())
	}
	m := found[0].ContextMap()
	names := fmt.Sprint(m["longest_running"])
	if m["actions_running"] != int64(1) || !strings.Contains(names, `stuckReport ["doc2"] report (running `) {
		t.Errorf("the warning says %v; want 1 action running, stuckReport [\"doc2\"] report", m)
	}
}
