package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

type blockState struct {
	N int `json:"n"`
}

// blockers is where the "hold" action of blocker waits. Tests that share
// it do not run in parallel with each other (see TestMain).
var blockers = struct {
	entered chan struct{}
	release chan struct{}
}{}

var blocker = rivet.Actor[blockState]{
	Name: "blocker",
	Actions: rivet.Actions[blockState]{
		"hold": rivet.Query(func(c *rivet.ActionCtx[blockState]) (int, error) {
			close(blockers.entered)
			<-blockers.release
			return c.State.N, nil
		}),
		"set": rivet.Action(func(c *rivet.ActionCtx[blockState], n int) (int, error) {
			c.State.N = n
			return n, nil
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[blockState]) (int, error) { return c.State.N, nil }),
	},
}

// Past the lease's local deadline (a stall: the watchdog has not run yet,
// and another node may serve the partition by now) a node answers nothing
// about its actors, reads included: a call is refused (turnFor checks the
// claim once it has the gate). Get and Inspect, which read an actor in
// memory under its gate, must be refused too, not answer from memory that
// another owner may have made stale.
func TestInspectPastTheLeaseDeadlineIsRefused(t *testing.T) {
	t.Parallel()
	// Inspect waits for the gate past the stall below (by default it
	// reads storage after 50 ms: on a loaded machine, before the stall).
	e := newEnv(t, counterReg(t, blocker), func(c *runtime.Config) { c.ReadGateWait = time.Minute })
	ref := runtime.Ref{Name: "blocker", Key: []string{"b"}}
	if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "set", Args: json.RawMessage(`[1]`), CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	blockers.entered, blockers.release = make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(blockers.release) })
	t.Cleanup(release)
	go func() { _, _ = e.host.Call(context.Background(), runtime.CallRequest{Ref: ref, Action: "hold"}) }()
	<-blockers.entered
	type answer struct {
		ins runtime.Inspection
		err error
	}
	done := make(chan answer, 1)
	go func() {
		ins, err := e.host.Inspect(ctx(t), ref)
		done <- answer{ins, err}
	}()
	waitFor(t, "Inspect to wait for the gate", 10*time.Second, func() bool { return e.host.GateWaiters(ref) == 1 })
	// The node stalls past its lease's local deadline: no renewal heard,
	// the watchdog not run yet. Meanwhile the partition's next owner
	// changes the actor (here written to storage directly).
	e.store.muteRenewals.Store(true)
	t.Cleanup(func() { e.store.muteRenewals.Store(false) })
	e.own.ExpireLocally()
	p, _ := e.host.PartitionOf(ref)
	if e.host.Owns(p) {
		t.Fatal("partition still served past the lease's deadline")
	}
	key := storage.ActorPrefix(p, ref.Name, storage.EncodeKey(ref.Key)) + storage.StateSuffix
	if err := e.store.Store.Commit(ctx(t), storage.Txn{Ops: []storage.Op{storage.Put(key, []byte(`{"n":2}`))}}); err != nil {
		t.Fatal(err)
	}
	release()
	a := <-done
	if a.err == nil {
		t.Fatalf("Inspect past the lease's deadline answered from memory (state %s, storage holds {\"n\":2}); want UNAVAILABLE", a.ins.State)
	}
	if !errors.Is(a.err, rivet.ErrUnavailable) {
		t.Fatalf("Inspect past the lease's deadline = %v, want UNAVAILABLE", a.err)
	}
	// A call in the same state is refused.
	if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "get"}); !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("call past the lease's deadline = %v, want UNAVAILABLE", err)
	}
	// And a request for an actor not in memory says why: the node holds
	// no lease (during a quorum loss every request said only that its
	// partition was not the node's: a trial).
	other := runtime.Ref{Name: "counter", Key: []string{"elsewhere"}}
	if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: other, Action: "getCount", CreateIfMissing: true}); !errors.Is(err, rivet.ErrUnavailable) || !strings.Contains(err.Error(), "holds no lease now") {
		t.Fatalf("a call of an actor not in memory past the lease's deadline = %v, want UNAVAILABLE saying the node holds no lease", err)
	}
}

// HotActors names the actors a node's load goes to, by key, the busiest
// first, and the turns waiting for each (an on-call trial found the hot
// actor type in the metrics, and nothing named the key).
func TestHotActorsNamesTheBusiestKeys(t *testing.T) {
	e := newEnv(t, counterReg(t, blocker), nil)
	for key, n := range map[string]int{"busy": 40, "calm": 4, "idle": 1} {
		for range n {
			if _, err := call(t, e.host, "counter", key, "increment", true, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	hot := e.host.HotActors(2)
	if len(hot) != 2 || hot[0].Ref.Key[0] != "busy" || hot[1].Ref.Key[0] != "calm" {
		t.Fatalf("hot actors %+v, want busy then calm", hot)
	}
	if hot[0].Turns < 40 || hot[0].TurnsPerSecond <= hot[1].TurnsPerSecond || hot[0].Since.IsZero() {
		t.Fatalf("busiest %+v: want at least 40 turns, a higher rate than calm's (%v), a first turn", hot[0], hot[1].TurnsPerSecond)
	}
	// A turn held, and one waiting behind it: counted as waiting, and its
	// wait added once it got in.
	ref := runtime.Ref{Name: "blocker", Key: []string{"h"}}
	if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "set", Args: json.RawMessage(`[1]`), CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
	blockers.entered, blockers.release = make(chan struct{}), make(chan struct{})
	release := sync.OnceFunc(func() { close(blockers.release) })
	t.Cleanup(release)
	held := make(chan error, 2)
	go func() {
		_, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "hold"})
		held <- err
	}()
	<-blockers.entered
	go func() {
		_, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "set", Args: json.RawMessage(`[2]`)})
		held <- err
	}()
	waitFor(t, "the second call to wait", 10*time.Second, func() bool { return e.host.GateWaiters(ref) == 1 })
	var found *runtime.HotActor
	for _, h := range e.host.HotActors(10) {
		if h.Ref.Name == "blocker" {
			found = &h
		}
	}
	if found == nil || found.Waiting != 1 {
		t.Fatalf("blocker among the hot actors: %+v, want 1 waiting", found)
	}
	release()
	for range 2 {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range e.host.HotActors(10) {
		if h.Ref.Name == "blocker" && (h.Waiting != 0 || h.Waited <= 0) {
			t.Fatalf("blocker once both calls ended: %+v, want none waiting and their wait counted", h)
		}
	}
}
