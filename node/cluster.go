package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/cluster"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/defaults"
	"github.com/rivet-go/rivet/internal/ration"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/storage"
)

// view is what a node knows of the cluster: gossip membership (who is
// alive), and mirrors of the node registrations and the partition table in
// etcd (who exists, who owns what). Routing reads the partition table, the
// authority; the ring that decides who should own what is computed over
// the nodes that are both alive in gossip and registered in etcd.
type view struct {
	self   string
	parts  uint32
	log    *zap.Logger
	gossip *cluster.Cluster
	owners *storage.Mirror
	nodes  *storage.Mirror
	host   *runtime.Host
	dial   []grpc.DialOption
	// maxForward bounds the requests forwarded to peers (marshalled).
	maxForward int
	// traced: the node traces, and its forwarded requests carry their
	// callers' trace context (set before the view is used).
	traced bool

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn   // by gRPC address
	peers map[string][]*server.PeerConn // forwarding streams, by gRPC address
	next  atomic.Uint64                 // round robin over a peer's streams
	// isStopping is set by stopping: the PeerConns made after it are told.
	isStopping bool
	// forwards counts requests sent to other nodes (forwarded client
	// requests and actors' calls to actors there), for metrics.
	forwards atomic.Uint64
	// fwdNotSent and fwdBroken count the forwarded requests whose hop to
	// their owner failed (ForwardFailed): never sent, or broken once they
	// may have been; fwdWarn rations the warning of them.
	fwdNotSent, fwdBroken atomic.Uint64
	fwdWarn               ration.Every
	// faults are the registered peers whose connection fails, by node ID
	// (watchPeers).
	faults map[string]*peerFault
	// recs caches every registered node's decoded record as of the nodes
	// mirror's revision recRev (read only: recordsCached).
	recs   map[string]runtime.NodeRecord
	recRev int64
	// leaseTTL is this node's LeaseTTL, which peerLeaseTTL falls back on
	// for a peer whose record does not give its own.
	leaseTTL time.Duration
}

// peerStreams is how many forwarding streams a node keeps to each peer.
// One, since a stream message carries every call queued for it: spreading
// the calls over more streams made the batches, and so the saving, smaller
// (before batching, 4 were needed, as one stream's serial sends became the
// bottleneck; docs/benchmarks.md). The cost is that a large payload holds
// up the calls queued behind it for its transmission time.
const peerStreams = 1

// newView returns a view whose connections to peers use creds (transport
// and per-call credentials) and carry requests within limits.
func newView(self string, parts uint32, st storage.Store, log *zap.Logger, creds []grpc.DialOption, limits server.Limits) *view {
	return &view{
		self: self, parts: parts, log: log,
		owners:     storage.NewMirror(st, storage.OwnersPrefix, log),
		nodes:      storage.NewMirror(st, storage.NodesPrefix, log),
		dial:       append(server.PeerDialOptions(limits), creds...),
		maxForward: limits.MaxForwardedBytes(),
		conns:      map[string]*grpc.ClientConn{},
		peers:      map[string][]*server.PeerConn{},
	}
}

// records returns the registered nodes by ID.
func (v *view) records() map[string]runtime.NodeRecord {
	out := map[string]runtime.NodeRecord{}
	for _, kv := range v.nodes.Snapshot() {
		var rec runtime.NodeRecord
		if json.Unmarshal(kv.Value, &rec) == nil && rec.NodeID != "" {
			out[rec.NodeID] = rec
		}
	}
	return out
}

// typeHolders names the other registered nodes that register the actor
// type name, and those whose registration does not say which types they
// register (older builds), each sorted (runtime.Host.SetTypeHolders).
func (v *view) typeHolders(name string) (holders, unknown []string) {
	for id, rec := range v.recordsCached() {
		if id == v.self {
			continue
		}
		switch reg, known := rec.Registers(name); {
		case !known:
			unknown = append(unknown, id)
		case reg:
			holders = append(holders, id)
		}
	}
	slices.Sort(holders)
	slices.Sort(unknown)
	return holders, unknown
}

// recordsCached is records, decoded once per revision of the mirror of
// nodes/: routing reads the owner's record on every forwarded call, and
// typeHolders runs on every call of a type this node does not register,
// which a misdeployed cluster may get at a high rate. The map is shared:
// read it only.
func (v *view) recordsCached() map[string]runtime.NodeRecord {
	rev := v.nodes.Revision() // before the snapshot: never a newer revision for older records
	v.mu.Lock()
	if v.recs != nil && v.recRev == rev {
		recs := v.recs
		v.mu.Unlock()
		return recs
	}
	v.mu.Unlock()
	recs := v.records()
	v.mu.Lock()
	v.recs, v.recRev = recs, rev
	v.mu.Unlock()
	return recs
}

// record returns one node's registration. Routing asks for the owner's on
// every forwarded call: recordsCached decodes them once per revision.
func (v *view) record(id string) (runtime.NodeRecord, bool) {
	rec, ok := v.recordsCached()[id]
	return rec, ok
}

// eligible returns the nodes the ring is computed over: registered, not
// draining, and alive in gossip (when there is gossip).
func (v *view) eligible() []string {
	return slices.Sorted(maps.Keys(v.eligibleRecords()))
}

// draining returns the nodes registered, draining, and alive in gossip
// (when there is gossip): the ring's fallback when no node is eligible.
func (v *view) draining() []string {
	return slices.Sorted(maps.Keys(v.aliveRecords(true)))
}

// eligibleRecords returns the nodes eligible returns, by ID, each with its
// record as mirrored: the key and mod revision that a write can require
// unchanged, to act on the answer atomically (gossip aside).
func (v *view) eligibleRecords() map[string]storage.KV {
	return v.aliveRecords(false)
}

// aliveRecords returns the registered nodes alive in gossip (when there is
// gossip) whose draining mark is draining, by ID, with their records.
func (v *view) aliveRecords(draining bool) map[string]storage.KV {
	var alive map[string]bool
	if v.gossip != nil {
		alive = map[string]bool{}
		for _, m := range v.gossip.Alive() {
			alive[m.ID] = true
		}
	}
	out := map[string]storage.KV{}
	for _, kv := range v.nodes.Snapshot() {
		var rec runtime.NodeRecord
		if json.Unmarshal(kv.Value, &rec) != nil || rec.NodeID == "" || rec.Draining != draining {
			continue
		}
		if alive != nil && !alive[rec.NodeID] {
			continue
		}
		out[rec.NodeID] = kv
	}
	return out
}

// awaitRecordChange waits until the mirror of nodes/ no longer holds one
// of recs as read (its key has another mod revision, or is gone): a write
// that required them unchanged failed, and this waits for the change that
// failed it to reach the view. It fails when ctx ends first.
func (v *view) awaitRecordChange(ctx context.Context, recs []storage.KV) error {
	for {
		changed := v.nodes.Changed()
		for _, kv := range recs {
			if cur, ok := v.nodes.Get(kv.Key); !ok || cur.ModRevision != kv.ModRevision {
				return nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ownerTable returns the owner of each partition, indexed by partition.
func (v *view) ownerTable() []string {
	out := make([]string, v.parts)
	for _, kv := range v.owners.Snapshot() {
		if p, ok := storage.ParseOwnerKey(kv.Key); ok && p < v.parts {
			out[p] = string(kv.Value)
		}
	}
	return out
}

func (v *view) ownerOf(p uint32) (string, int64) {
	kv, ok := v.owners.Get(storage.OwnerKey(p))
	if !ok {
		return "", 0
	}
	return string(kv.Value), kv.CreateRevision
}

// routeWait bounds how long a request waits for its partition to get an
// owner (a failover or handoff in progress) before it is refused with
// UNAVAILABLE for the client to retry.
const routeWait = 3 * time.Second

// Route implements server.Router: nil for actors served here, else a
// connection to their owner. While the partition has no owner, or this
// node is its owner on record but does not serve it (a handoff between
// release and the table's update), it waits for the table to change.
func (v *view) Route(ctx context.Context, ref runtime.Ref) (grpc.ClientConnInterface, error) {
	p, err := v.host.PartitionOf(ref)
	if err != nil {
		return nil, nil // served here: the host refuses it properly
	}
	conn, _, err := v.connFor(ctx, p)
	if conn == nil {
		// Not a typed nil in the interface: the caller tests for nil.
		return nil, err
	}
	v.forwards.Add(1)
	return conn, err
}

// connFor returns the forwarding stream to the owner of p (nil if it is
// this node) and the owner's ID.
func (v *view) connFor(ctx context.Context, p uint32) (*server.PeerConn, string, error) {
	deadline := time.Now().Add(routeWait)
	// A caller whose deadline comes first hears before it that the owner
	// is unreachable (UNAVAILABLE, which clients retry): the wait ended
	// with its context, and the call, never sent, with its deadline.
	if by, ok := server.AnswerBy(ctx); ok && by.Before(deadline) {
		deadline = by
	}
	for {
		changed := v.owners.Changed()
		owner, _ := v.ownerOf(p)
		switch {
		case owner == v.self && v.host.Owns(p):
			return nil, owner, nil
		case owner != "" && owner != v.self:
			rec, ok := v.record(owner)
			if ok && rec.GRPCAddr != "" {
				c, err := v.peer(rec.GRPCAddr)
				// An owner that cannot be dialed is most likely dead,
				// its partitions about to move: hold the request for the
				// table to change rather than fail it. Not once its
				// registration has outlived its connection's failure by
				// more than a dead owner's lease lasts (faultOutlivesLease):
				// its lease is being renewed, so it is alive, and this is
				// a network fault, which moves no partition. The request
				// then fails at once, for its client to retry (through
				// another node, if it has one), rather than hold its
				// caller for routeWait on each try, the last try's answer
				// racing its deadline. Being marked unreachable (3 s) is
				// not enough: a crashed owner is, for as long as its lease
				// outlives it and gossip takes to call it dead (~6 s with
				// ProfileLAN), and its requests are held through that
				// failover.
				if err != nil || c.Conn().GetState() != connectivity.TransientFailure || v.faultOutlivesLease(owner, time.Now()) {
					return c, owner, err
				}
			}
		}
		if time.Now().After(deadline) {
			if owner != "" && owner != v.self {
				// Still undialable: forward anyway, and the caller gets
				// the dial error as a retryable UNAVAILABLE.
				if rec, ok := v.record(owner); ok {
					c, err := v.peer(rec.GRPCAddr)
					return c, owner, err
				}
			}
			// Let the local host answer: it refuses with UNAVAILABLE,
			// which clients retry.
			return nil, owner, nil
		}
		t := time.NewTimer(max(min(100*time.Millisecond, time.Until(deadline)), time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, owner, nil
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// conn returns a pooled connection to a peer.
func (v *view) conn(addr string) (*grpc.ClientConn, error) {
	v.mu.Lock()
	if c, ok := v.conns[addr]; ok {
		v.mu.Unlock()
		return c, nil
	}
	c, err := grpc.NewClient(addr, v.dial...)
	if err != nil {
		v.mu.Unlock()
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	v.conns[addr] = c
	v.mu.Unlock()
	// The caller read addr's record before pooling c, and prune, which
	// runs after each change of the registrations, may have run in
	// between: a connection pooled after the prune that followed its
	// node's leaving stayed (reconnecting to nothing) until some other
	// node joined or left. Looked at again now that c is in the pool: a
	// prune that runs later finds c.
	if !v.registered(addr) {
		v.prune()
		return nil, fmt.Errorf("dial %s: no node is registered there any more", addr)
	}
	return c, nil
}

// registered reports whether a registered node has gRPC address addr.
func (v *view) registered(addr string) bool {
	for _, rec := range v.records() {
		if rec.GRPCAddr == addr {
			return true
		}
	}
	return false
}

// peer returns one of the forwarding streams to a peer.
func (v *view) peer(addr string) (*server.PeerConn, error) {
	n := v.next.Add(1)
	v.mu.Lock()
	if ps, ok := v.peers[addr]; ok {
		v.mu.Unlock()
		return ps[n%uint64(len(ps))], nil
	}
	v.mu.Unlock()
	c, err := v.conn(addr)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	ps, ok := v.peers[addr]
	if !ok && v.conns[addr] != c {
		// prune closed c meanwhile: no streams on a closed connection.
		return nil, fmt.Errorf("connection to %s was closed", addr)
	}
	if !ok {
		for range peerStreams {
			pc := server.NewPeerConn(c).LimitRequests(v.maxForward)
			if v.traced {
				pc.CarryTraceContext()
			}
			if v.isStopping {
				pc.Stopping() // see stopping
			}
			ps = append(ps, pc)
		}
		v.peers[addr] = ps
	}
	return ps[n%uint64(len(ps))], nil
}

// stopping tells every peer this node forwards to that it stops
// (server.PeerConn.Stopping), and each it forwards to from now on: a call
// still being routed as the stop began may go to a peer this node had no
// connection to yet.
func (v *view) stopping() {
	if v == nil {
		return // stopped before it had one
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.isStopping = true
	for _, ps := range v.peers {
		for _, p := range ps {
			p.Stopping()
		}
	}
}

// prune closes connections to addresses no registered node has.
func (v *view) prune() {
	live := map[string]bool{}
	for _, rec := range v.records() {
		live[rec.GRPCAddr] = true
	}
	v.mu.Lock()
	var gone []*server.PeerConn
	for addr, ps := range v.peers {
		if !live[addr] {
			gone = append(gone, ps...)
			delete(v.peers, addr)
		}
	}
	var conns []*grpc.ClientConn
	for addr, c := range v.conns {
		if !live[addr] {
			conns = append(conns, c)
			delete(v.conns, addr)
		}
	}
	v.mu.Unlock()
	for _, p := range gone {
		p.Close()
	}
	for _, c := range conns {
		c.Close()
	}
}

func (v *view) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	for addr, ps := range v.peers {
		for _, p := range ps {
			p.Close()
		}
		delete(v.peers, addr)
	}
	for addr, c := range v.conns {
		c.Close()
		delete(v.conns, addr)
	}
}

// remote implements runtime.Remote: actors calling actors that another
// node serves.
type remote struct{ v *view }

func (r remote) Call(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
	var (
		resp  *rivetv1.CallResponse
		local json.RawMessage
	)
	err := r.do(ctx, req.Ref, callResend(req), func() (err error) {
		// As a call between actors of this node: it ends with the
		// caller's ctx, as the call to the other node would have, even
		// if the called action does not heed it.
		local, err = r.v.host.CallLocal(ctx, req)
		return err
	}, func(conn *server.PeerConn) (err error) {
		resp, err = rivetv1.NewActorServiceClient(conn).Call(server.WithChain(ctx, req.Chain.ID), &rivetv1.CallRequest{
			Actor: &rivetv1.ActorRef{Name: req.Ref.Name, Key: req.Ref.Key}, Action: req.Action, Args: req.Args,
			CreateIfMissing: req.CreateIfMissing, Input: req.Input, ReadOnly: req.ReadOnly, IdempotencyKey: req.IdempotencyKey,
		})
		return err
	})
	if err != nil || resp == nil {
		return local, err
	}
	return resp.GetResult(), nil
}

func (r remote) Send(ctx context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
	var (
		resp  *rivetv1.SendResponse
		local runtime.SendResult
	)
	err := r.do(ctx, req.Ref, sendResend(req), func() (err error) {
		lreq := req
		lreq.Timeout = waitLeft(ctx, req.Timeout)
		local, err = r.v.host.Send(ctx, lreq)
		return err
	}, func(conn *server.PeerConn) (err error) {
		resp, err = rivetv1.NewActorServiceClient(conn).Send(server.WithChain(ctx, req.Chain.ID), &rivetv1.SendRequest{
			Actor: &rivetv1.ActorRef{Name: req.Ref.Name, Key: req.Ref.Key}, Queue: req.Queue, Body: req.Body,
			CreateIfMissing: req.CreateIfMissing, Input: req.Input, Wait: req.Wait, TimeoutMs: waitLeft(ctx, req.Timeout).Milliseconds(),
			IdempotencyKey: req.IdempotencyKey, RequireRunning: req.RequireRunning,
		})
		return err
	})
	if err != nil || resp == nil {
		return local, err
	}
	return runtime.SendResult{MessageID: resp.GetMessageId(), Status: resp.GetStatus(), Response: resp.GetResponse(), WorkflowStatus: resp.GetWorkflowStatus(), MessageState: resp.GetMessageState(), Duplicate: resp.GetDuplicate()}, nil
}

// Create is an actor's create of an actor another node serves, through
// the peer connection with the ActorService Create RPC, carrying the
// creator's chain.
func (r remote) Create(ctx context.Context, ref runtime.Ref, input json.RawMessage, opts runtime.CreateOptions) (runtime.ActorInfo, bool, error) {
	return r.create(ctx, ref, input, opts, func(conn *server.PeerConn) (*rivetv1.CreateResponse, error) {
		return rivetv1.NewActorServiceClient(conn).Create(server.WithChain(ctx, opts.Chain.ID), &rivetv1.CreateRequest{
			Actor: &rivetv1.ActorRef{Name: ref.Name, Key: ref.Key}, Input: input, IdempotencyKey: opts.IdempotencyKey,
		})
	})
}

// create is Create with send, one hop of it (a test's, to break it). A
// keyed create sent again after a hop that broke off answers
// ALREADY_EXISTS, from an owner older than the key, when the broken one
// applied: that answer is of unknown outcome, as the Go client's is
// (rpcerr.CreateRanBefore).
func (r remote) create(ctx context.Context, ref runtime.Ref, input json.RawMessage, opts runtime.CreateOptions, send func(*server.PeerConn) (*rivetv1.CreateResponse, error)) (runtime.ActorInfo, bool, error) {
	var (
		resp      *rivetv1.CreateResponse
		local     runtime.ActorInfo
		dup       bool
		ranBefore bool
	)
	err := r.do(ctx, ref, createResend(opts), func() (err error) {
		local, dup, err = r.v.host.CreateWith(ctx, ref, input, opts)
		return err
	}, func(conn *server.PeerConn) (err error) {
		resp, err = send(conn)
		if err != nil && hopBrokeOff(status.Convert(err)) {
			ranBefore = true
		}
		return err
	})
	if err != nil || resp == nil {
		return local, dup, rpcerr.CreateRanBefore(ranBefore, err)
	}
	return actorInfoOf(resp.GetActor()), resp.GetDuplicate(), nil
}

// actorInfoOf is the owner's answer as the runtime has it.
func actorInfoOf(a *rivetv1.ActorInfo) runtime.ActorInfo {
	info := runtime.ActorInfo{
		Ref: runtime.Ref{Name: a.GetActor().GetName(), Key: a.GetActor().GetKey()}, Partition: a.GetPartition(), Owner: a.GetOwner(),
		WorkflowError: a.GetWorkflowError(),
	}
	// Unset is unknown: zero, not the epoch AsTime makes of it.
	if t := a.GetCreatedAt(); t != nil {
		info.CreatedAt = t.AsTime()
	}
	if t := a.GetWorkflowFailedAt(); t != nil {
		info.WorkflowFailedAt = t.AsTime()
	}
	return info
}

// waitLeft is a waiting send's timeout cut to what is left of ctx, as
// SendWith cut it when the send began: the tries of a send not sent take
// some of that time, and a wait that outlived the caller's deadline would
// fail its step after the message was queued (and a step's retry would
// queue it again).
func waitLeft(ctx context.Context, timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return timeout // the owner's default, cut there
	}
	return defaults.SendWaitWithin(ctx, timeout)
}

// callResend says whether a call may be sent again after its hop broke
// mid-call: a read-only call changes nothing, and a keyed one sent again
// runs once.
func callResend(req runtime.CallRequest) resend {
	switch {
	case req.ReadOnly:
		return resendReadOnly
	case req.IdempotencyKey != "":
		return resendKeyed
	}
	return resendNever
}

// sendResend says whether a send may be sent again after its hop broke
// mid-call: a keyed one is queued once however often it is sent (a
// waiting one gets the first message's completion), as the Go client
// retries it on any UNAVAILABLE; without a key it may have been queued.
func sendResend(req runtime.SendRequest) resend {
	if req.IdempotencyKey != "" {
		return resendKeyed
	}
	return resendNever
}

// createResend says whether a create may be sent again after its hop broke
// mid-call: a keyed one, whose first attempt, if it applied, stored the
// key with the actor, which the owner then answers as a duplicate; an
// unkeyed one not, as its retry could not tell its own actor from another
// create's and would say ALREADY_EXISTS of the create that made it.
func createResend(opts runtime.CreateOptions) resend {
	if opts.IdempotencyKey != "" {
		return resendKeyed
	}
	return resendNever
}

// remoteRetryWait bounds how long a call to an actor of another node is
// tried again while it is not sent (its owner's node just died, and its
// partition has not moved yet: about the lease TTL and a claim) or the
// owner's node refuses it without running it (UNAVAILABLE with a node's
// ActorError: a partition not or no longer its, moving, a node stopping),
// as the Go client retries: it did not run, so trying it again is safe for
// any call; and a read-only call whose hop broke mid-call (see do).
// Without it, a call failed at once whenever the dead owner's connection
// was idle or connecting rather than failed (connFor waits only for a
// failed one), and a step's few retries (about 0.7 s by default) ran out
// in one failover, leaving its workflow failed for an operator to retry.
// A variable for tests.
var remoteRetryWait = 10 * time.Second

// resend says whether do sends a request again after a hop that broke
// mid-call, which may have run it.
type resend int

const (
	resendNever    resend = iota
	resendReadOnly        // a read-only call: the owner refuses any other
	resendKeyed           // a call or send with an idempotency key: it runs, or is queued, once
)

// do runs call on a connection to ref's owner, again while the request is
// not sent (no owner, no connection, or gRPC's "not sent") or refused by a
// node, with a backoff from 50 ms to 500 ms, until remoteRetryWait (the
// wait for an owner included) or ctx ends; or local, if the
// partition moved to this node meanwhile. Its error is the last attempt's:
// rivet.ErrUnavailable for one that was not sent (the caller's step
// retries), else what the owner said (peerError). A safe request (a
// read-only call: the owner refuses any other) is sent again also after a
// hop that broke mid-call, and fails as unavailable, not of unknown
// outcome, when that was its last attempt (a keyed call, which may have
// run, as of unknown outcome); but not after the owner's
// answer marked outcome unknown (the query ran and passed on what a call
// of its own got, whose effect on another actor stands).
func (r remote) do(ctx context.Context, ref runtime.Ref, again resend, local func() error, call func(*server.PeerConn) error) error {
	safe := again != resendNever
	p, err := r.v.host.PartitionOf(ref)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(remoteRetryWait)
	wctx, cancel := context.WithDeadline(ctx, deadline) // connFor's wait for an owner
	defer cancel()
	backoff := 50 * time.Millisecond
	brokeBefore := false // a hop broke off once it may have been sent, and was sent again
	for {
		// The last attempt's status if its hop failed (server.HopFailed):
		// counted only if do fails with it, as a client's forwarded
		// request is, not for each attempt of a request sent again.
		var hop *status.Status
		conn, owner, err := r.v.connFor(wctx, p)
		switch {
		case err != nil:
			err = rivet.Errorf(rivet.ErrUnavailable, "reach the owner of partition %d: %v", p, err)
		case conn == nil && owner == r.v.self && r.v.host.Owns(p):
			// Moved here meanwhile (this node took over the dead
			// owner's partition).
			return local()
		case conn == nil:
			err = rivet.Errorf(rivet.ErrUnavailable, "partition %d has no reachable owner (table says %q)", p, owner)
		default:
			r.v.forwards.Add(1)
			err = call(conn)
			if err == nil {
				return nil
			}
			st := status.Convert(err)
			if server.HopFailed(st) {
				hop = st
			}
			if st.Code() == codes.DeadlineExceeded && !rpcerr.HasActorError(st) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The caller's own deadline, before the owner answered:
				// gRPC says only "context deadline exceeded", which reads
				// as the calling action's own slowness.
				k, _ := json.Marshal(ref.Key)
				return rivet.Errorf(rivet.ErrTimeout, "no answer from %s %s on node %s, its owner, before the caller's deadline: its action ran that long (a wait for the actor's turn there ends shortly before the deadline, as actor.busy, unless that answer came late or the node's build is older)", ref.Name, k, owner)
			}
			brokeOff := hopBrokeOff(st)
			if st.Code() != codes.Unavailable || brokeOff && !safe || rpcerr.MarkedOutcomeUnknown(st) || runtime.IsOverloaded(peerError(err)) {
				// Refused as overloaded (runtime.Config.MaxWaitingCalls):
				// not an answer this build gives an actor's call (it
				// refuses clients' alone), but one not to retry here on
				// top of whoever retries it. A busy answer (actor.busy)
				// says this hop did not run: one that broke before may
				// have.
				return r.v.failedAfter(ref, hop, rpcerr.BusyRanBefore(brokeBefore, peerError(err)))
			}
			brokeBefore = brokeBefore || brokeOff
			switch {
			case brokeOff && again == resendReadOnly:
				err = rivet.Errorf(rivet.ErrUnavailable, "a read-only call to the owner's node broke off (its actor's state is unchanged): %s", st.Message())
			default:
				// A keyed call that broke off may have run: if this was
				// its last attempt, its outcome is unknown (the same key
				// is safe to send again).
				err = peerError(err)
			}
		}
		if ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			return r.v.failedAfter(ref, hop, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return r.v.failedAfter(ref, hop, err)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// ForwardFailed implements server.ForwardObserver, for the client requests
// this node forwards, and is told of the calls and sends of actors here
// to actors of other nodes that failed the same way: it counts them
// (rivet_forward_failures_total), and warns at most once a minute. Such
// a failure is an error its caller sees that no node counted otherwise
// (the owner counts the requests it ran), and that nothing logged above
// debug: a crashed owner's calls in flight, a network fault between the
// nodes.
func (v *view) ForwardFailed(ref runtime.Ref, st *status.Status) {
	result, n := "broken", &v.fwdBroken
	if rpcerr.NotSent(st) {
		result, n = "not_sent", &v.fwdNotSent
	}
	n.Add(1)
	if v.fwdWarn.Allow(time.Minute) {
		v.log.Warn("a request forwarded to its actor's owner failed on the way there or back: its caller got UNAVAILABLE (rivet_forward_failures_total counts them all; this line comes at most once a minute)",
			zap.String("actor", ref.Name), zap.Strings("key", ref.Key), zap.String("result", result), zap.String("error", st.Message()))
	}
}

// failedAfter returns err, the error of a request to ref sent to another
// node (remote.do), after telling ForwardFailed of hop, its last
// attempt's status, if that attempt's hop failed (non-nil).
func (v *view) failedAfter(ref runtime.Ref, hop *status.Status, err error) error {
	if hop != nil {
		v.ForwardFailed(ref, hop)
	}
	return err
}

// peerError turns a peer's status back into the *rivet.Error it carried.
// A bare UNAVAILABLE from a stream that broke mid-call is not: the call
// may have run, and the calling actor's error would otherwise reach its
// own client as a node's UNAVAILABLE, which the client retries. One the
// owner answered with the outcome-unknown mark (an action that ran and
// failed on an actor it called) is the owner's answer, passed on as a
// call on this node would get it: its Group stays empty, so no one
// retries it either.
func peerError(err error) error {
	st := status.Convert(err)
	if hopBrokeOff(st) {
		return rivet.Errorf(rivet.ErrTimeout, "call to the owner's node broke off; its outcome is unknown: %s", st.Message())
	}
	return rpcerr.FromStatus(st)
}

// hopBrokeOff says whether st is a hop to another node that broke once its
// request may have been sent (a bare UNAVAILABLE), rather than the owner's
// answer (an ActorError, the outcome-unknown mark) or a request not sent.
func hopBrokeOff(st *status.Status) bool {
	return st.Code() == codes.Unavailable && !rpcerr.NotSent(st) && !rpcerr.HasActorError(st) && !rpcerr.MarkedOutcomeUnknown(st)
}

func sortMembers(ms []runtime.Member) {
	slices.SortFunc(ms, func(a, b runtime.Member) int {
		switch {
		case a.NodeID < b.NodeID:
			return -1
		case a.NodeID > b.NodeID:
			return 1
		}
		return 0
	})
}
