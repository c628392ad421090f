// Package nodetest starts real single nodes for the tests of packages that
// host actors (the examples): one node with an embedded etcd on random
// loopback ports, and a Go client of it.
package nodetest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/node"
)

// Start starts a node on dir (data kept there: a second Start on the same
// dir is a restart) hosting defs, and returns a client of it and the stop
// of both, which the test's cleanup also calls. The node logs nothing, so
// it sends the text of actions' internal errors to callers
// (ExposeErrors): "internal error (the node's log has the cause)" told a
// test nothing it could read (a user trial). For a log, start a node with
// node.Start and a logger of your own.
func Start(t *testing.T, dir string, defs ...rivet.Definition) (*client.Client, func()) {
	t.Helper()
	reg, err := rivet.Setup(defs...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultLocalConfig(dir)
	cfg.Logger = zap.NewNop()
	cfg.Runtime.ExposeErrors = true
	cfg.Runtime.CheckQueries = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		c.Close()
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if err := n.Stop(sctx); err != nil {
			t.Errorf("node stop: %v", err)
		}
	}
	t.Cleanup(stop)
	return c, stop
}

// VerifyNoLeaks runs the package's tests and fails them if goroutines are
// left behind, apart from the few process-wide ones etcd's client and
// embedded server keep after Close. Call it from TestMain.
func VerifyNoLeaks(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
	)
}
