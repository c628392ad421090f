package storage

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// failingLists fails ListRev while fail is set.
type failingLists struct {
	Store
	fail  atomic.Bool
	lists atomic.Int32
}

func (f *failingLists) ListRev(ctx context.Context, prefix string, opts ListOptions) ([]KV, int64, error) {
	f.lists.Add(1)
	if f.fail.Load() {
		return nil, 0, errors.New("injected: store unreachable")
	}
	return f.Store.ListRev(ctx, prefix, opts)
}

// A Mirror waiting out its backoff after failures tries again at once when
// kicked (its owner learnt that the store serves again), instead of
// serving a stale copy for the rest of the wait.
func TestMirrorKickCutsTheBackoffShort(t *testing.T) {
	mem := NewMemory()
	defer mem.Close()
	if err := mem.Commit(t.Context(), Txn{Ops: []Op{Put("k/a", []byte("1"))}}); err != nil {
		t.Fatal(err)
	}
	s := &failingLists{Store: mem}
	s.fail.Store(true)
	m := NewMirror(s, "k/", nil)
	m.backoff = func(int) time.Duration { return time.Hour } // only a kick ends a wait
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(20 * time.Second)
	for s.lists.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no read within 20 s")
		}
		time.Sleep(time.Millisecond)
	}
	s.fail.Store(false)
	m.Kick()
	select {
	case <-m.Ready():
	case <-time.After(20 * time.Second):
		t.Fatalf("a kicked mirror did not read again (%d reads)", s.lists.Load())
	}
	if kv, ok := m.Get("k/a"); !ok || string(kv.Value) != "1" {
		t.Fatalf("copy after the kick: %+v, %v", kv, ok)
	}
}
