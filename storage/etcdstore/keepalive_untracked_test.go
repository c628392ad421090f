package etcdstore_test

import (
	"context"
	"testing"
	"time"

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
	s, g := gatedStore(t, etcdtest.NewClient(t, endpoints))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := granter.GrantLease(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	keepAliveEndsAtRevoke(t, ctx, s, g, lease)
}
