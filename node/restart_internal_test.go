package node

import (
	"context"
	"encoding/json"
	"errors"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// crash stops n the way a killed process stops: no gossip leave, no
// resign, so its registration and claims stay on its lease.
func crash(ctx context.Context, n *Node) {
	n.stopBalancer()
	_ = n.host.Stop(ctx)
	n.hostStopped = true // closeAll must not resign
	n.closeAll()
}

// A node that crashes and comes back at once under its ID and gossip
// address (a process restarted by its supervisor) takes its partitions
// back itself: the other node, which never saw it leave gossip, claims
// none of them. It claimed them all, and handed them back one by one,
// because the restarted node revoked its previous run's lease, which held
// its registration too, before registering again.
func TestAQuickRestartUnderTheSameIDMovesNoPartitionTwice(t *testing.T) {
	const parts = 16
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	config := func(id string, join []string) Config {
		return ClusterConfigForTest(t, id, endpoints, "/restart-test/", parts, join)
	}
	start := func(cfg Config) *Node { return StartForTest(t, ctx, cfg, reg) }
	a := start(config("a", nil))
	bcfg := config("b", []string{a.GossipAddr()})
	b := start(bcfg)
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	claimed, handedOff := a.claimed.Load(), a.handedOff.Load()

	crash(ctx, b)
	bcfg.GossipAddr = b.GossipAddr()
	b2 := start(bcfg)
	awaitCond(t, ctx, "a and the restarted b to share the partitions", sharing(parts, a, b2))
	if got := a.claimed.Load() - claimed; got != 0 {
		t.Errorf("a claimed %d of b's partitions while b restarted, and handed off %d", got, a.handedOff.Load()-handedOff)
	}
}

// A second process started under a running node's ID (by mistake, or a
// restart while the previous process still lived, frozen) revokes the
// first's lease, as a restart does. The first must then give way with a
// clear error: it re-established its lease and revoked the second's, which
// did the same in turn, and the two took the node's partitions from each
// other every second for as long as both ran (each revoke fenced the
// other's writes, so there were never two writers, but nothing stayed
// served).
func TestASecondProcessUnderARunningNodesIDReplacesItAndTheFirstGivesWay(t *testing.T) {
	const parts = 8
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := StartForTest(t, ctx, ClusterConfigForTest(t, "a", endpoints, "/dup-id-test/", parts, nil), reg)
	awaitCond(t, ctx, "the first process to own every partition", func() bool { return first.own.Owned() == parts })
	serving := func(n *Node) bool {
		res, err := n.health.Check(ctx, &healthpb.HealthCheckRequest{})
		return err == nil && res.Status == healthpb.HealthCheckResponse_SERVING
	}
	awaitCond(t, ctx, "the first process to report SERVING", func() bool { return serving(first) })
	second := StartForTest(t, ctx, ClusterConfigForTest(t, "a", endpoints, "/dup-id-test/", parts, nil), reg)

	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	select {
	case <-first.Done():
		// What a program that embeds the node (Start, not Run) sees.
		err := first.Err()
		if !errors.Is(err, runtime.ErrReplaced) {
			t.Fatalf("the first process's fatal error = %v, want runtime.ErrReplaced", err)
		}
		t.Logf("first process: %v", err)
		// Probes stop sending it work: it serves nothing now.
		if serving(first) {
			t.Fatal("the first process still reports SERVING after it failed")
		}
	case <-wctx.Done():
		r1, l1 := first.own.LeaseStats()
		r2, l2 := second.own.LeaseStats()
		t.Fatalf("the first process never gave way (its lease lost %d times, renewed %d; the second's lost %d times, renewed %d)", l1, r1, l2, r2)
	}
	// The first's lease loop has ended: the second keeps its lease and
	// takes every partition.
	if first.own.Lease() != 0 || first.own.Owned() != 0 {
		t.Fatalf("the first process holds lease %x and %d partitions after giving way", first.own.Lease(), first.own.Owned())
	}
	awaitCond(t, ctx, "the second process to own every partition", func() bool { return second.own.Owned() == parts })
	kv, err := second.store.Get(ctx, storage.NodeKey("a"))
	if err != nil {
		t.Fatal(err)
	}
	var rec runtime.NodeRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil || rec.Lease != second.own.Lease() {
		t.Fatalf("node a registered as %+v (%v), want on the second process's lease %x", rec, err, second.own.Lease())
	}
	if _, losses := second.own.LeaseStats(); losses != 0 {
		t.Fatalf("the second process lost its lease %d times", losses)
	}
}

// A second node started on a running node's data directory (the same
// --data-dir twice, so the same node ID) is refused at once, saying why,
// and the first serves on undisturbed. Its embedded etcd used to wait for
// ever, logging nothing above info and deaf to the start's context (so to
// SIGTERM), for the database lock the first node's member holds.
func TestASecondNodeOnARunningNodesDataDirIsRefused(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := DefaultLocalConfig(dir)
	cfg.HTTPAddr, cfg.Logger = "-", zap.NewNop()
	first := StartForTest(t, ctx, cfg, reg)

	second := DefaultLocalConfig(dir)
	second.HTTPAddr, second.Logger = "-", zap.NewNop()
	done := make(chan error, 1)
	go func() {
		n, err := Start(ctx, second, reg)
		if err == nil {
			_ = n.Stop(context.Background())
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "in use by another running node") {
			t.Fatalf("second node on the same data dir: %v, want refused as in use", err)
		}
		t.Logf("second node: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("a second node on a running node's data dir neither started nor failed in 30 s")
	}
	if _, losses := first.own.LeaseStats(); losses != 0 || first.own.Owned() != int(cfg.Partitions) {
		t.Fatalf("the first node lost its lease %d times and owns %d of %d partitions", losses, first.own.Owned(), cfg.Partitions)
	}
	// Its lock goes with it: the directory serves the next run.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if err := first.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	StartForTest(t, ctx, second, reg)
}

// A node runs on until it fails or is stopped: Done stays open and Err nil
// while it serves, and a Stop without a failure closes Done leaving Err
// nil, so that a program waiting on Done for the node's life learns it
// ended either way.
func TestANodesDoneClosesOnStopWithoutAnError(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.HTTPAddr, cfg.Logger = "-", zap.NewNop()
	n, err := Start(ctx, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Done():
		t.Fatalf("Done closed on a serving node (Err %v)", n.Err())
	default:
	}
	if err := n.Err(); err != nil {
		t.Fatalf("Err = %v on a serving node", err)
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Done():
	default:
		t.Fatal("Done still open after Stop")
	}
	if err := n.Err(); err != nil {
		t.Fatalf("Err = %v after a clean Stop", err)
	}
}

// Run stops a node that gives way to another process under its ID, and
// returns why.
func TestRunReturnsWhenAnotherProcessTakesItsNodeIDOver(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const prefix = "/dup-run-test/"
	done := make(chan error, 1)
	cfg := ClusterConfigForTest(t, "a", endpoints, prefix, 8, nil)
	// As under --log-format json: the failure is logged at ERROR once, as
	// the node failed, and Run's exit line does not repeat it at ERROR.
	core, logs := observer.New(zapcore.InfoLevel)
	cfg.Logger, cfg.logJSON = zap.New(core), true
	go func() { done <- Run(ctx, cfg, reg) }()
	takeOverOnceRegistered(t, ctx, endpoints, prefix, reg)
	select {
	case err := <-done:
		if !errors.Is(err, runtime.ErrReplaced) {
			t.Fatalf("Run = %v, want runtime.ErrReplaced", err)
		}
		if !errors.As(err, new(loggedError)) {
			t.Errorf("Run = %v, not marked as logged: ExitStatus writes it again", err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return once another process took its node ID over")
	}
	fatal := logs.FilterMessageSnippet("fatal error").FilterLevelExact(zapcore.ErrorLevel).Len()
	exit := logs.FilterMessage("exiting on an error").All()
	if fatal != 1 || len(exit) != 1 || exit[0].Level != zapcore.InfoLevel || exit[0].ContextMap()["node"] != "a" {
		t.Errorf("fatal errors logged at ERROR: %d; the exit line: %+v; want one, and the exit line at INFO with the node", fatal, exit)
	}
}

// A node that fails while it starts (here another process takes its node
// ID over while it waits to reach a gossip peer) fails its Start with why,
// at once: Start used to wait out SettleTimeout, then return a node
// "serving" with no lease, no partition, and its failure unread.
func TestAStartThatFailsMeanwhileReturnsWhy(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const prefix = "/dup-start-test/"
	// A peer that never answers holds the start in its wait for gossip,
	// for longer than the test runs.
	cfg := ClusterConfigForTest(t, "a", endpoints, prefix, 8, []string{"127.0.0.1:1"})
	cfg.SettleTimeout = 10 * time.Minute
	done := startInBackground(ctx, cfg, reg)
	takeOverOnceRegistered(t, ctx, endpoints, prefix, reg)
	select {
	case s := <-done:
		if s.err == nil {
			_ = s.n.Stop(context.Background())
		}
		if !errors.Is(s.err, runtime.ErrReplaced) {
			t.Fatalf("Start = %v, want runtime.ErrReplaced", s.err)
		}
	case <-ctx.Done():
		t.Fatal("Start did not return once another process took its node ID over")
	}
}

// A second process under a running node's ID that joins gossip through
// that node (its only seed, the usual setup of a one-node cluster) starts
// at once, as it does through any other member: the seed answered, knowing
// only this node's ID at the other process's address. It used to count
// itself alone and wait out SettleTimeout before claiming anything.
func TestASecondProcessJoiningThroughTheNodeItReplacesStartsAtOnce(t *testing.T) {
	const parts = 8
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const prefix = "/dup-gossip-test/"
	first := StartForTest(t, ctx, ClusterConfigForTest(t, "a", endpoints, prefix, parts, nil), reg)
	cfg := ClusterConfigForTest(t, "a", endpoints, prefix, parts, []string{first.GossipAddr()})
	// Longer than the test runs: a start that waits it out fails.
	cfg.SettleTimeout = 10 * time.Minute
	done := startInBackground(ctx, cfg, reg)
	var second *Node
	select {
	case s := <-done:
		if s.err != nil {
			t.Fatalf("the second process's Start: %v", s.err)
		}
		second = s.n
		t.Cleanup(func() { _ = second.Stop(context.Background()) })
	case <-ctx.Done():
		t.Fatal("the second process's Start waited for a gossip peer other than the process it replaces")
	}
	select {
	case <-first.Done():
		if err := first.Err(); !errors.Is(err, runtime.ErrReplaced) {
			t.Fatalf("the first process's error = %v, want runtime.ErrReplaced", err)
		}
	case <-ctx.Done():
		t.Fatal("the first process never gave way")
	}
	awaitCond(t, ctx, "the second process to own every partition", func() bool { return second.own.Owned() == parts })
}

// A node that fails on its own with its lease still held (its embedded
// etcd died, its gRPC listener failed) reports NOT_SERVING at once, so
// that probes and load balancers stop sending it work it cannot do.
func TestAFailedNodeReportsNotServing(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.HTTPAddr, cfg.Logger = "-", zap.NewNop()
	n := StartForTest(t, ctx, cfg, reg)
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		res, err := n.health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Status
	}
	awaitCond(t, ctx, "the node to report SERVING", func() bool { return status() == healthpb.HealthCheckResponse_SERVING })
	n.fail(errors.New("injected: the embedded etcd died"))
	select {
	case <-n.Done():
	default:
		t.Fatal("Done is open after the node failed")
	}
	if n.own.Lease() == 0 {
		t.Fatal("the lease is gone: this test is of a failure that keeps it")
	}
	if st := status(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("a failed node reports %v", st)
	}
}

// takeOverOnceRegistered starts a second process under node ID "a" once a
// first has registered it under prefix.
func takeOverOnceRegistered(t *testing.T, ctx context.Context, endpoints []string, prefix string, reg *rivet.Registry) {
	t.Helper()
	st, err := etcdstore.New(etcdtest.NewClient(t, endpoints), prefix)
	if err != nil {
		t.Fatal(err)
	}
	awaitCond(t, ctx, "the first process to register", func() bool {
		_, err := st.Get(ctx, storage.NodeKey("a"))
		return err == nil
	})
	StartForTest(t, ctx, ClusterConfigForTest(t, "a", endpoints, prefix, 8, nil), reg)
}
