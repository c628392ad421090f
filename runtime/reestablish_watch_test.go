package runtime_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// cutStore is a store that, once cut, answers nothing: its calls wait
// until their context ends, as those of an etcd client whose endpoints
// are unreachable do.
type cutStore struct {
	storage.Store
	cut atomic.Bool
}

func (s *cutStore) KeepAlive(ctx context.Context, lease storage.LeaseID, renewed func(time.Time)) error {
	if s.cut.Load() {
		<-ctx.Done()
		return nil
	}
	// A keep-alive begun before the cut hears no renewal after it.
	return s.Store.KeepAlive(ctx, lease, func(validUntil time.Time) {
		if !s.cut.Load() {
			renewed(validUntil)
		}
	})
}

func (s *cutStore) GrantLease(ctx context.Context, ttl time.Duration) (storage.LeaseID, error) {
	if s.cut.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	return s.Store.GrantLease(ctx, ttl)
}

// A node whose lease came back after a loss, and whose etcd became
// unreachable again while it loaded the wakeups of the partitions it had
// claimed again (an OnClaimed callback: reads that wait for etcd as long
// as their context lets them), still drops those claims and runs its
// OnLost callbacks once the new lease may have expired. The callbacks ran
// without a deadline in the loop that renews and watches the lease, which
// then did neither until etcd came back: the node kept its claims (its
// stats and rivet_partitions_owned counted them, beside the nodes that
// had taken them over) and never noticed the second loss (found by
// cutting a node of a three-node cluster off etcd repeatedly under load).
func TestALeaseReestablishedJustBeforeACutIsStillWatched(t *testing.T) {
	t.Parallel()
	m := storage.NewMemory()
	t.Cleanup(func() { m.Close() })
	const ttl = time.Second
	st := &cutStore{Store: m}
	own, ctx, run := establishedOwnership(t, st, ttl)
	var lost, claimed atomic.Int32
	own.OnLost(func() { lost.Add(1) })
	own.OnClaimed(func(ctx context.Context, parts []uint32) {
		// Cut off as the lease came back: the read waits for as long as
		// ctx lets it.
		st.cut.Store(true)
		claimed.Add(1)
		<-ctx.Done()
	})
	run()

	// The first loss; Run drops the claims, gets a lease again, claims
	// the partitions again and loads their wakeups, which hangs.
	if err := m.RevokeLease(ctx, own.Lease()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claims taken again, and their wakeups loading", 10*time.Second, func() bool {
		return lost.Load() == 1 && claimed.Load() >= 1
	})
	// Nothing renews the new lease: the node must give its claims up
	// once it may have expired, and say so.
	waitFor(t, "the claims of the unrenewed lease dropped", 5*ttl, func() bool {
		return lost.Load() == 2 && own.Owned() == 0
	})
}

// A Claim whose OnClaimed callbacks wait on storage that went away (the
// wakeup loads of the partitions it claimed) returns by the lease's local
// deadline, rather than hold its caller, the balancer, until storage is
// back: past that deadline nothing they load is served anyway.
func TestAClaimDoesNotWaitForItsCallbacksPastTheLease(t *testing.T) {
	t.Parallel()
	m := storage.NewMemory()
	defer m.Close()
	const ttl = time.Second
	own := runtime.NewOwnership(m, runtime.NodeRecord{NodeID: "n1"}, ttl, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := own.Establish(ctx, []uint32{1}); err != nil {
		t.Fatal(err)
	}
	own.OnClaimed(func(ctx context.Context, parts []uint32) { <-ctx.Done() })
	done := make(chan error, 1)
	go func() {
		_, err := own.Claim(ctx, []uint32{2})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
	case <-time.After(10 * ttl):
		t.Fatal("Claim still waits for its callbacks, long past the lease's deadline")
	}
}

// The lease that came back is renewed while the callbacks of the claims
// taken again run, however long they take: they ran in the loop that
// renews it, so a node with many partitions to load (or a slow etcd) lost
// the lease again right after getting it back.
func TestALeaseReestablishedIsRenewedWhileItsClaimsLoad(t *testing.T) {
	t.Parallel()
	m := storage.NewMemory()
	t.Cleanup(func() { m.Close() })
	const ttl = time.Second
	own, ctx, run := establishedOwnership(t, m, ttl)
	var lost, loading atomic.Int32
	release := make(chan struct{})
	own.OnLost(func() { lost.Add(1) })
	own.OnClaimed(func(ctx context.Context, parts []uint32) {
		loading.Add(1)
		select { // a long load: the test says when it ends
		case <-release:
		case <-ctx.Done():
		}
	})
	run()

	if err := m.RevokeLease(ctx, own.Lease()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claims taken again, and their load begun", 10*time.Second, func() bool {
		return lost.Load() == 1 && loading.Load() == 1
	})
	// Several TTLs of loading: the lease must be renewed meanwhile.
	r0, _ := own.LeaseStats()
	waitFor(t, "renewals of the new lease during the load", 10*time.Second, func() bool {
		r, _ := own.LeaseStats()
		return r >= r0+4
	})
	close(release)
	if lost.Load() != 1 || own.Owned() != 2 {
		t.Fatalf("after a load of several TTLs: %d losses (want 1), %d partitions owned (want 2)", lost.Load(), own.Owned())
	}
}

// establishedOwnership is node n1's Ownership over st, holding partitions 1
// and 2, and the func that starts its Run (after the test registers its
// callbacks); the test's cleanup stops it.
func establishedOwnership(t *testing.T, st storage.Store, ttl time.Duration) (*runtime.Ownership, context.Context, func()) {
	own := runtime.NewOwnership(st, runtime.NodeRecord{NodeID: "n1"}, ttl, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	if err := own.Establish(ctx, []uint32{1, 2}); err != nil {
		t.Fatal(err)
	}
	return own, ctx, func() {
		wg.Add(1)
		go func() { defer wg.Done(); _ = own.Run(ctx) }()
	}
}
