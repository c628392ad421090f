package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/storage/storagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// One etcd serves every subtest, each in its own namespace.
func TestConformance(t *testing.T) {
	cli := etcdtest.StartClient(t)
	var n atomic.Int64
	storagetest.Run(t, func(t *testing.T) storage.Store {
		s, err := etcdstore.New(cli, fmt.Sprintf("/t%d/", n.Add(1)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// etcd's own refusals map to storage.ErrTooLarge too, for a store that
// believes its limits are higher than the server's.
func TestServerLimits(t *testing.T) {
	cli := etcdtest.StartClient(t)
	// The store's own limits are set above the server's, so that the
	// server's refusals are what is tested.
	s, err := etcdstore.New(cli, etcdstore.DefaultPrefix, etcdstore.WithLimits(storage.Limits{MaxTxnOps: 4 * etcdstore.EmbeddedMaxTxnOps, MaxTxnBytes: 8 << 20}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var many storage.Txn
	for i := range etcdstore.EmbeddedMaxTxnOps + 1 {
		many.Ops = append(many.Ops, storage.Put(fmt.Sprintf("k%d", i), nil))
	}
	for name, txn := range map[string]storage.Txn{
		"1025 ops (etcd: too many operations)": many,
		"1.6 MiB (etcd: request is too large)": {Ops: []storage.Op{storage.Put("big", make([]byte, 1600<<10))}},
		"2.1 MiB (client: ResourceExhausted)":  {Ops: []storage.Op{storage.Put("big", make([]byte, 2100<<10))}},
	} {
		if err := s.Commit(ctx, txn); !errors.Is(err, storage.ErrTooLarge) {
			t.Errorf("%s: %v, want ErrTooLarge", name, err)
		}
	}
	if n, err := s.Count(ctx, ""); err != nil || n != 0 {
		t.Fatalf("Count = %d, %v; want nothing written", n, err)
	}
}

func TestEmbeddedConfig(t *testing.T) {
	ctx := context.Background()
	if _, err := etcdstore.StartEmbedded(ctx, etcdstore.EmbeddedConfig{}); err == nil {
		t.Fatal("StartEmbedded without Dir succeeded")
	}
	c := etcdstore.DefaultLocalEmbeddedConfig(t.TempDir())
	c.InitialClusterState = "maybe"
	if _, err := etcdstore.StartEmbedded(ctx, c); err == nil {
		t.Fatal("StartEmbedded with a bad InitialClusterState succeeded")
	}
}
