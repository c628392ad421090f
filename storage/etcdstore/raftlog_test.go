package etcdstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet/storage/etcdstore"
)

// A member keeps applied raft entries in memory for followers that lag.
// A member alone has none to serve, yet with etcd's default (5,000 entries
// after each snapshot) a node's big group commits, tens of KB each under
// workflow load, kept hundreds of MB in its heap for as long as it ran.
func TestAMemberAloneKeepsFewRaftEntriesInMemory(t *testing.T) {
	_, cli := startMember(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const (
		entries = 1500
		size    = 64 << 10 // 96 MB through raft in all
		writers = 16
		// 5,000 entries would keep all 96 MB (128 MB grown, measured);
		// the 200 at most kept here, 13 MB, plus what etcd's backend
		// buffers keep of its latest batches (up to 35 MB measured).
		bound = 80 << 20
	)
	value := strings.Repeat("v", size)
	before := liveHeap()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < entries; i += writers {
				if _, err := cli.Put(ctx, fmt.Sprintf("raftlog/%d", w), value); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The write buffer of etcd's backend lets go of the values once it
	// commits (every 100 ms): wait for that, with a deadline.
	var grown uint64
	for deadline := time.Now().Add(20 * time.Second); ; {
		h := liveHeap()
		if grown = h - min(before, h); grown < bound {
			t.Logf("the heap kept %d MB", grown>>20)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the heap kept %d MB after %d MB went through raft (bound %d MB)", grown>>20, entries*size>>20, bound>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A member restarted after a crash replays its raft log from its last
// snapshot to disk before it serves; a group commit is one entry of up to
// 1,024 operations, so the member snapshots every EmbeddedSnapshotCount
// entries, not etcd's 10,000: after 2,500 writes it has a snapshot on disk.
func TestAMemberSnapshotsToDiskEveryThousandEntries(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := etcdstore.StartEmbedded(ctx, etcdstore.DefaultLocalEmbeddedConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	cli := e.Client()
	t.Cleanup(func() { cli.Close() })
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < 2500; i += 16 {
				if _, err := cli.Put(ctx, fmt.Sprintf("snap/%d", w), "v"); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The snapshot is taken as the entry past the count is applied:
	// wait for it, with a deadline.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		snaps, _ := filepath.Glob(filepath.Join(dir, "member", "snap", "*.snap"))
		if len(snaps) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot on disk after 2,500 entries (a restart would replay them all)")
		}
	}
}
