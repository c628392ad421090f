package runtime_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

// actorKeys lists the stored keys of actor type name with key key: its
// records, index entry, wakeup record and scheduled calls.
func actorKeys(t *testing.T, e *env, name, key string) []string {
	t.Helper()
	kvs, err := e.store.List(ctx(t), "", storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enc := storage.EncodeKey([]string{key})
	var keys []string
	for _, kv := range kvs {
		segs := strings.Split(kv.Key, "/")
		for i := 0; i+1 < len(segs); i++ {
			if segs[i] == name && segs[i+1] == enc {
				keys = append(keys, kv.Key)
				break
			}
		}
	}
	return keys
}

// mustBeGone checks that nothing of the actor is left: no record in
// storage, nothing Get, Inspect or List would find.
func mustBeGone(t *testing.T, e *env, what, key string) {
	t.Helper()
	ref := runtime.Ref{Name: "hooked", Key: []string{key}}
	if _, err := e.host.Get(ctx(t), ref); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("%s: Get after the failed create: %v, want ErrNotFound", what, err)
	}
	if _, err := e.host.Inspect(ctx(t), ref); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("%s: Inspect after the failed create: %v, want ErrNotFound", what, err)
	}
	list, err := e.host.List(ctx(t), runtime.ListOptions{Name: "hooked"})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range list.Actors {
		if len(info.Ref.Key) == 1 && info.Ref.Key[0] == key {
			t.Fatalf("%s: List after the failed create shows the actor", what)
		}
	}
	if keys := actorKeys(t, e, "hooked", key); len(keys) != 0 {
		t.Fatalf("%s: stored after the failed create: %q, want nothing", what, keys)
	}
}

// A create whose creation hooks (CreateVars, OnWake) fail or panic creates
// nothing: the caller gets the hook's error (INTERNAL), the actor does not
// exist (not in storage, not listed, no workflow, no scheduled call), and
// the same create, retried, succeeds as a create.
func TestACreateWhoseHooksFailLeavesNoActor(t *testing.T) {
	t.Parallel()
	p := &hookProbe{}
	e := newEnv(t, counterReg(t, hookedActor(p, true)), nil)
	for i, tc := range []struct {
		name string
		flag *atomic.Bool
		get  bool // by a call with CreateIfMissing, not Create
	}{
		{"OnWake error", &p.failWake, false},
		{"OnWake panic", &p.panicWake, false},
		{"CreateVars error", &p.failVars, false},
		{"OnWake error, GetOrCreate call", &p.failWake, true},
	} {
		key := "c" + string(rune('a'+i))
		ref := runtime.Ref{Name: "hooked", Key: []string{key}}
		tc.flag.Store(true)
		var err error
		if tc.get {
			_, err = getHooked(t, e.host, key, true)
		} else {
			_, err = e.host.Create(ctx(t), ref, nil)
		}
		tc.flag.Store(false)
		if !errors.Is(err, rivet.ErrInternal) {
			t.Fatalf("%s: err = %v, want ErrInternal", tc.name, err)
		}
		// What a gRPC caller gets: INTERNAL, saying nothing was created.
		if st, _ := rpcerr.ToStatus(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "the actor was not created") {
			t.Fatalf("%s: status %v, want INTERNAL saying the actor was not created", tc.name, st)
		}
		if n := e.host.Stats().ActiveActors; n != uint64(i) {
			t.Fatalf("%s: %d actors in memory after a failed create, want the %d earlier cases'", tc.name, n, i)
		}
		mustBeGone(t, e, tc.name, key)

		// Retried, the create creates it: its first activation.
		if _, err := e.host.Create(ctx(t), ref, nil); err != nil {
			t.Fatalf("%s: retried Create: %v", tc.name, err)
		}
		var v hookedView
		waitFor(t, "the first step", 10*time.Second, func() bool {
			v = mustGetHooked(t, e.host, key, false)
			return v.StepSaw != 0
		})
		if v.Wakes != 1 || v.Setups != 1 || v.StepSaw != 1 {
			t.Fatalf("%s: after the retried create: %+v, want 1 wake, 1 setup, a first step that saw 1 wake", tc.name, v)
		}
		in, err := e.host.Inspect(ctx(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Schedules) != 1 {
			t.Fatalf("%s: %d scheduled calls, want the one setup's", tc.name, len(in.Schedules))
		}
		if keys := actorKeys(t, e, "hooked", key); len(keys) < 4 {
			t.Fatalf("%s: stored for the actor: %q, want its records, index entry, wakeup and scheduled call", tc.name, keys)
		}
	}
}

// What a successful CreateVars committed before OnWake failed goes too.
func TestAFailedCreateTakesBackWhatItsFirstHookCommitted(t *testing.T) {
	t.Parallel()
	var failWake atomic.Bool
	a := hookedActor(&hookProbe{}, false)
	a.CreateVars = func(c *rivet.ActionCtx[hookedState]) (any, error) {
		c.State.Setups += 10
		if _, err := c.Schedule().After(time.Hour, "get"); err != nil {
			return nil, err
		}
		return nil, nil
	}
	a.OnWake = func(c *rivet.ActionCtx[hookedState]) error {
		if failWake.Load() {
			return errors.New("wake failed")
		}
		c.State.Wakes++
		return nil
	}
	e := newEnv(t, counterReg(t, a), nil)
	failWake.Store(true)
	if _, err := getHooked(t, e.host, "v", true); !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("err = %v, want ErrInternal", err)
	}
	mustBeGone(t, e, "CreateVars committed, OnWake failed", "v")
	failWake.Store(false)
	if v := mustGetHooked(t, e.host, "v", true); v.Setups != 10 || v.Wakes != 1 {
		t.Fatalf("after the retried create: %+v, want 10 setups, 1 wake", v)
	}
	in, err := e.host.Inspect(ctx(t), runtime.Ref{Name: "hooked", Key: []string{"v"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Schedules) != 1 {
		t.Fatalf("%d scheduled calls, want the retried create's one", len(in.Schedules))
	}
}

// Requests that come while a create's OnWake runs wait for it; if it fails,
// a GetOrCreate among them creates the actor itself (and says so), a call
// without create finds no actor, and a Destroy finds nothing to destroy.
func TestRequestsDuringAFailingCreateSeeNoActor(t *testing.T) {
	t.Parallel()
	var (
		entered = make(chan struct{})
		release = make(chan struct{})
		wakes   atomic.Int32
	)
	a := hookedActor(&hookProbe{}, true)
	a.CreateVars = nil
	a.OnWake = func(c *rivet.ActionCtx[hookedState]) error {
		if wakes.Add(1) == 1 {
			close(entered)
			<-release
			return errors.New("wake failed")
		}
		c.State.Wakes++
		return nil
	}
	e := newEnv(t, counterReg(t, a), nil)
	ref := runtime.Ref{Name: "hooked", Key: []string{"r"}}
	var (
		wg                    sync.WaitGroup
		createErr, getErr     error
		destroyErr, secondErr error
		secondCreated         bool
	)
	wg.Add(1)
	go func() { defer wg.Done(); _, createErr = e.host.Create(ctx(t), ref, nil) }()
	<-entered
	wg.Add(3)
	go func() { defer wg.Done(); _, getErr = getHooked(t, e.host, "r", false) }()
	go func() { defer wg.Done(); destroyErr = e.host.Destroy(ctx(t), ref) }()
	waitFor(t, "the call and the destroy to wait for the wake", 10*time.Second, func() bool { return e.host.GateWaiters(ref) >= 2 })
	go func() { defer wg.Done(); _, secondCreated, secondErr = e.host.GetOrCreate(ctx(t), ref, nil) }()
	close(release) // the GetOrCreate comes during the wake or after it: either way it creates the actor itself
	wg.Wait()
	if !errors.Is(createErr, rivet.ErrInternal) {
		t.Fatalf("Create: %v, want ErrInternal", createErr)
	}
	if getErr != nil && !errors.Is(getErr, rivet.ErrNotFound) {
		t.Fatalf("call without create: %v, want ErrNotFound (or an answer of the actor the GetOrCreate made)", getErr)
	}
	if destroyErr != nil && !errors.Is(destroyErr, rivet.ErrNotFound) {
		t.Fatalf("Destroy: %v, want nil or ErrNotFound", destroyErr)
	}
	if secondErr != nil {
		t.Fatalf("GetOrCreate: %v", secondErr)
	}
	if !secondCreated {
		t.Fatal("GetOrCreate after a failed create says it did not create the actor")
	}
	if _, err := e.host.Get(ctx(t), ref); destroyErr == nil && errors.Is(err, rivet.ErrNotFound) {
		// The Destroy came after the GetOrCreate's create: fine.
	} else if err != nil {
		t.Fatalf("Get: %v", err)
	}
}

// A page token that is not one of this listing's is INVALID_ARGUMENT,
// saying so: a token of another listing, or text that is no token (most
// text decodes as base64, so it read as "another listing").
func TestAListPageTokenNotOfThisListingIsRefused(t *testing.T) {
	e := newEnv(t, counterReg(t), nil)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := e.host.Create(ctx(t), runtime.Ref{Name: "counter", Key: []string{k}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	page, err := e.host.List(ctx(t), runtime.ListOptions{Name: "counter", Limit: 1})
	if err != nil || page.NextPageToken == "" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	for _, tc := range []struct{ what, name, token string }{
		{"text", "counter", "garbage"},
		{"another listing's", "other", page.NextPageToken},
	} {
		_, err := e.host.List(ctx(t), runtime.ListOptions{Name: tc.name, PageToken: tc.token})
		if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "not one of this listing's") {
			t.Errorf("%s: %v, want ErrInvalidArgument saying it is not this listing's", tc.what, err)
		}
	}
}
