package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// stallKeysList stalls, once armed, the next read of an actor's
// idempotency keys (as an etcd that lost its quorum would) until release
// is closed.
type stallKeysList struct {
	storage.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *stallKeysList) List(ctx context.Context, prefix string, opts storage.ListOptions) ([]storage.KV, error) {
	if strings.HasSuffix(prefix, "/"+storage.IdempotencySuffix) && s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.List(ctx, prefix, opts)
}

// A workflow's Complete that reads the actor's keys (the first of its
// activation, before any send) holds no send up while the read is slow: a
// send, which must read them too, does so in its own turn, bounded by its
// own context. Before, Complete read them under keysMu, which the send's
// turn then waited for, past its caller's deadline and holding the actor's
// gate, for as long as the read the workflow started took (its context
// has no deadline).
func TestASendIsNotHeldUpByACompletesSlowReadOfTheKeys(t *testing.T) {
	reg, err := rivet.Setup(retried, retriedLarge)
	if err != nil {
		t.Fatal(err)
	}
	es, err := etcdstore.New(etcdtest.StartClient(t), "/keysread/")
	if err != nil {
		t.Fatal(err)
	}
	store := &stallKeysList{Store: es, entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-store.release:
		default:
			close(store.release)
		}
	})
	r := &retryHost{t: t, reg: reg, store: store}
	r.h, r.stop = memHostOn(t, reg, store, shortStepGrace)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ref := Ref{Name: "retried", Key: []string{"slowkeys"}}
	g := holdBody(t, 111)
	if _, err := r.h.Send(ctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`111`), CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	g.waitEntered(t, "after the send")
	// Loaded again: no send of the new activation reads the keys before
	// the workflow completes the message it took.
	r.restart(ctx)
	if _, err := r.h.Call(ctx, CallRequest{Ref: ref, Action: "ping"}); err != nil {
		t.Fatal(err)
	}
	g.waitEntered(t, "after the restart")
	store.armed.Store(true)
	close(g.release)
	select {
	case <-store.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the workflow's Complete never read the keys")
	}
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	defer scancel()
	sent := r.sendAsync(sctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`112`)})
	select {
	case a := <-sent:
		if a.err != nil {
			t.Fatalf("the send while Complete's read of the keys is slow: %v, want it queued", a.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the send was held up past its deadline (3s) by the workflow's read of the keys")
	}
	close(store.release)
	if got := r.taken(ctx, ref, 2); !slices.Equal(got, []int{111, 112}) {
		t.Errorf("the workflow took %v, want [111 112]", got)
	}
}

// stallKeptRead stalls, once armed, reads of kept completions until the
// reader's context ends.
type stallKeptRead struct {
	storage.Store
	armed atomic.Bool
}

func (s *stallKeptRead) Get(ctx context.Context, key string) (storage.KV, error) {
	if strings.Contains(key, "/"+storage.IdempotencyResponseSuffix) && s.armed.Load() {
		<-ctx.Done()
		return storage.KV{}, ctx.Err()
	}
	return s.Store.Get(ctx, key)
}

// A waiting send retried with its key whose deadline passes while it reads
// the message's kept completion says so (TIMEOUT, as a deadline that
// passes in its wait does), not UNAVAILABLE, which tells a caller that
// storage failed and to retry.
func TestAKeyedRetryWhoseDeadlinePassesAsItReadsTheKeptCompletionTimesOut(t *testing.T) {
	reg, err := rivet.Setup(retried, retriedLarge)
	if err != nil {
		t.Fatal(err)
	}
	es, err := etcdstore.New(etcdtest.StartClient(t), "/keptread/")
	if err != nil {
		t.Fatal(err)
	}
	store := &stallKeptRead{Store: es}
	h, _ := memHostOn(t, reg, store)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "retried", Key: []string{"keptread"}}
	req := SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`113`), CreateIfMissing: true, IdempotencyKey: "job-kr", Wait: true, Timeout: 20 * time.Second}
	first, err := h.Send(ctx, req)
	wantCompleted(t, "the first send", sendAnswer{first, err}, first.MessageID, "226", false)
	store.armed.Store(true)
	dctx, dcancel := context.WithTimeout(ctx, time.Second)
	defer dcancel()
	res, err := h.Send(dctx, req)
	if !errors.Is(err, rivet.ErrTimeout) {
		t.Fatalf("the retry, its deadline passed as it read the kept completion: %+v, %v; want TIMEOUT", res, err)
	}
}
