package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// pauseClaims is a store whose Claims, once armed, lists storage, then
// waits for resume before answering: what a Claim adopting orphans sees
// when a release runs meanwhile.
type pauseClaims struct {
	storage.Store
	armed          chan struct{} // closed: the next Claims pauses
	listed, resume chan struct{}
}

func (s *pauseClaims) Claims(ctx context.Context) ([]storage.Claim, error) {
	all, err := s.Store.Claims(ctx)
	select {
	case <-s.armed:
		s.armed = make(chan struct{}) // once
		close(s.listed)
		<-s.resume
	default:
	}
	return all, err
}

// A Claim that adopts the claims storage holds on this node's lease must
// not adopt one released after it listed them: the node would serve the
// partition on a dead token, and another node could claim it (found in
// review).
func TestClaimDoesNotAdoptAClaimReleasedAfterItWasListed(t *testing.T) {
	m := storage.NewMemory()
	defer m.Close()
	st := &pauseClaims{Store: m, armed: make(chan struct{}), listed: make(chan struct{}), resume: make(chan struct{})}
	own := runtime.NewOwnership(st, runtime.NodeRecord{NodeID: "n1"}, time.Minute, nil)
	ctx := context.Background()
	if err := own.Establish(ctx, []uint32{3}); err != nil {
		t.Fatal(err)
	}
	if !own.Owns(3) {
		t.Fatal("partition 3 not owned after Establish")
	}
	// Partition 3 is owned: the Claim below claims nothing and looks for
	// orphans; it pauses once it has listed the current claim.
	close(st.armed)
	done := make(chan []uint32, 1)
	go func() {
		got, err := own.Claim(ctx, []uint32{3})
		if err != nil {
			t.Errorf("Claim: %v", err)
		}
		done <- got
	}()
	<-st.listed
	if !own.BeginRelease(3) {
		t.Fatal("BeginRelease(3) = false")
	}
	if err := own.FinishRelease(ctx, 3); err != nil {
		t.Fatal(err)
	}
	close(st.resume)
	if got := <-done; len(got) != 0 {
		t.Fatalf("Claim adopted %v, a claim released meanwhile", got)
	}
	if own.Owns(3) || own.Holds(3) {
		t.Fatalf("partition 3 held after its release (Owns %v, Holds %v)", own.Owns(3), own.Holds(3))
	}
	if cs, err := m.Claims(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("claims in storage: %v, %v; want none", cs, err)
	}
}

// A drain whose conds fail writes nothing and leaves the node's own record
// as it was: the balancer reads Draining from it, and a lease re-established
// later registers it again, so a refused drain must not linger there.
func TestSetDrainingChangesTheRecordOnlyIfWritten(t *testing.T) {
	m := storage.NewMemory()
	defer m.Close()
	own := runtime.NewOwnership(m, runtime.NodeRecord{NodeID: "n1"}, time.Minute, nil)
	ctx := context.Background()
	if err := own.Establish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	stored := func() runtime.NodeRecord {
		t.Helper()
		kv, err := m.Get(ctx, storage.NodeKey("n1"))
		if err != nil {
			t.Fatal(err)
		}
		var rec runtime.NodeRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	if err := m.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(storage.NodeKey("n2"), []byte(`{"node_id":"n2"}`))}}); err != nil {
		t.Fatal(err)
	}
	other, err := m.Get(ctx, storage.NodeKey("n2"))
	if err != nil {
		t.Fatal(err)
	}
	stale := storage.Unchanged(other.Key, other.ModRevision-1)
	if err := own.SetDraining(ctx, true, stale); !errors.Is(err, storage.ErrConditionFailed) {
		t.Fatalf("SetDraining with a failing cond = %v, want ErrConditionFailed", err)
	}
	if own.Record().Draining || stored().Draining {
		t.Fatalf("after a refused drain: record draining %v, stored draining %v; want neither", own.Record().Draining, stored().Draining)
	}
	if err := own.SetDraining(ctx, true, storage.Unchanged(other.Key, other.ModRevision)); err != nil {
		t.Fatalf("SetDraining with a holding cond = %v", err)
	}
	if !own.Record().Draining || !stored().Draining {
		t.Fatalf("after a drain: record draining %v, stored draining %v; want both", own.Record().Draining, stored().Draining)
	}
	if err := own.SetDraining(ctx, false); err != nil {
		t.Fatalf("undrain = %v", err)
	}
	if own.Record().Draining || stored().Draining {
		t.Fatalf("after an undrain: record draining %v, stored draining %v; want neither", own.Record().Draining, stored().Draining)
	}
}

// lostReplyStore applies a registration write and then fails it, as a
// write whose reply a timeout or a lost connection cut off does.
type lostReplyStore struct {
	storage.Store
	lose atomic.Bool
}

func (s *lostReplyStore) PutLeased(ctx context.Context, key string, value []byte, lease storage.LeaseID, conds ...storage.Cond) error {
	if err := s.Store.PutLeased(ctx, key, value, lease, conds...); err != nil || !s.lose.Load() {
		return err
	}
	return context.DeadlineExceeded
}

func TestSetDrainingWhoseReplyWasLostKeepsTheRecordAsStored(t *testing.T) {
	m := storage.NewMemory()
	defer m.Close()
	s := &lostReplyStore{Store: m}
	own := runtime.NewOwnership(s, runtime.NodeRecord{NodeID: "n1"}, time.Minute, nil)
	ctx := context.Background()
	if err := own.Establish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	s.lose.Store(true)
	// Applied, reply lost: the node learns from storage that it drains.
	if err := own.SetDraining(ctx, true); err != nil {
		t.Fatalf("SetDraining whose write applied = %v, want nil", err)
	}
	if !own.Record().Draining {
		t.Fatal("a drain that applied left the node's record not draining")
	}
	// Not applied (the lease is gone) and failed: nothing changes.
	if err := m.RevokeLease(ctx, own.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := own.SetDraining(ctx, false); err == nil {
		t.Fatal("undrain without a lease succeeded")
	}
	if !own.Record().Draining {
		t.Fatal("an undrain that did not apply changed the node's record")
	}
}

// revokeHookStore runs before (if set) as a lease revoke begins and after
// once it has applied.
type revokeHookStore struct {
	storage.Store
	before, after func(lease storage.LeaseID)
}

func (s *revokeHookStore) RevokeLease(ctx context.Context, lease storage.LeaseID) error {
	if s.before != nil {
		s.before(lease)
	}
	err := s.Store.RevokeLease(ctx, lease)
	if s.after != nil {
		s.after(lease)
	}
	return err
}

// registeredOn returns the lease node id's registration is on in st, 0 if
// it has none.
func registeredOn(t *testing.T, st storage.Store, id string) storage.LeaseID {
	t.Helper()
	kv, err := st.Get(context.Background(), storage.NodeKey(id))
	if errors.Is(err, storage.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	var rec runtime.NodeRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Lease != kv.Lease {
		t.Fatalf("the registration says lease %x and is on lease %x", rec.Lease, kv.Lease)
	}
	return kv.Lease
}

// A node that crashed and comes back at once under its ID revokes its
// previous run's lease, to free that run's claims without waiting for the
// TTL, and stays registered throughout: revoked before the new
// registration was written, the record vanished for a moment, and every
// other node left this one out of its ring, claimed the partitions the
// revoke had just freed, and handed them back once the record returned
// (node TestAQuickRestartUnderTheSameIDMovesNoPartitionTwice).
func TestARestartUnderTheSameIDKeepsTheNodeRegistered(t *testing.T) {
	m := storage.NewMemory()
	defer m.Close()
	ctx := context.Background()
	old := crashedRun(t, m, []uint32{0, 1, 2})
	s := &revokeHookStore{Store: m}
	var afterRevoke storage.LeaseID
	s.after = func(lease storage.LeaseID) {
		if lease == old {
			afterRevoke = registeredOn(t, m, "b")
		}
	}
	restarted := runtime.NewOwnership(s, runtime.NodeRecord{NodeID: "b"}, time.Minute, nil)
	if err := restarted.Establish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if afterRevoke == 0 {
		t.Error("the node was unregistered as its previous run's lease was revoked")
	}
	if got := registeredOn(t, m, "b"); got != restarted.Lease() {
		t.Errorf("registered on lease %x, want the new run's %x", got, restarted.Lease())
	}
	claims, err := m.Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 0 {
		t.Errorf("the previous run's claims outlived the restart: %v", claims)
	}
	// The new run claims them at once.
	got, err := restarted.Claim(ctx, []uint32{0, 1, 2})
	if err != nil || len(got) != 3 {
		t.Fatalf("claim after the restart = %v, %v", got, err)
	}
}

// A write of the previous lease's given up on (a drain during a cut) may
// apply between the new registration and the revoke, moving the record
// back to the previous lease, which the revoke then deletes: Establish
// registers the node again.
func TestARegistrationTakenBackByALateWriteIsWrittenAgain(t *testing.T) {
	m := storage.NewMemory()
	defer m.Close()
	ctx := context.Background()
	old := crashedRun(t, m, nil)
	late, _ := json.Marshal(runtime.NodeRecord{NodeID: "b", Lease: old, Draining: true})
	s := &revokeHookStore{Store: m}
	s.before = func(lease storage.LeaseID) {
		if lease == old {
			if err := m.PutLeased(ctx, storage.NodeKey("b"), late, old); err != nil {
				t.Errorf("setup: the late write: %v", err)
			}
		}
	}
	restarted := runtime.NewOwnership(s, runtime.NodeRecord{NodeID: "b"}, time.Minute, nil)
	if err := restarted.Establish(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := registeredOn(t, m, "b"); got != restarted.Lease() {
		t.Errorf("registered on lease %x, want the new run's %x", got, restarted.Lease())
	}
}

// A restart whose revoke of the previous run's lease fails (etcd gone
// mid-way, or a crash right after the new registration) has already moved
// the record to its own lease: the next run reads that lease, not the one
// that holds the first run's claims. It must still free those claims,
// instead of leaving the node's partitions owned by a dead lease, and
// served by no one, until its TTL runs out.
func TestARestartWhoseRevokeFailedStillFreesTheFirstRunsClaims(t *testing.T) {
	m := storage.NewMemory()
	defer m.Close()
	ctx := context.Background()
	old := crashedRun(t, m, []uint32{0, 1, 2})
	failing := &revokeFailStore{Store: m, fail: old}
	second := runtime.NewOwnership(failing, runtime.NodeRecord{NodeID: "b"}, time.Minute, nil)
	if err := second.Establish(ctx, nil); err == nil {
		t.Fatal("setup: Establish succeeded although its revoke failed")
	}
	third := runtime.NewOwnership(m, runtime.NodeRecord{NodeID: "b"}, time.Minute, nil)
	if err := third.Establish(ctx, []uint32{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	claims, err := m.Claims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if c.Lease == old {
			t.Errorf("partition %d is still claimed on the first run's lease %x after two restarts", c.Partition, old)
		}
	}
	for _, p := range []uint32{0, 1, 2} {
		if _, ok := third.Token(p); !ok {
			t.Errorf("the restarted node does not hold partition %d", p)
		}
	}
}

// revokeFailStore fails every revoke of lease fail, as etcd going away
// mid-way would.
type revokeFailStore struct {
	storage.Store
	fail storage.LeaseID
}

func (s *revokeFailStore) RevokeLease(ctx context.Context, lease storage.LeaseID) error {
	if lease == s.fail {
		return storage.ErrNotSent
	}
	return s.Store.RevokeLease(ctx, lease)
}

// crashedRun establishes node "b" on m with partitions and leaves it as a
// crashed process leaves it: registered, its claims on its lease, which it
// returns.
func crashedRun(t *testing.T, m storage.Store, partitions []uint32) storage.LeaseID {
	t.Helper()
	crashed := runtime.NewOwnership(m, runtime.NodeRecord{NodeID: "b"}, time.Minute, nil)
	if err := crashed.Establish(context.Background(), partitions); err != nil {
		t.Fatal(err)
	}
	return crashed.Lease()
}
