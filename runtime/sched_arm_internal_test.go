package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
)

// holdCommitStore holds the first commit that writes a key containing sub
// (once it is set) until gate closes; entered closes when it starts waiting.
type holdCommitStore struct {
	storage.Store
	sub           atomic.Value // string
	entered, gate chan struct{}
}

func (s *holdCommitStore) Commit(ctx context.Context, txns ...storage.Txn) error {
	v, _ := s.sub.Load().(string)
	hit := false
	for _, txn := range txns {
		for _, op := range txn.Ops {
			hit = hit || v != "" && strings.Contains(op.Key, v)
		}
	}
	if hit && s.sub.CompareAndSwap(v, "") {
		close(s.entered)
		<-s.gate
	}
	return s.Store.Commit(ctx, txns...)
}

type armedState struct {
	Wakes int `json:"wakes"`
	Count int `json:"count"`
}

// A load whose caller gives up while the writes of the actor's OnWake are
// on their way still arms the timer of the actor's stored calls: the
// activation stays in memory (its hooks ran), and no later load of it
// comes to arm it. Here the timer had gone past the call (as after a write
// of an earlier activation that failed once its turn had moved the timer);
// armSchedules, which puts it back, ran only for a loader that saw the
// wake's writes land, and the call never ran.
func TestAStoredCallIsArmedWhenItsLoaderLeavesDuringTheWakeWrites(t *testing.T) {
	armed := rivet.Actor[armedState]{
		Name: "armed",
		OnWake: func(c *rivet.ActionCtx[armedState]) error {
			c.State.Wakes++ // a write for the load to wait for
			return nil
		},
		Actions: rivet.Actions[armedState]{
			"later": rivet.Action0(func(c *rivet.ActionCtx[armedState]) (string, error) {
				return c.Schedule().After(time.Hour, "add")
			}),
			"add": rivet.Action0(func(c *rivet.ActionCtx[armedState]) (int, error) {
				c.State.Count++
				return c.State.Count, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[armedState]) (armedState, error) { return *c.State, nil }),
		},
	}
	reg, err := rivet.Setup(armed)
	if err != nil {
		t.Fatal(err)
	}
	mem := storage.NewMemory()
	defer mem.Close()
	st := &holdCommitStore{Store: mem, entered: make(chan struct{}), gate: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(st.gate)
		}
	}
	defer release()
	h, _ := memHostOn(t, reg, st)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := Ref{Name: "armed", Key: []string{"a"}}
	if _, err := h.Call(ctx, CallRequest{Ref: ref, Action: "later", CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	a := h.loaded(ref)
	if a == nil {
		t.Fatal("the actor is not in memory")
	}
	id, prefix := a.id, a.prefix
	// The actor leaves memory, and its calls' timer is gone.
	h.evict(a)
	h.timers.cancel(schedTimer(id))

	// The next load's caller leaves while OnWake's writes are held.
	st.sub.Store(prefix + storage.StateSuffix)
	lctx, lcancel := context.WithCancel(ctx)
	defer lcancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.Call(lctx, CallRequest{Ref: ref, Action: "get"})
		done <- err
	}()
	select {
	case <-st.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("OnWake's write never reached storage")
	}
	lcancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the load's caller got %v, want its context's end", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the load's caller did not return when its context ended")
	}
	release()
	if h.loaded(ref) == nil {
		t.Fatal("the activation left memory")
	}

	// The call comes due: it runs without any request.
	h.SetWakeClock(func() time.Time { return time.Now().Add(2 * time.Hour) })
	deadline := time.Now().Add(10 * time.Second)
	for {
		raw, err := h.Call(ctx, CallRequest{Ref: ref, Action: "get"})
		if err != nil {
			t.Fatal(err)
		}
		var s armedState
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		if s.Count == 1 {
			break
		}
		if time.Now().After(deadline) {
			h.timers.mu.Lock()
			_, ok := h.timers.byID[schedTimer(id)]
			h.timers.mu.Unlock()
			t.Fatalf("the due call did not run (state %+v; its timer armed: %v)", s, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
