package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type childState struct {
	N       int    `json:"n"`
	Doubled int    `json:"doubled"`
	Done    bool   `json:"done"`
	Note    string `json:"note,omitempty"`
}

// childActor is made from its create input (made counts CreateState's
// runs), and its workflow doubles the input's N once.
func childActor(made *atomic.Int32) rivet.Actor[childState] {
	return rivet.Actor[childState]{
		Name: "child",
		CreateState: func(in json.RawMessage) (childState, error) {
			made.Add(1)
			var s childState
			if len(in) > 0 {
				if err := json.Unmarshal(in, &s); err != nil {
					return s, err
				}
			}
			return s, nil
		},
		Run: func(c *workflow.Ctx[childState]) error {
			return c.Step("double", func(s *workflow.StepCtx[childState]) error {
				s.State.Doubled, s.State.Done = 2*s.State.N, true
				return nil
			})
		},
		Actions: rivet.Actions[childState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[childState]) (childState, error) { return *c.State, nil }),
		},
	}
}

// spawned is what parent's spawn action says of its create.
type spawned struct {
	Name      string    `json:"name"`
	Key       []string  `json:"key"`
	Partition uint32    `json:"partition"`
	Owner     string    `json:"owner"`
	CreatedAt time.Time `json:"createdAt"`
	Created   bool      `json:"created"`
	Duplicate bool      `json:"duplicate"`
	Exists    bool      `json:"exists"`
	Invalid   bool      `json:"invalid"`
	TooLarge  bool      `json:"tooLarge"`
}

type spawnArgs struct {
	Key   string `json:"key"`
	N     int    `json:"n"`
	IDKey string `json:"idKey"`
	Note  string `json:"note"`
}

// parentActor's spawn action creates a child with an input.
var parentActor = rivet.Actor[struct{}]{
	Name: "parent",
	Actions: rivet.Actions[struct{}]{
		"spawn": rivet.Action(func(c *rivet.ActionCtx[struct{}], a spawnArgs) (spawned, error) {
			res, err := rivet.CreateWith(c.Context(), c.Client(), "child", []string{a.Key}, childState{N: a.N, Note: a.Note}, rivet.CreateOptions{IdempotencyKey: a.IDKey})
			switch {
			case errors.Is(err, rivet.ErrAlreadyExists):
				return spawned{Exists: true}, nil
			case errors.Is(err, rivet.ErrInvalidArgument):
				return spawned{Invalid: true}, nil
			case errors.Is(err, rivet.ErrTooLarge):
				return spawned{TooLarge: true}, nil
			case err != nil:
				return spawned{}, err
			}
			return spawned{Name: res.Name, Key: res.Key, Partition: res.Partition, Owner: res.Owner, CreatedAt: res.CreatedAt, Created: !res.Duplicate, Duplicate: res.Duplicate}, nil
		}),
	},
}

func childOf(t *testing.T, h *runtime.Host, key string) childState {
	t.Helper()
	raw, err := h.Call(ctx(t), runtime.CallRequest{Ref: runtime.Ref{Name: "child", Key: []string{key}}, Action: "get"})
	if err != nil {
		t.Fatal(err)
	}
	var st childState
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// An action creates another actor with an input, as a client's Create
// does: the child's CreateState gets the input, its workflow starts, and
// the action learns it made it; a second create of it is ALREADY_EXISTS,
// unless it carries the first one's idempotency key and input (then a
// duplicate, CreateState not run again), and the key with another input
// is INVALID_ARGUMENT.
func TestAnActionCreatesAnActorWithInput(t *testing.T) {
	t.Parallel()
	var made atomic.Int32
	e := newEnv(t, counterReg(t, parentActor, childActor(&made)), nil)
	spawn := func(a spawnArgs) spawned {
		t.Helper()
		raw, err := call(t, e.host, "parent", "p", "spawn", true, a)
		if err != nil {
			t.Fatalf("spawn %+v: %v", a, err)
		}
		var s spawned
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	s := spawn(spawnArgs{Key: "c1", N: 21})
	part, err := e.host.PartitionOf(runtime.Ref{Name: "child", Key: []string{"c1"}})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Created || s.Name != "child" || !slices.Equal(s.Key, []string{"c1"}) || s.Partition != part {
		t.Fatalf("spawn c1 = %+v, want child [c1] of partition %d created", s, part)
	}
	waitFor(t, "the child's workflow to run", 20*time.Second, func() bool { return childOf(t, e.host, "c1").Done })
	if st := childOf(t, e.host, "c1"); st.N != 21 || st.Doubled != 42 {
		t.Fatalf("child c1 state %+v, want made from the input (n 21) and doubled by its workflow", st)
	}
	if s := spawn(spawnArgs{Key: "c1", N: 21}); !s.Exists {
		t.Fatalf("spawn c1 again without a key = %+v, want ALREADY_EXISTS", s)
	}

	if s := spawn(spawnArgs{Key: "c2", N: 5, IDKey: "spawn-c2"}); !s.Created {
		t.Fatalf("keyed spawn c2 = %+v, want created", s)
	}
	if s := spawn(spawnArgs{Key: "c2", N: 5, IDKey: "spawn-c2"}); !s.Duplicate {
		t.Fatalf("keyed spawn c2 again = %+v, want its duplicate", s)
	}
	if s := spawn(spawnArgs{Key: "c2", N: 6, IDKey: "spawn-c2"}); !s.Invalid {
		t.Fatalf("keyed spawn c2 with another input = %+v, want INVALID_ARGUMENT", s)
	}
	if n := made.Load(); n != 2 {
		t.Fatalf("CreateState ran %d times, want 2 (c1, c2)", n)
	}
}

// A workflow step that creates a child and then fails is retried: with
// the step's idempotency key, the retry's create is the first one's
// duplicate and the step goes on; without a key, the retry gets
// ALREADY_EXISTS (it cannot tell its own child from another's).
func TestAStepRetriedAfterItsCreateGetsADuplicateWithAKey(t *testing.T) {
	t.Parallel()
	var (
		made atomic.Int32
		mu   sync.Mutex
		got  = map[string][]string{} // parent key: each attempt's outcome
	)
	parent := rivet.Actor[struct{}]{
		Name: "stepParent",
		Run: func(c *workflow.Ctx[struct{}]) error {
			return c.StepWith(workflow.StepOptions{Name: "spawn", MaxRetries: 2, RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond},
				func(s *workflow.StepCtx[struct{}]) error {
					var opts rivet.CreateOptions
					if s.Key()[0] == "keyed" {
						opts.IdempotencyKey = s.IdempotencyKey("child")
					}
					res, err := rivet.CreateWith(s.Context(), s.Client(), "child", s.Key(), childState{N: 7}, opts)
					outcome := "created"
					switch {
					case errors.Is(err, rivet.ErrAlreadyExists):
						outcome = "exists"
					case err != nil:
						outcome = err.Error()
					case res.Duplicate:
						outcome = "duplicate"
					}
					mu.Lock()
					got[s.Key()[0]] = append(got[s.Key()[0]], outcome)
					mu.Unlock()
					if s.Attempt() == 1 {
						return errors.New("fails after its create")
					}
					if err != nil {
						return workflow.Critical(err)
					}
					return nil
				})
		},
	}
	e := newEnv(t, counterReg(t, parent, childActor(&made)), nil)
	for _, key := range []string{"keyed", "plain"} {
		if _, err := e.host.Create(ctx(t), runtime.Ref{Name: "stepParent", Key: []string{key}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]struct {
		outcomes []string
		status   string
	}{
		"keyed": {[]string{"created", "duplicate"}, runtime.WorkflowCompleted},
		"plain": {[]string{"created", "exists"}, runtime.WorkflowFailed},
	}
	for key, w := range want {
		waitFor(t, "parent "+key+"'s workflow to end", 20*time.Second, func() bool {
			return inspect(t, e.host, "stepParent", key).WorkflowStatus != runtime.WorkflowRunning
		})
		ins := inspect(t, e.host, "stepParent", key)
		mu.Lock()
		outcomes := slices.Clone(got[key])
		mu.Unlock()
		if !slices.Equal(outcomes, w.outcomes) || ins.WorkflowStatus != w.status {
			t.Fatalf("parent %s: attempts saw %q, workflow %s (%s); want %q, %s", key, outcomes, ins.WorkflowStatus, ins.WorkflowError, w.outcomes, w.status)
		}
		if st := childOf(t, e.host, key); st.N != 7 {
			t.Fatalf("child %s state %+v, want made from the input (n 7)", key, st)
		}
	}
	if n := made.Load(); n != 2 {
		t.Fatalf("CreateState ran %d times, want 2 (one child per parent)", n)
	}
}

// An actor's create of an actor of a partition this node serves runs here:
// with a Remote, as every node's host has, nothing reaches it.
func TestAnActorsCreateOfAnActorServedHereRunsHere(t *testing.T) {
	remote := &countingRemote{}
	withRemote(t, remote)
	var made atomic.Int32
	e := newEnv(t, counterReg(t, parentActor, childActor(&made)), nil)
	raw, err := call(t, e.host, "parent", "p", "spawn", true, spawnArgs{Key: "here", N: 3})
	if err != nil {
		t.Fatal(err)
	}
	var s spawned
	if err := json.Unmarshal(raw, &s); err != nil || !s.Created {
		t.Fatalf("spawn = %s, %v; want created", raw, err)
	}
	info, err := e.host.Get(ctx(t), runtime.Ref{Name: "child", Key: []string{"here"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Owner != e.cfg.NodeID || s.Owner == "" || s.CreatedAt.IsZero() || !s.CreatedAt.Equal(info.CreatedAt) {
		t.Fatalf("spawn = %+v, want owner %q (this node) and the child's CreatedAt %v", s, e.cfg.NodeID, info.CreatedAt)
	}
	if n := remote.calls.Load(); n != 0 {
		t.Fatalf("%d requests reached the Remote, want none", n)
	}
	if st := childOf(t, e.host, "here"); st.N != 3 {
		t.Fatalf("child state %+v, want n 3", st)
	}
}

// An action of an actor whose partition is being handed off, its turn
// holding the handoff up, creates an actor of that partition: the create
// is served on the partition's claim, as that turn's calls are (letIn),
// not refused as not owned, and the next owner finds the actor made from
// its input.
func TestACreateByATurnTheHandoffWaitsForIsLetIn(t *testing.T) {
	remote := &countingRemote{}
	withRemote(t, remote)
	entered, hold := make(chan struct{}), make(chan struct{})
	var holdOnce sync.Once
	release := func() { holdOnce.Do(func() { close(hold) }) }
	var zKey string // set before any call
	x := rivet.Actor[taskState]{
		Name: "createX",
		Actions: rivet.Actions[taskState]{
			"spawn": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (bool, error) {
				close(entered)
				<-hold
				res, err := rivet.Create(c.Context(), c.Client(), "child", []string{zKey}, childState{N: 4})
				return err == nil && res.Name == "child", err
			}),
		},
	}
	var made atomic.Int32
	e := newEnv(t, counterReg(t, x, childActor(&made)), nil)
	// Before the env's stop, which would wait for a spawn still held if
	// the test fails before it lets it go.
	t.Cleanup(release)
	part := placement.Partition("createX", storage.EncodeKey([]string{"x"}), testPartitions)
	for i := 0; zKey == "" && i < 10_000; i++ {
		if k := fmt.Sprint("z", i); placement.Partition("child", storage.EncodeKey([]string{k}), testPartitions) == part {
			zKey = k
		}
	}
	if zKey == "" {
		t.Fatalf("no key of 10,000 puts a child in partition %d", part)
	}
	spawned := make(chan error, 1)
	go func() { _, err := call(t, e.host, "createX", "x", "spawn", true); spawned <- err }()
	select {
	case <-entered:
	case err := <-spawned:
		t.Fatalf("spawn ended before it began: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("spawn did not begin")
	}
	handedOff := make(chan error, 1)
	go func() { handedOff <- e.host.Handoff(context.Background(), part) }()
	waitFor(t, "the partition to be releasing", 10*time.Second, func() bool { _, ok := e.own.Releasing(part); return ok })
	release()
	for _, ch := range []struct {
		what string
		c    <-chan error
	}{{"the create during the handoff", spawned}, {"the handoff", handedOff}} {
		select {
		case err := <-ch.c:
			if err != nil {
				t.Fatalf("%s: %v", ch.what, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not end", ch.what)
		}
	}
	if n := remote.calls.Load(); n != 0 {
		t.Fatalf("%d requests were sent to other nodes, want the create served here", n)
	}
	h2, own2 := secondHost(t, e)
	if _, err := own2.Claim(ctx(t), []uint32{part}); err != nil {
		t.Fatal(err)
	}
	if st := childOf(t, h2, zKey); st.N != 4 {
		t.Fatalf("the child on the next owner: %+v, want made from the input (n 4)", st)
	}
}

// An actor's create input is held to the node's MaxInputBytes where the
// actor makes it, as a client's is by the server it reaches: a create of
// an actor of this node's own is refused as one of another node's is.
func TestAnActorsCreateInputIsBoundedWhereItIsMade(t *testing.T) {
	t.Parallel()
	var made atomic.Int32
	e := newEnv(t, counterReg(t, parentActor, childActor(&made)), func(c *runtime.Config) { c.MaxInputBytes = 64 })
	spawn := func(note string) spawned {
		t.Helper()
		raw, err := call(t, e.host, "parent", "p", "spawn", true, spawnArgs{Key: "big", N: 1, Note: note})
		if err != nil {
			t.Fatal(err)
		}
		var s spawned
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := spawn(strings.Repeat("x", 64)); !s.TooLarge {
		t.Fatalf("a create with a 64-byte note (input over 64 bytes) = %+v, want TOO_LARGE", s)
	}
	if n := made.Load(); n != 0 {
		t.Fatalf("CreateState ran %d times for a refused create", n)
	}
	if s := spawn("small"); !s.Created {
		t.Fatalf("a create with a small input = %+v, want created", s)
	}
}

// An actor's create of an actor of this node ends with the creator's
// context, as one of another node's actor does (Remote.Create), even if
// the new actor's CreateState or OnWake does not heed it: the creator's
// turn is not held past its deadline. The create goes on once the code
// returns, and nothing is left running after it (the node's Stop, which
// waits for every request it serves, returns).
func TestAnActorsCreateServedHereEndsWithItsContext(t *testing.T) {
	t.Parallel()
	for _, hook := range []string{"CreateState", "OnWake"} {
		t.Run(hook, func(t *testing.T) {
			t.Parallel()
			entered, unblock := make(chan struct{}), make(chan struct{})
			var once sync.Once
			release := func() { once.Do(func() { close(unblock) }) }
			stuck := func() {
				close(entered)
				<-unblock // not its context: it ignores it
			}
			child := rivet.Actor[childState]{Name: "slowChild"}
			if hook == "CreateState" {
				child.CreateState = func(json.RawMessage) (childState, error) { stuck(); return childState{N: 1}, nil }
			} else {
				child.OnWake = func(*rivet.ActionCtx[childState]) error { stuck(); return nil }
			}
			creator := rivet.Actor[struct{}]{
				Name: "impatientCreator",
				Actions: rivet.Actions[struct{}]{
					"spawn": rivet.Action0(func(c *rivet.ActionCtx[struct{}]) (string, error) {
						cctx, cancel := context.WithTimeout(c.Context(), 200*time.Millisecond)
						defer cancel()
						_, err := rivet.Create(cctx, c.Client(), "slowChild", []string{"s"}, nil)
						if errors.Is(err, rivet.ErrTimeout) {
							return "timeout", nil
						}
						return fmt.Sprint(err), nil
					}),
				},
			}
			e := newEnv(t, counterReg(t, creator, child), nil)
			t.Cleanup(release) // before the env's stop, which would wait for the stuck code
			done := make(chan error, 1)
			var got json.RawMessage
			go func() {
				var err error
				got, err = call(t, e.host, "impatientCreator", "c", "spawn", true)
				done <- err
			}()
			select {
			case <-entered:
			case <-time.After(20 * time.Second):
				t.Fatalf("%s never ran", hook)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != `"timeout"` {
					t.Fatalf("the create ended with %s, want ErrTimeout", got)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("the creator's turn waited for %s, which ignores its context", hook)
			}
			release()
			stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := e.host.Stop(stopCtx); err != nil {
				t.Fatalf("the node's stop after %s returned: %v (the create is still running)", hook, err)
			}
		})
	}
}
