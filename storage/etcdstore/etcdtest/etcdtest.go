// Package etcdtest runs a real etcd for tests and benchmarks: a
// single-member embedded etcd on free loopback ports, with its data in the
// test's temporary directory, stopped when the test ends. It starts in
// about a second; share one per test function rather than one per subtest.
package etcdtest

import (
	"context"
	"io"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet/storage/etcdstore"
)

// Start starts an embedded etcd and returns its client endpoints. It is
// closed by t.Cleanup. A test's (not a benchmark's) does not fsync its
// writes: they outlive a stop of the member, not a crash of the machine.
func Start(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := etcdstore.DefaultLocalEmbeddedConfig(t.TempDir())
	// A test's etcd lives as long as its process: without an fsync per
	// commit, a test that commits in sequence (a workflow's steps) waits
	// on etcd, not on the disk. A benchmark's keeps its fsyncs, as a
	// node's etcd does: its figures are compared with earlier runs'.
	_, bench := t.(*testing.B)
	cfg.UnsafeNoFsync = !bench
	e, err := etcdstore.StartEmbedded(ctx, cfg)
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e.Endpoints()
}

// NewClient returns a client of endpoints, closed by t.Cleanup (before the
// etcd of Start, which registered its cleanup earlier).
func NewClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// StartClient starts an embedded etcd and returns a client of it, both
// closed by t.Cleanup.
func StartClient(t testing.TB) *clientv3.Client {
	t.Helper()
	return NewClient(t, Start(t))
}

// SaveSnapshot writes a snapshot of cli's member to path, the file
// etcdctl snapshot save writes: what a restore starts from.
func SaveSnapshot(t testing.TB, ctx context.Context, cli *clientv3.Client, path string) {
	t.Helper()
	snap, err := cli.SnapshotWithVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rc := snap.Snapshot
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
