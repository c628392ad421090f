package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
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
	select {
	case <-hold:
	case <-ctx.Done(): // the Committer stops
		return ctx.Err()
	}
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
	// Never sent: its caller must not take it for an outcome unknown.
	if err := <-left; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotSent) || OutcomeUnknown(err) {
		t.Fatalf("abandoned Commit = %v (outcome unknown: %v), want context.Canceled and ErrNotSent, not unknown", err, OutcomeUnknown(err))
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

// keySet.conflicts agrees with a naive check of every pair of keys, on
// random requests over a small tree of keys (so that overlaps, shared
// directories and prefixes that are not directories are common), as sets
// grow and shrink.
func TestKeySetConflictsMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	segs := []string{"a", "b", "ab", "a/", "b/"}
	key := func() string {
		var b strings.Builder
		for range 1 + rng.IntN(4) {
			b.WriteString(segs[rng.IntN(len(segs))])
		}
		return b.String()
	}
	newReq := func() *request {
		var txn Txn
		for range rng.IntN(3) {
			txn.Conds = append(txn.Conds, Present(key()))
		}
		for range 1 + rng.IntN(3) {
			switch rng.IntN(3) {
			case 0:
				txn.Ops = append(txn.Ops, Put(key(), nil))
			case 1:
				txn.Ops = append(txn.Ops, Delete(key()))
			default:
				txn.Ops = append(txn.Ops, DeletePrefix(key()))
			}
		}
		r := &request{txn: txn}
		r.indexKeys()
		return r
	}
	// naive: r conflicts with a if they overlap and one side writes.
	naive := func(r, a *request) bool {
		covers := func(ps []string, k string) bool {
			for _, p := range ps {
				if strings.HasPrefix(k, p) {
					return true
				}
			}
			return false
		}
		for _, x := range [2][2]*request{{r, a}, {a, r}} {
			for _, k := range x[0].writes {
				if contains(x[1].writes, k) || contains(x[1].reads, k) || covers(x[1].prefixes, k) {
					return true
				}
			}
			for _, k := range x[0].reads {
				if contains(x[1].writes, k) || covers(x[1].prefixes, k) {
					return true
				}
			}
			for _, p := range x[0].prefixes {
				if covers(x[1].prefixes, p) {
					return true
				}
			}
		}
		return false
	}
	s := newKeySet()
	var in []*request
	for i := range 20000 {
		r := newReq()
		want := false
		for _, a := range in {
			if naive(r, a) {
				want = true
				break
			}
		}
		if got := s.conflicts(r); got != want {
			t.Fatalf("step %d: conflicts(%+v) = %v, want %v; set: %+v", i, r.txn, got, want, in)
		}
		if len(in) > 0 && (len(in) > 6 || rng.IntN(2) == 0) {
			j := rng.IntN(len(in))
			s.remove(in[j])
			in = append(in[:j], in[j+1:]...)
		} else {
			s.add(r)
			in = append(in, r)
		}
	}
}

func contains(ks []string, k string) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// A batch stuck in the store (as a proposal lost with etcd's leader is)
// stops holding its slot after StallAfter: a txn on other keys commits
// while it hangs, and a txn on its keys waits for it.
func TestCommitterStalledBatchDoesNotStopOthers(t *testing.T) {
	m := NewMemory()
	defer m.Close()
	stuck := make(chan struct{})
	h := &holdStore{Store: m, hold: stuck}
	c := NewCommitter(h, CommitterConfig{MaxInFlight: 1, StallAfter: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error)
	go func() { runDone <- c.Run(ctx) }()
	defer func() { cancel(); <-runDone }()

	commit := func(key string) chan error {
		done := make(chan error, 1)
		go func() { done <- c.Commit(ctx, Txn{Ops: []Op{Put(key, []byte("v"))}}) }()
		return done
	}
	batches := func() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.batches) }
	first := commit("a") // stuck in the store
	waitUntil(t, "the first batch in flight", func() bool { return batches() == 1 })
	h.mu.Lock()
	h.hold = closedChan() // later batches go through
	h.mu.Unlock()
	same := commit("a")
	other := commit("b")
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("commit of b: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a txn on other keys waited for the stuck batch")
	}
	select {
	case err := <-same:
		t.Fatalf("a txn on the stuck batch's key went ahead of it: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if st := c.Stats(); st.Stalls < 1 {
		t.Fatalf("stalls = %d, want the stuck batch counted", st.Stalls)
	}
	close(stuck)
	for _, ch := range []chan error{first, same} {
		if err := <-ch; err != nil {
			t.Fatalf("commit of a: %v", err)
		}
	}
}

func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// failFirstStore holds the first Commit until release closes, then fails
// it with errLost without writing (a request whose outcome its caller
// cannot know: etcd may yet apply it); later commits pass through. It
// records every txn it was given.
type failFirstStore struct {
	Store
	release chan struct{}
	mu      sync.Mutex
	calls   int
	seen    []Txn
}

var errLost = errors.New("request lost with the leader")

func (f *failFirstStore) Commit(ctx context.Context, txns ...Txn) error {
	f.mu.Lock()
	f.calls++
	first := f.calls == 1
	f.seen = append(f.seen, txns...)
	f.mu.Unlock()
	if first {
		select {
		case <-f.release:
		case <-ctx.Done(): // the test failed early; the Committer stops
			return ctx.Err()
		}
		return errLost
	}
	return f.Store.Commit(ctx, txns...)
}

// claimedMemory returns a memory store in which partitions 1..n are
// claimed on a lease, and the claims' fences.
func claimedMemory(t *testing.T, n uint32) (*Memory, []Fence) {
	t.Helper()
	m := NewMemory()
	t.Cleanup(func() { m.Close() })
	lease, err := m.GrantLease(context.Background(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var parts []uint32
	for p := uint32(1); p <= n; p++ {
		parts = append(parts, p)
	}
	claims, err := m.Claim(context.Background(), "n1", lease, parts)
	if err != nil || len(claims) != int(n) {
		t.Fatalf("claim: %v, %v", claims, err)
	}
	fences := make([]Fence, len(claims))
	for i, c := range claims {
		fences[i] = Fence{Partition: c.Partition, Token: c.Token}
	}
	return m, fences
}

// runCommitter runs c until the test ends, and returns the context its
// callers use (done when it stops).
func runCommitter(t *testing.T, c *Committer) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return ctx
}

// A write whose outcome is unknown stops every later write on its claim:
// the ones queued behind it and the ones that come after fail with
// ErrFenced without reaching the store, and OnInDoubt hears of the claim
// once. Writes on other claims, and unfenced ones, go on.
func TestCommitterWriteInDoubtStopsItsClaim(t *testing.T) {
	m, fences := claimedMemory(t, 2)
	doubtful, other := fences[0], fences[1]

	f := &failFirstStore{Store: m, release: make(chan struct{})}
	var (
		reportMu sync.Mutex
		reported [][]Fence
	)
	// StallAfter: a held batch keeps its slot however slow the machine.
	c := NewCommitter(f, CommitterConfig{MaxInFlight: 1, StallAfter: time.Hour, OnInDoubt: func(fs []Fence) {
		reportMu.Lock()
		reported = append(reported, fs)
		reportMu.Unlock()
	}})
	ctx := runCommitter(t, c)

	commit := func(fence Fence, key string) chan error {
		done := make(chan error, 1)
		go func() { done <- c.Commit(ctx, Txn{Fence: fence, Ops: []Op{Put(key, []byte("v"))}}) }()
		return done
	}
	first := commit(doubtful, "p1/a")
	waitUntil(t, "the first batch in flight", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.calls == 1 })
	queuedSameKey := commit(doubtful, "p1/a")
	waitUntil(t, "a txn queued behind it", func() bool { return c.Stats().Waiting == 1 })
	close(f.release)

	if err := <-first; !errors.Is(err, errLost) {
		t.Fatalf("the doubtful write: %v, want the store's error", err)
	}
	if err := <-queuedSameKey; !errors.Is(err, ErrFenced) {
		t.Fatalf("a txn queued on the doubtful claim: %v, want ErrFenced", err)
	}
	if err := <-commit(doubtful, "p1/b"); !errors.Is(err, ErrFenced) {
		t.Fatalf("a later txn on the doubtful claim: %v, want ErrFenced", err)
	}
	if err := <-commit(other, "p2/a"); err != nil {
		t.Fatalf("a txn on another claim: %v", err)
	}
	if err := <-commit(Fence{}, "free"); err != nil {
		t.Fatalf("an unfenced txn: %v", err)
	}
	f.mu.Lock()
	for i, txn := range f.seen {
		if i > 0 && txn.Fence == doubtful {
			t.Errorf("txn %d on the doubtful claim reached the store: %+v", i, txn)
		}
	}
	f.mu.Unlock()
	reportMu.Lock()
	defer reportMu.Unlock()
	if len(reported) != 1 || len(reported[0]) != 1 || reported[0][0] != doubtful {
		t.Fatalf("OnInDoubt heard %v, want [[%v]] once", reported, doubtful)
	}
}

// splitStore holds its first Commit until hold closes, and fails a lone
// txn writing p1/a with errLost (outcome unknown); it records every call.
type splitStore struct {
	Store
	hold  chan struct{}
	mu    sync.Mutex
	calls [][]Txn
}

func (s *splitStore) Commit(ctx context.Context, txns ...Txn) error {
	s.mu.Lock()
	s.calls = append(s.calls, txns)
	n := len(s.calls)
	s.mu.Unlock()
	if n == 1 {
		select {
		case <-s.hold:
		case <-ctx.Done(): // the test failed early; the Committer stops
			return ctx.Err()
		}
	}
	if len(txns) == 1 && len(txns[0].Ops) > 0 && txns[0].Ops[0].Key == "p1/a" {
		return errLost
	}
	return s.Store.Commit(ctx, txns...)
}

// A batch that fails on one txn's condition is split and its halves sent
// apart; once one half's outcome is in doubt, the other half does not
// carry txns on the doubted claim (found in review).
func TestCommitterSplitHalfAfterADoubtCarriesNoTxnOnItsClaim(t *testing.T) {
	m, fences := claimedMemory(t, 2)
	p, q := fences[0], fences[1]
	s := &splitStore{Store: m, hold: make(chan struct{})}
	doubtedAt := -1
	c := NewCommitter(s, CommitterConfig{MaxInFlight: 1, StallAfter: time.Hour, OnInDoubt: func([]Fence) {
		s.mu.Lock()
		doubtedAt = len(s.calls)
		s.mu.Unlock()
	}})
	ctx := runCommitter(t, c)
	first := make(chan error, 1)
	go func() { first <- c.Commit(ctx, Txn{Ops: []Op{Put("free/x", []byte("v"))}}) }()
	waitUntil(t, "a batch in flight", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.calls) == 1 })
	// Queued in this order, then packed into one batch: [p1/a, the failing
	// cond on q, p1/b]; split: [p1/a] (in doubt), then [cond, p1/b].
	res := make([]chan error, 3)
	for i, txn := range []Txn{
		{Fence: p, Ops: []Op{Put("p1/a", []byte("v"))}},
		{Fence: q, Conds: []Cond{Present("p2/missing")}, Ops: []Op{Put("p2/a", []byte("v"))}},
		{Fence: p, Ops: []Op{Put("p1/b", []byte("v"))}},
	} {
		res[i] = make(chan error, 1)
		go func() { res[i] <- c.Commit(ctx, txn) }()
		waitUntil(t, "txn queued", func() bool { return c.Stats().Waiting == i+1 })
	}
	close(s.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-res[0]; !errors.Is(err, errLost) {
		t.Fatalf("p1/a: %v, want the store's error", err)
	}
	if err := <-res[1]; !errors.Is(err, ErrConditionFailed) {
		t.Fatalf("the cond txn: %v, want ErrConditionFailed", err)
	}
	if err := <-res[2]; !errors.Is(err, ErrFenced) {
		t.Fatalf("p1/b: %v, want ErrFenced (its claim is in doubt)", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if doubtedAt < 0 {
		t.Fatal("no doubt reported")
	}
	for i, call := range s.calls[doubtedAt:] {
		for _, txn := range call {
			if txn.Fence == p {
				t.Errorf("store call %d after the doubt carries %s on the doubted claim", doubtedAt+i+1, txn.Ops[0].Key)
			}
		}
	}
}

// A caller that leaves while its txn is in flight does not know whether it
// committed: its claim is in doubt, as if the store had said so (found in
// review: a Destroy whose ctx ended mid-commit let the actor load again
// and write after the delete).
func TestCommitterCallerLeavingInFlightPutsItsClaimInDoubt(t *testing.T) {
	m, fences := claimedMemory(t, 1)
	p := fences[0]
	h := &holdStore{Store: m, hold: make(chan struct{})}
	reported := make(chan []Fence, 1)
	c := NewCommitter(h, CommitterConfig{MaxInFlight: 1, StallAfter: time.Hour, OnInDoubt: func(fs []Fence) { reported <- fs }})
	ctx := runCommitter(t, c)

	cctx, ccancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- c.Commit(cctx, Txn{Fence: p, Ops: []Op{Put("p1/a", []byte("v"))}}) }()
	waitUntil(t, "the txn in flight", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.batches) == 1 })
	ccancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that left: %v", err)
	}
	select {
	case fs := <-reported:
		if len(fs) != 1 || fs[0] != p {
			t.Fatalf("OnInDoubt heard %v, want [%v]", fs, p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnInDoubt never heard of the claim whose txn's caller left")
	}
	if err := c.Commit(ctx, Txn{Fence: p, Ops: []Op{Put("p1/b", []byte("v"))}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("a later txn on the claim: %v, want ErrFenced", err)
	}
	close(h.hold)
}

// A store that stops answering does not hold a writer for ever, even one
// whose context has no deadline: its batch fails after SendTimeout with
// DeadlineExceeded, the claim it was fenced on goes in doubt, and the
// Committer goes on with other batches.
func TestCommitterSendTimeoutAnswersACallerWithoutDeadline(t *testing.T) {
	m, fences := claimedMemory(t, 2)
	h := &holdStore{Store: m, hold: make(chan struct{})} // never released
	var (
		reportMu sync.Mutex
		reported []Fence
	)
	c := NewCommitter(h, CommitterConfig{SendTimeout: 50 * time.Millisecond, OnInDoubt: func(fs []Fence) {
		reportMu.Lock()
		reported = append(reported, fs...)
		reportMu.Unlock()
	}})
	runCommitter(t, c)

	done := make(chan error, 1)
	go func() {
		done <- c.Commit(context.Background(), Txn{Fence: fences[0], Ops: []Op{Put("p1/a", []byte("v"))}})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !OutcomeUnknown(err) {
			t.Fatalf("the write to a store that does not answer: %v, want DeadlineExceeded, outcome unknown", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write to a store that does not answer was not answered")
	}
	reportMu.Lock()
	got := reported
	reportMu.Unlock()
	if len(got) != 1 || got[0] != fences[0] {
		t.Fatalf("OnInDoubt heard %v, want [%v]", got, fences[0])
	}
	if err := c.Commit(context.Background(), Txn{Fence: fences[0], Ops: []Op{Put("p1/b", []byte("v"))}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("a later write on the doubted claim: %v, want ErrFenced", err)
	}
	st := c.Stats()
	if st.Failed != 2 || st.Committed != 0 {
		t.Fatalf("stats %+v, want 2 failed", st)
	}
}

// The pairwise check of a small txn's ops refuses exactly the txns the
// check by maps refuses.
func TestPutConflictsPairwiseMatchesByMaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	keys := []string{"a", "a/b", "a/b/c", "b", "ab"}
	kinds := []OpKind{OpPut, OpDelete, OpDeletePrefix}
	refused := 0
	for i := range 20000 {
		var txn Txn
		for range rng.IntN(smallTxnOps + 1) {
			txn.Ops = append(txn.Ops, Op{Kind: kinds[rng.IntN(len(kinds))], Key: keys[rng.IntN(len(keys))]})
		}
		pair, maps := putConflictsPairwise(txn.Ops), putConflictsByMaps([]Txn{txn})
		if (pair == nil) != (maps == nil) || pair != nil && !errors.Is(pair, ErrInvalidTxn) {
			t.Fatalf("txn %d %+v: pairwise %v, by maps %v", i, txn, pair, maps)
		}
		if pair != nil {
			refused++
		}
	}
	if refused < 1000 || refused > 19000 {
		t.Fatalf("%d of 20000 random txns refused: the test does not tell the checks apart", refused)
	}
}

// fenceBytes counts an owner key without making it: the same size.
func TestFenceBytesIsTheOwnerKeysSize(t *testing.T) {
	for _, p := range []uint32{0, 1, 9, 99999, 100000, 999999, 1000000, 123456789, 999999999, 1000000000, 4294967295} {
		if got, want := fenceBytes(p), 2*(len(OwnerKey(p))+16); got != want {
			t.Errorf("fenceBytes(%d) = %d, want %d", p, got, want)
		}
	}
}

// When Run stops, the txns still queued were never sent: their callers,
// leaving with the same context, must not report their claims in doubt
// (each such report costs its partition a re-fence).
func TestCommitterStopDoesNotDoubtQueuedTxns(t *testing.T) {
	m, fences := claimedMemory(t, 1)
	h := &holdStore{Store: m, hold: make(chan struct{})}
	var (
		mu      sync.Mutex
		doubted []Fence
	)
	c := NewCommitter(h, CommitterConfig{MaxInFlight: 1, StallAfter: time.Hour, OnInDoubt: func(fs []Fence) {
		mu.Lock()
		doubted = append(doubted, fs...)
		mu.Unlock()
	}})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error)
	go func() { runDone <- c.Run(ctx) }()
	// An unfenced txn holds the one slot; fenced ones queue behind it.
	go func() { _ = c.Commit(ctx, Txn{Ops: []Op{Put("held", nil)}}) }()
	waitUntil(t, "the first batch", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.batches) == 1 })
	const queued = 2000
	var wg sync.WaitGroup
	for i := range queued {
		wg.Go(func() {
			_ = c.Commit(ctx, Txn{Fence: fences[0], Ops: []Op{Put(fmt.Sprintf("q/%d", i), nil)}})
		})
	}
	waitUntil(t, "queued", func() bool { return c.Stats().Waiting == queued })
	cancel()
	wg.Wait()
	<-runDone
	h.mu.Lock()
	sent := len(h.batches)
	h.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if sent != 1 || len(doubted) > 0 {
		t.Fatalf("%d batches sent, claims reported in doubt: %v; want 1 batch, none (nothing fenced was sent)", sent, doubted)
	}
}

// CommitWith answers every commit on the caller's one channel, and gives it
// up (sets it to nil) when its caller left a txn in flight, whose answer
// comes later: a reused channel would hand that stale answer to the next
// commit.
func TestCommitterCommitWithReusesItsChannel(t *testing.T) {
	m, fences := claimedMemory(t, 2)
	h := &holdStore{Store: m, hold: closedChan()}
	c := NewCommitter(h, CommitterConfig{MaxInFlight: 1, StallAfter: time.Hour})
	ctx := runCommitter(t, c)
	var done chan error
	for i := range 3 {
		if err := c.CommitWith(ctx, Txn{Fence: fences[0], Ops: []Op{Put(fmt.Sprintf("p1/k%d", i), []byte("v"))}}, &done); err != nil {
			t.Fatal(err)
		}
		if i == 0 && done == nil {
			t.Fatal("no channel kept")
		}
	}
	first := done
	if err := c.CommitWith(ctx, Txn{Fence: fences[0], Ops: []Op{Put("p1/k", []byte("v"))}}, &done); err != nil || done != first {
		t.Fatalf("a later commit: %v, same channel %v", err, done == first)
	}
	if err := c.CommitWith(ctx, Txn{Fence: fences[0], Conds: []Cond{Absent("p1/k")}, Ops: []Op{Put("p1/k2", []byte("v"))}}, &done); !errors.Is(err, ErrConditionFailed) || done != first {
		t.Fatalf("a failed commit: %v (want ErrConditionFailed), same channel %v", err, done == first)
	}

	h2 := &holdStore{Store: m, hold: make(chan struct{})}
	c2 := NewCommitter(h2, CommitterConfig{MaxInFlight: 1, StallAfter: time.Hour})
	ctx2 := runCommitter(t, c2)
	cctx, ccancel := context.WithCancel(ctx2)
	left := make(chan error, 1)
	go func() {
		left <- c2.CommitWith(cctx, Txn{Fence: fences[1], Ops: []Op{Put("p2/a", []byte("v"))}}, &done)
	}()
	waitUntil(t, "the txn in flight", func() bool { h2.mu.Lock(); defer h2.mu.Unlock(); return len(h2.batches) == 1 })
	ccancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that left: %v", err)
	}
	if done != nil {
		t.Fatal("the channel of a txn left in flight is kept: its late answer would go to the next commit")
	}
	close(h2.hold)
}
