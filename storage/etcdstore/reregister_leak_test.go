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

// lateWriteThenFail is a store on which, while armed, the revoke of lease
// old follows a write of the node's record on it (one of the previous
// run's, given up on but applied late), so that the revoke deletes the
// record, and the put that writes the record again fails.
type lateWriteThenFail struct {
	storage.Store
	armed  atomic.Bool
	old    storage.LeaseID
	record []byte
	puts   atomic.Int32
}

func (s *lateWriteThenFail) RevokeLease(ctx context.Context, lease storage.LeaseID) error {
	if s.armed.Load() && lease == s.old {
		if err := s.Store.PutLeased(ctx, storage.NodeKey("n1"), s.record, s.old); err != nil {
			return err
		}
	}
	return s.Store.RevokeLease(ctx, lease)
}

func (s *lateWriteThenFail) PutLeased(ctx context.Context, key string, value []byte, lease storage.LeaseID, conds ...storage.Cond) error {
	if s.armed.Load() && s.puts.Add(1) == 2 {
		return errors.New("injected: registration written again failed")
	}
	return s.Store.PutLeased(ctx, key, value, lease, conds...)
}

// An Establish that registers the node, revokes the previous run's lease
// (which deleted the record: a write of that run's had moved it back) and
// then fails to write the record again leaves no lease behind: its lease
// held nothing, no record and no claim, so no later Establish would find
// it to revoke, and it stayed in etcd until its TTL and in the store's map
// of leases for good.
func TestEstablishWhoseSecondRegistrationFailsLeavesNoLease(t *testing.T) {
	endpoints := etcdtest.Start(t)
	cli := etcdtest.NewClient(t, endpoints)
	s, err := etcdstore.New(cli, "/reregister-leak/")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The previous run: registered, with claims, then gone (not stopped).
	prev := runtime.NewOwnership(s, runtime.NodeRecord{NodeID: "n1"}, 30*time.Second, nil)
	if err := prev.Establish(ctx, runtime.AllPartitions(4)); err != nil {
		t.Fatal(err)
	}
	kv, err := s.Get(ctx, storage.NodeKey("n1"))
	if err != nil {
		t.Fatal(err)
	}
	st := &lateWriteThenFail{Store: s, old: kv.Lease, record: kv.Value}
	st.armed.Store(true)
	own := runtime.NewOwnership(st, runtime.NodeRecord{NodeID: "n1"}, 30*time.Second, nil)
	if err := own.Establish(ctx, runtime.AllPartitions(4)); err == nil {
		t.Fatal("an Establish whose second registration failed succeeded")
	}
	if n := st.puts.Load(); n != 2 {
		t.Fatalf("%d registrations written, want 2 (the injection missed)", n)
	}
	st.armed.Store(false)
	if err := own.Establish(ctx, runtime.AllPartitions(4)); err != nil {
		t.Fatal(err)
	}
	if n := s.TrackedLeases(); n != 1 {
		t.Errorf("%d leases tracked once established, want 1 (the failed attempt's stays)", n)
	}
	resp, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Leases) != 1 {
		t.Errorf("%d leases in etcd once established, want 1", len(resp.Leases))
	}
}
