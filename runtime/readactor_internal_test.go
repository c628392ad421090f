package runtime

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
)

// writeBetweenStore commits write, once, just before the first read of a
// key ending in suffix is answered: a writer at work between two reads.
type writeBetweenStore struct {
	storage.Store
	suffix string
	write  storage.Txn
	done   atomic.Bool
}

func (s *writeBetweenStore) Get(ctx context.Context, key string) (storage.KV, error) {
	if strings.HasSuffix(key, s.suffix) && s.done.CompareAndSwap(false, true) {
		if err := s.Store.Commit(ctx, s.write); err != nil {
			return storage.KV{}, err
		}
	}
	return s.Store.Get(ctx, key)
}

// An actor read from storage while a writer changes it (an activation
// loading on the node runs its workflow to the end) is read as of one
// moment: not the workflow's final status with the state from before its
// last step, which Inspect showed (seen as a flaky test).
func TestAnActorIsReadAsOfOneMoment(t *testing.T) {
	reg, err := rivet.Setup(inbox)
	if err != nil {
		t.Fatal(err)
	}
	m := storage.NewMemory()
	defer m.Close()
	ctx := context.Background()
	const prefix = "a/test/actor/"
	if err := m.Commit(ctx, storage.Txn{Ops: []storage.Op{
		storage.Put(prefix+storage.MetaSuffix, []byte(`{"created_at":1}`)),
		storage.Put(prefix+storage.StateSuffix, []byte(`{"step":1}`)),
		storage.Put(prefix+storage.WorkflowStatusSuffix, []byte(`{"status":"running"}`)),
	}}); err != nil {
		t.Fatal(err)
	}
	st := &writeBetweenStore{Store: m, suffix: storage.WorkflowStatusSuffix, write: storage.Txn{Ops: []storage.Op{
		storage.Put(prefix+storage.StateSuffix, []byte(`{"step":2}`)),
		storage.Put(prefix+storage.WorkflowStatusSuffix, []byte(`{"status":"completed"}`)),
	}}}
	h, _ := memHostOn(t, reg, st)
	snap, err := h.readActor(ctx, prefix, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(snap.state) + " " + snap.wfStatus.Status; got != `{"step":2} completed` {
		t.Fatalf("read %s; want the state and status of one moment, {\"step\":2} completed", got)
	}
}
