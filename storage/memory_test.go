package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/storagetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMemoryConformance(t *testing.T) {
	storagetest.Run(t, storagetest.Harness{
		NewStore: func(t *testing.T) storage.Store { return storage.NewMemory() },
		Compact: func(_ context.Context, s storage.Store, rev int64) error {
			s.(*storage.Memory).Compact(rev)
			return nil
		},
	})
}

// Revisions of the twin grow exactly as etcd's: one per committed write
// batch, none for a batch that changes nothing.
func TestMemoryRevisionsPerBatch(t *testing.T) {
	ctx := context.Background()
	m := storage.NewMemory()
	defer m.Close()
	rev := func(key string) int64 {
		kv, err := m.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return kv.ModRevision
	}
	put := func(keys ...string) {
		var txn storage.Txn
		for _, k := range keys {
			txn.Ops = append(txn.Ops, storage.Put(k, nil))
		}
		if err := m.Commit(ctx, txn); err != nil {
			t.Fatal(err)
		}
	}
	put("a")
	if r := rev("a"); r != 1 {
		t.Fatalf("first write at revision %d, want 1", r)
	}
	put("b", "c")
	if rev("b") != 2 || rev("c") != 2 {
		t.Fatalf("batch revisions %d, %d; want 2", rev("b"), rev("c"))
	}
	if err := m.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Delete("none")}}); err != nil {
		t.Fatal(err)
	}
	put("d")
	if r := rev("d"); r != 3 {
		t.Fatalf("revision %d after a no-op delete, want 3", r)
	}
}

func TestMemoryExpireLease(t *testing.T) {
	ctx := context.Background()
	m := storage.NewMemory()
	defer m.Close()
	l, err := m.GrantLease(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := m.Claim(ctx, "n1", l, []uint32{1})
	if err != nil || len(cs) != 1 {
		t.Fatal(cs, err)
	}
	fence := storage.Fence{Partition: 1, Token: cs[0].Token}
	if err := m.Commit(ctx, storage.Txn{Fence: fence, Ops: []storage.Op{storage.Put("k", nil)}}); err != nil {
		t.Fatal(err)
	}
	m.ExpireLease(l)
	if err := m.Commit(ctx, storage.Txn{Fence: fence, Ops: []storage.Op{storage.Put("k", nil)}}); !errors.Is(err, storage.ErrFenced) {
		t.Fatalf("write after the owner's lease expired = %v, want ErrFenced", err)
	}
	if _, err := m.Claim(ctx, "n1", l, []uint32{1}); !errors.Is(err, storage.ErrLeaseNotFound) {
		t.Fatalf("Claim on an expired lease = %v, want ErrLeaseNotFound", err)
	}
}
