package etcdstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
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
