package etcdstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// failingRegistration fails the node's registration (PutLeased) while
// fails is above zero.
type failingRegistration struct {
	storage.Store
	fails atomic.Int32
}

func (f *failingRegistration) PutLeased(ctx context.Context, key string, value []byte, lease storage.LeaseID, conds ...storage.Cond) error {
	if f.fails.Add(-1) >= 0 {
		return errors.New("injected: registration failed")
	}
	return f.Store.PutLeased(ctx, key, value, lease, conds...)
}

// An Establish whose registration fails after its lease was granted
// leaves no lease behind: not in etcd (revoked, not left to expire), not in
// the store's map of leases (which grew by one per failed attempt, for
// good: a lease that nothing renews or revokes is never forgotten).
func TestFailedEstablishLeavesNoLease(t *testing.T) {
	endpoints := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, endpoints)
	s, err := etcdstore.New(cli, "/establish-leak/")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := &failingRegistration{Store: s}
	own := runtime.NewOwnership(st, runtime.NodeRecord{NodeID: "n1"}, 30*time.Second, nil)
	const attempts = 10
	st.fails.Store(attempts)
	for range attempts {
		if err := own.Establish(ctx, runtime.AllPartitions(4)); err == nil {
			t.Fatal("an Establish whose registration failed succeeded")
		}
	}
	if n := s.TrackedLeases(); n != 0 {
		t.Errorf("%d leases tracked after %d failed Establish, want 0", n, attempts)
	}
	resp, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Leases) != 0 {
		t.Errorf("%d leases in etcd after %d failed Establish, want 0", len(resp.Leases), attempts)
	}
	if err := own.Establish(ctx, runtime.AllPartitions(4)); err != nil {
		t.Fatal(err)
	}
	if n := s.TrackedLeases(); n != 1 {
		t.Errorf("%d leases tracked once established, want 1", n)
	}
}
