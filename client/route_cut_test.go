package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// frozenCluster is three fakes: a owns the actors of partition 0 and
// freezes (its "block" action and its Inspect never answer until the test
// ends, whatever the caller does, as a stopped process's would not); n
// owns partition 1, and partition 0 too once moved is set; b is the seed,
// whose Members and Partitions the client's router reads.
type frozenCluster struct {
	c *client.Client
	// aState is a's state in b's member list ("" leaves it out).
	aState atomic.Value
	moved  atomic.Bool
	// seedFrozen makes b's calls, Members and Partitions go unanswered (n
	// answers Members and Partitions as b would).
	seedFrozen atomic.Bool
	// entered gets what a's frozen handlers were entered for.
	entered chan string
	// Counts, by node: "block" calls, Inspects, subscriptions; and the
	// frozen handlers that returned (none while the test runs).
	aBlocks, bBlocks, aReads, bReads, subsA, subsB, subsN, aReturned atomic.Int64
	// bQueries counts the "block" calls b got marked read-only.
	bQueries atomic.Int64
	// keyOn is a key of counter on each of the two partitions.
	keyOn map[uint32]string
}

func startFrozenCluster(t *testing.T, every time.Duration) *frozenCluster {
	f := &frozenCluster{entered: make(chan string, 16), keyOn: map[uint32]string{}}
	f.aState.Store("alive")
	for i := 0; len(f.keyOn) < 2 && i < 100; i++ {
		k := string(rune('a' + i))
		f.keyOn[client.PartitionOf("counter", k, 2)] = k
	}
	release := make(chan struct{})
	enter := func(what string) {
		select {
		case f.entered <- what:
		default:
		}
	}
	event := func(node string) rivet.Event {
		return rivet.Event{Name: "newCount", Data: json.RawMessage(`"` + node + `"`)}
	}

	a := servertest.NewFake()
	a.CallFunc = func(_ context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		if req.Action == "block" {
			f.aBlocks.Add(1)
			enter("call")
			<-release // frozen: not even the caller's cancel gets an answer
			f.aReturned.Add(1)
		}
		return json.RawMessage(`"a"`), nil
	}
	a.InspectFunc = func(context.Context, runtime.Ref) (runtime.Inspection, error) {
		f.aReads.Add(1)
		enter("inspect")
		<-release
		f.aReturned.Add(1)
		return runtime.Inspection{State: json.RawMessage(`"a"`)}, nil
	}
	a.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		f.subsA.Add(1)
		return servertest.NewEvents(nil, event("a")), nil // one event, then silence
	}
	// Frozen, a answers no one asking for the members or the table
	// either (the router asks the nodes it has connections to when the
	// seed does not answer).
	a.MembersFunc = func(ctx context.Context) ([]runtime.Member, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	a.PartitionsFunc = func(ctx context.Context) (uint32, []runtime.PartitionOwner, error) {
		<-ctx.Done()
		return 0, nil, ctx.Err()
	}
	aAddr := servertest.Start(t, a, servertest.Config{})

	n := servertest.NewFake()
	n.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		return json.RawMessage(`"n"`), nil
	}
	n.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		f.subsN.Add(1)
		return servertest.NewEvents(nil, event("n")), nil
	}
	var nAddr string
	members := func() []runtime.Member {
		ms := []runtime.Member{
			{NodeID: "b", GRPCAddr: "unused", State: "alive", StartedAt: servertest.Created},
			{NodeID: "n", GRPCAddr: nAddr, State: "alive", StartedAt: servertest.Created},
		}
		if st := f.aState.Load().(string); st != "" {
			ms = append(ms, runtime.Member{NodeID: "a", GRPCAddr: aAddr, State: st})
		}
		return ms
	}
	partitions := func() (uint32, []runtime.PartitionOwner, error) {
		owner := "a"
		if f.moved.Load() {
			owner = "n"
		}
		return 2, []runtime.PartitionOwner{{Partition: 0, Owner: owner}, {Partition: 1, Owner: "n"}}, nil
	}
	n.MembersFunc = func(context.Context) ([]runtime.Member, error) { return members(), nil }
	n.PartitionsFunc = func(context.Context) (uint32, []runtime.PartitionOwner, error) { return partitions() }
	nAddr = servertest.Start(t, n, servertest.Config{})

	b := servertest.NewFake()
	b.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		if req.Action == "block" {
			f.bBlocks.Add(1)
			if req.ReadOnly {
				f.bQueries.Add(1)
			}
		}
		if f.seedFrozen.Load() {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return json.RawMessage(`"b"`), nil
	}
	b.InspectFunc = func(context.Context, runtime.Ref) (runtime.Inspection, error) {
		f.bReads.Add(1)
		return runtime.Inspection{State: json.RawMessage(`"b"`)}, nil
	}
	b.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		f.subsB.Add(1)
		return servertest.NewEvents(nil, event("b")), nil
	}
	// Frozen, b answers only as its copy of the caller's deadline ends
	// the request, which gRPC may still deliver to the caller: the router
	// must not take that for an answer. Its answer is read before it
	// looks whether it is frozen: one that b gives in time is from before
	// the test froze it, and so from before a lost its lease (the test
	// freezes b first).
	frozen := func(ctx context.Context) {
		if f.seedFrozen.Load() {
			<-ctx.Done() // no answer in time: the caller gives up
		}
	}
	b.MembersFunc = func(ctx context.Context) ([]runtime.Member, error) {
		ms := members()
		frozen(ctx)
		return ms, nil
	}
	b.PartitionsFunc = func(ctx context.Context) (uint32, []runtime.PartitionOwner, error) {
		count, owners, err := partitions()
		frozen(ctx)
		return count, owners, err
	}
	bAddr := servertest.Start(t, b, servertest.Config{})
	// Before the servers stop (cleanups run last first): a's handlers
	// return, as a node thawed would answer.
	t.Cleanup(func() { close(release) })
	f.c = newClient(t, bAddr, client.WithDirectRouting(every))
	return f
}

// actor is counter on partition 0, which a owns until moved.
func (f *frozenCluster) actor() *client.ActorHandle { return f.c.Actor("counter", f.keyOn[0]) }

// reach calls counter key until the answer is want (the router knows the
// table, and its connection to that owner is up).
func (f *frozenCluster) reach(ctx context.Context, t *testing.T, key, want string) {
	t.Helper()
	for {
		out, err := f.c.Actor("counter", key).Call(ctx, "x")
		if err != nil {
			t.Fatalf("a call while waiting for %s to serve: %v", want, err)
		}
		if string(out) == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// blockInFlight starts a call of a's "block" action, which a never
// answers, and returns once a has it: the call's error comes on the
// channel.
func (f *frozenCluster) blockInFlight(ctx context.Context, t *testing.T) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := f.actor().Call(ctx, "block")
		done <- err
	}()
	f.wait(t, "call")
	return done
}

// wait waits until a's frozen handler was entered for what.
func (f *frozenCluster) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case got := <-f.entered:
		if got != what {
			t.Fatalf("a was entered for %s, want %s", got, what)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a's handler was not entered for %s", what)
	}
}

// cutBound bounds how long a call in flight at an owner that the table
// says is dead may wait, with a refresh every 200 ms: far less than the
// keepalive's 15 s (and than forever, which is what the fakes' connections,
// alive and answering pings, would give it), with room for a loaded machine.
const cutBound = 8 * time.Second

// A side-effecting call in flight at an owner that stops answering fails
// once a refresh of the table finds the owner dead: UNAVAILABLE, naming
// the node, of an unknown outcome, and not run again (not at the owner,
// not through the seed), well before the keepalive would end it.
func TestDirectRoutingCutsOffACallAtAnOwnerTheTableSaysIsDead(t *testing.T) {
	f := startFrozenCluster(t, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.reach(ctx, t, f.keyOn[0], `"a"`)
	done := f.blockInFlight(ctx, t)
	f.aState.Store("dead") // no call is made from now on: the watcher refreshes
	changed := time.Now()
	var err error
	select {
	case err = <-done:
	case <-time.After(cutBound):
		t.Fatalf("the call still waits %s after the table said its owner is dead", cutBound)
	}
	t.Logf("the call failed %s after the table changed: %v", time.Since(changed).Round(time.Millisecond), err)
	if f.aReturned.Load() != 0 {
		t.Fatal("a answered: the call was not cut off")
	}
	var re *rivet.Error
	if !errors.As(err, &re) || !errors.Is(err, rivet.ErrUnavailable) || client.Code(err) != codes.Unavailable {
		t.Fatalf("error %#v, want a *rivet.Error of kind ErrUnavailable", err)
	}
	if !rivet.OutcomeUnknown(err) || errors.Is(err, context.Canceled) {
		t.Fatalf("error %v: outcome unknown %v, want true (the action may have run), and not a cancel", err, rivet.OutcomeUnknown(err))
	}
	for _, want := range []string{"node a", `"dead"`, "may have run"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if f.aBlocks.Load() != 1 || f.bBlocks.Load() != 0 {
		t.Fatalf("the action was sent to a %d times, to b %d; want once to a, never again", f.aBlocks.Load(), f.bBlocks.Load())
	}
}

// While the seed does not answer, the router asks another node it has a
// connection to for the members: the call in flight at an owner the list
// no longer has is still cut off, well before the keepalive, and not sent
// again. And what would go to the seed goes to that node: a call whose
// owner was cut off (and a read retried after its cut-off) would
// otherwise wait on the frozen seed for the keepalive.
func TestDirectRoutingGoesAroundASeedThatDoesNotAnswer(t *testing.T) {
	f := startFrozenCluster(t, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.reach(ctx, t, f.keyOn[1], `"n"`) // a connection to n
	f.reach(ctx, t, f.keyOn[0], `"a"`)
	done := f.blockInFlight(ctx, t)
	f.seedFrozen.Store(true)
	f.aState.Store("dead") // a lost its lease; its partition not yet moved
	changed := time.Now()
	select {
	case err := <-done:
		t.Logf("the call failed %s after the list changed: %v", time.Since(changed).Round(time.Millisecond), err)
		if !errors.Is(err, rivet.ErrUnavailable) || !rivet.OutcomeUnknown(err) || !strings.Contains(err.Error(), "node a") {
			t.Fatalf("error %v, want UNAVAILABLE naming node a, of an unknown outcome", err)
		}
		if f.aReturned.Load() != 0 || f.aBlocks.Load() != 1 || f.bBlocks.Load() != 0 {
			t.Fatalf("a answered %d, the action sent to a %d times, to b %d; want once to a, cut off", f.aReturned.Load(), f.aBlocks.Load(), f.bBlocks.Load())
		}
	case <-time.After(cutBound):
		t.Fatalf("the call at a still waits %s after a left the list", cutBound)
	}
	cctx, ccancel := context.WithTimeout(ctx, cutBound)
	defer ccancel()
	start := time.Now()
	out, err := f.actor().Call(cctx, "x")
	if err != nil || string(out) != `"n"` {
		t.Fatalf("a call of a's actor, a cut off and b silent: %s, %v after %s; want n's answer", out, err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("answered by n %s after it was made", time.Since(start).Round(time.Millisecond))
}

// The node at the client's address may be an owner too, with a connection
// of the router's own to it: when it freezes, its calls in flight are cut
// off once it loses its lease, and what would go to it goes to the node
// that answered the router instead, not to it through that connection.
func TestDirectRoutingGoesAroundAFrozenSeedThatOwnsActors(t *testing.T) {
	var frozen, moved atomic.Bool
	var entered atomic.Int64
	keyOn := map[uint32]string{}
	for i := 0; len(keyOn) < 2 && i < 100; i++ {
		k := string(rune('a' + i))
		keyOn[client.PartitionOf("counter", k, 2)] = k
	}
	var aAddr, nAddr string
	members := func() []runtime.Member {
		ms := []runtime.Member{{NodeID: "n", GRPCAddr: nAddr, State: "alive", StartedAt: servertest.Created}}
		if frozen.Load() {
			return append(ms, runtime.Member{NodeID: "a", GRPCAddr: aAddr, State: "unregistered"})
		}
		return append(ms, runtime.Member{NodeID: "a", GRPCAddr: aAddr, State: "alive", StartedAt: servertest.Created})
	}
	partitions := func() (uint32, []runtime.PartitionOwner, error) {
		owner := "a"
		if moved.Load() {
			owner = "n"
		}
		return 2, []runtime.PartitionOwner{{Partition: 0, Owner: owner}, {Partition: 1, Owner: "n"}}, nil
	}
	// a's two faces, the same node to the client: its address as the
	// client's seed, and its address as an owner in the member list
	// (another port here, so that the test knows which connection a call
	// came by; a real client has two connections to it as well).
	fake := func(asOwner bool) *servertest.Fake {
		f := servertest.NewFake()
		f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
			if req.Action == "block" && asOwner {
				entered.Add(1)
				<-ctx.Done()
				return nil, ctx.Err()
			}
			if frozen.Load() {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			if asOwner {
				return json.RawMessage(`"a"`), nil
			}
			return json.RawMessage(`"a as the seed"`), nil
		}
		f.ListFunc = func(ctx context.Context, opts runtime.ListOptions) (runtime.ListResult, error) {
			<-ctx.Done() // only asked while frozen
			return runtime.ListResult{}, ctx.Err()
		}
		// The answer is read before the freeze is looked at: one read
		// after a freeze that came between would be an answer in time
		// that already says what only the freeze brings.
		f.MembersFunc = func(ctx context.Context) ([]runtime.Member, error) {
			ms := members()
			if frozen.Load() {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return ms, nil
		}
		f.PartitionsFunc = func(ctx context.Context) (uint32, []runtime.PartitionOwner, error) {
			n, owners, err := partitions()
			if frozen.Load() {
				<-ctx.Done()
				return 0, nil, ctx.Err()
			}
			return n, owners, err
		}
		return f
	}
	aSeed := servertest.Start(t, fake(false), servertest.Config{})
	aAddr = servertest.Start(t, fake(true), servertest.Config{})
	n := servertest.NewFake()
	n.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		return json.RawMessage(`"n"`), nil
	}
	var nLists atomic.Int64
	n.ListFunc = func(context.Context, runtime.ListOptions) (runtime.ListResult, error) {
		nLists.Add(1)
		return runtime.ListResult{}, nil
	}
	n.MembersFunc = func(context.Context) ([]runtime.Member, error) { return members(), nil }
	n.PartitionsFunc = func(context.Context) (uint32, []runtime.PartitionOwner, error) { return partitions() }
	nAddr = servertest.Start(t, n, servertest.Config{})
	c := newClient(t, aSeed, client.WithDirectRouting(200*time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	fc := &frozenCluster{c: c}
	fc.reach(ctx, t, keyOn[1], `"n"`) // connections to n and to a as owners
	fc.reach(ctx, t, keyOn[0], `"a"`)
	done := make(chan error, 1)
	go func() {
		_, err := c.Actor("counter", keyOn[0]).Call(ctx, "block")
		done <- err
	}()
	for entered.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the call never reached a")
		}
		time.Sleep(5 * time.Millisecond)
	}
	frozen.Store(true) // and a's lease is lost
	var err error
	select {
	case err = <-done:
	case <-time.After(cutBound):
		t.Fatalf("the call at a still waits %s after a froze and lost its lease", cutBound)
	}
	if !errors.Is(err, rivet.ErrUnavailable) || !strings.Contains(err.Error(), "node a") {
		t.Fatalf("the call at a: %v, want UNAVAILABLE naming node a", err)
	}
	// Calls that no owner takes go to n, which answered the router, not
	// to a through its owner's connection: each of these would wait
	// otherwise.
	for i := range 5 {
		lctx, lcancel := context.WithTimeout(ctx, cutBound)
		_, err := c.List(lctx, "counter", client.ListOptions{})
		lcancel()
		if err != nil {
			t.Fatalf("list %d, a frozen: %v; want n's answer", i, err)
		}
	}
	if nLists.Load() != 5 {
		t.Fatalf("n answered %d lists, want 5", nLists.Load())
	}
	moved.Store(true)
	cctx, ccancel := context.WithTimeout(ctx, cutBound)
	defer ccancel()
	if out, err := c.Actor("counter", keyOn[0]).Call(cctx, "x"); err != nil || string(out) != `"n"` {
		t.Fatalf("a call of a's actor once moved: %s, %v; want n's answer", out, err)
	}
}

// An idempotent read in flight at an owner that stops answering is cut off
// once the owner is gone from the member list, and retried: the seed
// answers it.
func TestDirectRoutingRetriesAReadCutOffAtAnOwnerGoneFromTheTable(t *testing.T) {
	for _, c := range []struct {
		name, entered string
		read          func(context.Context, *client.ActorHandle) (string, error)
		// at a and at b: the reads the fakes were asked for.
		at func(*frozenCluster) (a, b int64)
	}{
		{"inspect", "inspect", func(ctx context.Context, h *client.ActorHandle) (string, error) {
			in, err := h.Inspect(ctx)
			return string(in.State), err
		}, func(f *frozenCluster) (int64, int64) { return f.aReads.Load(), f.bReads.Load() }},
		// A read-only call is retried as a read, with its mark kept.
		{"query", "call", func(ctx context.Context, h *client.ActorHandle) (string, error) {
			out, err := h.Query(ctx, "block")
			return string(out), err
		}, func(f *frozenCluster) (int64, int64) { return f.aBlocks.Load(), f.bQueries.Load() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := startFrozenCluster(t, 200*time.Millisecond)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			f.reach(ctx, t, f.keyOn[0], `"a"`)
			type result struct {
				out string
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := c.read(ctx, f.actor())
				done <- result{out, err}
			}()
			f.wait(t, c.entered)
			f.aState.Store("") // gone from the list
			changed := time.Now()
			var res result
			select {
			case res = <-done:
			case <-time.After(cutBound):
				t.Fatalf("the read still waits %s after its owner left the table", cutBound)
			}
			t.Logf("the read was answered %s after the table changed", time.Since(changed).Round(time.Millisecond))
			if res.err != nil || res.out != `"b"` {
				t.Fatalf("read: %s, %v; want b's answer (retried through the seed)", res.out, res.err)
			}
			if a, b := c.at(f); f.aReturned.Load() != 0 || a != 1 || b != 1 {
				t.Fatalf("reads at a %d (answered %d), at b %d; want one each, a's unanswered", a, f.aReturned.Load(), b)
			}
		})
	}
}

// A subscription at an owner that stops answering (its stream just goes
// quiet) moves on once the table says the owner is dead and the actor
// moved: a Gap, then the events of the new owner, subscribed to directly.
func TestDirectRoutingMovesASubscriptionOffAnOwnerTheTableSaysIsDead(t *testing.T) {
	f := startFrozenCluster(t, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.reach(ctx, t, f.keyOn[0], `"a"`)
	f.reach(ctx, t, f.keyOn[1], `"n"`) // a connection to n, the next owner, up
	var breaks atomic.Int64
	var cause atomic.Value
	sub, err := f.actor().SubscribeWith(ctx, client.SubscribeOptions{Events: []string{"newCount"}, OnBreak: func(err error) {
		if breaks.Add(1) == 1 {
			cause.Store(err)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if ev, err := sub.Next(ctx); err != nil || string(ev.Data) != `"a"` {
		t.Fatalf("first event %s (%v), want a's", ev.Data, err)
	}
	f.moved.Store(true)
	f.aState.Store("dead")
	changed := time.Now()
	nctx, ncancel := context.WithTimeout(ctx, cutBound)
	defer ncancel()
	for _, want := range []string{"gap", `"n"`} {
		got, err := nextEvent(nctx, sub)
		if err != nil || got != want {
			t.Fatalf("event %s (%v), want %s; subscriptions at a %d, b %d, n %d", got, err, want, f.subsA.Load(), f.subsB.Load(), f.subsN.Load())
		}
	}
	t.Logf("the subscription moved %s after the table changed (the break: %v)", time.Since(changed).Round(time.Millisecond), cause.Load())
	if f.subsA.Load() != 1 || f.subsB.Load() != 0 || f.subsN.Load() != 1 {
		t.Fatalf("subscriptions at a %d, b %d, n %d; want one at a, then one at n", f.subsA.Load(), f.subsB.Load(), f.subsN.Load())
	}
	if err, _ := cause.Load().(error); !errors.Is(err, rivet.ErrUnavailable) || !strings.Contains(err.Error(), "node a") {
		t.Fatalf("the break's cause: %v, want the UNAVAILABLE that names node a", err)
	}
}

// The caller's own deadline or cancel ends a call in flight at a frozen
// owner with its own error, not the router's, and the table's change after
// it alters nothing.
func TestDirectRoutingLeavesTheCallersOwnEndToIt(t *testing.T) {
	f := startFrozenCluster(t, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.reach(ctx, t, f.keyOn[0], `"a"`)

	dctx, dcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer dcancel()
	_, err := f.actor().Call(dctx, "block")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, rivet.ErrTimeout) || client.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call whose deadline ran out: %v (%s), want its deadline's error", err, client.Code(err))
	}
	f.wait(t, "call")

	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := f.actor().Call(cctx, "block")
		done <- err
	}()
	f.wait(t, "call")
	ccancel()
	f.aState.Store("dead") // too late: the call is over, or ends with the cancel
	select {
	case err = <-done:
	case <-time.After(cutBound):
		t.Fatal("a cancelled call did not end")
	}
	if !errors.Is(err, context.Canceled) || client.Code(err) != codes.Canceled {
		t.Fatalf("a cancelled call: %v (%s), want Canceled", err, client.Code(err))
	}
	if f.aBlocks.Load() != 2 || f.bBlocks.Load() != 0 {
		t.Fatalf("the action was sent to a %d times, to b %d; want twice to a", f.aBlocks.Load(), f.bBlocks.Load())
	}
}
