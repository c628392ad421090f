package storagetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/rivet-go/rivet/storage"
)

// runMirror runs a Mirror of prefix over s until stop is called or the
// test ends, and fails the test if Run does not return nil promptly then.
func runMirror(t *testing.T, s storage.Store, prefix string) (m *storage.Mirror, stop func()) {
	m = storage.NewMirror(s, prefix, zaptest.NewLogger(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Mirror.Run = %v, want nil after ctx done", err)
				}
			case <-time.After(watchWait):
				t.Errorf("Mirror.Run did not return within %v of ctx done", watchWait)
			}
		})
	}
	t.Cleanup(stop)
	return m, stop
}

func waitReady(t *testing.T, m *storage.Mirror) {
	t.Helper()
	select {
	case <-m.Ready():
	case <-time.After(watchWait):
		t.Fatalf("mirror not ready within %v", watchWait)
	}
}

// waitMirror waits until m holds exactly what s holds under prefix.
func waitMirror(t *testing.T, m *storage.Mirror, s storage.Store, prefix string) {
	t.Helper()
	deadline := time.After(watchWait)
	for {
		changed := m.Changed()
		d := diffKVs(m.Snapshot(), wantListAny(t, s, prefix, storage.ListOptions{}))
		if d == "" {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("mirror of %q did not converge within %v: %s", prefix, watchWait, d)
		}
	}
}

// A mirror follows puts, deletes, prefix deletes and lease revocations,
// and wakes every waiter on each change.
func testMirrorConverges(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	commit(t, s, puts("m/a", "1", "m/b", "2", "m/d/1", "3", "n/x", "0"))
	m, stop := runMirror(t, s, "m/")
	waitReady(t, m)
	// Ready means a full read is in.
	if d := diffKVs(m.Snapshot(), wantListAny(t, s, "m/", storage.ListOptions{})); d != "" {
		t.Fatalf("mirror at Ready: %s", d)
	}
	if rev, b := m.Revision(), mustGet(t, s, "m/b"); rev < b.ModRevision {
		t.Fatalf("Revision %d before the write of m/b at %d", rev, b.ModRevision)
	}

	const waiters = 5
	changed := m.Changed()
	var wg sync.WaitGroup
	woke := make(chan struct{}, waiters)
	for range waiters {
		wg.Go(func() {
			select {
			case <-changed:
				woke <- struct{}{}
			case <-time.After(watchWait):
			}
		})
	}
	commit(t, s, puts("m/c", "4"), puts("m/a", "5"))
	wg.Wait()
	if len(woke) != waiters {
		t.Fatalf("%d of %d waiters woke on a change", len(woke), waiters)
	}
	waitMirror(t, m, s, "m/")

	commit(t, s, storage.Txn{Ops: []storage.Op{storage.Delete("m/b")}})
	waitMirror(t, m, s, "m/")
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.DeletePrefix("m/d/"), storage.Put("n/y", nil)}})
	waitMirror(t, m, s, "m/")
	lease := grant(t, s, 30*time.Second)
	for _, k := range []string{"m/l1", "m/l2"} {
		if err := s.PutLeased(ctx, k, []byte(k), lease); err != nil {
			t.Fatal(err)
		}
	}
	waitMirror(t, m, s, "m/")
	if kv, ok := m.Get("m/l1"); !ok || string(kv.Value) != "m/l1" || kv.Lease != lease {
		t.Fatalf("Get(m/l1) = %+v, %v", kv, ok)
	}
	if err := s.RevokeLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	waitMirror(t, m, s, "m/")
	if _, ok := m.Get("m/l1"); ok {
		t.Fatal("Get(m/l1) found a key of a revoked lease")
	}
	if _, ok := m.Get("n/x"); ok {
		t.Fatal("Get(n/x) found a key outside the prefix")
	}
	if got := keys(m.Snapshot()); len(got) != 2 || got[0] != "m/a" || got[1] != "m/c" || m.Len() != 2 {
		t.Fatalf("Snapshot keys %q, Len %d; want m/a, m/c", got, m.Len())
	}
	stop()
	// The copy stays readable after Run returned.
	if kv, ok := m.Get("m/a"); !ok || string(kv.Value) != "5" {
		t.Fatalf("Get(m/a) after Run = %+v, %v", kv, ok)
	}
}

// gatedWatchStore holds every Watch until gate is closed, and reports the
// revision each Watch starts from, so that a test can let a mirror's watch
// fall behind a compaction.
type gatedWatchStore struct {
	storage.Store
	gate  chan struct{}
	froms chan int64
}

func (g *gatedWatchStore) Watch(ctx context.Context, prefix string, fromRev int64) <-chan storage.WatchResponse {
	select {
	case g.froms <- fromRev:
	default:
	}
	out := make(chan storage.WatchResponse)
	go func() {
		defer close(out)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return
		}
		for r := range g.Store.Watch(ctx, prefix, fromRev) {
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// A mirror whose watch falls behind a compaction reads the prefix again
// and converges: keys deleted meanwhile vanish.
func testMirrorCompacted(t *testing.T, s storage.Store, compact func(context.Context, int64) error) {
	if compact == nil {
		t.Skip("the harness cannot compact")
	}
	ctx := testCtx(t)
	commit(t, s, puts("m/keep", "1", "m/old", "1", "m/dir/1", "1", "m/dir/2", "1"))
	g := &gatedWatchStore{Store: s, gate: make(chan struct{}), froms: make(chan int64, 16)}
	m, _ := runMirror(t, g, "m/")
	waitReady(t, m)
	var first int64
	select {
	case first = <-g.froms:
	case <-time.After(watchWait):
		t.Fatal("the mirror started no watch")
	}
	commit(t, s, puts("m/new", "2"))
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.Delete("m/old")}})
	commit(t, s, storage.Txn{Ops: []storage.Op{storage.DeletePrefix("m/dir/")}})
	commit(t, s, puts("m/keep", "2"))
	rev := storeRev(t, s)
	if err := compact(ctx, rev); err != nil {
		t.Fatalf("Compact(%d): %v", rev, err)
	}
	if first >= rev {
		t.Fatalf("the mirror watches from %d, not behind the compaction at %d", first, rev)
	}
	close(g.gate)
	select {
	case second := <-g.froms:
		if second <= rev {
			t.Fatalf("after the compaction at %d the mirror watches from %d", rev, second)
		}
	case <-time.After(watchWait):
		t.Fatal("the mirror did not watch again after its watch was compacted")
	}
	waitMirror(t, m, s, "m/")
	if got := keys(m.Snapshot()); len(got) != 2 || got[0] != "m/keep" || got[1] != "m/new" {
		t.Fatalf("mirror keys %q, want m/keep, m/new", got)
	}
	if m.Revision() < rev {
		t.Fatalf("Revision %d after a read at or after %d", m.Revision(), rev)
	}
	// And it follows the store from there.
	commit(t, s, puts("m/after", "3"))
	waitMirror(t, m, s, "m/")
}

// A mirror of node records sees a node's record vanish when its lease
// expires.
func testMirrorLeaseExpiry(t *testing.T, s storage.Store) {
	ctx := testCtx(t)
	lease := grant(t, s, time.Second) // etcd raises it to its minimum, 2 s
	if err := s.PutLeased(ctx, storage.NodeKey("n1"), []byte("addr"), lease); err != nil {
		t.Fatal(err)
	}
	m, _ := runMirror(t, s, storage.NodesPrefix)
	waitReady(t, m)
	deadline := time.After(watchWait)
	for {
		changed := m.Changed()
		if _, ok := m.Get(storage.NodeKey("n1")); !ok {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the node record outlived its lease by %v", watchWait)
		}
	}
	wantAbsent(t, s, storage.NodeKey("n1"))
}
