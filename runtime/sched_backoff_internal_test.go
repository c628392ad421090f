package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
)

// refuseStore refuses, as etcd out of space does, every commit that writes
// under the prefix it is given, and counts them.
type refuseStore struct {
	storage.Store
	prefix  atomic.Value // string
	refused atomic.Int64
}

func (s *refuseStore) Commit(ctx context.Context, txns ...storage.Txn) error {
	if p, _ := s.prefix.Load().(string); p != "" {
		for _, txn := range txns {
			for _, op := range txn.Ops {
				if strings.HasPrefix(op.Key, p) {
					s.refused.Add(1)
					return fmt.Errorf("%w: out of space", storage.ErrRefused)
				}
			}
		}
	}
	return s.Store.Commit(ctx, txns...)
}

// A due call whose turn cannot commit is tried again with the timers'
// backoff, growing 1 s, 2 s, 4 s. The load that each run made armed the
// timer again at the call's time, so a second run started at once beside
// the first, and the failures counted from none: the call ran twice a
// second for as long as storage refused (etcd out of space), each run
// loading the actor and logging a warning.
func TestADueCallThatCannotCommitBacksOff(t *testing.T) {
	t.Parallel()
	type st struct{ Count int }
	act := rivet.Actor[st]{
		Name: "due",
		Actions: rivet.Actions[st]{
			"later": rivet.Action0(func(c *rivet.ActionCtx[st]) (string, error) {
				return c.Schedule().After(time.Hour, "add")
			}),
			"add": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				c.State.Count++
				return c.State.Count, nil
			}),
		},
	}
	reg, err := rivet.Setup(act)
	if err != nil {
		t.Fatal(err)
	}
	mem := storage.NewMemory()
	defer mem.Close()
	store := &refuseStore{Store: mem}
	h, _ := memHostOn(t, reg, store)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := Ref{Name: "due", Key: []string{"a"}}
	if _, err := h.Call(ctx, CallRequest{Ref: ref, Action: "later", CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	a := h.loaded(ref)
	if a == nil {
		t.Fatal("the actor is not in memory")
	}
	id, prefix := a.id, a.prefix
	store.prefix.Store(prefix)
	h.SetWakeClock(func() time.Time { return time.Now().Add(2 * time.Hour) })
	fails := func() int {
		h.timers.mu.Lock()
		defer h.timers.mu.Unlock()
		if it, ok := h.timers.byID[schedTimer(id)]; ok {
			return it.fails
		}
		return 0
	}
	// With the backoff: 3 runs by the third failure, about 3 s in.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for fails() < 3 {
		if n := store.refused.Load(); n >= 6 {
			t.Fatalf("%d runs of the due call refused, and its timer counts %d failures: no backoff", n, fails())
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for 3 failures: %v (%d runs refused)", ctx.Err(), store.refused.Load())
		case <-tick.C:
		}
	}
	if n := store.refused.Load(); n > 4 {
		t.Errorf("%d runs refused by the third failure, want 3", n)
	}
}
