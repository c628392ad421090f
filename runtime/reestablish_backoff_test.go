package runtime_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// refusingStore fails every Get at once while refusing, as etcd does with
// "leader changed" as a member that was cut off rejoins, until it has
// failed refusals of them; then it answers again, and back says when.
type refusingStore struct {
	storage.Store
	refusals int32
	failed   atomic.Int32
	back     atomic.Int64 // unix nanoseconds
}

func (s *refusingStore) Get(ctx context.Context, key string) (storage.KV, error) {
	if s.back.Load() == 0 {
		if s.failed.Add(1) >= s.refusals {
			s.back.Store(time.Now().UnixNano())
		}
		return storage.KV{}, errors.New("etcdserver: leader changed")
	}
	return s.Store.Get(ctx, key)
}

// A node whose lease was lost registers again within about a second of
// etcd answering again, however long it could not: each try during an
// outage waits for etcd's own timeout (6 s on an embedded member without
// a leader), and a try that then failed at once (etcd's "leader changed"
// as the member rejoined) was followed by a wait of up to 5 s, which a
// healed node spent not serving although etcd answered.
func TestALostLeaseComesBackSoonAfterStorageAnswersAgain(t *testing.T) {
	t.Parallel()
	m := storage.NewMemory()
	t.Cleanup(func() { m.Close() })
	const ttl = time.Second
	// Enough failed tries that the waits between them have grown as far
	// as they go (they double from 100 ms).
	st := &refusingStore{Store: m, refusals: 8}
	st.back.Store(1) // answering while the node establishes its lease
	own, ctx, run := establishedOwnership(t, st, ttl)
	var established atomic.Int32
	own.OnEstablished(func() { established.Add(1) })
	run()

	st.back.Store(0)
	if err := m.RevokeLease(ctx, own.Lease()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lease re-established once storage answers again", 60*time.Second, func() bool {
		return established.Load() > 0
	})
	took := time.Since(time.Unix(0, st.back.Load()))
	t.Logf("re-established %v after storage answered again, after %d failed tries", took.Round(time.Millisecond), st.failed.Load())
	if took > 2500*time.Millisecond {
		t.Errorf("re-established %v after storage answered again; want within about a second", took.Round(time.Millisecond))
	}
}

// A node that cannot re-establish its lease for a while says so once,
// not once per try (a WARN a second through an outage), and says how many
// tries failed when the lease comes back.
func TestFailedTriesToReestablishALeaseWarnOnceAWhileWithACount(t *testing.T) {
	t.Parallel()
	m := storage.NewMemory()
	t.Cleanup(func() { m.Close() })
	core, logs := observer.New(zap.InfoLevel)
	// Fewer tries than fit in the WARN's interval (10 s): ~5 s of waits.
	st := &refusingStore{Store: m, refusals: 8}
	st.back.Store(1)
	own := runtime.NewOwnership(st, runtime.NodeRecord{NodeID: "n1"}, time.Second, zap.New(core))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	if err := own.Establish(ctx, []uint32{1, 2}); err != nil {
		t.Fatal(err)
	}
	var established atomic.Int32
	own.OnEstablished(func() { established.Add(1) })
	wg.Add(1)
	go func() { defer wg.Done(); _ = own.Run(ctx) }()

	st.back.Store(0)
	if err := m.RevokeLease(ctx, own.Lease()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lease re-established once storage answers again", 60*time.Second, func() bool {
		return established.Load() > 0
	})
	warns := logs.FilterMessage("re-establishing ownership failed").Len()
	var back any // logged before OnEstablished runs
	if l := logs.FilterMessage("re-established ownership").All(); len(l) > 0 {
		back = l[0].ContextMap()["failed_tries"]
	}
	if warns != 1 || back != int64(st.failed.Load()) {
		t.Errorf("%d failed tries: %d WARNs, and the lease's return counts %v; want one WARN and the count", st.failed.Load(), warns, back)
	}
}
