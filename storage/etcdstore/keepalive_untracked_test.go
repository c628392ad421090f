package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// So for a lease this store did not grant (a node's lease from before a
// restart, granted by another store): one it revokes while its first
// renewal is on its way back ends KeepAlive at once, reported renewed
// never, rather than tracked anew as alive until the next renewal.
func TestKeepAliveOfAnUntrackedLeaseEndsAtRevokeDuringARenewal(t *testing.T) {
	endpoints := etcdtest.Start(t)
	granter, err := etcdstore.New(etcdtest.NewClient(t, endpoints), "/ka/")
	if err != nil {
		t.Fatal(err)
	}
	defer granter.Close()
	cli := etcdtest.NewClient(t, endpoints)
	g := &gatedLease{Lease: cli.Lease, held: make(chan struct{}), release: make(chan struct{})}
	cli.Lease = g
	s, err := etcdstore.New(cli, "/ka/")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := granter.GrantLease(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	renewals := make(chan time.Time, 10)
	g.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- s.KeepAlive(ctx, lease, func(v time.Time) { renewals <- v }) }()
	select {
	case <-g.held:
	case <-ctx.Done():
		t.Fatal("no renewal")
	}
	if err := s.RevokeLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	select {
	case err := <-done:
		if !errors.Is(err, storage.ErrLeaseNotFound) {
			t.Fatalf("KeepAlive of a revoked lease = %v, want ErrLeaseNotFound", err)
		}
	case <-time.After(5 * time.Second):
		cancel()
		<-done
		t.Fatal("KeepAlive went on after the store revoked its lease (until its next renewal, a third of the TTL away)")
	}
	if n := len(renewals); n != 0 {
		t.Fatalf("KeepAlive reported %d renewals of a lease revoked before it heard of them", n)
	}
}
