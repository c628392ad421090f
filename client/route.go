package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
)

// router sends each actor request straight to the node that owns the
// actor's partition, from a copy of the partition table it refreshes in
// the background, so that calls take no forwarding hop. Everything else,
// and every request it cannot place, goes to the node the client was made
// with, which forwards as needed: a stale table costs a hop, never an
// error. It implements grpc.ClientConnInterface.
type router struct {
	seed  *grpc.ClientConn
	admin rivetv1.AdminServiceClient
	dial  []grpc.DialOption
	every time.Duration

	mu     sync.Mutex
	count  uint32
	owners []string          // node ID by partition
	addrs  map[string]string // gRPC address by node ID
	conns  map[string]*grpc.ClientConn
	// inUse counts the calls and streams on each connection (pick, done):
	// one dropped from conns as its node left the table is retired, and
	// closed as the last of them ends, not under them (a call cut off
	// that way may have run, and could not be sent on again).
	inUse   map[*grpc.ClientConn]int
	retired map[*grpc.ClientConn]bool
	// uses are the calls and streams in flight on those connections,
	// which a refresh cuts off when their node is no longer a live
	// member (cutOff); watching says that watch runs, asking for the
	// members while there are any.
	uses     map[*use]struct{}
	watching bool
	asked    time.Time // when watch last asked for the members
	// seedSilent says that the seed did not answer the router's last
	// request (fromAnyNode): requests for it go to answered, the
	// connection of the node that answered instead (fallback).
	seedSilent bool
	answered   *grpc.ClientConn
	// membersAsked numbers the requests for the members; membersApplied
	// is the latest whose answer was applied (askForMembers).
	membersAsked, membersApplied uint64
	bad                          map[string]time.Time // addresses that failed to dial, until
	fetched                      time.Time
	refreshed                    chan struct{} // while a refresh runs: closed as it ends
	closed                       bool
	wg                           sync.WaitGroup
	// ctx bounds the refreshes; close cancels it, so that it does not
	// wait out a refresh against a node that does not answer.
	ctx  context.Context
	stop context.CancelFunc
}

// askTimeout bounds the router's requests for the table or the members to
// one node (fromAnyNode).
const askTimeout = 2 * time.Second

// badFor is how long an address that could not be dialed is avoided (it
// may be a container address this client cannot reach).
const badFor = 30 * time.Second

func newRouter(seed *grpc.ClientConn, dial []grpc.DialOption, every time.Duration) *router {
	ctx, stop := context.WithCancel(context.Background())
	return &router{
		seed: seed, admin: rivetv1.NewAdminServiceClient(seed), dial: dial, every: every,
		conns: map[string]*grpc.ClientConn{}, bad: map[string]time.Time{},
		inUse: map[*grpc.ClientConn]int{}, retired: map[*grpc.ClientConn]bool{},
		uses: map[*use]struct{}{}, ctx: ctx, stop: stop,
	}
}

type actorRequest interface{ GetActor() *rivetv1.ActorRef }

// Invoke implements grpc.ClientConnInterface.
func (r *router) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	u := r.pick(ctx, args)
	if u == nil {
		return r.invokeFallback(ctx, method, args, reply, opts...)
	}
	err, connected, unsent := r.invokeOn(ctx, u, method, args, reply, opts)
	if unsent || r.unreached(u.addr, err, connected) {
		return r.invokeFallback(ctx, method, args, reply, opts...)
	}
	return err
}

// invokeOn sends a call on u and ends the use. It returns the call's
// failure as u.failure says it; connected says that the call reached a
// node (gRPC gave it a stream), unsent that the router cut it off before
// that: it was never sent, and may go elsewhere.
func (r *router) invokeOn(ctx context.Context, u *use, method string, args, reply any, opts []grpc.CallOption) (err error, connected, unsent bool) {
	p := peer.Peer{Addr: noPeer}
	err = u.conn.Invoke(u.ctx, method, args, reply, append(opts, grpc.Peer(&p))...)
	r.release(u)
	connected = p.Addr != noPeer
	if !connected && u.cut(ctx, err) != nil {
		return err, false, true
	}
	return u.callFailure(ctx, err, connected), connected, false
}

// callFailure is failure for a call on u: one that reached the owner
// (connected) and whose connection broke then (the transport's bare
// UNAVAILABLE) says it may have run, in the words brokeAt gives a call
// whose connection to the node it went through broke. It only named the
// node, and a user read it as a call that was not made. Its status (a bare
// UNAVAILABLE: rivet.OutcomeUnknown) is failure's.
func (u *use) callFailure(ctx context.Context, err error, connected bool) error {
	f := u.failure(ctx, err)
	st, ok := status.FromError(err)
	if !connected || !ok || st.Code() != codes.Unavailable || len(st.Proto().GetDetails()) > 0 || rpcerr.NotSent(st) || status.Code(f) != codes.Unavailable {
		return f
	}
	return status.Errorf(codes.Unavailable, "the call to node %s (%s), %s, %s: %s", u.node, u.addr, role(u.via), mayHaveRun, st.Message())
}

// A use is one call or stream on a connection that pick returned, until
// release. Its context is the caller's, which a refresh of the table cuts
// off (with an *ownerGone cause) when its node is no longer a live member
// of the cluster: a node that froze (a stopped process, a cut network)
// keeps its connections open, and a call in flight on one would otherwise
// wait for the connection's keepalive (about 15 s, clientKeepalive),
// where the node that forwards a call learns within seconds that its
// owner is gone.
type use struct {
	conn *grpc.ClientConn
	addr string
	node string // the owner's ID, as the table named it
	// stream says that it is a subscription's, not a call's.
	stream bool
	// via says that the node is not the owner but one that forwards to
	// it, in the seed's stead (fallback).
	via bool
	// ctx is the call's or stream's context; cancel cuts it off.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// ownerGone is why the router cut off a call or stream: its node is no
// longer a live member of the cluster (state, as Members said it; "" if
// it is not listed at all).
type ownerGone struct {
	node, addr, state string
	stream            bool // a subscription's, not a call's
	via               bool // the node forwarded it (use.via)
}

func (g *ownerGone) Error() string {
	why := "is no longer listed among the cluster's members"
	switch g.state {
	case "":
	case "unregistered":
		why = "lost its lease (the cluster's members list it unregistered)"
	default:
		why = fmt.Sprintf("lost its lease (the cluster's members list it %q, unregistered)", g.state)
	}
	if g.stream {
		return fmt.Sprintf("node %s (%s), %s, stopped answering: it %s, and the stream on it was cut off", g.node, g.addr, role(g.via), why)
	}
	return fmt.Sprintf("node %s (%s), %s, stopped answering: it %s, and the call in flight on it was cut off; it may have run (its outcome is unknown)", g.node, g.addr, role(g.via), why)
}

// role is what a node of a use is to its request: its actor's owner, or
// (via) a node in the seed's stead that forwards it.
func role(via bool) string {
	if via {
		return "which forwarded the request"
	}
	return "the actor's owner"
}

// status is how a call cut off fails: UNAVAILABLE without an ActorError,
// as a connection that broke mid-call (and a call a node forwarded to an
// owner that left, whose peer stream broke) fails. The client retries it
// only for requests without side effects: the owner may have run it.
func (g *ownerGone) status() *status.Status { return status.New(codes.Unavailable, g.Error()) }

// cut returns why the router cut u off, if it did, err is what that did
// (gRPC's Canceled) and the caller's ctx has not ended.
func (u *use) cut(ctx context.Context, err error) *ownerGone {
	var g *ownerGone
	if err == nil || ctx.Err() != nil || status.Code(err) != codes.Canceled || !errors.As(context.Cause(u.ctx), &g) {
		return nil
	}
	return g
}

// failure is the error of a call or stream on u that failed with err: the
// UNAVAILABLE of ownerGone if the router cut it off; the caller's own
// context's error if that ended too (a cut off call may report Canceled
// where the caller's deadline ran out); err otherwise.
func (u *use) failure(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if g := u.cut(ctx, err); g != nil {
		return g.status().Err()
	}
	if ctx.Err() != nil && errors.As(context.Cause(u.ctx), new(*ownerGone)) {
		return status.FromContextError(ctx.Err()).Err()
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable && len(st.Proto().GetDetails()) == 0 {
		// The transport's own words ("error reading from server: EOF",
		// a keepalive's), which name no node: say whose connection it
		// was. The words stay, for what looks at them (rpcerr.NotSent).
		return status.Errorf(codes.Unavailable, "node %s (%s), %s: %s", u.node, u.addr, role(u.via), st.Message())
	}
	return err
}

// cutStream is a Subscribe stream on a use, whose Recv says why the
// router cut it off: an UNAVAILABLE, after which the subscription
// subscribes again (where the table says the actor is now), not a
// Canceled, which would end it.
type cutStream struct {
	grpc.ServerStreamingClient[rivetv1.SubscribeResponse]
	u   *use
	ctx context.Context // the caller's
}

func (s *cutStream) Recv() (*rivetv1.SubscribeResponse, error) {
	m, err := s.ServerStreamingClient.Recv()
	return m, s.u.failure(s.ctx, err)
}

// unreached reports whether err says that the owner at addr could not be
// reached at all (the request was not sent: it never had a connection, see
// attempt, or its error says so). Then the address is avoided for a while
// and the table refreshed; the caller lets the seed node forward the
// request.
func (r *router) unreached(addr string, err error, connected bool) bool {
	if err == nil {
		return false
	}
	if st := status.Convert(err); st.Code() != codes.Unavailable || connected && !rpcerr.NotSent(st) {
		return false
	}
	r.mu.Lock()
	r.bad[addr] = time.Now().Add(badFor)
	r.fetched = time.Time{}
	r.mu.Unlock()
	return true
}

// NewStream implements grpc.ClientConnInterface. A stream's request is not
// known here, so streams go to the seed (fallback); Subscribe picks its
// owner itself (ActorHandle.subscribe).
func (r *router) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	u := r.fallback(ctx, true)
	if u == nil {
		return r.seed.NewStream(ctx, desc, method, opts...)
	}
	cs, err := u.conn.NewStream(u.ctx, desc, method, opts...)
	if err != nil {
		r.release(u)
		return nil, u.failure(ctx, err)
	}
	// In use until the stream ends, however it ends (its context ends
	// with it; asking for it gives up gRPC's transparent retry of the
	// stream, which only the seed's get).
	context.AfterFunc(cs.Context(), func() { r.release(u) })
	return &useStream{ClientStream: cs, u: u, ctx: ctx}, nil
}

// cutOff cuts off the calls and streams in flight on nodes that members
// (the cluster's, as a refresh read them) no longer lists as live: gone
// from the list, or neither "alive" nor "unknown" in gossip nor
// registered (no start time: its lease in etcd expired, which is when the
// nodes forwarding to it give it up, server.PeerConn closed by the node's
// prune). A node still registered keeps its calls whatever gossip says:
// one that left the gossip is stopping gracefully (it finishes the calls
// in flight, then closes its connections), and one that gossip alone
// declared dead (a gossip network's fault) still owns its partitions and
// may well answer; the forwarding nodes do not give it up either. New
// calls go to the seed meanwhile. A list without a registered node cuts
// off nothing: every node lists itself, registered, once it serves, so
// that is no answer to act on (an empty one, or a node's that had not yet
// read the cluster's records: nodes before this client's refuse that).
// Called with mu held.
func (r *router) cutOff(members []*rivetv1.Member) {
	if len(r.uses) == 0 || !slices.ContainsFunc(members, func(m *rivetv1.Member) bool { return m.GetStartedAt() != nil }) {
		return
	}
	keep := map[string]bool{}
	state := map[string]string{}
	for _, m := range members {
		st := m.GetState()
		if st == "alive" || st == "unknown" || m.GetStartedAt() != nil {
			keep[m.GetGrpcAddr()] = true
		} else {
			state[m.GetGrpcAddr()] = st
		}
	}
	for u := range r.uses {
		if !keep[u.addr] {
			u.cancel(&ownerGone{node: u.node, addr: u.addr, state: state[u.addr], stream: u.stream, via: u.via})
		}
	}
	// Nor is anything sent there from now on (a read cut off is retried
	// at once): its calls go to the seed until the table is refreshed.
	for id, addr := range r.addrs {
		if !keep[addr] {
			delete(r.addrs, id)
		}
	}
}

// dropConns drops the connections to nodes no longer members at all (not
// in live) and returns those to close now; those in use are retired, and
// closed by their last use's done. Called with mu held.
func (r *router) dropConns(live map[string]bool) (closeNow []*grpc.ClientConn) {
	for addr, c := range r.conns {
		if live[addr] {
			continue
		}
		delete(r.conns, addr)
		if r.inUse[c] > 0 {
			r.retired[c] = true
		} else {
			closeNow = append(closeNow, c)
		}
	}
	return closeNow
}

// release ends u, a use that pick began, closing its connection if it
// was the last use of a retired one.
func (r *router) release(u *use) {
	u.cancel(nil) // a cause given before stays
	r.mu.Lock()
	delete(r.uses, u)
	last := r.doneLocked(u.conn)
	r.mu.Unlock()
	if last {
		u.conn.Close()
	}
}

// doneLocked ends a use of c and reports whether it was the last use of a
// retired connection, which the caller closes once mu is released.
func (r *router) doneLocked(c *grpc.ClientConn) (last bool) {
	n := r.inUse[c] - 1
	last = n <= 0 && r.retired[c]
	if n <= 0 {
		delete(r.inUse, c)
		delete(r.retired, c)
	} else {
		r.inUse[c] = n
	}
	return last
}

// pick returns a use of the connection to the owner of the request's
// actor, with a context derived from ctx for the call or stream, or nil
// for the seed. The use lasts until release.
func (r *router) pick(ctx context.Context, args any) *use {
	r.maybeRefresh()
	ar, ok := args.(actorRequest)
	if !ok || ar.GetActor() == nil {
		return nil
	}
	if _, ok := args.(proto.Message); !ok {
		return nil
	}
	a := ar.GetActor()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.count == 0 || r.closed {
		return nil
	}
	p := placement.Partition(a.GetName(), storage.EncodeKey(a.GetKey()), r.count)
	node := r.owners[p]
	addr := r.addrs[node]
	if addr == "" || time.Now().Before(r.bad[addr]) {
		return nil
	}
	c, ok := r.conns[addr]
	if !ok {
		var err error
		if c, err = grpc.NewClient(addr, r.dial...); err != nil {
			return nil
		}
		r.conns[addr] = c
	}
	if c.GetState() != connectivity.Ready {
		// Not connected (yet, or at all: an address this client cannot
		// reach, a certificate that does not name it): the seed forwards
		// meanwhile, and the connection is tried in the background. A
		// call on it would wait for the dial, or fail.
		c.Connect()
		return nil
	}
	_, stream := args.(*rivetv1.SubscribeRequest)
	return r.beginUse(ctx, &use{conn: c, addr: addr, node: node, stream: stream})
}

// beginUse counts u, a call or stream about to go on u.conn, in use until
// release, with a context of its own derived from ctx that a refresh can
// cut off, and has the members watched meanwhile. Called with mu held.
func (r *router) beginUse(ctx context.Context, u *use) *use {
	r.inUse[u.conn]++
	u.ctx, u.cancel = context.WithCancelCause(ctx)
	r.uses[u] = struct{}{}
	if !r.watching {
		r.watching = true
		r.wg.Add(1)
		go r.watch()
	}
	return u
}

// watch asks the seed for the cluster's members every interval while calls
// or streams are in flight on the owners' connections, whether or not new
// calls come (which refresh the whole table, maybeRefresh), so that it
// finds, and cuts off, the uses of a node that froze (cutOff). Members
// alone: the partition table, some 20 KB, is the calls' to refresh, and a
// client with only subscriptions open would fetch it every interval for
// as long as they last. It ends when no use is left, or with close.
func (r *router) watch() {
	defer r.wg.Done()
	t := time.NewTimer(r.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-r.ctx.Done(): // close
			return
		}
		r.mu.Lock()
		if r.closed || len(r.uses) == 0 {
			r.watching = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		a, err := fromAnyNode(r, r.askForMembers)
		r.mu.Lock()
		r.asked = time.Now()
		if err == nil && r.latestMembers(a.gen) {
			r.cutOff(a.ms.GetMembers())
		}
		r.mu.Unlock()
		t.Reset(r.every)
	}
}

// fromAnyNode returns the answer to ask of the seed's admin client, or, if
// the seed does not answer it within askTimeout (a seed that froze keeps
// its connection open: its calls would wait for the keepalive, about
// 15 s), the first answer of the other nodes the router has a ready
// connection to, asked side by side within askTimeout (one of them may be
// the frozen seed itself, as an owner). Any node's table and member list
// will do, and the frozen seed may be the very owner whose calls the
// answer would cut off. The node that answered instead of the seed takes
// what would have gone to it (fallback). It returns the seed's error if
// no node answers, and waits for every request it sent to end.
//
// An answer the seed gave only as askTimeout ran out is not one within
// it: the seed counts as silent, and the other nodes are asked (its
// answer is returned if none of them answers). gRPC may deliver such an
// answer, as a success, before the client's own timer cancels the
// request: the node's copy of the deadline ends its handler, and a
// handler that replies once its context ends (a node that thaws just
// then, or one too loaded to answer in time) sends a reply that can
// arrive first. Taken for an answer, it would send the seed what goes
// to it, a call whose owner the answer just cut off among them, to wait
// there for the keepalive.
func fromAnyNode[T any](r *router, ask func(ctx context.Context, admin rivetv1.AdminServiceClient) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(r.ctx, askTimeout)
	deadline, _ := ctx.Deadline()
	v, err := ask(ctx, r.admin)
	late := err == nil && !time.Now().Before(deadline)
	cancel()
	r.mu.Lock()
	r.seedSilent = (err != nil || late) && r.ctx.Err() == nil
	var others []*grpc.ClientConn
	if r.seedSilent {
		for _, c := range r.conns {
			if c.GetState() == connectivity.Ready {
				others = append(others, c)
			}
		}
	}
	r.mu.Unlock()
	if len(others) == 0 {
		return v, err
	}
	type answer struct {
		v   T
		c   *grpc.ClientConn
		err error
	}
	ctx, cancel = context.WithTimeout(r.ctx, askTimeout)
	defer cancel()
	answers := make(chan answer, len(others))
	for _, c := range others {
		// A connection closed meanwhile (its node left the table) just
		// fails.
		go func() {
			v, err := ask(ctx, rivetv1.NewAdminServiceClient(c))
			answers <- answer{v, c, err}
		}()
	}
	var first *answer
	for range others {
		a := <-answers
		if a.err == nil && first == nil {
			first = &a
			cancel() // the others' requests end
		}
	}
	if first == nil {
		if late {
			// The seed's late answer stands, and the node that stood in
			// for it before did not answer now: the seed's requests go to
			// the seed, not to it.
			r.mu.Lock()
			r.answered = nil
			r.mu.Unlock()
		}
		return v, err
	}
	r.mu.Lock()
	r.answered = first.c
	r.mu.Unlock()
	return first.v, nil
}

// fallback picks where a request goes that no owner takes (the table
// cannot place it, or its owner was cut off or could not be reached): nil
// for the seed, but while the seed does not answer the router's own
// requests (fromAnyNode), a use of the connection of the node that
// answered them instead, which forwards the request as the seed would. A
// seed that froze keeps its connection open: every request sent it would
// wait for the keepalive (about 15 s), reads retried after a cut-off too;
// one restarting refuses them until it is back. That node's address must
// still be in the table, not cut off nor unreachable (the seed's own
// address may be there too, as an owner's: it is not the one that
// answered). Like an owner's, the use is cut off if that node loses its
// lease.
func (r *router) fallback(ctx context.Context, stream bool) *use {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.answered
	if !r.seedSilent || r.closed || c == nil || c.GetState() != connectivity.Ready {
		return nil
	}
	for node, addr := range r.addrs {
		if r.conns[addr] == c && !time.Now().Before(r.bad[addr]) {
			return r.beginUse(ctx, &use{conn: c, addr: addr, node: node, stream: stream, via: true})
		}
	}
	return nil
}

// invokeFallback sends a call that no owner takes (fallback).
func (r *router) invokeFallback(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	u := r.fallback(ctx, false)
	if u == nil {
		return r.seed.Invoke(ctx, method, args, reply, opts...)
	}
	err, _, unsent := r.invokeOn(ctx, u, method, args, reply, opts)
	if unsent {
		return r.seed.Invoke(ctx, method, args, reply, opts...)
	}
	return err
}

// useStream is a stream on a use (fallback), whose errors say which node
// it went through, or that the router cut it off.
type useStream struct {
	grpc.ClientStream
	u   *use
	ctx context.Context // the caller's
}

func (s *useStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	return s.u.failure(s.ctx, err)
}

// membersAnswer is a node's member list, with the number of the request
// (askForMembers).
type membersAnswer struct {
	ms  *rivetv1.MembersResponse
	gen uint64
}

// tableAnswer is a node's partition table and member list.
type tableAnswer struct {
	tab *rivetv1.PartitionsResponse
	ms  membersAnswer
}

// askForMembers asks admin for the members, numbering the request so that
// its answer is applied only if no answer to a later one was
// (latestMembers: the watch's and a refresh's requests run side by side).
func (r *router) askForMembers(ctx context.Context, admin rivetv1.AdminServiceClient) (membersAnswer, error) {
	r.mu.Lock()
	r.membersAsked++
	gen := r.membersAsked
	r.mu.Unlock()
	ms, err := admin.Members(ctx, &rivetv1.MembersRequest{})
	return membersAnswer{ms, gen}, err
}

// latestMembers reports whether the answer to request gen (askForMembers) is
// later than any applied, and if so records it applied. Called with mu
// held.
func (r *router) latestMembers(gen uint64) bool {
	if gen <= r.membersApplied {
		return false
	}
	r.membersApplied = gen
	return true
}

// maybeRefresh starts a refresh of the table if it is older than every
// and none runs.
func (r *router) maybeRefresh() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.refreshed != nil || time.Since(r.fetched) < r.every {
		return
	}
	r.startRefresh()
}

// startRefresh starts a refresh of the table. Called with mu held, none
// running.
func (r *router) startRefresh() {
	done := make(chan struct{})
	r.refreshed = done
	r.wg.Add(1)
	go r.refresh(done)
}

// refreshNow waits for a refresh of the table that starts after it was
// called or runs already (it may have asked before the change: a refresh
// is cheap, a stream relayed for its whole life is not), or for ctx.
func (r *router) refreshNow(ctx context.Context) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	if r.refreshed == nil {
		r.startRefresh()
	}
	done := r.refreshed
	r.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (r *router) refresh(done chan struct{}) {
	defer r.wg.Done()
	a, err := fromAnyNode(r, func(ctx context.Context, admin rivetv1.AdminServiceClient) (tableAnswer, error) {
		t, err := admin.Partitions(ctx, &rivetv1.PartitionsRequest{})
		if err != nil {
			return tableAnswer{}, err
		}
		m, err := r.askForMembers(ctx, admin)
		return tableAnswer{t, m}, err
	})
	tab, ms, gen := a.tab, a.ms.ms, a.ms.gen
	var stale []*grpc.ClientConn
	defer func() {
		for _, c := range stale {
			c.Close()
		}
	}()
	r.mu.Lock()
	defer r.mu.Unlock()
	defer close(done)
	r.refreshed = nil
	r.fetched = time.Now()
	if err != nil {
		return // keep the old table; the seed forwards meanwhile
	}
	r.count = tab.GetPartitionCount()
	r.owners = make([]string, r.count)
	for _, o := range tab.GetPartitions() {
		if o.GetPartition() < r.count {
			r.owners[o.GetPartition()] = o.GetOwner()
		}
	}
	if !r.latestMembers(gen) {
		// The watch applied an answer asked for after this one's: newer
		// (it may have cut off a node this one still lists).
		return
	}
	r.addrs = map[string]string{}
	live := map[string]bool{}
	for _, m := range ms.GetMembers() {
		live[m.GetGrpcAddr()] = true
		if m.GetState() == "alive" || m.GetState() == "unknown" {
			r.addrs[m.GetNodeId()] = m.GetGrpcAddr()
		}
	}
	r.cutOff(ms.GetMembers())
	stale = r.dropConns(live) // closed once mu is released
	for addr, until := range r.bad {
		if time.Now().After(until) {
			delete(r.bad, addr)
		}
	}
}

func (r *router) close() {
	r.mu.Lock()
	r.closed = true
	conns := make([]*grpc.ClientConn, 0, len(r.conns)+len(r.retired))
	for _, c := range r.conns {
		conns = append(conns, c)
	}
	for c := range r.retired {
		conns = append(conns, c)
	}
	r.conns = map[string]*grpc.ClientConn{}
	r.retired = map[*grpc.ClientConn]bool{}
	r.mu.Unlock()
	r.stop()
	r.wg.Wait()
	for _, c := range conns {
		c.Close()
	}
}
