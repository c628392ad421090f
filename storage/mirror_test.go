package storage_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/rivet-go/rivet/storage"
)

const wait = 20 * time.Second

// flakyStore fails ListRev while failLists > 0, and fails the next
// failWatches watches at once with a store error.
type flakyStore struct {
	storage.Store
	failLists, failWatches atomic.Int32
	lists                  atomic.Int32
}

func (f *flakyStore) ListRev(ctx context.Context, prefix string, opts storage.ListOptions) ([]storage.KV, int64, error) {
	f.lists.Add(1)
	if f.failLists.Add(-1) >= 0 {
		return nil, 0, errors.New("injected list failure")
	}
	return f.Store.ListRev(ctx, prefix, opts)
}

func (f *flakyStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan storage.WatchResponse {
	if f.failWatches.Add(-1) >= 0 {
		ch := make(chan storage.WatchResponse, 1)
		ch <- storage.WatchResponse{Err: errors.New("injected watch failure: etcdserver: no leader")}
		close(ch)
		return ch
	}
	return f.Store.Watch(ctx, prefix, fromRev)
}

// startMirror runs a mirror until the test ends. done is closed when Run
// returns, with its result in *runErr.
func startMirror(t *testing.T, s storage.Store, prefix string) (m *storage.Mirror, cancel context.CancelFunc, done <-chan struct{}, runErr *error) {
	m = storage.NewMirror(s, prefix, zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	d := make(chan struct{})
	runErr = new(error)
	go func() {
		defer close(d)
		*runErr = m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-d
	})
	return m, cancel, d, runErr
}

func waitFor(t *testing.T, m *storage.Mirror, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(wait)
	for {
		ch := m.Changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A mirror retries failed reads and watches, and still converges.
func TestMirrorRetries(t *testing.T) {
	ctx := t.Context()
	mem := storage.NewMemory()
	defer mem.Close()
	if err := mem.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put("p/a", []byte("1"))}}); err != nil {
		t.Fatal(err)
	}
	f := &flakyStore{Store: mem}
	f.failLists.Store(3)
	f.failWatches.Store(2)
	m, _, _, _ := startMirror(t, f, "p/")
	select {
	case <-m.Ready():
	case <-time.After(wait):
		t.Fatal("not ready after the store recovered")
	}
	if n := f.lists.Load(); n < 4 {
		t.Fatalf("ready after %d reads, want 3 failures first", n)
	}
	// Each failed watch is followed by a fresh read. Reads that change
	// nothing do not signal Changed: poll.
	deadline := time.Now().Add(wait)
	for f.lists.Load() < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads, want a re-read after each of the 2 failed watches", f.lists.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := mem.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put("p/b", []byte("2")), storage.Delete("p/a")}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, "the mirror to follow", func() bool {
		_, a := m.Get("p/a")
		_, b := m.Get("p/b")
		return !a && b
	})
}

// Run returns promptly on cancel, even while it backs off from a store
// that keeps failing, and refuses to run twice at once.
func TestMirrorRunStops(t *testing.T) {
	mem := storage.NewMemory()
	defer mem.Close()
	f := &flakyStore{Store: mem}
	f.failLists.Store(1 << 30)
	m, cancel, done, runErr := startMirror(t, f, "p/")
	deadline := time.Now().Add(wait)
	for f.lists.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the mirror does not retry")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := m.Run(t.Context()); err == nil {
		t.Fatal("a second Run while running returned nil")
	}
	cancel()
	select {
	case <-done:
		if *runErr != nil {
			t.Fatalf("Run = %v, want nil", *runErr)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after cancel")
	}
	select {
	case <-m.Ready():
		t.Fatal("ready without a successful read")
	default:
	}
}

// The memory twin keeps DefaultMemoryRetention revisions of history, and
// a watcher that far behind catches up in bounded responses.
func TestMemoryWatchRetention(t *testing.T) {
	ctx := t.Context()
	m := storage.NewMemory()
	defer m.Close()
	const n = storage.DefaultMemoryRetention + 10
	for i := range n {
		if err := m.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(fmt.Sprintf("r/%d", i%100), nil)}}); err != nil {
			t.Fatal(err)
		}
	}
	r := <-m.Watch(ctx, "r/", 1)
	if !errors.Is(r.Err, storage.ErrCompacted) {
		t.Fatalf("watch from revision 1 of %d = %+v, want ErrCompacted", n, r)
	}
	from := int64(n - storage.DefaultMemoryRetention + 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := m.Watch(wctx, "r/", from)
	got, responses := 0, 0
	for got < storage.DefaultMemoryRetention {
		select {
		case r := <-w:
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if len(r.Events) > 1000 {
				t.Fatalf("a response of %d events", len(r.Events))
			}
			got += len(r.Events)
			responses++
		case <-time.After(wait):
			t.Fatalf("%d of %d events", got, storage.DefaultMemoryRetention)
		}
	}
	if responses < 10 {
		t.Fatalf("%d events in %d responses", got, responses)
	}
	// Compact clamps to the current revision.
	m.Compact(1 << 40)
	if r := <-m.Watch(ctx, "r/", n-1); !errors.Is(r.Err, storage.ErrCompacted) {
		t.Fatalf("watch from before the compaction = %+v, want ErrCompacted", r)
	}
	w = m.Watch(wctx, "r/", n)
	if err := m.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put("r/x", nil)}}); err != nil {
		t.Fatal(err)
	}
	// The change at the compaction revision is kept, as etcd keeps it.
	var evs []storage.Event
	for len(evs) < 2 {
		r := <-w
		if r.Err != nil {
			t.Fatalf("watch from the compaction revision: %v", r.Err)
		}
		evs = append(evs, r.Events...)
	}
	if len(evs) != 2 || evs[0].KV.ModRevision != n || evs[1].KV.Key != "r/x" {
		t.Fatalf("watch from the compaction revision = %+v", evs)
	}
}

// owners builds a memory store whose owners/ prefix is full, as in a
// cluster of the default 1024 partitions.
func owners(b *testing.B) (*storage.Memory, storage.LeaseID, []uint32) {
	ctx := b.Context()
	mem := storage.NewMemory()
	b.Cleanup(func() { mem.Close() })
	lease, err := mem.GrantLease(ctx, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	ps := make([]uint32, 1024)
	for i := range ps {
		ps[i] = uint32(i)
	}
	if _, err := mem.Claim(ctx, "node-1", lease, ps); err != nil {
		b.Fatal(err)
	}
	return mem, lease, ps
}

// The partition table changes in bursts: a node's 1024 claims vanish (its
// lease expired) and another node claims them all.
func BenchmarkMirrorOwnersBurst(b *testing.B) {
	ctx := b.Context()
	mem, lease, ps := owners(b)
	m := storage.NewMirror(mem, storage.OwnersPrefix, nil)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(rctx) }()
	defer func() { cancel(); <-done }()
	<-m.Ready()
	for b.Loop() {
		if err := mem.RevokeLease(ctx, lease); err != nil {
			b.Fatal(err)
		}
		var err error
		if lease, err = mem.GrantLease(ctx, time.Hour); err != nil {
			b.Fatal(err)
		}
		if _, err := mem.Claim(ctx, "node-2", lease, ps); err != nil {
			b.Fatal(err)
		}
		for {
			ch := m.Changed()
			if kv, ok := m.Get(storage.OwnerKey(1023)); ok && kv.Lease == lease {
				break
			}
			<-ch
		}
	}
}

func BenchmarkMirrorGet(b *testing.B) {
	mem, _, _ := owners(b)
	m := storage.NewMirror(mem, storage.OwnersPrefix, nil)
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-m.Ready()
	key := storage.OwnerKey(512)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := m.Get(key); !ok {
				b.Fail()
			}
		}
	})
}

func BenchmarkMirrorSnapshot(b *testing.B) {
	mem, _, _ := owners(b)
	m := storage.NewMirror(mem, storage.OwnersPrefix, nil)
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-m.Ready()
	for b.Loop() {
		if len(m.Snapshot()) != 1024 {
			b.Fatal("snapshot")
		}
	}
}

// A closed store freezes the copy; Run still waits for ctx.
func TestMirrorStoreClosed(t *testing.T) {
	ctx := t.Context()
	mem := storage.NewMemory()
	if err := mem.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put("p/a", []byte("1"))}}); err != nil {
		t.Fatal(err)
	}
	m, cancel, done, runErr := startMirror(t, mem, "p/")
	select {
	case <-m.Ready():
	case <-time.After(wait):
		t.Fatal("not ready")
	}
	mem.Close()
	select {
	case <-done:
		t.Fatalf("Run returned %v when the store closed, before ctx was done", *runErr)
	case <-time.After(100 * time.Millisecond):
	}
	if _, ok := m.Get("p/a"); !ok {
		t.Fatal("the copy lost its keys when the store closed")
	}
	cancel()
	select {
	case <-done:
		if *runErr != nil {
			t.Fatalf("Run = %v, want nil", *runErr)
		}
	case <-time.After(wait):
		t.Fatal("Run did not return after cancel")
	}
}
