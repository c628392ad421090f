package storage

import (
	"cmp"
	"context"
	"fmt"
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
// Leases expire on real time. Expiry is applied lazily, at the start of
// every operation, which no caller can tell from eager expiry because every
// observation goes through an operation. ExpireLease expires one at once.
//
// A packed transaction that writes a key twice, or puts a key under one of
// its own deletes, fails with ErrInvalidTxn, as etcd refuses it with
// "duplicate key given in txn request".
type Memory struct {
	limits Limits

	// mu guards everything below.
	mu     sync.Mutex
	rev    int64
	keys   []string // sorted; the keys of data
	data   map[string]*memEntry
	leases map[LeaseID]*memLease
	// lastLease is the last lease id granted; ids are never reused.
	lastLease LeaseID
	closed    bool
	// closedc is closed by Close, to end KeepAlive calls.
	closedc chan struct{}
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
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store with the etcd store's default
// limits.
func NewMemory() *Memory {
	return &Memory{
		limits:  DefaultLimits(),
		data:    make(map[string]*memEntry),
		leases:  make(map[LeaseID]*memLease),
		closedc: make(chan struct{}),
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
	now := time.Now()
	for _, l := range m.leases {
		if now.After(l.deadline) {
			m.removeLeaseLocked(l)
		}
	}
	return nil
}

func (m *Memory) removeLeaseLocked(l *memLease) {
	delete(m.leases, l.id)
	close(l.gone)
	if len(l.keys) == 0 {
		return
	}
	rev := m.rev + 1
	for k := range l.keys {
		m.deleteLocked(k)
	}
	m.rev = rev
}

// putLocked sets key at revision rev (the caller advances m.rev).
func (m *Memory) putLocked(key string, value []byte, lease LeaseID, rev int64) {
	e, ok := m.data[key]
	if !ok {
		e = &memEntry{create: rev}
		m.data[key] = e
		i, _ := slices.BinarySearch(m.keys, key)
		m.keys = slices.Insert(m.keys, i, key)
	}
	if e.lease != 0 && e.lease != lease {
		if l := m.leases[e.lease]; l != nil {
			delete(l.keys, key)
		}
	}
	e.value = slices.Clone(value)
	e.mod = rev
	e.lease = lease
	if lease != 0 {
		m.leases[lease].keys[key] = struct{}{}
	}
}

// deleteLocked deletes key and reports whether it existed.
func (m *Memory) deleteLocked(key string) bool {
	e, ok := m.data[key]
	if !ok {
		return false
	}
	if e.lease != 0 {
		if l := m.leases[e.lease]; l != nil {
			delete(l.keys, key)
		}
	}
	delete(m.data, key)
	if i, found := slices.BinarySearch(m.keys, key); found {
		m.keys = slices.Delete(m.keys, i, i+1)
	}
	return true
}

// rangeLocked returns the index range of m.keys that starts with prefix and
// comes after startAfter.
func (m *Memory) rangeLocked(prefix, startAfter string) (int, int) {
	start := prefix
	if startAfter != "" && startAfter+"\x00" > start {
		start = startAfter + "\x00"
	}
	i := sort.SearchStrings(m.keys, start)
	j := i
	for j < len(m.keys) && strings.HasPrefix(m.keys[j], prefix) {
		j++
	}
	return i, j
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
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	i, j := m.rangeLocked(prefix, opts.StartAfter)
	if opts.Limit > 0 && j-i > opts.Limit {
		j = i + opts.Limit
	}
	out := make([]KV, 0, j-i)
	for _, k := range m.keys[i:j] {
		out = append(out, m.kvLocked(k, opts.KeysOnly))
	}
	return out, nil
}

// Count implements Store.
func (m *Memory) Count(ctx context.Context, prefix string) (int64, error) {
	if err := m.lock(ctx); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	i, j := m.rangeLocked(prefix, "")
	return int64(j - i), nil
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
		for _, c := range t.Conds {
			_, exists := m.data[c.Key]
			if condErr == nil && exists != (c.Kind == CondPresent) {
				condErr = fmt.Errorf("%w: %q", ErrConditionFailed, c.Key)
			}
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
				changed = m.deleteLocked(o.Key) || changed
			case OpDeletePrefix:
				a, b := m.rangeLocked(o.Key, "")
				for _, k := range slices.Clone(m.keys[a:b]) {
					changed = m.deleteLocked(k) || changed
				}
			}
		}
	}
	if changed {
		m.rev = rev
	}
	return nil
}

// PutIfAbsent implements Store.
func (m *Memory) PutIfAbsent(ctx context.Context, key string, value []byte) ([]byte, bool, error) {
	if key == "" {
		return nil, false, fmt.Errorf("%w: empty key", ErrInvalidTxn)
	}
	if err := m.lock(ctx); err != nil {
		return nil, false, err
	}
	defer m.mu.Unlock()
	if e, ok := m.data[key]; ok {
		return slices.Clone(e.value), false, nil
	}
	m.rev++
	m.putLocked(key, value, 0, m.rev)
	return slices.Clone(value), true, nil
}

// PutLeased implements Store.
func (m *Memory) PutLeased(ctx context.Context, key string, value []byte, lease LeaseID) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidTxn)
	}
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if _, ok := m.leases[lease]; !ok {
		return fmt.Errorf("%w: %x", ErrLeaseNotFound, int64(lease))
	}
	m.rev++
	m.putLocked(key, value, lease, m.rev)
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
	m.leases[m.lastLease] = &memLease{
		id:       m.lastLease,
		ttl:      ttl,
		deadline: time.Now().Add(ttl),
		keys:     make(map[string]struct{}),
		gone:     make(chan struct{}),
	}
	return m.lastLease, nil
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
	return l, nil
}

// KeepAlive implements Store. It renews every third of the ttl, as the
// etcd client does.
func (m *Memory) KeepAlive(ctx context.Context, lease LeaseID) error {
	l, err := m.renew(ctx, lease)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	t := time.NewTicker(l.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-l.gone:
			return fmt.Errorf("%w: %x", ErrLeaseNotFound, int64(lease))
		case <-m.closedc:
			return ErrClosed
		case <-t.C:
			if _, err := m.renew(ctx, lease); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
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
		m.rev = rev
	}
	return out, nil
}

// Release implements Store.
func (m *Memory) Release(ctx context.Context, c Claim) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	k := OwnerKey(c.Partition)
	if e, ok := m.data[k]; ok && e.create == c.Token {
		m.deleteLocked(k)
		m.rev++
	}
	return nil
}

// Claims implements Store.
func (m *Memory) Claims(ctx context.Context) ([]Claim, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	i, j := m.rangeLocked(OwnersPrefix, "")
	var out []Claim
	for _, k := range m.keys[i:j] {
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

// Close implements Store: later calls fail with ErrClosed and KeepAlive
// calls return it.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.closed {
		m.closed = true
		close(m.closedc)
	}
	return nil
}
