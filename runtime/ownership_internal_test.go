package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/storage"
)

// stuckGrantStore blocks GrantLease until release closes (etcd unreachable:
// clientv3 waits for a ready connection, and reestablish passes Run's ctx,
// which has no deadline).
type stuckGrantStore struct {
	storage.Store
	block   chan struct{}
	entered chan struct{}
	once    sync.Once
}

func (s *stuckGrantStore) GrantLease(ctx context.Context, ttl time.Duration) (storage.LeaseID, error) {
	if s.block != nil {
		s.once.Do(func() { close(s.entered) })
		select {
		case <-s.block:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return s.Store.GrantLease(ctx, ttl)
}

// While the lease loop establishes the lease again (Establish held up by
// etcd, holding the registration lock), a drain fails at once: it waited
// on the lock for its caller's whole deadline (rivetctl drain: minutes).
func TestSetDrainingWithoutALeaseFailsAtOnce(t *testing.T) {
	m := storage.NewMemory()
	defer m.Close()
	s := &stuckGrantStore{Store: m}
	own := NewOwnership(s, NodeRecord{NodeID: "n1"}, time.Minute, nil)
	if err := own.Establish(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// The lease is lost: drop, then the lease loop's Establish gets stuck.
	own.drop(true)
	s.block, s.entered = make(chan struct{}), make(chan struct{})
	bg, cancelBg := context.WithCancel(context.Background())
	estDone := make(chan error, 1)
	go func() { estDone <- own.Establish(bg, nil) }()
	<-s.entered
	defer func() { cancelBg(); <-estDone }()

	const deadline = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	t0 := time.Now()
	err := own.SetDraining(ctx, true)
	took := time.Since(t0)
	if !errors.Is(err, storage.ErrLeaseNotFound) || ctx.Err() != nil {
		t.Errorf("SetDraining without a lease waited %v (the caller's whole deadline) and returned %v; want ErrLeaseNotFound at once", took, err)
	}
}

// lateApplyStore fails a registration write as a timed-out one does, but
// applies it only after the caller's read-back: etcd can apply a proposal
// whose client gave up (the project's own faultStore.stashCommitSub models
// this for Commit).
type lateApplyStore struct {
	storage.Store
	mu      sync.Mutex
	stashed func()
	stash   bool
}

func (s *lateApplyStore) PutLeased(ctx context.Context, key string, value []byte, lease storage.LeaseID, conds ...storage.Cond) error {
	s.mu.Lock()
	stash := s.stash
	if stash {
		s.stash = false
		v := append([]byte(nil), value...)
		s.stashed = func() { _ = s.Store.PutLeased(context.Background(), key, v, lease, conds...) }
	}
	s.mu.Unlock()
	if stash {
		return context.DeadlineExceeded
	}
	return s.Store.PutLeased(ctx, key, value, lease, conds...)
}

// A registration write that applies after its caller gave up on it (and
// after the read-back that looks for it) reaches the node's record through
// the copy of storage (SyncRecord, which the node calls as its copy of the
// nodes' records changes): otherwise the next Establish, after a lease
// loss, wrote the stale mark back, here undoing an undrain that applied (and
// with another node drained meanwhile, on the strength of this one being
// eligible, every node would be draining).
func TestALateAppliedUndrainIsNotRevertedByEstablish(t *testing.T) {
	m, s, own := drainedNode(t)
	ctx := context.Background()
	stored, rev := readRecord(t, m, "a")
	drained, drainedRev := stored(), rev()
	// Undrain: the reply is lost (the caller's deadline), the read-back
	// sees the old record, then etcd applies the write.
	setDrainingWithItsReplyLost(t, s, own, false)
	s.stashed()
	if stored().Draining {
		t.Fatal("setup: the late undrain did not apply")
	}
	// A copy of storage that lags behind the drain's write says nothing.
	own.SyncRecord(drained, drainedRev-1)
	if !own.Record().Draining {
		t.Fatal("the record took the mark of a copy older than its last write")
	}
	// The node's copy of the nodes' records shows the late write.
	own.SyncRecord(stored(), rev())
	if own.Record().Draining {
		t.Fatal("the record did not take the stored mark")
	}
	// A record of another lease (an earlier run's) is not taken.
	old := stored()
	old.Lease, old.Draining = old.Lease+1000, true
	own.SyncRecord(old, rev()+1)
	if own.Record().Draining {
		t.Fatal("the record took the mark of a record under another lease")
	}
	// (Here another node's drain sees a eligible and succeeds.)
	// a's lease is lost and re-established.
	own.drop(true)
	if err := own.Establish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if stored().Draining {
		t.Errorf("after a lease loss the node is registered draining again: Establish reverted an undrain that applied")
	}
}

// readRecord returns readers of node id's registration in m and of its
// mod revision.
func readRecord(t *testing.T, m storage.Store, id string) (func() NodeRecord, func() int64) {
	get := func() storage.KV {
		kv, err := m.Get(context.Background(), storage.NodeKey(id))
		if err != nil {
			t.Fatal(err)
		}
		return kv
	}
	return func() NodeRecord {
			var rec NodeRecord
			if err := json.Unmarshal(get().Value, &rec); err != nil {
				t.Fatal(err)
			}
			return rec
		}, func() int64 {
			return get().ModRevision
		}
}

// A copy of storage that trails a drain which succeeded (an event the
// node's mirror applies after the drain's reply, showing the record as it
// was under the same lease) must not undo it: the next Establish, after a
// lease loss, would write the old mark back.
func TestACopyOlderThanADrainDoesNotUndoIt(t *testing.T) {
	m := storage.NewMemory()
	defer m.Close()
	own := NewOwnership(m, NodeRecord{NodeID: "a"}, time.Minute, nil)
	ctx := context.Background()
	if err := own.Establish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	stored, rev := readRecord(t, m, "a")
	before, beforeRev := stored(), rev()
	if err := own.SetDraining(ctx, true); err != nil {
		t.Fatal(err)
	}
	own.SyncRecord(before, beforeRev)
	if !own.Record().Draining {
		t.Fatal("a copy older than the drain that just succeeded flipped the record to not draining")
	}
	own.drop(true)
	if err := own.Establish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if !stored().Draining {
		t.Fatal("after a lease loss the node is registered not draining: a drain that succeeded was undone")
	}
}

// The late write most likely in practice applies while the node has no
// lease: an etcd cut times out the drain's write and stops the lease's
// renewals, etcd extends leases across a leader change, so the old lease
// lives on and the proposal applies under it. SyncRecord cannot take it
// (no lease, then a new one); Establish must, from the old lease's record,
// rather than write the stale mark back under the new lease.
func TestALateWriteUnderTheLostLeaseIsNotRevertedByEstablish(t *testing.T) {
	m, s, own := drainedNode(t)
	ctx := context.Background()
	stored, rev := readRecord(t, m, "a")
	// Undrain during the cut: reply lost, read-back sees the old record.
	setDrainingWithItsReplyLost(t, s, own, false)
	// The same cut: the watchdog drops the lease (etcd still has it).
	own.drop(true)
	// etcd applies the undrain under the old lease; the mirror shows it.
	s.stashed()
	if stored().Draining {
		t.Fatal("setup: the late undrain did not apply")
	}
	own.SyncRecord(stored(), rev()) // ignored: o.lease == 0
	if err := own.Establish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	own.SyncRecord(stored(), rev()) // Establish's own write: same stale mark
	if stored().Draining {
		t.Errorf("Establish registered the node draining again: the undrain that applied under the lost lease was reverted")
	}
}

// getHookStore runs hook after a Get of key (once), and fails the next
// Get when failGet is set.
type getHookStore struct {
	*lateApplyStore
	failGet atomic.Bool
	hookMu  sync.Mutex
	hook    func()
}

func (s *getHookStore) Get(ctx context.Context, key string) (storage.KV, error) {
	if s.failGet.CompareAndSwap(true, false) {
		return storage.KV{}, errors.New("injected: read-back timed out")
	}
	kv, err := s.lateApplyStore.Get(ctx, key)
	s.hookMu.Lock()
	h := s.hook
	s.hook = nil
	s.hookMu.Unlock()
	if h != nil {
		h()
	}
	return kv, err
}

// A read-back that fails after a write that succeeded leaves the write's
// revision unknown: a late write of an earlier SetDraining that applies
// afterwards must still be taken from a copy (refused, the node's record
// and storage disagreed until the next Establish wrote the stale mark).
func TestAnUnknownRevisionDoesNotBlockALateWrite(t *testing.T) {
	m, s, own := nodeWithALostDrain(t) // #1: a drain whose reply was lost, not applied yet
	ctx := context.Background()
	stored, rev := readRecord(t, m, "a")
	// #2 undrain: applies, its read-back fails.
	s.failGet.Store(true)
	if err := own.SetDraining(ctx, false); err != nil {
		t.Fatal(err)
	}
	// #1 applies late; the mirror shows it.
	s.stashed()
	own.SyncRecord(stored(), rev())
	if got, want := own.Record().Draining, stored().Draining; got != want {
		t.Errorf("record draining=%v, storage draining=%v (rev %d): the copy was refused (recordRev=MaxInt64)", got, want, rev())
	}
}

// SetDraining must not take back a newer copy that SyncRecord took while
// its read-back was in flight.
func TestSetDrainingKeepsANewerCopyTakenMeanwhile(t *testing.T) {
	m, s, own := nodeWithALostDrain(t) // #1: a drain whose reply was lost, not applied yet
	ctx := context.Background()
	stored, rev := readRecord(t, m, "a")
	// #2's read-back is served; then #1 applies and the mirror delivers it
	// (watchCluster's SyncRecord) before SetDraining takes o.mu.
	s.hookMu.Lock()
	s.hook = func() {
		s.stashed()
		own.SyncRecord(stored(), rev())
	}
	s.hookMu.Unlock()
	if err := own.SetDraining(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got, want := own.Record().Draining, stored().Draining; got != want {
		t.Errorf("record draining=%v, storage draining=%v: SetDraining overwrote a newer adopted copy (rev %d)", got, want, rev())
	}
}

// drainWithItsReplyLost makes own drain, its write failing unapplied, to
// apply when s.stashed is called.
func drainWithItsReplyLost(t *testing.T, s *lateApplyStore, own *Ownership) {
	t.Helper()
	setDrainingWithItsReplyLost(t, s, own, true)
}

// setDrainingWithItsReplyLost is drainWithItsReplyLost for a drain or an
// undrain.
func setDrainingWithItsReplyLost(t *testing.T, s *lateApplyStore, own *Ownership, draining bool) {
	t.Helper()
	s.mu.Lock()
	s.stash = true
	s.mu.Unlock()
	if err := own.SetDraining(context.Background(), draining); err == nil {
		t.Fatal("setup: a registration write that did not apply reported success")
	}
}

// drainedNode returns node "a", registered and drained, on a store that
// can apply a write after its caller gave up on it.
func drainedNode(t *testing.T) (*storage.Memory, *lateApplyStore, *Ownership) {
	t.Helper()
	m := storage.NewMemory()
	t.Cleanup(func() { m.Close() })
	s := &lateApplyStore{Store: m}
	own := NewOwnership(s, NodeRecord{NodeID: "a"}, time.Minute, nil)
	if err := own.Establish(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if err := own.SetDraining(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	return m, s, own
}

// nodeWithALostDrain returns node "a", registered, whose drain failed
// unapplied (to apply when s.stashed is called), on a store whose reads
// can be failed or hooked.
func nodeWithALostDrain(t *testing.T) (*storage.Memory, *getHookStore, *Ownership) {
	t.Helper()
	m := storage.NewMemory()
	t.Cleanup(func() { m.Close() })
	s := &getHookStore{lateApplyStore: &lateApplyStore{Store: m}}
	own := NewOwnership(s, NodeRecord{NodeID: "a"}, time.Minute, nil)
	if err := own.Establish(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	drainWithItsReplyLost(t, s.lateApplyStore, own)
	return m, s, own
}

// blockingPut holds registration writes until release closes.
type blockingPut struct {
	storage.Store
	block, entered chan struct{}
	once           sync.Once
}

func (s *blockingPut) PutLeased(ctx context.Context, key string, value []byte, lease storage.LeaseID, conds ...storage.Cond) error {
	if s.block != nil {
		s.once.Do(func() { close(s.entered) })
		<-s.block
	}
	return s.Store.PutLeased(ctx, key, value, lease, conds...)
}

// A drain waiting for another registration write to finish fails at once
// when the lease is lost meanwhile, rather than waiting its caller's
// deadline behind the lease's re-establishment.
func TestADrainWaitingForTheRegistrationLockFailsWhenTheLeaseIsLost(t *testing.T) {
	m := storage.NewMemory()
	defer m.Close()
	s := &blockingPut{Store: m}
	own := NewOwnership(s, NodeRecord{NodeID: "a"}, time.Minute, nil)
	if err := own.Establish(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	s.block, s.entered = make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() { first <- own.SetDraining(context.Background(), true) }()
	<-s.entered // the first holds the lock, its write held
	waiting := make(chan struct{})
	var once sync.Once
	own.lockWaitHook = func() { once.Do(func() { close(waiting) }) }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	second := make(chan error, 1)
	go func() { second <- own.SetDraining(ctx, false) }()
	<-waiting // the second is at the lock, with a lease
	own.drop(true)
	select {
	case err := <-second:
		if !errors.Is(err, storage.ErrLeaseNotFound) {
			t.Errorf("the waiting drain = %v, want ErrLeaseNotFound", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the waiting drain still waits 30 s after the lease was lost")
		close(s.block)
		<-first
		<-second
		return
	}
	close(s.block)
	<-first
}
