package storage

import (
	"cmp"
	"context"
	"fmt"
	"github.com/google/btree"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Memory is the in-memory twin of the etcd store: the same semantics
// (revisions, leases, fenced transactions, limits), no durability. Tests of
// packages above storage use it so that they run without etcd; the
// conformance suite (storagetest) holds the two to the same behaviour.
//
// Revisions grow as etcd's do: one global revision, incremented once per
// transaction that changes something, and every key records the revision
// that created it and the one that last modified it.
//
// Leases expire on real time: a timer per lease expires it when its TTL
// passes, so that watchers see the deletes of its keys without anyone
// calling the store, and every operation applies due expiries first, so
// that no caller sees a lease outlive its deadline because a timer ran
// late. ExpireLease expires one at once.
//
// Watch reads a log of the changes of the last DefaultMemoryRetention
// revisions (fewer if they hold more than 40,000 changes); a watch from an
// older revision gets ErrCompacted, as it does
// from etcd after a compaction. Compact discards history at once, for
// tests of watchers that fall behind.
//
// A packed transaction that writes a key twice, or puts a key under one of
// its own deletes, fails with ErrInvalidTxn, as etcd refuses it with
// "duplicate key given in txn request".
type Memory struct {
	limits Limits

	// mu guards everything below.
	mu     sync.Mutex
	rev    int64
	keys   *btree.BTreeG[string] // the keys of data, in order
	data   map[string]*memEntry
	leases map[LeaseID]*memLease
	// lastLease is the last lease id granted; ids are never reused.
	lastLease LeaseID
	closed    bool
	// closedc is closed by Close, to end KeepAlive and Watch calls.
	closedc chan struct{}

	// log holds every change from revision compacted on, oldest first;
	// prevs[i] is the key as it was before log[i], for reads at a past
	// revision.
	log   []Event
	prevs []memPrev
	// compacted is the oldest revision a Watch can start from, as etcd's
	// compaction revision: history before it is gone.
	compacted int64
	// changed is closed and replaced whenever rev grows, to wake watchers.
	changed chan struct{}
}

// DefaultMemoryRetention is how many revisions of history a Memory keeps
// for watchers that lag behind. etcd's embedded member keeps five minutes.
const DefaultMemoryRetention = 10000

// maxMemoryEvents bounds the events a Memory's log keeps, whatever
// DefaultMemoryRetention says: the history of the latest revisions that
// hold at most this many changes (or more, for one revision's).
const maxMemoryEvents = 4 * DefaultMemoryRetention

// memWatchBatch bounds the events of one WatchResponse of a Memory, so that
// a watcher far behind catches up in steps (as etcd sends at most 1000
// revisions at a time). A revision is never split, so one response can
// hold more.
const memWatchBatch = 1000

// memPrev is a key as it was before a change: existed false if it did not
// exist.
type memPrev struct {
	kv      KV
	existed bool
}

type memEntry struct {
	value       []byte
	create, mod int64
	lease       LeaseID
}

type memLease struct {
	id       LeaseID
	ttl      time.Duration
	deadline time.Time
	keys     map[string]struct{}
	// gone is closed when the lease expires or is revoked.
	gone chan struct{}
	// timer expires the lease at its deadline; renewals push it back.
	timer *time.Timer
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store with the etcd store's default
// limits.
func NewMemory() *Memory {
	return &Memory{
		limits:  DefaultLimits(),
		data:    make(map[string]*memEntry),
		keys:    btree.NewOrderedG[string](32),
		leases:  make(map[LeaseID]*memLease),
		closedc: make(chan struct{}),
		changed: make(chan struct{}),
	}
}

// lock takes mu, applies due lease expiries and checks that the store is
// open. On error mu is not held.
func (m *Memory) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	m.expireLocked()
	return nil
}

// expireLocked removes the leases whose deadline has passed.
func (m *Memory) expireLocked() {
	now := time.Now()
	for _, l := range m.leases {
		if !now.Before(l.deadline) {
			m.removeLeaseLocked(l)
		}
	}
}

// expireTimer is the body of a lease's timer.
func (m *Memory) expireTimer(l *memLease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.leases[l.id] != l {
		return
	}
	// A renewal may have raced with the timer's firing: only a lease past
	// its deadline goes.
	if d := time.Until(l.deadline); d > 0 {
		l.timer.Reset(d)
		return
	}
	m.expireLocked()
}

// removeLeaseLocked deletes the lease and its keys, in one revision and in
// key order, as etcd revokes a lease in one transaction.
func (m *Memory) removeLeaseLocked(l *memLease) {
	delete(m.leases, l.id)
	l.timer.Stop()
	close(l.gone)
	if len(l.keys) == 0 {
		return
	}
	rev := m.rev + 1
	for _, k := range slices.Sorted(maps.Keys(l.keys)) {
		m.deleteLocked(k, rev)
	}
	m.advanceLocked(rev)
}

// advanceLocked makes rev, whose changes are in the log, the current
// revision: it drops history past the retention and wakes watchers.
func (m *Memory) advanceLocked(rev int64) {
	m.rev = rev
	old := rev - DefaultMemoryRetention + 1
	if n := len(m.log); n > maxMemoryEvents {
		// Group commits of hundreds of keys would otherwise keep
		// millions of events for the watchers, which the garbage
		// collector scans and appends copy.
		old = max(old, m.log[n-maxMemoryEvents].KV.ModRevision)
	}
	if old > m.compacted {
		m.compactLocked(old)
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// compactLocked drops the history before rev.
//
// The events before rev stay in the log until they are as many as those
// after it (every reader looks past m.compacted): moving the rest to the
// front then keeps the log's array, where reslicing it at every revision
// made appends reallocate and copy the whole retained log every few
// thousand events (a sixth of the CPU of a step-heavy benchmark).
func (m *Memory) compactLocked(rev int64) {
	m.compacted = rev
	i := sort.Search(len(m.log), func(i int) bool { return m.log[i].KV.ModRevision >= rev })
	if i == 0 || i < len(m.log)-i {
		return
	}
	n := copy(m.log, m.log[i:])
	clear(m.log[n:]) // lets the dropped events' values go
	m.log = m.log[:n]
	n = copy(m.prevs, m.prevs[i:])
	clear(m.prevs[n:])
	m.prevs = m.prevs[:n]
}

// prevLocked is key as it is now, before a change logged next.
func (m *Memory) prevLocked(key string) memPrev {
	e, ok := m.data[key]
	if !ok {
		return memPrev{}
	}
	return memPrev{kv: KV{Key: key, Value: e.value, CreateRevision: e.create, ModRevision: e.mod, Lease: e.lease}, existed: true}
}

// Compact discards the history before rev (at most the current revision),
// as etcd's compaction does: a Watch from an older revision then fails
// with ErrCompacted. Compacting to an older revision than before does
// nothing. It is a test hook for watchers that fall behind.
func (m *Memory) Compact(rev int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rev = min(rev, m.rev)
	if rev > m.compacted {
		m.compactLocked(rev)
	}
}

// putLocked sets key at revision rev and logs the change (the caller
// advances m.rev).
func (m *Memory) putLocked(key string, value []byte, lease LeaseID, rev int64) {
	m.prevs = append(m.prevs, m.prevLocked(key))
	e, ok := m.data[key]
	if !ok {
		e = &memEntry{create: rev}
		m.data[key] = e
		m.keys.ReplaceOrInsert(key)
	}
	if e.lease != 0 && e.lease != lease {
		if l := m.leases[e.lease]; l != nil {
			delete(l.keys, key)
		}
	}
	e.value = slices.Clone(value)
	if e.value == nil {
		e.value = []byte{}
	}
	e.mod = rev
	e.lease = lease
	if lease != 0 {
		m.leases[lease].keys[key] = struct{}{}
	}
	// The log shares e.value: a put replaces the slice, never writes to it.
	m.log = append(m.log, Event{Type: EventPut, KV: KV{Key: key, Value: e.value, CreateRevision: e.create, ModRevision: rev, Lease: lease}})
}

// deleteLocked deletes key at revision rev, logs the change if it existed
// (the caller advances m.rev) and reports whether it did.
func (m *Memory) deleteLocked(key string, rev int64) bool {
	e, ok := m.data[key]
	if !ok {
		return false
	}
	m.prevs = append(m.prevs, m.prevLocked(key))
	m.log = append(m.log, Event{Type: EventDelete, KV: KV{Key: key, ModRevision: rev}})
	if e.lease != 0 {
		if l := m.leases[e.lease]; l != nil {
			delete(l.keys, key)
		}
	}
	delete(m.data, key)
	m.keys.Delete(key)
	return true
}

// keysLocked returns, in order, the keys that start with prefix and come
// after startAfter, at most limit of them (all if limit <= 0).
func (m *Memory) keysLocked(prefix, startAfter string, limit int) []string {
	start := prefix
	if startAfter != "" && startAfter+"\x00" > start {
		start = startAfter + "\x00"
	}
	var out []string
	m.keys.AscendGreaterOrEqual(start, func(k string) bool {
		if !strings.HasPrefix(k, prefix) {
			return false
		}
		out = append(out, k)
		return limit <= 0 || len(out) < limit
	})
	return out
}

func (m *Memory) kvLocked(key string, keysOnly bool) KV {
	e := m.data[key]
	kv := KV{Key: key, CreateRevision: e.create, ModRevision: e.mod, Lease: e.lease}
	if !keysOnly {
		kv.Value = slices.Clone(e.value)
		if kv.Value == nil {
			kv.Value = []byte{}
		}
	}
	return kv
}

// Get implements Store.
func (m *Memory) Get(ctx context.Context, key string) (KV, error) {
	if err := m.lock(ctx); err != nil {
		return KV{}, err
	}
	defer m.mu.Unlock()
	if _, ok := m.data[key]; !ok {
		return KV{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return m.kvLocked(key, false), nil
}

// List implements Store.
func (m *Memory) List(ctx context.Context, prefix string, opts ListOptions) ([]KV, error) {
	kvs, _, err := m.ListRev(ctx, prefix, opts)
	return kvs, err
}

// ListRev implements Store.
func (m *Memory) ListRev(ctx context.Context, prefix string, opts ListOptions) ([]KV, int64, error) {
	if err := m.lock(ctx); err != nil {
		return nil, 0, err
	}
	defer m.mu.Unlock()
	if opts.Revision != 0 {
		kvs, err := m.listAtLocked(prefix, opts)
		return kvs, m.rev, err
	}
	keys := m.keysLocked(prefix, opts.StartAfter, opts.Limit)
	out := make([]KV, 0, len(keys))
	for _, k := range keys {
		out = append(out, m.kvLocked(k, opts.KeysOnly))
	}
	return out, m.rev, nil
}

// listAtLocked is ListRev at opts.Revision: the keys as they are now,
// except those changed since, which are as the first change after it
// found them.
func (m *Memory) listAtLocked(prefix string, opts ListOptions) ([]KV, error) {
	rev := opts.Revision
	switch {
	case rev < m.compacted:
		return nil, fmt.Errorf("%w: read at revision %d, history starts at %d", ErrCompacted, rev, m.compacted)
	case rev > m.rev:
		return nil, fmt.Errorf("storage: read at revision %d, which is in the future (the store is at %d)", rev, m.rev)
	}
	before := map[string]memPrev{}
	for i := sort.Search(len(m.log), func(i int) bool { return m.log[i].KV.ModRevision > rev }); i < len(m.log); i++ {
		k := m.log[i].KV.Key
		if _, seen := before[k]; !seen && strings.HasPrefix(k, prefix) {
			before[k] = m.prevs[i]
		}
	}
	var out []KV
	for _, k := range m.keysLocked(prefix, "", 0) {
		if _, changed := before[k]; !changed {
			out = append(out, m.kvLocked(k, opts.KeysOnly))
		}
	}
	for _, p := range before {
		if !p.existed {
			continue
		}
		kv := p.kv
		if opts.KeysOnly {
			kv.Value = nil
		} else {
			kv.Value = slices.Clone(kv.Value)
			if kv.Value == nil {
				kv.Value = []byte{}
			}
		}
		out = append(out, kv)
	}
	slices.SortFunc(out, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
	if opts.StartAfter != "" {
		n, _ := slices.BinarySearchFunc(out, opts.StartAfter+"\x00", func(kv KV, k string) int { return strings.Compare(kv.Key, k) })
		out = out[n:]
	}
	if opts.Limit > 0 && len(out) > opts.Limit {
		out = out[:opts.Limit]
	}
	return out, nil
}

// Count implements Store.
func (m *Memory) Count(ctx context.Context, prefix string) (int64, error) {
	if err := m.lock(ctx); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	n := int64(0)
	m.keys.AscendGreaterOrEqual(prefix, func(k string) bool {
		if !strings.HasPrefix(k, prefix) {
			return false
		}
		n++
		return true
	})
	return n, nil
}

// Limits implements Store.
func (m *Memory) Limits() Limits { return m.limits }

// Commit implements Store.
func (m *Memory) Commit(ctx context.Context, txns ...Txn) error {
	if err := m.limits.Check(txns...); err != nil {
		return err
	}
	if err := checkTxns(txns); err != nil {
		return err
	}
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	// Evaluate every compare first, as one etcd txn does: ErrFenced wins
	// over ErrConditionFailed.
	var condErr error
	for i := range txns {
		t := &txns[i]
		if t.Fence.Token != 0 {
			e, ok := m.data[OwnerKey(t.Fence.Partition)]
			if !ok || e.create != t.Fence.Token {
				return fmt.Errorf("%w: partition %d, token %d", ErrFenced, t.Fence.Partition, t.Fence.Token)
			}
		}
		if condErr == nil {
			condErr = m.condsLocked(t.Conds)
		}
	}
	if condErr != nil {
		return condErr
	}
	rev := m.rev + 1
	changed := false
	for i := range txns {
		for _, o := range txns[i].Ops {
			switch o.Kind {
			case OpPut:
				m.putLocked(o.Key, o.Value, 0, rev)
				changed = true
			case OpDelete:
				changed = m.deleteLocked(o.Key, rev) || changed
			case OpDeletePrefix:
				for _, k := range m.keysLocked(o.Key, "", 0) {
					changed = m.deleteLocked(k, rev) || changed
				}
			}
		}
	}
	if changed {
		m.advanceLocked(rev)
	}
	return nil
}

// condsLocked returns ErrConditionFailed (wrapped) if one of conds does
// not hold.
func (m *Memory) condsLocked(conds []Cond) error {
	for _, c := range conds {
		e, exists := m.data[c.Key]
		var holds bool
		switch c.Kind {
		case CondAbsent:
			holds = !exists
		case CondPresent:
			holds = exists
		case CondUnchanged:
			// etcd compares a missing key's mod revision as 0.
			mod := int64(0)
			if exists {
				mod = e.mod
			}
			holds = mod == c.Rev
		}
		if !holds {
			return fmt.Errorf("%w: %q", ErrConditionFailed, c.Key)
		}
	}
	return nil
}

// PutIfAbsent implements Store.
func (m *Memory) PutIfAbsent(ctx context.Context, key string, value []byte) ([]byte, bool, error) {
	if key == "" {
		return nil, false, fmt.Errorf("%w: empty key", ErrInvalidTxn)
	}
	// etcd refuses a request over its size limit, whatever its kind.
	if err := m.limits.Check(Txn{Ops: []Op{Put(key, value)}}); err != nil {
		return nil, false, err
	}
	if err := m.lock(ctx); err != nil {
		return nil, false, err
	}
	defer m.mu.Unlock()
	if e, ok := m.data[key]; ok {
		return slices.Clone(e.value), false, nil
	}
	m.putLocked(key, value, 0, m.rev+1)
	m.advanceLocked(m.rev + 1)
	return slices.Clone(value), true, nil
}

// PutLeased implements Store. The conds are checked before the lease, as
// etcd checks the lease of a put only on the branch of a txn it runs.
func (m *Memory) PutLeased(ctx context.Context, key string, value []byte, lease LeaseID, conds ...Cond) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidTxn)
	}
	// The put is checked too, without conds: etcd refuses a request over
	// its size limit, whatever its kind.
	txn := Txn{Conds: conds, Ops: []Op{Put(key, value)}}
	if err := m.limits.Check(txn); err != nil {
		return err
	}
	if err := checkTxns([]Txn{txn}); err != nil {
		return err
	}
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if err := m.condsLocked(conds); err != nil {
		return err
	}
	if _, ok := m.leases[lease]; !ok {
		return fmt.Errorf("%w: %x", ErrLeaseNotFound, int64(lease))
	}
	m.putLocked(key, value, lease, m.rev+1)
	m.advanceLocked(m.rev + 1)
	return nil
}

// leaseTTL rounds ttl as etcd does: whole seconds, at least one.
func leaseTTL(ttl time.Duration) time.Duration {
	s := (ttl + time.Second - 1) / time.Second
	return max(s, 1) * time.Second
}

// GrantLease implements Store. The ttl is rounded up to whole seconds, as
// etcd keeps it.
func (m *Memory) GrantLease(ctx context.Context, ttl time.Duration) (LeaseID, error) {
	if err := m.lock(ctx); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	m.lastLease++
	ttl = leaseTTL(ttl)
	l := &memLease{
		id:       m.lastLease,
		ttl:      ttl,
		deadline: time.Now().Add(ttl),
		keys:     make(map[string]struct{}),
		gone:     make(chan struct{}),
	}
	l.timer = time.AfterFunc(ttl, func() { m.expireTimer(l) })
	m.leases[l.id] = l
	return l.id, nil
}

// GrantedTTL implements GrantedTTLs: lease's TTL, 0 if it is gone.
func (m *Memory) GrantedTTL(lease LeaseID) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[lease]; l != nil {
		return l.ttl
	}
	return 0
}

// renew extends lease by its ttl and returns it, or nil if it is gone.
func (m *Memory) renew(ctx context.Context, lease LeaseID) (*memLease, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	l := m.leases[lease]
	if l == nil {
		return nil, fmt.Errorf("%w: %x", ErrLeaseNotFound, int64(lease))
	}
	l.deadline = time.Now().Add(l.ttl)
	l.timer.Reset(l.ttl)
	return l, nil
}

// KeepAlive implements Store. It renews every third of the ttl, as the
// etcd store does.
func (m *Memory) KeepAlive(ctx context.Context, lease LeaseID, renewed func(validUntil time.Time)) error {
	var (
		l          *memLease
		validUntil time.Time
		gone       <-chan struct{} // nil until the first renewal
	)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-gone:
			return fmt.Errorf("%w: %x expired or revoked", ErrLeaseNotFound, int64(lease))
		case <-m.closedc:
			return ErrClosed
		case <-t.C:
		}
		// The renewal below cannot fail for want of the store, but the
		// wait for the timer can outlast the lease (a stalled process):
		// the contract is the same as the etcd store's.
		if !validUntil.IsZero() && !time.Now().Before(validUntil) {
			return fmt.Errorf("%w: %x not renewed before %v", ErrLeaseNotFound, int64(lease), validUntil)
		}
		sent := time.Now()
		var err error
		if l, err = m.renew(ctx, lease); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		gone = l.gone
		validUntil = sent.Add(l.ttl)
		if renewed != nil {
			renewed(validUntil)
		}
		t.Reset(time.Until(sent.Add(l.ttl / 3)))
	}
}

// RevokeLease implements Store.
func (m *Memory) RevokeLease(ctx context.Context, lease LeaseID) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if l := m.leases[lease]; l != nil {
		m.removeLeaseLocked(l)
	}
	return nil
}

// ExpireLease expires lease now, as if its ttl had passed without renewal:
// its keys and claims vanish and KeepAlive on it returns ErrLeaseNotFound.
// It is a test hook for node loss without waiting for real time.
func (m *Memory) ExpireLease(lease LeaseID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.leases[lease]; l != nil {
		m.removeLeaseLocked(l)
	}
}

// Claim implements Store. All claims made by one call share a revision, as
// the claims of one etcd txn do.
func (m *Memory) Claim(ctx context.Context, node string, lease LeaseID, partitions []uint32) ([]Claim, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	if _, ok := m.leases[lease]; !ok {
		return nil, fmt.Errorf("%w: %x", ErrLeaseNotFound, int64(lease))
	}
	ps := slices.Clone(partitions)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	rev := m.rev + 1
	var out []Claim
	for _, p := range ps {
		k := OwnerKey(p)
		if _, owned := m.data[k]; owned {
			continue
		}
		m.putLocked(k, []byte(node), lease, rev)
		out = append(out, Claim{Partition: p, Node: node, Token: rev, Lease: lease})
	}
	if len(out) > 0 {
		m.advanceLocked(rev)
	}
	return out, nil
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, c Claim) (int64, error) {
	if err := m.lock(ctx); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	k := OwnerKey(c.Partition)
	if e, ok := m.data[k]; ok && e.create == c.Token {
		m.deleteLocked(k, m.rev+1)
		m.advanceLocked(m.rev + 1)
		return m.rev, nil
	}
	return 0, nil
}

// Claims implements Store.
func (m *Memory) Claims(ctx context.Context) ([]Claim, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []Claim
	for _, k := range m.keysLocked(OwnersPrefix, "", 0) {
		p, ok := ParseOwnerKey(k)
		if !ok {
			continue
		}
		e := m.data[k]
		out = append(out, Claim{Partition: p, Node: string(e.value), Token: e.create, Lease: e.lease})
	}
	slices.SortFunc(out, func(a, b Claim) int { return cmp.Compare(a.Partition, b.Partition) })
	return out, nil
}

// Close implements Store: later calls fail with ErrClosed, and KeepAlive
// and Watch calls end with it. Leases stop expiring.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.closedc)
		for _, l := range m.leases {
			l.timer.Stop()
		}
	}
	return nil
}

// Watch implements Store. Each watch has one goroutine, which reads the
// log under the store's lock and sends without it.
func (m *Memory) Watch(ctx context.Context, prefix string, fromRev int64) <-chan WatchResponse {
	out := make(chan WatchResponse, watchBuffer)
	if fromRev <= 0 {
		m.mu.Lock()
		fromRev = m.rev + 1
		m.mu.Unlock()
	}
	go m.watch(ctx, prefix, fromRev, out)
	return out
}

// watchBuffer is the buffer of a Watch channel: enough to absorb a burst
// while the reader works, small enough that a stalled reader holds up only
// its own watch.
const watchBuffer = 16

func (m *Memory) watch(ctx context.Context, prefix string, next int64, out chan<- WatchResponse) {
	defer close(out)
	send := func(r WatchResponse) bool {
		select {
		case out <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		if err := m.lock(ctx); err != nil {
			if ctx.Err() == nil {
				send(WatchResponse{Err: err})
			}
			return
		}
		if next < m.compacted {
			err := fmt.Errorf("%w: watch from revision %d, history starts at %d", ErrCompacted, next, m.compacted)
			m.mu.Unlock()
			send(WatchResponse{Err: err})
			return
		}
		evs, upTo := m.eventsLocked(prefix, next)
		caughtUp := upTo == m.rev
		wake := m.changed
		m.mu.Unlock()
		if upTo >= next {
			next = upTo + 1
			if len(evs) > 0 && !send(WatchResponse{Events: evs, Revision: upTo}) {
				return
			}
		}
		if caughtUp {
			select {
			case <-ctx.Done():
				return
			case <-m.closedc:
			case <-wake:
			}
		}
	}
}

// eventsLocked returns the logged events under prefix from revision next
// on, at most about memWatchBatch of them, and the revision they bring the
// watcher up to.
func (m *Memory) eventsLocked(prefix string, next int64) ([]Event, int64) {
	i := sort.Search(len(m.log), func(i int) bool { return m.log[i].KV.ModRevision >= next })
	var out []Event
	upTo := m.rev
	for ; i < len(m.log); i++ {
		e := m.log[i]
		if len(out) >= memWatchBatch && e.KV.ModRevision != out[len(out)-1].KV.ModRevision {
			upTo = e.KV.ModRevision - 1
			break
		}
		if !strings.HasPrefix(e.KV.Key, prefix) {
			continue
		}
		if e.Type == EventPut {
			e.KV.Value = slices.Clone(e.KV.Value)
		}
		out = append(out, e)
	}
	return out, upTo
}
