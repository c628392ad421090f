package storage

import (
	"context"
	"sync"
	"testing"
	"time"
)

// holdStore holds every Commit until release is called, recording the
// batches it was given.
type holdStore struct {
	Store
	mu      sync.Mutex
	batches [][]Txn
	hold    chan struct{}
}

func (h *holdStore) Commit(ctx context.Context, txns ...Txn) error {
	h.mu.Lock()
	h.batches = append(h.batches, txns)
	hold := h.hold
	h.mu.Unlock()
	<-hold
	return h.Store.Commit(ctx, txns...)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Txns on one key keep their order, even across batches in flight, and
// never share a batch; txns on other keys go ahead of them.
func TestCommitterKeyOrder(t *testing.T) {
	m := NewMemory()
	defer m.Close()
	h := &holdStore{Store: m, hold: make(chan struct{})}
	c := NewCommitter(h, CommitterConfig{MaxInFlight: 4})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error)
	go func() { runDone <- c.Run(ctx) }()
	defer func() { cancel(); <-runDone }()

	var wg sync.WaitGroup
	commit := func(txn Txn) {
		wg.Go(func() {
			if err := c.Commit(ctx, txn); err != nil {
				t.Errorf("Commit: %v", err)
			}
		})
	}
	batches := func() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.batches) }
	// Batch 1 (held in flight): k=1.
	commit(Txn{Ops: []Op{Put("a/k", []byte("1"))}})
	waitUntil(t, "batch 1", func() bool { return batches() == 1 })
	// Queued: k=2 (must wait for batch 1), a txn whose cond reads a/k
	// (must wait behind k=2), and one free key (goes ahead in batch 2).
	commit(Txn{Ops: []Op{Put("a/k", []byte("2"))}})
	waitUntil(t, "k=2 queued", func() bool { return c.Stats().Waiting == 1 })
	commit(Txn{Conds: []Cond{Present("a/k")}, Ops: []Op{Put("other", []byte("x"))}})
	waitUntil(t, "cond txn queued", func() bool { return c.Stats().Waiting == 2 })
	commit(Txn{Ops: []Op{Put("free", []byte("f"))}})
	waitUntil(t, "batch 2", func() bool { return batches() == 2 })
	if n := c.Stats().Waiting; n != 2 {
		t.Fatalf("%d txns waiting, want 2 (both on a/k)", n)
	}
	h.mu.Lock()
	close(h.hold)
	h.hold = make(chan struct{})
	close(h.hold) // from now on, commits pass
	h.mu.Unlock()
	wg.Wait()

	kv, err := m.Get(context.Background(), "a/k")
	if err != nil || string(kv.Value) != "2" {
		t.Fatalf("a/k = %q, %v; want the later write", kv.Value, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, b := range h.batches {
		n := 0
		for _, txn := range b {
			for _, o := range txn.Ops {
				if o.Key == "a/k" {
					n++
				}
			}
			for _, cd := range txn.Conds {
				if cd.Key == "a/k" {
					n++
				}
			}
		}
		if n > 1 {
			t.Fatalf("batch %d touches a/k %d times: %+v", i, n, b)
		}
	}
	if got := len(h.batches[1]); got != 1 || h.batches[1][0].Ops[0].Key != "free" {
		t.Fatalf("batch 2 = %+v, want the free key alone", h.batches[1])
	}
}

// A caller that leaves while its txn waits gets ctx.Err() and the txn is
// never written.
func TestCommitterAbandon(t *testing.T) {
	m := NewMemory()
	defer m.Close()
	h := &holdStore{Store: m, hold: make(chan struct{})}
	c := NewCommitter(h, CommitterConfig{MaxInFlight: 1})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error)
	go func() { runDone <- c.Run(ctx) }()

	first := make(chan error, 1)
	go func() { first <- c.Commit(ctx, Txn{Ops: []Op{Put("first", nil)}}) }()
	waitUntil(t, "first batch", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.batches) == 1 })
	cctx, ccancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- c.Commit(cctx, Txn{Ops: []Op{Put("left", nil)}}) }()
	waitUntil(t, "queued", func() bool { return c.Stats().Waiting == 1 })
	ccancel()
	if err := <-left; err != context.Canceled {
		t.Fatalf("abandoned Commit = %v, want context.Canceled", err)
	}
	close(h.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "queue drained", func() bool { return c.Stats().Waiting == 0 })
	if _, err := m.Get(context.Background(), "left"); err == nil {
		t.Fatal("abandoned txn was written")
	}
	cancel()
	<-runDone
	if err := c.Commit(context.Background(), Txn{Ops: []Op{Put("late", nil)}}); err != ErrClosed {
		t.Fatalf("Commit after Run = %v, want ErrClosed", err)
	}
}

// recordObserver records what a Committer tells its CommitObserver.
type recordObserver struct {
	mu               sync.Mutex
	calls, txns, ops int
	errs             int
}

func (o *recordObserver) StoreCommit(txns, ops int, took time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	o.txns += txns
	o.ops += ops
	if err != nil {
		o.errs++
	}
}

// The observer hears of every store transaction, with the callers' txns
// and ops it held: a held batch makes the next one hold several txns.
func TestCommitterObserver(t *testing.T) {
	m := NewMemory()
	defer m.Close()
	h := &holdStore{Store: m, hold: make(chan struct{})}
	obs := &recordObserver{}
	c := NewCommitter(h, CommitterConfig{MaxInFlight: 1, Observer: obs})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error)
	go func() { runDone <- c.Run(ctx) }()
	defer func() { cancel(); <-runDone }()

	var wg sync.WaitGroup
	commit := func(key string) {
		wg.Go(func() {
			if err := c.Commit(ctx, Txn{Ops: []Op{Put(key, []byte("v")), Put(key+"/2", []byte("v"))}}); err != nil {
				t.Errorf("Commit: %v", err)
			}
		})
	}
	batches := func() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.batches) }
	commit("a") // held in flight
	waitUntil(t, "the first batch", func() bool { return batches() == 1 })
	commit("b")
	commit("c")
	waitUntil(t, "two txns waiting", func() bool { return c.Stats().Waiting == 2 })
	close(h.hold)
	wg.Wait()

	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.calls != 2 || obs.txns != 3 || obs.ops != 6 || obs.errs != 0 {
		t.Fatalf("observer saw %d store commits, %d txns, %d ops, %d errors; want 2, 3, 6, 0", obs.calls, obs.txns, obs.ops, obs.errs)
	}
}
