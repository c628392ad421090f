package storage

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Mirror keeps an in-memory copy of the keys under one prefix of a Store,
// for the small prefixes every node reads on every request (owners/, the
// partition table; nodes/, the node records): reads cost a map lookup, not
// a store round trip.
//
// Run reads the prefix (ListRev) and then follows it (Watch from the read's
// revision + 1), so the copy trails the store by the watch's latency and
// never misses a change. When the watch ends with an error (the store
// compacted the revisions it still had to deliver, or etcd lost its
// leader), Run reads the prefix again and resumes; keys deleted meanwhile
// vanish from the copy.
//
// Goroutines: NewMirror starts none; Run runs in the calling goroutine
// plus the store's goroutine for the current watch, and returns once both
// are done. The read methods may be called from any goroutine, before,
// while or after Run runs.
type Mirror struct {
	store  Store
	prefix string
	log    *zap.Logger

	running   atomic.Bool
	ready     chan struct{} // closed by the first successful read
	readyOnce sync.Once
	// kick cuts a backoff short (Kick).
	kick chan struct{}
	// backoff returns the wait after the fails-th failure in a row
	// (mirrorBackoff; tests change it).
	backoff func(fails int) time.Duration

	// mu guards the fields below. Run writes them; readers take it shared.
	mu  sync.RWMutex
	kvs map[string]KV
	// rev is the store revision the copy reflects.
	rev int64
	// sorted is kvs in key order, built on demand for Snapshot; nil after
	// a change.
	sorted []KV
	// changed is closed and replaced every time the copy changes.
	changed chan struct{}
}

// Backoff between failed attempts of a Mirror (a read, or a watch that
// failed soon after it began); each failure doubles it, with jitter so that
// the nodes of a cluster do not retry in step after etcd comes back.
const (
	mirrorMinBackoff = 50 * time.Millisecond
	mirrorMaxBackoff = 5 * time.Second
	// mirrorHealthyWatch is how long a watch must run, if it delivered
	// nothing, for its end to count as a new failure rather than one
	// more of a series.
	mirrorHealthyWatch = time.Second
)

// NewMirror returns a Mirror of the keys under prefix, empty until Run has
// read them. A nil log discards its messages.
func NewMirror(store Store, prefix string, log *zap.Logger) *Mirror {
	if log == nil {
		log = zap.NewNop()
	}
	return &Mirror{
		store:   store,
		prefix:  prefix,
		log:     log.With(zap.String("prefix", prefix)),
		ready:   make(chan struct{}),
		kvs:     make(map[string]KV),
		changed: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		backoff: mirrorBackoff,
	}
}

// mirrorBackoff is the wait after the fails-th failure in a row (from 0).
func mirrorBackoff(fails int) time.Duration {
	delay := min(mirrorMinBackoff<<min(fails, 16), mirrorMaxBackoff)
	return delay/2 + rand.N(delay/2+1)
}

// Kick makes a Mirror that waits to try the store again (after failures)
// try at once: its owner has news that the store serves again (the node's
// lease was renewed after a cut), and a copy seconds behind would route
// calls by owners that have changed. A kick while the Mirror follows the
// store is kept until its next read: at most one wait cut short, after a
// watch that, having run, starts its backoff from the shortest anyway
// (dropping such kicks instead could drop the one that matters, given as
// a watch fails).
func (m *Mirror) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Run keeps the copy up to date until ctx is done, and returns nil then.
// Store errors are logged and retried with backoff, except the compaction
// of a watch that was doing well, which is re-read at once, and ErrClosed,
// after which the copy stays as it is until ctx is done. Run must not be
// called twice at the same time.
func (m *Mirror) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("storage: Mirror.Run called while running")
	}
	defer m.running.Store(false)
	fails := 0
	for {
		healthy, err := m.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrClosed) {
			// A closed store never serves again; retrying would only log.
			// The copy stays readable, frozen, until the owner stops Run.
			m.log.Info("mirror: store closed; the copy stops following it")
			<-ctx.Done()
			return nil
		}
		if healthy {
			fails = 0
		}
		var delay time.Duration
		if fails > 0 || !errors.Is(err, ErrCompacted) {
			delay = m.backoff(fails)
		}
		fails++
		if errors.Is(err, ErrCompacted) {
			m.log.Info("mirror: watch fell behind a compaction; reading the prefix again", zap.Error(err), zap.Duration("after", delay))
		} else {
			m.log.Warn("mirror: store failed; reading the prefix again", zap.Error(err), zap.Int("failures", fails), zap.Duration("after", delay))
		}
		if delay > 0 {
			// A kick that came while the failed read ran is kept: it may
			// say that the store is back since that read began.
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			case <-m.kick:
				t.Stop()
			}
		}
	}
}

// follow reads the prefix and then applies its watch until the watch
// fails (its error is returned) or ctx is done. healthy says whether the
// watch did well for a while, so that its end starts a new series of
// failures.
func (m *Mirror) follow(ctx context.Context) (healthy bool, err error) {
	kvs, rev, err := m.store.ListRev(ctx, m.prefix, ListOptions{})
	if err != nil {
		return false, fmt.Errorf("list: %w", err)
	}
	m.replace(kvs, rev)
	// Read: a kick from before it is served.
	select {
	case <-m.kick:
	default:
	}
	m.readyOnce.Do(func() { close(m.ready) })

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for resp := range m.store.Watch(wctx, m.prefix, rev+1) {
		if resp.Err != nil {
			return healthy || time.Since(start) >= mirrorHealthyWatch, resp.Err
		}
		healthy = true
		m.apply(resp)
	}
	if ctx.Err() != nil {
		return true, ctx.Err()
	}
	return false, errors.New("storage: watch channel closed without an error")
}

// replace makes a fresh read the copy.
func (m *Mirror) replace(kvs []KV, rev int64) {
	next := make(map[string]KV, len(kvs))
	m.mu.Lock()
	defer m.mu.Unlock()
	same := len(kvs) == len(m.kvs)
	for _, kv := range kvs {
		next[kv.Key] = kv
		if same {
			// A revision names one write of one key: equal revisions are
			// equal contents.
			old, ok := m.kvs[kv.Key]
			same = ok && old.ModRevision == kv.ModRevision && old.CreateRevision == kv.CreateRevision
		}
	}
	m.kvs = next
	// Not max(m.rev, rev): the watch that follows starts at rev+1, and
	// apply must not skip its events as already seen.
	m.rev = rev
	m.sorted = kvs // ListRev returns keys in order
	if !same {
		m.notifyLocked()
	}
}

// apply applies one watch response.
func (m *Mirror) apply(resp WatchResponse) {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for _, ev := range resp.Events {
		if ev.KV.ModRevision <= m.rev || !strings.HasPrefix(ev.KV.Key, m.prefix) {
			continue // already in the copy (or not ours: a store bug, ignored)
		}
		switch ev.Type {
		case EventPut:
			m.kvs[ev.KV.Key] = ev.KV
			changed = true
		case EventDelete:
			if _, ok := m.kvs[ev.KV.Key]; ok {
				delete(m.kvs, ev.KV.Key)
				changed = true
			}
		}
	}
	m.rev = max(m.rev, resp.Revision)
	if changed {
		m.sorted = nil
		m.notifyLocked()
	}
}

func (m *Mirror) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Get returns the copy of key. The KV's Value is shared with the mirror
// and with other readers: it must not be modified.
func (m *Mirror) Get(key string) (KV, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	kv, ok := m.kvs[key]
	return kv, ok
}

// Snapshot returns the copy in key order. The slice is the caller's; the
// Values are shared, as Get's are.
func (m *Mirror) Snapshot() []KV {
	m.mu.RLock()
	s := m.sorted
	m.mu.RUnlock()
	if s == nil {
		m.mu.Lock()
		if m.sorted == nil {
			m.sorted = make([]KV, 0, len(m.kvs))
			for _, kv := range m.kvs {
				m.sorted = append(m.sorted, kv)
			}
			slices.SortFunc(m.sorted, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
		}
		s = m.sorted
		m.mu.Unlock()
	}
	return slices.Clone(s)
}

// Len returns the number of keys in the copy.
func (m *Mirror) Len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.kvs)
}

// Revision returns the store revision the copy reflects: every change
// under the prefix up to it is in the copy. Zero until the first read.
func (m *Mirror) Revision() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.rev
}

// Ready returns a channel closed once the copy holds a first full read of
// the prefix. Before that, Get finds nothing.
func (m *Mirror) Ready() <-chan struct{} { return m.ready }

// Changed returns a channel that is closed at the next change of the copy
// (one watch response, or a re-read that found a difference), when a new
// one takes its place. Any number of goroutines can wait on it. To miss no
// change, take the channel before reading the copy:
//
//	for {
//		ch := m.Changed()
//		if kv, ok := m.Get(key); ok && done(kv) {
//			break
//		}
//		<-ch
//	}
func (m *Mirror) Changed() <-chan struct{} {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.changed
}
