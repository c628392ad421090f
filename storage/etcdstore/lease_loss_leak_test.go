package etcdstore_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// stalledRenewals renews no lease, as a node frozen past its TTL (a long
// GC pause, a suspended VM) does: its KeepAlive waits until cancelled,
// and returns only once the lease has surely expired in etcd, with the
// registration and claims it held.
type stalledRenewals struct {
	storage.Store
	expiry time.Duration
}

func (s *stalledRenewals) KeepAlive(ctx context.Context, lease storage.LeaseID, renewed func(time.Time)) error {
	<-ctx.Done()
	time.Sleep(s.expiry)
	return nil
}

// Leases lost by expiry, one after the other: the store forgets each
// (the re-establish finds no record naming it, and revoked none: one
// entry per loss stayed in the store's map for good).
func TestLeasesLostByExpiryAreForgotten(t *testing.T) {
	endpoints := etcdtest.Start(t)
	s, err := etcdstore.New(etcdtest.NewClient(t, endpoints), "/loss-leak/")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = time.Second // etcd raises it to its minimum
	st := &stalledRenewals{Store: s}
	own := runtime.NewOwnership(st, runtime.NodeRecord{NodeID: "n1"}, ttl, nil)
	if err := own.Establish(ctx, runtime.AllPartitions(4)); err != nil {
		t.Fatal(err)
	}
	// The lease as etcd granted it, and the time after which it has
	// surely expired.
	resp, err := etcdtest.NewClient(t, endpoints).TimeToLive(ctx, clientv3.LeaseID(own.Lease()))
	if err != nil {
		t.Fatal(err)
	}
	st.expiry = time.Duration(resp.GrantedTTL)*time.Second + 500*time.Millisecond
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = own.Run(rctx) }()
	const losses = 2
	for {
		if _, n := own.LeaseStats(); n >= losses {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no lease lost")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Re-established after the last loss.
	for own.Lease() == 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	n := s.TrackedLeases()
	rcancel()
	<-done
	if n > 1 {
		t.Fatalf("%d leases tracked after %d lost by expiry, want only the current one", n, losses)
	}
}
