package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/cluster"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/storage"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// settle starts the balancer and waits, within SettleTimeout, until the
// node sees the cluster and has claimed the partitions free for it. A
// failure meanwhile (Done) is the start's: waiting on would end in a node
// that serves nothing, its failure told to no one.
func (n *Node) settle(ctx, bgCtx context.Context) error {
	t0 := time.Now()
	for _, m := range []interface{ Ready() <-chan struct{} }{n.view.owners, n.view.nodes} {
		select {
		case <-m.Ready():
		case <-ctx.Done():
			return fmt.Errorf("node: reading the cluster's tables: %w", ctx.Err())
		case <-n.done:
			return n.Err()
		}
	}
	deadline := time.NewTimer(n.cfg.SettleTimeout)
	defer deadline.Stop()
	if n.gossip != nil && len(n.cfg.Join) > 0 {
		select {
		case <-n.gossip.Joined():
		case <-deadline.C:
			n.log.Warn("no peer reached yet: serving anyway; joining goes on", zap.Strings("join", n.cfg.Join))
		case <-ctx.Done():
			return ctx.Err()
		case <-n.done:
			return n.Err()
		}
	}
	bctx, cancel := context.WithCancel(bgCtx)
	actx, abort := context.WithCancel(bgCtx)
	n.balanceCancel, n.balanceAbort = cancel, abort
	n.balanceDone = make(chan struct{})
	go func() {
		defer close(n.balanceDone)
		_ = n.balancer.RunGraceful(bctx, actx)
	}()
	n.goBackground("watch", func() error { n.watchCluster(bctx); return nil })
	n.goBackground("rejoin", func() error { n.rejoinLoop(bctx); return nil })
	if !n.awaitSettled(ctx, deadline.C, nil) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := n.Err(); err != nil {
			return err
		}
		n.log.Warn("partitions not settled yet: serving anyway", zap.Int("owned", n.own.Owned()))
		return nil
	}
	n.log.Info("partitions settled", zap.Int("owned", n.own.Owned()), zap.Duration("took", time.Since(t0)))
	return nil
}

// awaitSettled waits until the balancer has settled and the node's
// mirror of the owners table shows the partitions it serves (true), or
// until deadline fires, ctx is done, the node is done (failed) or stale
// (if set) says the wait is no longer needed (false). The balancer counts
// a claim once storage has taken it, while the mirror learns of it from
// a watch a moment later: without the second wait, a node just serving
// listed itself with no partitions (rivetctl members; CI once).
func (n *Node) awaitSettled(ctx context.Context, deadline <-chan time.Time, stale func() bool) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !n.balancer.Settled() || !n.mirrorShowsOwn() {
		if stale != nil && stale() {
			return false
		}
		select {
		case <-tick.C:
		case <-deadline:
			return false
		case <-ctx.Done():
			return false
		case <-n.done:
			return false
		}
	}
	return true
}

// mirrorShowsOwn reports whether the owners table's mirror names this
// node the owner of every partition it serves.
func (n *Node) mirrorShowsOwn() bool {
	for _, p := range n.own.Partitions() {
		if owner, _ := n.view.ownerOf(p); owner != n.cfg.NodeID {
			return false
		}
	}
	return true
}

// serveWhenSettled turns the node SERVING again after its lease was
// re-established, under the rule of Start: once it has claimed what the
// ring gives it that is free (the balancer settled under the new lease),
// or, if that takes over SettleTimeout, anyway. A loss of the lease since
// epoch ends it: the next re-establishment starts another.
func (n *Node) serveWhenSettled(ctx context.Context, epoch uint64) {
	t0 := time.Now()
	deadline := time.NewTimer(n.cfg.SettleTimeout)
	defer deadline.Stop()
	stale := func() bool { return n.epoch() != epoch }
	if n.awaitSettled(ctx, deadline.C, stale) {
		n.log.Info("partitions settled after the lease came back", zap.Int("owned", n.own.Owned()), zap.Duration("took", time.Since(t0)))
	} else {
		if ctx.Err() != nil || stale() || n.Err() != nil {
			return
		}
		n.log.Warn("partitions not settled yet after the lease came back: serving anyway", zap.Int("owned", n.own.Owned()))
	}
	n.setServing(epoch)
}

// epoch returns the number of lease losses so far.
func (n *Node) epoch() uint64 {
	n.readyMu.Lock()
	defer n.readyMu.Unlock()
	return n.readyEpoch
}

// notServing turns the node NOT_SERVING: its lease was lost, or it
// failed (before its health server exists, possibly: which then starts
// NOT_SERVING, and the epoch keeps it so).
func (n *Node) notServing() {
	n.readyMu.Lock()
	defer n.readyMu.Unlock()
	n.readyEpoch++
	if n.health != nil {
		n.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	}
}

// setServing turns the node SERVING, unless its lease was lost since
// epoch. After Stop began, the health server ignores it.
func (n *Node) setServing(epoch uint64) {
	n.readyMu.Lock()
	defer n.readyMu.Unlock()
	// A lease lost before the callbacks were registered bumped no epoch:
	// without a lease, the node serves nothing, whatever settling said.
	if n.readyEpoch == epoch && n.own.Lease() != 0 {
		n.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	}
}

// watchCluster tells the balancer of every change of membership,
// registrations or owners.
func (n *Node) watchCluster(ctx context.Context) {
	var gossipChanges <-chan struct{}
	if n.gossip != nil {
		gossipChanges = n.gossip.Changes()
	}
	var pruned int64 // the nodes mirror's revision at the last prune
	for {
		owners, nodes := n.view.owners.Changed(), n.view.nodes.Changed()
		// Connections to nodes no longer registered are closed whichever
		// channel woke the loop: a node that leaves releases its claims
		// and its registration at once, and pruning only when the select
		// took nodes missed about half of such leavings (the next round
		// takes new channels), keeping a connection to nothing.
		if rev := n.view.nodes.Revision(); rev != pruned {
			n.view.prune()
			n.checkTypes()
			pruned = rev
		}
		// After taking the channels, so that no change is missed: a write
		// of this node's registration that applied after its caller gave
		// up on it reaches the node's own record this way.
		if kv, ok := n.view.nodes.Get(storage.NodeKey(n.cfg.NodeID)); ok {
			var rec runtime.NodeRecord
			if json.Unmarshal(kv.Value, &rec) == nil {
				n.own.SyncRecord(rec, kv.ModRevision)
			}
		}
		// After taking the channels too, so that no change is missed.
		var again <-chan time.Time
		if n.gateFormats(ctx, true) {
			again = time.After(time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-gossipChanges:
		case <-owners:
		case <-nodes:
		case <-again:
		}
		// Before the balancer acts on a new node: it may be of an older
		// build. (The gate opens at the top of the loop, which may write.)
		n.gateFormats(ctx, false)
		n.balancer.Kick()
	}
}

// rejoinLoop keeps gossip whole: every 5 s, a registered node that gossip
// does not see alive is joined again (gossip alone never rejoins a member
// it declared dead, so a healed network partition would otherwise stay
// split). Apart from watchCluster, whose reactions a join to an
// unreachable node (seconds of dialing each) would hold up.
func (n *Node) rejoinLoop(ctx context.Context) {
	rejoin := time.NewTicker(5 * time.Second)
	defer rejoin.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-rejoin.C:
			n.rejoin()
			n.balancer.Kick()
		}
	}
}

// rejoin joins the registered nodes that gossip does not see alive.
func (n *Node) rejoin() {
	if n.gossip == nil {
		return
	}
	alive := map[string]bool{}
	for _, m := range n.gossip.Alive() {
		alive[m.ID] = true
	}
	var addrs []string
	for id, rec := range n.view.records() {
		if !alive[id] && rec.GossipAddr != "" {
			addrs = append(addrs, rec.GossipAddr)
		}
	}
	if len(addrs) > 0 {
		if _, err := n.gossip.Join(addrs); err != nil {
			n.log.Debug("rejoining registered nodes", zap.Strings("addrs", addrs), zap.Error(err))
		}
	}
}

// stopBalancer stops the balancer and cancels the handoffs under way (a
// crash, a failed start).
func (n *Node) stopBalancer() {
	if n.balanceCancel != nil {
		n.balanceCancel()
		n.balanceAbort()
		<-n.balanceDone
	}
}

// stopBalancerGracefully stops the balancer, starting no more handoffs,
// and lets those under way finish (a drain the stop interrupts: their
// turns end and commit, their actors' OnSleep runs), unless ctx ends
// first, which cancels them.
func (n *Node) stopBalancerGracefully(ctx context.Context) {
	if n.balanceCancel == nil {
		return
	}
	n.balanceCancel()
	select {
	case <-n.balanceDone:
	case <-ctx.Done():
		n.balanceAbort()
		<-n.balanceDone
	}
}

// backend is the runtime host as the gRPC services see it, with the
// cluster-wide answers that only the node can give.
type backend struct {
	*runtime.Host
	n *Node
}

// The optional Backend interfaces the node answers: the server finds them
// by a type assertion, so a changed signature would silently drop the
// feature (an admin call answering "not supported") instead of failing
// the build.
var (
	_ server.Backend             = backend{}
	_ server.LogLeveler          = backend{}
	_ server.NodeStatser         = backend{}
	_ server.RetryingWorkflowser = backend{}
	_ server.HotActorser         = backend{}
	_ server.Backuper            = backend{}
	_ server.TablesNoter         = backend{}
	_ server.WaitingWorkflowser  = backend{}
	_ server.RecordedFormatser   = backend{}
)

// Subscribe is the Host's, as the server's EventStream.
func (b backend) Subscribe(ctx context.Context, ref runtime.Ref, events []string) (server.EventStream, error) {
	sub, err := b.Host.Subscribe(ctx, ref, events)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return sub, nil
}

// tablesRead refuses, UNAVAILABLE, to answer from the copies of the
// cluster's tables before their first read: a node serves gRPC before it
// has read them (settle waits for that), and would list every member,
// itself included, as unregistered, and no partition as owned. A client
// routing calls directly took that for every owner gone and cut off all
// it had in flight; retried (it is a read), the answer comes once the
// copies are read.
func (b backend) tablesRead() error {
	for _, m := range []interface{ Ready() <-chan struct{} }{b.n.view.owners, b.n.view.nodes} {
		select {
		case <-m.Ready():
		default:
			return rivet.Errorf(rivet.ErrUnavailable, "node %s is starting: it has not read the cluster's members and partition owners yet", b.n.cfg.NodeID)
		}
	}
	return nil
}

// Members lists the registered nodes, with their gossip state, and the
// nodes gossip knows that hold no record: gone ones it still remembers,
// and live ones as "unregistered" (see below).
func (b backend) Members(ctx context.Context) ([]runtime.Member, error) {
	if err := b.tablesRead(); err != nil {
		return nil, err
	}
	owned := map[string]uint32{}
	for _, o := range b.n.view.ownerTable() {
		if o != "" {
			owned[o]++
		}
	}
	state := map[string]string{}
	var gossiped []runtime.Member
	if b.n.gossip != nil {
		for _, m := range b.n.gossip.Members() {
			state[m.ID] = string(m.State)
			gossiped = append(gossiped, runtime.Member{NodeID: m.ID, GRPCAddr: m.Meta.GRPCAddr, GossipAddr: m.GossipAddr, HTTPAddr: m.Meta.HTTPAddr, State: string(m.State)})
		}
	}
	recs := b.n.view.records()
	unreachable := b.n.view.unreachable(time.Now())
	var out []runtime.Member
	for id, rec := range recs {
		st := state[id]
		if st == "" {
			st = "alive"
			if b.n.gossip != nil {
				st = "unknown" // registered, but not (yet) in gossip
			}
		}
		out = append(out, runtime.Member{
			NodeID: id, GRPCAddr: rec.GRPCAddr, GossipAddr: rec.GossipAddr, HTTPAddr: rec.HTTPAddr,
			State: st, PartitionsOwned: owned[id], StartedAt: rec.StartedAt, Draining: rec.Draining,
			Unreachable: unreachable[id], Build: rec.Build,
			ActorTypes: rec.ActorTypes, ActorTypesKnown: rec.KnownTypes(),
			StorageFormat: rec.Format(),
		})
	}
	for _, m := range gossiped {
		if _, ok := recs[m.NodeID]; ok {
			continue
		}
		if m.State == string(cluster.StateAlive) {
			// Alive in gossip without a lease in etcd: a node starting,
			// one cut off from etcd, or one killed whose record went with
			// its lease before gossip declared it dead (gossip has no
			// suspect state). Left out, a killed node vanished from the
			// list for seconds before it came back dead.
			m.State = "unregistered"
		}
		out = append(out, m)
	}
	sortMembers(out)
	return out, nil
}

// TablesNote says, when this node holds no lease, that its copies of the
// cluster's tables are its last ones: a trial's operator read, during a
// quorum loss, partition counts that no longer held.
func (b backend) TablesNote() string {
	if b.n.own.Leased() {
		return ""
	}
	return fmt.Sprintf("node %s holds no lease (etcd does not answer it or has no leader, or the node is stopping), so the registrations and partition owners listed are its last copy of etcd's and may be out of date", b.n.cfg.NodeID)
}

// RecordedFormats reads the storage formats the cluster has recorded,
// from etcd: a node records one while others may be running (gateFormats),
// so no copy of this node's would do. Not from a node that holds no lease,
// which answers from its copies without waiting for an etcd that does
// not answer it (TablesNote), nor longer than recordedFormatsWait.
func (b backend) RecordedFormats(ctx context.Context) ([]int, error) {
	if !b.n.own.Leased() {
		return nil, rivet.Errorf(rivet.ErrUnavailable, "node %s holds no lease", b.n.cfg.NodeID)
	}
	ctx, cancel := context.WithTimeout(ctx, recordedFormatsWait)
	defer cancel()
	return recordedFormats(ctx, b.n.store)
}

// recordedFormatsWait bounds a read of the recorded formats for rivetctl
// members, which lists the members without them past it.
const recordedFormatsWait = 2 * time.Second

// Partitions returns the partition table as this node mirrors it.
func (b backend) Partitions(ctx context.Context) (uint32, []runtime.PartitionOwner, error) {
	if err := b.tablesRead(); err != nil {
		return 0, nil, err
	}
	var out []runtime.PartitionOwner
	for p := range b.n.view.parts {
		if owner, token := b.n.view.ownerOf(p); owner != "" {
			out = append(out, runtime.PartitionOwner{Partition: p, Owner: owner, Token: token})
		}
	}
	return b.n.view.parts, out, nil
}

// Drain starts or ends the drain of a node: this one, or another one
// through its own AdminService.
func (b backend) Drain(ctx context.Context, node string, undo bool) (uint32, error) {
	if node == "" || node == b.n.cfg.NodeID {
		owned := uint32(b.n.own.Owned())
		if undo {
			if err := b.n.own.SetDraining(ctx, false); err != nil {
				return 0, rivet.Errorf(rivet.ErrUnavailable, "mark node %s no longer draining: %v", b.n.cfg.NodeID, err)
			}
		} else if err := b.drainSelf(ctx); err != nil {
			return 0, err
		}
		b.n.log.Info("drain", zap.Bool("undo", undo), zap.Uint32("owned", owned))
		b.n.balancer.Kick()
		return owned, nil
	}
	why := "it has nothing to drain"
	if undo {
		why = "it rejoins undrained"
	}
	peer, hctx, rec, err := b.adminPeer(ctx, node, why)
	if err != nil {
		return 0, err
	}
	resp, err := peer.Drain(hctx, &rivetv1.DrainRequest{NodeId: node, Undo: undo})
	if err != nil {
		return 0, adminPeerError(err, "ask node %s at %s to drain", node, rec.GRPCAddr)
	}
	return resp.GetPartitionsOwned(), nil
}

// adminHopKey marks an admin request one node sends another on its
// caller's behalf.
const adminHopKey = "rivet-admin-hop"

// adminPeer returns the AdminService of the registered node, and ctx
// marked as a hop, for a request sent on to it on the caller's behalf; why
// says what the node's not being registered means for the request. A
// request that came here as a hop is refused: it was sent to node's
// registered address, which this node now serves, and sent on it would
// come back here until the caller's deadline.
func (b backend) adminPeer(ctx context.Context, node, why string) (rivetv1.AdminServiceClient, context.Context, runtime.NodeRecord, error) {
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(adminHopKey)) > 0 {
		return nil, nil, runtime.NodeRecord{}, rivet.Errorf(rivet.ErrFailedPrecondition, "node %s's registered address is served by node %s (it was replaced, and its registration has not expired yet)", node, b.n.cfg.NodeID)
	}
	rec, err := b.registered(node, why)
	if err != nil {
		return nil, nil, runtime.NodeRecord{}, err
	}
	conn, err := b.n.view.conn(rec.GRPCAddr)
	if err != nil {
		return nil, nil, runtime.NodeRecord{}, rivet.Errorf(rivet.ErrUnavailable, "reach node %s: %v", node, err)
	}
	return rivetv1.NewAdminServiceClient(conn), metadata.AppendToOutgoingContext(ctx, adminHopKey, "1"), rec, nil
}

// adminPeerError is the error of an admin request sent to another node on
// a caller's behalf: the peer's own error as it is; a failure to reach it
// UNAVAILABLE saying which (passed on bare, it read as the caller's node
// not answering).
func adminPeerError(err error, format string, args ...any) error {
	st := rpcerr.PassedOn(status.Convert(err)) // this node is not the one stopping
	e := rpcerr.FromStatus(st)
	var re *rivet.Error
	if st.Code() != codes.Unavailable || errors.As(e, &re) && re.Group != "" {
		// The peer's answer, or the caller's deadline or cancel.
		return e
	}
	return rivet.Errorf(rivet.ErrUnavailable, "%s: %s", fmt.Sprintf(format, args...), st.Message())
}

// registered returns node's registration, or NOT_FOUND naming the
// registered nodes (why: what the request means for a node not
// registered), or the node an address given for it is of.
func (b backend) registered(node, why string) (runtime.NodeRecord, error) {
	recs := b.n.view.records()
	if rec, ok := recs[node]; ok {
		return rec, nil
	}
	// An operator who gave an address (node1:6420) meant a node: say
	// which, as rivetctl members would.
	ids := make([]string, 0, len(recs))
	for id, r := range recs {
		if r.GRPCAddr == node || r.GossipAddr == node || r.HTTPAddr == node {
			return runtime.NodeRecord{}, rivet.Reasonf(rivet.ErrNotFound, "node", "not_found", "no node %q is registered: %s is an address of node %s; give the node's ID", node, node, id)
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if len(ids) > 10 {
		ids = append(ids[:10], "...")
	}
	return runtime.NodeRecord{}, rivet.Reasonf(rivet.ErrNotFound, "node", "not_found", "no node %q is registered (one that has left or died is not: %s); the registered nodes are %s", node, why, strings.Join(ids, ", "))
}

// NodeStats returns the counters of node, and up to hot of its busiest
// actors: this one's, or another's that it asks through its AdminService.
func (b backend) NodeStats(ctx context.Context, node string, hot int, retrying runtime.RetryingQuery) (runtime.Stats, error) {
	if node == b.n.cfg.NodeID {
		st := b.Host.Stats()
		if hot > 0 {
			st.Hot, st.HotCounted = b.Host.HotActors(hot), true
		}
		if retrying.Limit > 0 {
			st.Retrying, st.RetryingCounted = b.Host.RetryingWorkflows(retrying), true
		}
		return st, nil
	}
	rec, err := b.registered(node, "it serves nothing")
	if err != nil {
		return runtime.Stats{}, err
	}
	conn, err := b.n.view.conn(rec.GRPCAddr)
	if err != nil {
		return runtime.Stats{}, rivet.Errorf(rivet.ErrUnavailable, "reach node %s: %v", node, err)
	}
	// Asked for its own counters, not node's: an address now served by
	// another node (one replaced under a new ID while the old record's
	// lease runs) would otherwise forward the request again, to itself,
	// until the caller's deadline (a review's find).
	resp, err := rivetv1.NewAdminServiceClient(conn).Stats(ctx, &rivetv1.StatsRequest{
		Hot: uint32(max(hot, 0)), Retrying: uint32(max(retrying.Limit, 0)),
		RetryingName: retrying.Name, RetryingErrorContains: retrying.ErrorContains,
	})
	if err != nil {
		return runtime.Stats{}, adminPeerError(err, "ask node %s at %s for its counters", node, rec.GRPCAddr)
	}
	if resp.GetNodeId() != node {
		return runtime.Stats{}, rivet.Errorf(rivet.ErrFailedPrecondition, "node %s's registered address %s answers as node %q (it was replaced, and its registration has not expired yet)", node, rec.GRPCAddr, resp.GetNodeId())
	}
	st := runtime.Stats{
		NodeID: resp.GetNodeId(), ActiveActors: resp.GetActiveActors(), Calls: resp.GetCalls(),
		Commits: resp.GetCommits(), CommitBatches: resp.GetCommitBatches(), PartitionsOwned: resp.GetPartitionsOwned(),
		HotCounted: resp.GetHotCounted(), RetryingCounted: resp.GetRetryingCounted(),
		RetryingOmitted: int(resp.GetRetryingOmitted()),
	}
	for _, r := range resp.GetRetryingWorkflows() {
		rw := runtime.RetryingWorkflow{Ref: runtime.Ref{Name: r.GetName(), Key: r.GetKey()}, Partition: r.GetPartition(), StepsOmitted: int(r.GetStepsOmitted())}
		for _, p := range r.GetSteps() {
			ps := runtime.PendingStep{Path: p.GetPath(), Attempt: int(p.GetAttempt()), MaxAttempts: int(p.GetMaxAttempts()), LastError: p.GetLastError()}
			if p.GetStartedAt() != nil {
				ps.StartedAt = p.GetStartedAt().AsTime()
			}
			if p.GetNextAttemptAt() != nil {
				ps.NextAttemptAt = p.GetNextAttemptAt().AsTime()
			}
			rw.Steps = append(rw.Steps, ps)
		}
		st.Retrying = append(st.Retrying, rw)
	}
	for _, h := range resp.GetHotActors() {
		var since time.Time
		if h.GetSince() != nil {
			since = h.GetSince().AsTime()
		}
		st.Hot = append(st.Hot, runtime.HotActor{
			Ref: runtime.Ref{Name: h.GetName(), Key: h.GetKey()}, Partition: h.GetPartition(), TurnsPerSecond: h.GetTurnsPerSecond(),
			Turns: h.GetTurns(), Waited: time.Duration(h.GetWaitedSeconds() * float64(time.Second)), Since: since, Waiting: int(h.GetWaiting()),
		})
	}
	return st, nil
}

// A drain whose write was refused (another node's registration changed
// since the view showed it) waits up to drainViewWait for the view to show
// the change, and looks again, up to drainAttempts times in all.
const (
	drainViewWait = 10 * time.Second
	drainAttempts = 5
)

// drainSelf marks this node draining, unless no other node could take its
// partitions: the ring would be empty, and nothing could ever move. The
// check reads this node's view, which trails etcd, so the write requires
// the records of the other eligible nodes it saw to be unchanged: of two
// nodes drained at once, each seeing the other eligible, the second write
// fails, and its check, done again once the view has the first, refuses.
func (b backend) drainSelf(ctx context.Context) error {
	self := b.n.cfg.NodeID
	for attempt := 1; ; attempt++ {
		others := b.n.view.eligibleRecords()
		delete(others, self)
		if len(others) == 0 {
			return rivet.Reasonf(rivet.ErrFailedPrecondition, "node", "last_eligible", "cannot drain node %s: no other node can take its partitions (the others are draining or gone); start or undrain another node first", self)
		}
		// Any one of them unchanged would keep a node eligible; all are
		// required, up to the store's bound on compares.
		ids := slices.Sorted(maps.Keys(others))
		compared := make([]storage.KV, 0, len(ids))
		conds := make([]storage.Cond, 0, len(ids))
		for _, id := range ids[:min(len(ids), b.n.store.Limits().MaxTxnOps)] {
			kv := others[id]
			compared = append(compared, kv)
			conds = append(conds, storage.Unchanged(kv.Key, kv.ModRevision))
		}
		if b.n.drainChecked != nil {
			b.n.drainChecked()
		}
		err := b.n.own.SetDraining(ctx, true, conds...)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, storage.ErrConditionFailed):
			return rivet.Errorf(rivet.ErrUnavailable, "mark node %s draining: %v", self, err)
		case attempt == drainAttempts:
			return rivet.Errorf(rivet.ErrUnavailable, "cannot drain node %s: the other nodes' registrations kept changing (%d attempts); try again", self, attempt)
		}
		wctx, cancel := context.WithTimeout(ctx, drainViewWait)
		err = b.n.view.awaitRecordChange(wctx, compared)
		cancel()
		switch {
		case ctx.Err() != nil:
			return rivet.Errorf(rivet.ErrUnavailable, "cannot drain node %s: %v", self, ctx.Err())
		case err != nil:
			return rivet.Errorf(rivet.ErrUnavailable, "cannot drain node %s: another node's registration changed, and this node's view of the cluster did not show it within %v; try again", self, drainViewWait)
		}
	}
}

// gateFormats lets the node write each storage format newer than 1 while
// every registered node reads it (clusterFormat), once the nodes' mirror
// holds this node's own record (it has read every node's): format 2,
// steps store the state in their history entries; format 3, a join's
// large values go apart from its record; format 4, a pending join's
// branch failures go in entries of their own. A node of an older build
// registering after the cluster wrote a format it does not read is an
// error worth an operator's eye: it may load an older state and write
// over the newer one (2), replay a join's values as zeros (3), or run a
// join's failed branches again and fail the workflow on a divergence (4).
//
// A format's gate opens only once the cluster's storage.FormatKey of it
// is written, which mayRecord allows: a build that does not read it then
// refuses to start (checkStorageFormats); from format 3 on, only once
// formatWait's waits have passed too. It reports whether a gate stays
// closed only because a format could not be recorded or a wait has not
// passed (the caller tries again later).
func (n *Node) gateFormats(ctx context.Context, mayRecord bool) (retry bool) {
	if _, ok := n.view.nodes.Get(storage.NodeKey(n.cfg.NodeID)); !ok {
		return false
	}
	recs := n.view.records()
	read := clusterFormat(recs)
	now := time.Now()
	// The oldest format an older node registered would misread, and
	// whether it is newly there.
	older := max(read+1, 3)
	newlyOlder := older <= runtime.StorageFormat && !n.formats[older].olderPresent
	for f := 2; f <= runtime.StorageFormat; f++ {
		g := &n.formats[f]
		if read < f || g.olderPresent {
			// Seen until now: the evaluation that finds it gone is the
			// first that does not (a quiet cluster evaluates seldom).
			g.olderSeen, g.olderPresent = now, read < f
		}
	}
	if read < 2 && n.formatWriting >= 2 {
		n.log.Error("a node of an older build registered in a cluster whose workflows store their state in history entries: it reads only the state key, and may load an older state of such an actor and write over the newer one; stop it (a downgrade past storage format 2 is not supported, docs/deploy.md)",
			zap.Strings("older_nodes", olderNodes(recs, 2)))
	} else if older <= runtime.StorageFormat && (n.formatWriting >= older || newlyOlder && n.formatWritten(ctx, older)) {
		// Whether this node wrote that format or not (it started with
		// the older node there, or before the gate's wait ended), the
		// cluster may have: the record says so. (Records are written in
		// order: none of it, none newer.)
		n.log.Error(fmt.Sprintf("a node of an older build registered in a cluster whose %s: %s; stop it (a downgrade past storage format %d is not supported, docs/deploy.md)", formatNews[older].cluster, formatNews[older].older, older),
			zap.Strings("older_nodes", olderNodes(recs, older)))
	}
	if mayRecord {
		// Recorded before the first write in each format, in order, which a
		// build that does not read it must not start against; until it is
		// written, the node writes the older format.
		for f := max(n.formatRecorded+1, 2); f <= read; f++ {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			rec := formatRecord{NodeID: n.cfg.NodeID, RecordedAt: now.UnixMilli()}
			if seen := n.formats[f].olderSeen; !seen.IsZero() {
				// Nodes that start within the grace wait for it too.
				rec.OlderSeenAt = seen.UnixMilli()
			}
			b, _ := json.Marshal(rec)
			stored, _, err := n.store.PutIfAbsent(pctx, storage.FormatKey(f), b)
			cancel()
			if err != nil {
				n.log.Warn("record the cluster's storage format; the node keeps writing the older one until it is recorded", zap.Int("format", f), zap.Error(err))
				retry = ctx.Err() == nil
				break
			}
			n.formatRecorded = f
			var got formatRecord
			if json.Unmarshal(stored, &got) == nil {
				// Times of another node's clock, never later than this
				// one's now: a clock ahead would hold the gate for as
				// long as it is ahead.
				if got.RecordedAt > 0 {
					n.formats[f].recordedAt = time.UnixMilli(min(got.RecordedAt, now.UnixMilli()))
				}
				if seen := time.UnixMilli(min(got.OlderSeenAt, now.UnixMilli())); got.OlderSeenAt > 0 && seen.After(n.formats[f].olderSeen) {
					n.formats[f].olderSeen = seen
				}
			}
		}
	}
	// Each format's gate in order: a format opens only after every older
	// one (whose older nodes, as seen in its record, read no newer one).
	on := writableFormat(read, n.formatRecorded)
	for f := 3; f <= on; f++ {
		g := &n.formats[f]
		recordedAt := g.recordedAt
		if n.clusterFormat >= f {
			recordedAt = time.Time{} // created by a build of format f: see formatWait
		}
		if wait := formatWait(now, recordedAt, g.olderSeen); wait > 0 {
			// A format's record stops an older build at its start, not
			// one already running: see formatWait. Tried again each
			// second.
			if !g.waiting {
				n.log.Info(fmt.Sprintf("%s a while longer: a node of an older build may still register (docs/deploy.md, storage format %d)", formatNews[f].waiting, f), zap.Duration("for", wait))
				g.waiting = true
			}
			on, retry = f-1, retry || ctx.Err() == nil
			break
		}
		if g.waiting {
			n.log.Info(fmt.Sprintf("%s (storage format %d)", formatNews[f].on, f))
			g.waiting = false
		}
	}
	n.formatWriting = on
	n.host.SetWriteFormat(on)
	return retry
}

// formatGate is what a node knows of one storage format's gate
// (gateFormats; watchCluster's goroutine).
type formatGate struct {
	// recordedAt is when the cluster recorded the format (its record's
	// recorded_at; zero if it says not), olderSeen when this node, or the
	// record's writer, last saw a node registered that does not read it,
	// olderPresent whether one was at this node's last look.
	recordedAt, olderSeen time.Time
	olderPresent          bool
	// waiting says whether the node logged that it waits (formatWait).
	waiting bool
}

// formatNews words, for the logs, what each storage format from 3 changes:
// what the cluster does once it writes it (cluster), what a node that does
// not read it would do (older), what the nodes do while they wait to write
// it (waiting), and once they do (on).
var formatNews = [runtime.StorageFormat + 1]struct{ cluster, older, waiting, on string }{
	3: {
		cluster: "joins write their large values apart from their records",
		older:   "it would replay such a join's values as zero values",
		waiting: "joins keep their values in their records",
		on:      "joins write their large values apart from their records",
	},
	4: {
		cluster: "joins hold their branches' failures in entries of their own",
		older:   "replaying such a pending join, it would run its failed branches again and fail the workflow on a divergence",
		waiting: "joins keep their branches' failures in their records",
		on:      "joins hold their branches' failures in entries of their own",
	},
}

// formatRecord is the value of a storage format's cluster record
// (storage.FormatKey): who wrote it and when, and when the writer last saw
// a node registered that does not read it (formatWait); times in Unix ms.
type formatRecord struct {
	NodeID      string `json:"node_id"`
	RecordedAt  int64  `json:"recorded_at,omitempty"`
	OlderSeenAt int64  `json:"older_seen_at,omitempty"`
}

// formatWritten says whether the cluster's record of format f is written
// (false if it cannot be read).
func (n *Node) formatWritten(ctx context.Context, f int) bool {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := n.store.Get(gctx, storage.FormatKey(f))
	return err == nil
}

// The gate of each format from 3 on waits, as the cluster's record of the
// format stops a node of an older build only when it starts
// (checkStorageFormats), and one may be running unseen (reviews'):
//   - formatSettle after the record is written: an older node that read
//     the formats just before registers later, within a start's security
//     wait (awaitSameSecurity, 30 s) and its first calls to etcd; not in
//     a cluster a build of that format or a newer one created, where no
//     node can have read the formats before the record;
//   - olderNodeGrace after a node that does not read the format was last
//     seen registered, by this node or by the node that wrote the record
//     (its older_seen_at): one whose lease lapsed (a blip of seconds)
//     registers again, and claims partitions again, without reading the
//     formats again.
//
// A node that has seen no older one and finds the record long written
// waits for neither. An older node away for longer than the grace that
// comes back still misreads what was written meanwhile: docs/deploy.md.
// Format 2 came before the waits and has none.
var (
	formatSettle   = 45 * time.Second
	olderNodeGrace = 2 * time.Minute
)

// formatWait is how long a node must still wait, at now, before writing
// a format from 3 on (above): recordedAt is when the cluster recorded it
// (zero if unknown: long ago), olderSeen when the node last saw a node
// registered that does not read it (zero if never).
func formatWait(now, recordedAt, olderSeen time.Time) time.Duration {
	var wait time.Duration
	if !recordedAt.IsZero() {
		wait = recordedAt.Add(formatSettle).Sub(now)
	}
	if !olderSeen.IsZero() {
		wait = max(wait, olderSeen.Add(olderNodeGrace).Sub(now))
	}
	return max(wait, 0)
}

// writableFormat is the newest storage format a node may write: one every
// registered node reads (read, clusterFormat), whose cluster record is
// written (recorded, the newest written in order).
func writableFormat(read, recorded int) int { return max(min(read, recorded), 1) }

// clusterFormat returns the newest storage format every registered node
// reads: the oldest any advertises (runtime.StorageFormat; none, format 1,
// before format 2), 0 with no record. A node of an older build, loading an
// actor, would misread a newer format: a state that rides in a history
// entry (2), for which it would take the state key's older one; a join's
// values apart from its record (3), which it would take for zero values; a
// pending join's branch failures in entries of their own (4), whose
// branches it would run again. A node of an older build that registers
// after the cluster has written a newer format misreads it: a downgrade
// past format 2, 3 or 4 is not supported (docs/deploy.md).
func clusterFormat(recs map[string]runtime.NodeRecord) int {
	read := 0
	for _, r := range recs {
		if f := r.Format(); read == 0 || f < read {
			read = f
		}
	}
	return read
}

// olderNodes returns the registered nodes that do not read format f.
func olderNodes(recs map[string]runtime.NodeRecord, f int) []string {
	var older []string
	for id, r := range recs {
		if r.StorageFormat < f {
			older = append(older, id)
		}
	}
	slices.Sort(older)
	return older
}
