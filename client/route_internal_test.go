package client

import (
	"context"
	"errors"
	"maps"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// useOf is a use of c as pick would have begun it.
func useOf(c *grpc.ClientConn) *use {
	u := &use{conn: c}
	u.ctx, u.cancel = context.WithCancelCause(context.Background())
	return u
}

// A connection to a node that left the table is closed at once if idle,
// and only as its last call or stream ends if not: closing it under them
// would cut off calls that may have run.
func TestARetiredConnectionClosesAfterItsLastUse(t *testing.T) {
	dial := func() *grpc.ClientConn {
		c, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	busy, idle, kept := dial(), dial(), dial()
	defer kept.Close()
	r := newRouter(nil, nil, 0)
	r.conns = map[string]*grpc.ClientConn{"busy": busy, "idle": idle, "kept": kept}
	r.inUse[busy] = 2

	r.mu.Lock()
	closeNow := r.dropConns(map[string]bool{"kept": true})
	r.mu.Unlock()
	if len(closeNow) != 1 || closeNow[0] != idle {
		t.Fatalf("to close now: %v, want the idle connection alone", closeNow)
	}
	idle.Close()
	if len(r.conns) != 1 || r.conns["kept"] != kept {
		t.Fatalf("connections left: %v", r.conns)
	}
	r.release(useOf(busy))
	if busy.GetState() == connectivity.Shutdown {
		t.Fatal("closed with a use left")
	}
	r.release(useOf(busy))
	if busy.GetState() != connectivity.Shutdown {
		t.Fatalf("still %v after its last use", busy.GetState())
	}
	if len(r.inUse) != 0 || len(r.retired) != 0 {
		t.Fatalf("bookkeeping left: %v, %v", r.inUse, r.retired)
	}

	// Two connections to one address retired in use (its node left,
	// came back, left again): closing the client closes both.
	c1, c2 := dial(), dial()
	r.conns = map[string]*grpc.ClientConn{"x": c1}
	r.inUse[c1] = 1
	r.mu.Lock()
	r.dropConns(nil)
	r.conns["x"] = c2
	r.inUse[c2] = 1
	r.dropConns(nil)
	r.mu.Unlock()
	r.close()
	if c1.GetState() != connectivity.Shutdown || c2.GetState() != connectivity.Shutdown {
		t.Fatalf("after close: %v and %v, want both shut down", c1.GetState(), c2.GetState())
	}
}

// A refresh cuts off the uses of nodes the member list no longer has as
// live: dead or left and unregistered (lease lost), "unregistered", or not
// listed; not those of a node alive, "unknown" (not yet in gossip), or
// dead or left in gossip while still registered (stopping gracefully: it
// finishes its calls; or a gossip fault: it still owns its partitions).
// An empty list cuts off nothing.
func TestCutOffCutsTheUsesOfNodesNoLongerLive(t *testing.T) {
	r := newRouter(nil, nil, 0)
	defer r.stop()
	started := timestamppb.Now()
	members := []*rivetv1.Member{
		{NodeId: "alive", GrpcAddr: "alive:1", State: "alive", StartedAt: started},
		{NodeId: "unknown", GrpcAddr: "unknown:1", State: "unknown", StartedAt: started},
		{NodeId: "stopping", GrpcAddr: "stopping:1", State: "left", StartedAt: started},
		{NodeId: "gone", GrpcAddr: "left:1", State: "left"},
		{NodeId: "dead", GrpcAddr: "dead:1", State: "dead"},
		{NodeId: "cutoff", GrpcAddr: "cutoff:1", State: "dead", StartedAt: started},
		{NodeId: "lost", GrpcAddr: "lost:1", State: "unregistered"},
		// A node restarted at a dead one's address: the address is live.
		{NodeId: "old", GrpcAddr: "alive:1", State: "dead"},
	}
	uses := map[string]*use{}
	for _, addr := range []string{"alive:1", "unknown:1", "stopping:1", "cutoff:1", "left:1", "dead:1", "lost:1", "unlisted:1"} {
		u := &use{addr: addr, node: strings.TrimSuffix(addr, ":1")}
		u.ctx, u.cancel = context.WithCancelCause(context.Background())
		defer u.cancel(nil)
		uses[addr] = u
		r.uses[u] = struct{}{}
	}
	// A node that serves before it has read the cluster's records (one
	// from before they refuse to answer then) lists everyone, itself
	// too, unregistered: no answer to act on, as an empty list is not.
	starting := []*rivetv1.Member{
		{NodeId: "alive", GrpcAddr: "alive:1", State: "unregistered"},
		{NodeId: "dead", GrpcAddr: "dead:1", State: "unregistered"},
	}
	r.addrs = map[string]string{"alive": "alive:1", "dead": "dead:1"}
	r.mu.Lock()
	r.cutOff(nil)
	r.cutOff(starting)
	r.mu.Unlock()
	for addr, u := range uses {
		if u.ctx.Err() != nil {
			t.Fatalf("an empty member list, or one without a registered node, cut off the use at %s", addr)
		}
	}
	r.mu.Lock()
	r.cutOff(members)
	r.mu.Unlock()
	if want := map[string]string{"alive": "alive:1"}; !maps.Equal(r.addrs, want) {
		t.Errorf("owners' addresses after the cut %v, want %v: nothing more is sent to a node cut off", r.addrs, want)
	}
	for addr, want := range map[string]string{"alive:1": "", "unknown:1": "", "stopping:1": "", "cutoff:1": "", "left:1": `"left"`, "dead:1": `"dead"`, "lost:1": "lost its lease", "unlisted:1": "no longer listed"} {
		cause := context.Cause(uses[addr].ctx)
		var g *ownerGone
		switch {
		case want == "" && cause != nil:
			t.Errorf("the use at %s was cut off: %v", addr, cause)
		case want != "" && (!errors.As(cause, &g) || !strings.Contains(g.Error(), want) || !strings.Contains(g.Error(), addr)):
			t.Errorf("the use at %s: %v, want it cut off, saying %s", addr, cause, want)
		}
	}
}

// A use cut off fails UNAVAILABLE (a call's, outcome unknown), unless the
// caller's own context ended too: its error then wins, whichever came
// first. A use not cut off keeps its error.
func TestAUseCutOffFailsUnavailableUnlessTheCallersContextEnded(t *testing.T) {
	canceled := status.Error(codes.Canceled, context.Canceled.Error())
	newUse := func(ctx context.Context) *use {
		u := &use{addr: "a:1", node: "a"}
		u.ctx, u.cancel = context.WithCancelCause(ctx)
		return u
	}
	u := newUse(context.Background())
	u.cancel(&ownerGone{node: u.node, addr: u.addr, state: "dead"})
	err := u.failure(context.Background(), canceled)
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "may have run") || rpcerr.NotSent(st) || rpcerr.HasActorError(st) {
		t.Fatalf("a call cut off: %v, want a bare UNAVAILABLE of unknown outcome", err)
	}
	// Answered otherwise meanwhile: the answer stands.
	if err := u.failure(context.Background(), status.Error(codes.NotFound, "no")); status.Code(err) != codes.NotFound {
		t.Fatalf("a call cut off as it failed NOT_FOUND: %v", err)
	}
	if err := u.failure(context.Background(), nil); err != nil {
		t.Fatalf("a call cut off as it succeeded: %v", err)
	}

	// Cut off, then the caller's deadline ran out, before gRPC returned.
	dctx, dcancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer dcancel()
	u = newUse(context.Background()) // not derived from dctx: the cut came first
	u.cancel(&ownerGone{node: u.node, addr: u.addr, state: "dead"})
	if err := u.failure(dctx, canceled); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call cut off as its deadline ran out: %v, want DEADLINE_EXCEEDED", err)
	}
	// The caller cancelled first: its cancel.
	cctx, ccancel := context.WithCancel(context.Background())
	u = newUse(cctx)
	ccancel()
	u.cancel(&ownerGone{node: u.node, addr: u.addr, state: "dead"})
	if err := u.failure(cctx, canceled); status.Code(err) != codes.Canceled {
		t.Fatalf("a call cancelled by its caller, then cut off: %v, want CANCELED", err)
	}
	// Not cut off: gRPC's error as it is.
	u = newUse(context.Background())
	defer u.cancel(nil)
	if err := u.failure(context.Background(), canceled); err != canceled {
		t.Fatalf("a call not cut off: %v, want its own error", err)
	}
}

// While a use is in flight the members are asked for every interval with no
// call made; the watcher doing it ends once no use is left, and with close.
func TestTheMembersAreAskedForWhileUsesAreInFlight(t *testing.T) {
	seed, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer seed.Close()
	r := newRouter(seed, nil, 20*time.Millisecond)
	defer r.close()
	inFlight := func() *use {
		u := &use{addr: "a:1", node: "a"}
		u.ctx, u.cancel = context.WithCancelCause(context.Background())
		r.mu.Lock()
		defer r.mu.Unlock()
		r.uses[u] = struct{}{}
		if !r.watching { // as pick starts it
			r.watching = true
			r.wg.Add(1)
			go r.watch()
		}
		return u
	}
	fetched := func() time.Time {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.asked
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("still not %s after 10 s", what)
			}
		}
	}
	u := inFlight()
	first := time.Time{}
	waitFor("refreshed", func() bool { first = fetched(); return !first.IsZero() })
	waitFor("refreshed again", func() bool { return fetched().After(first) })
	r.mu.Lock()
	delete(r.uses, u) // as release does
	r.mu.Unlock()
	u.cancel(nil)
	waitFor("done watching", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return !r.watching })
	last := fetched()
	u = inFlight() // watched again; close ends it (goleak checks)
	defer u.cancel(nil)
	waitFor("refreshed once more", func() bool { return fetched().After(last) })
}

// The watch's request for the members and a refresh's run side by side: an
// answer is applied only if none to a later request was, so that a
// refresh's answer from before a node was cut off does not put it back in
// the owners' addresses (new calls would go to the frozen node again).
func TestAnAnswerOlderThanOneAppliedIsDropped(t *testing.T) {
	r := newRouter(nil, nil, 0)
	defer r.stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	ask := func() uint64 { r.membersAsked++; return r.membersAsked } // as askForMembers numbers them
	refresh, watch := ask(), ask()
	if !r.latestMembers(watch) {
		t.Fatal("the later request's answer, first back, was dropped")
	}
	if r.latestMembers(refresh) {
		t.Fatal("the earlier request's answer, back after the later one's, was applied")
	}
	if next := ask(); !r.latestMembers(next) {
		t.Fatal("a request after them was dropped")
	}
}

// A call at an owner whose connection broke (killed: the transport's own
// words, "error reading from server: EOF") says which node that was; its
// code and words stay. A node's own answer (with its detail) is left as
// it is.
func TestABrokenConnectionToAnOwnerNamesTheNode(t *testing.T) {
	u := useOf(nil)
	u.node, u.addr = "n2", "127.0.0.1:7430"
	err := u.failure(context.Background(), status.Error(codes.Unavailable, "error reading from server: EOF"))
	if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "node n2 (127.0.0.1:7430), the actor's owner: error reading from server: EOF" {
		t.Errorf("a broken connection: %v", err)
	}
	answer, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnavailable, "the actor's partition is moving"))
	if err := u.failure(context.Background(), answer.Err()); status.Convert(err).Message() != answer.Message() {
		t.Errorf("a node's answer: %v, want it as it was", err)
	}
}

// An answer of the seed that comes only as the router's request for it
// times out is no answer within askTimeout: gRPC may deliver one, as a
// success, that a node sent as its own copy of the deadline ended its
// handler, before the client's timer cancels the request. The seed counts
// as silent, the other nodes are asked, and what would go to the seed goes
// to the node that answered (fallback); if none answers, the seed's answer
// stands.
func TestASeedAnswerAsTheAskTimesOutCountsAsSilence(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go srv.Serve(lis)
	defer srv.Stop()
	addr := lis.Addr().String()
	n, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n.Connect()
	for s := n.GetState(); s != connectivity.Ready; s = n.GetState() {
		if !n.WaitForStateChange(ctx, s) {
			t.Fatalf("the connection to n is %v, not ready", s)
		}
	}
	// An interval of an hour: the use fallback begins starts the router's
	// watch, whose first ask would go to the seed, which is nil here.
	r := newRouter(nil, nil, time.Hour)
	defer r.stop()
	r.conns = map[string]*grpc.ClientConn{addr: n}
	r.addrs = map[string]string{"n": addr}
	ask := func(nAnswers bool) func(context.Context, rivetv1.AdminServiceClient) (string, error) {
		return func(ctx context.Context, admin rivetv1.AdminServiceClient) (string, error) {
			if admin != r.admin {
				if !nAnswers {
					return "", status.Error(codes.Unavailable, "n does not answer")
				}
				return "n", nil
			}
			<-ctx.Done() // the seed's reply, delivered as the deadline passed
			return "seed", nil
		}
	}

	got, err := fromAnyNode(r, ask(true))
	if err != nil || got != "n" {
		t.Fatalf("answer %q, %v; want n's", got, err)
	}
	r.mu.Lock()
	silent, answered := r.seedSilent, r.answered
	r.mu.Unlock()
	if !silent || answered != n {
		t.Fatalf("seed silent %v, answered by n %v; want the seed silent and n to take its requests", silent, answered == n)
	}
	u := r.fallback(ctx, false)
	if u == nil || u.conn != n || !u.via {
		t.Fatalf("a request for the seed goes to %+v, want a use of n's connection", u)
	}
	r.release(u)

	if got, err := fromAnyNode(r, ask(false)); err != nil || got != "seed" {
		t.Fatalf("no other node answering: %q, %v; want the seed's late answer", got, err)
	}
	// n, which took the seed's requests, did not answer now: they go to
	// the seed again.
	r.mu.Lock()
	answered = r.answered
	r.mu.Unlock()
	if answered != nil {
		t.Fatal("after a late answer of the seed that n did not beat, n still takes the seed's requests")
	}
	if u := r.fallback(ctx, false); u != nil {
		t.Fatalf("a request for the seed goes to %+v, want the seed", u)
	}
}
