package runtime_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

type madeState struct {
	N int `json:"n"`
}

// madeActor counts its CreateState runs in made.
func madeActor(made *atomic.Int32) rivet.Actor[madeState] {
	return rivet.Actor[madeState]{
		Name: "made",
		CreateState: func(in json.RawMessage) (madeState, error) {
			made.Add(1)
			var s madeState
			if len(in) > 0 {
				if err := json.Unmarshal(in, &s); err != nil {
					return s, err
				}
			}
			return s, nil
		},
		Actions: rivet.Actions[madeState]{
			"bump": rivet.Action0(func(c *rivet.ActionCtx[madeState]) (int, error) { c.State.N++; return c.State.N, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[madeState]) (int, error) { return c.State.N, nil }),
		},
	}
}

// A Create with an idempotency key stores the key with the actor: the same
// Create again (same key, the same input as a JSON value) succeeds as a
// duplicate without running CreateState again, also after a restart (read
// from storage, as a new owner would after a failover); the same key with
// another input is INVALID_ARGUMENT; any other existing actor (created
// without a key, or with another) is ALREADY_EXISTS; after a destroy the
// key creates anew.
func TestCreateWithAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	var made atomic.Int32
	e := newEnv(t, counterReg(t, madeActor(&made)), nil)
	ref := runtime.Ref{Name: "made", Key: []string{"a"}}
	create := func(ref runtime.Ref, input, key string) (runtime.ActorInfo, bool, error) {
		var in json.RawMessage
		if input != "" {
			in = json.RawMessage(input)
		}
		return e.host.CreateWith(ctx(t), ref, in, runtime.CreateOptions{IdempotencyKey: key})
	}
	get := func(ref runtime.Ref) int {
		t.Helper()
		raw, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "get"})
		return mustInt(t, raw, err)
	}

	first, dup, err := create(ref, `{"n":1}`, "create-a")
	if err != nil || dup {
		t.Fatalf("first keyed create: dup %v, %v", dup, err)
	}
	if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "bump"}); err != nil {
		t.Fatal(err)
	}
	for i, input := range []string{`{"n":1}`, ` { "n" : 1 } `} {
		info, dup, err := create(ref, input, "create-a")
		if err != nil || !dup || !info.CreatedAt.Equal(first.CreatedAt) {
			t.Fatalf("keyed create again (%d, input %s) = %+v, dup %v, %v; want the duplicate of %+v", i, input, info, dup, err, first)
		}
	}
	if n := made.Load(); n != 1 {
		t.Fatalf("CreateState ran %d times, want 1", n)
	}
	if n := get(ref); n != 2 {
		t.Fatalf("state n = %d after the duplicates, want 2 (created with 1, bumped once)", n)
	}
	_, _, err = create(ref, `{"n":2}`, "create-a")
	if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "another input") {
		t.Fatalf("the key with another input = %v, want ErrInvalidArgument saying so", err)
	}
	for _, key := range []string{"create-b", ""} {
		if _, _, err := create(ref, `{"n":1}`, key); !errors.Is(err, rivet.ErrAlreadyExists) {
			t.Fatalf("create with key %q of an actor created with another = %v, want ErrAlreadyExists", key, err)
		}
	}

	// From storage, on a new host (a failover's new owner).
	e.restart()
	if _, dup, err := create(ref, `{"n":1}`, "create-a"); err != nil || !dup {
		t.Fatalf("keyed create after a restart: dup %v, %v; want the duplicate", dup, err)
	}
	if n := made.Load(); n != 1 {
		t.Fatalf("CreateState ran %d times, want 1", n)
	}
	// One key, in the actor's meta: nothing else stored for it.
	enc := storage.EncodeKey(ref.Key)
	for _, k := range actorKeys(t, e, "made", "a") {
		if strings.Contains(k, "create-a") || strings.Contains(k, "/k/") || strings.Contains(k, "/c/") {
			t.Errorf("stored for the create's key: %s (actor %s)", k, enc)
		}
	}

	// An actor created without a key: ALREADY_EXISTS for a keyed create.
	plain := runtime.Ref{Name: "made", Key: []string{"plain"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), plain, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := create(plain, "", "create-plain"); !errors.Is(err, rivet.ErrAlreadyExists) {
		t.Fatalf("keyed create of an actor created without a key = %v, want ErrAlreadyExists", err)
	}

	// After a destroy the key creates a new actor.
	if err := e.host.Destroy(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	if _, dup, err := create(ref, `{"n":5}`, "create-a"); err != nil || dup {
		t.Fatalf("keyed create after a destroy: dup %v, %v; want a new actor", dup, err)
	}
	if n := get(ref); n != 5 {
		t.Fatalf("state n = %d, want 5", n)
	}

	// The key's bound.
	if _, _, err := create(runtime.Ref{Name: "made", Key: []string{"long"}}, "", strings.Repeat("k", 257)); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("a 257-byte key = %v, want ErrInvalidArgument", err)
	}
}

// blockedMade is madeActor whose CreateState, once entered (said on
// entered), waits for release; bounded, so that a failed test does not
// leave a load waiting for ever.
func blockedMade(made *atomic.Int32, entered chan<- struct{}, release <-chan struct{}) rivet.Actor[madeState] {
	act := madeActor(made)
	create := act.CreateState
	act.CreateState = func(in json.RawMessage) (madeState, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		return create(in)
	}
	return act
}

// A keyed Create that arrives while another Create of the same key is
// still loading (its CreateState running) waits for that load, and then
// answers as its duplicate: one creates, the other is Duplicate, and
// CreateState runs once.
func TestAKeyedCreateWaitingForTheSameKeysCreateIsItsDuplicate(t *testing.T) {
	t.Parallel()
	var made atomic.Int32
	entered, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, counterReg(t, blockedMade(&made, entered, release)), nil)
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the host stops
	ref := runtime.Ref{Name: "made", Key: []string{"race"}}
	type result struct {
		dup bool
		err error
	}
	results := make(chan result, 2)
	create := func() {
		_, dup, err := e.host.CreateWith(ctx(t), ref, json.RawMessage(`{"n":3}`), runtime.CreateOptions{IdempotencyKey: "k"})
		results <- result{dup, err}
	}
	go create()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first create's CreateState did not run")
	}
	go create()
	waitFor(t, "the second create to wait for the first's load", 10*time.Second, func() bool {
		return e.host.PendingCreates(ref) == 1
	})
	open()
	var created, dups int
	for range 2 {
		select {
		case r := <-results:
			switch {
			case r.err != nil:
				t.Errorf("create: %v", r.err)
			case r.dup:
				dups++
			default:
				created++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a create did not answer")
		}
	}
	if created != 1 || dups != 1 || made.Load() != 1 {
		t.Fatalf("%d created, %d duplicates, CreateState ran %d times; want 1, 1, 1", created, dups, made.Load())
	}
}

// Many keyed Creates of one actor at once, with the same key and input:
// exactly one creates it, every other answers Duplicate, and CreateState
// runs once.
func TestConcurrentKeyedCreatesCreateOnce(t *testing.T) {
	t.Parallel()
	const n = 16
	var made atomic.Int32
	e := newEnv(t, counterReg(t, madeActor(&made)), nil)
	ref := runtime.Ref{Name: "made", Key: []string{"many"}}
	start := make(chan struct{})
	var created, dups, failed atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			_, dup, err := e.host.CreateWith(ctx(t), ref, json.RawMessage(`{"n":1}`), runtime.CreateOptions{IdempotencyKey: "k"})
			switch {
			case err != nil:
				failed.Add(1)
				t.Errorf("create: %v", err)
			case dup:
				dups.Add(1)
			default:
				created.Add(1)
			}
		})
	}
	close(start)
	wg.Wait() // each create is bounded by ctx(t)'s deadline
	if created.Load() != 1 || dups.Load() != n-1 || failed.Load() != 0 || made.Load() != 1 {
		t.Fatalf("%d created, %d duplicates, %d failed, CreateState ran %d times; want 1, %d, 0, 1", created.Load(), dups.Load(), failed.Load(), made.Load(), n-1)
	}
}
