package node

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// freeLoopbackAddr returns a loopback address whose port was free a moment
// ago: a restarted member must listen where it did, and ":0" would not.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// A node whose embedded etcd is out of space (its NOSPACE alarm) starts
// again: it waits, saying so, with its member serving, until an operator
// frees space and disarms the alarm, then serves. It exited, "node:
// cluster config: ... database space exceeded" (etcd refuses a
// transaction that may put, whether or not the key exists), taking its
// member down: a restart during the incident left the operator no member
// to disarm, and no later start could begin.
func TestANodeWhoseEtcdIsOutOfSpaceStartsOnceSpaceIsFreed(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := smallQuotaConfig(t)
	cfg.EtcdClientAddr = freeLoopbackAddr(t)
	cfg.EtcdPeerAddr = freeLoopbackAddr(t)
	cfg.HTTPAddr = freeLoopbackAddr(t) // probed while the restart waits
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	n, err := Start(ctx, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := counterCall(ctx, n, "k", "increment", 1); err != nil {
		t.Fatal(err)
	}
	fillEtcd(t, ctx, n)
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	_ = n.Stop(sctx) // its handoffs are refused: etcd is full
	scancel()

	core, logs := observer.New(zap.WarnLevel)
	cfg.Logger = zap.New(core)
	done := startInBackground(ctx, cfg, reg)
	said := func() bool {
		return logs.FilterMessageSnippet("etcd is out of space (alarm NOSPACE): the node starts once").Len() > 0
	}
	for deadline := time.Now().Add(30 * time.Second); !said(); {
		select {
		case s := <-done:
			if s.n != nil {
				_ = s.n.Stop(context.Background())
			}
			t.Fatalf("the node's start ended while etcd was out of space (%v), want it to wait for the operator", s.err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the starting node did not say that etcd is out of space within 30 s")
		}
	}
	// Alive, for a liveness probe not to restart it (and its member with
	// it), and not ready.
	hc := &http.Client{Timeout: 5 * time.Second}
	if code, body, err := probe(hc, "http://"+cfg.HTTPAddr+"/healthz"); err != nil || code != http.StatusOK || !strings.Contains(body, "out of space") {
		t.Errorf("/healthz while etcd is out of space: %d %q, %v; want 200 saying it waits for space", code, body, err)
	}
	if code, body, err := probe(hc, "http://"+cfg.HTTPAddr+"/readyz"); err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "out of space") {
		t.Errorf("/readyz while etcd is out of space: %d %q, %v; want 503 saying it waits for space", code, body, err)
	}

	// What an operator does, through the member the waiting node runs.
	freeEtcdSpace(t, ctx, []string{"http://" + cfg.EtcdClientAddr})

	var s started
	select {
	case s = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not start within 30 s of the alarm's disarm")
	}
	if s.err != nil {
		t.Fatalf("start once space was freed: %v", s.err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if err := s.n.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	if v, err := counterCall(ctx, s.n, "k", "increment", 1); err != nil || v != 2 {
		t.Fatalf("increment after the restart: %d, %v; want 2", v, err)
	}
}

// A backup taken while etcd was out of space holds the NOSPACE alarm,
// under the member ID of the cluster it was taken from. A node restored
// from it, with room to spare, serves at once: it waited (before, exited)
// for an operator to deactivate an alarm of a member that does not exist.
func TestANodeRestoredFromABackupTakenOutOfSpaceServes(t *testing.T) {
	t.Parallel()
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := smallQuotaConfig(t)
	cfg.HTTPAddr = "-"
	n := StartForTest(t, ctx, cfg, reg)
	if _, err := counterCall(ctx, n, "k", "increment", 5); err != nil {
		t.Fatal(err)
	}
	fillEtcd(t, ctx, n)
	backup := filepath.Join(t.TempDir(), "backup.db")
	etcdtest.SaveSnapshot(t, ctx, n.etcd, backup)

	cfg2 := DefaultLocalConfig(t.TempDir())
	cfg2.Partitions = 8
	cfg2.HTTPAddr = "-"
	cfg2.EtcdQuota = 64 << 20
	cfg2.EtcdRestoreFrom = backup
	cfg2.Logger = zap.NewNop()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	n2, err := Start(sctx, cfg2, reg)
	if err != nil {
		t.Fatalf("start from a backup taken out of space, with room to spare: %v", err)
	}
	defer func() {
		stctx, stcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer stcancel()
		if err := n2.Stop(stctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	if v, err := counterCall(ctx, n2, "k", "increment", 1); err != nil || v != 6 {
		t.Fatalf("increment on the restored node: %d, %v; want 6", v, err)
	}
}
