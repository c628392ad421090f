package runtime

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
	"go.uber.org/zap"
)

// BalancerConfig says where a Balancer reads the cluster from.
type BalancerConfig struct {
	// Eligible returns the IDs of the nodes the ring is computed over:
	// alive, registered in storage and not draining. This node takes no
	// partition while it is not among them, unless none is (Draining).
	Eligible func() []string
	// Draining, if set, returns the nodes alive and registered that are
	// draining. When no node is eligible, the ring is computed over these:
	// a drain asks to move partitions to other nodes, and once none is
	// left (they died after the drain began), serving from a draining
	// node beats serving from none until someone undoes the drain. The
	// partitions move off again as soon as an eligible node is back.
	Draining func() []string
	// Owners returns the owner of each partition as storage last said
	// ("" for none), indexed by partition.
	Owners func() []string
	// OwnerRecord, if set, returns the owner of partition p's record and
	// its token as storage last said ("" and 0 if none), both from one
	// read. A partition that Owners names this node for but that it does
	// not hold is adopted as a claim whose reply was lost only if this
	// record, read as the plan looks at p, still names this node with a
	// token newer than any claim of p it released: an older one is the
	// table lagging behind the release, and none means the release's
	// delete reached the table after Owners read it (p is free: the ring's
	// node claims it). Without it, Owners' word is taken.
	OwnerRecord func(p uint32) (node string, token int64)
	// Registered, if set, returns the lease of this node's registration
	// as the view of the cluster last said (0 if none). A look then counts
	// as settled only if that is the current lease: right after the lease
	// was re-established, a view that does not show the new registration
	// yet lags behind the re-establishment, and may show owners as they
	// were before the loss.
	Registered func() storage.LeaseID
	// Handoffs bounds the partitions handed off at once, so that a join
	// moves partitions in a trickle rather than a storm. Default 4.
	Handoffs int
	// HandoffTimeout bounds one handoff's drain. Default 30 s.
	HandoffTimeout time.Duration
	// Resync is how often the balancer looks even if nothing told it to.
	// Default 2 s.
	Resync time.Duration
	// OnMoved, if set, is told of every partition claimed (in) or handed
	// off (out), for metrics.
	OnMoved func(in, out int)
}

// Balancer keeps this node's claims in line with the ring (rendezvous
// hashing of partitions over the eligible nodes): it claims the unowned
// partitions the ring gives it, and hands off the ones the ring gives to
// another node. It never takes a partition from another node: the owner
// hands it off (or its lease expires), so no partition ever has two
// servers, and storage's fence makes that hold even if this code errs.
type Balancer struct {
	cfg  BalancerConfig
	host *Host
	own  *Ownership
	log  *zap.Logger
	kick chan struct{}

	mu     sync.Mutex
	moving int // handoffs in progress
	// handing holds the partitions of those handoffs: a look made before
	// one of them began would plan it again, and its handoff would take
	// one of the Handoffs slots to find the partition released already.
	handing map[uint32]bool
	// idle counts handoffs that found their partition released already.
	idle    atomic.Int64
	settled bool
	// settledLease is the lease the look that set settled ran under: a
	// look under an earlier lease says nothing of the claims of now.
	settledLease storage.LeaseID
	// verifiedLease is the last lease a look settled under. The first
	// look to settle under a lease has its plan checked against the owners
	// table in storage, not only the view's.
	verifiedLease storage.LeaseID
}

// NewBalancer returns a Balancer for host's partitions. Call Run.
func NewBalancer(cfg BalancerConfig, host *Host, own *Ownership) *Balancer {
	if cfg.Handoffs <= 0 {
		cfg.Handoffs = 4
	}
	if cfg.HandoffTimeout <= 0 {
		cfg.HandoffTimeout = 30 * time.Second
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 2 * time.Second
	}
	return &Balancer{cfg: cfg, host: host, own: own, log: host.log.Named("balancer"), kick: make(chan struct{}, 1)}
}

// Kick asks for a look at the cluster now (membership, registrations or
// owners changed). It never blocks.
func (b *Balancer) Kick() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Settled reports whether the last look under the node's current lease
// found nothing to move: this node has claimed every partition the ring
// gives it that is free (as storage lists them, for the first look to
// settle under a lease). It is false while the node has no lease, and,
// after the lease was lost, until a look under the re-established lease
// settles.
func (b *Balancer) Settled() bool {
	lease := b.own.Lease()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.settled && lease != 0 && b.settledLease == lease
}

// IdleHandoffs returns how many handoffs found their partition released
// already: a partition planned again while its handoff was under way,
// which handing prevents, or released by other means meanwhile.
func (b *Balancer) IdleHandoffs() int64 { return b.idle.Load() }

// verified reports whether a look has settled under lease already.
func (b *Balancer) verified(lease storage.LeaseID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.verifiedLease == lease
}

// Run balances until ctx is done; the handoffs under way then are
// cancelled (their actors evicted, without OnSleep), and Run returns once
// they have ended.
func (b *Balancer) Run(ctx context.Context) error { return b.RunGraceful(ctx, ctx) }

// RunGraceful balances until ctx is done, then waits for the handoffs
// under way to end, each within HandoffTimeout, unless abort ends first,
// which cancels them as Run does. A node that stops gracefully during a
// drain lets the handoffs it started finish (their turns end and commit,
// their actors' OnSleep runs, their writes land) rather than evict those
// actors, which its own stop would not have done: a turn in progress lost
// its writes (its caller, told UNAVAILABLE, ran it again on the next
// owner) and its actor never ran OnSleep.
func (b *Balancer) RunGraceful(ctx, abort context.Context) error {
	tick := time.NewTicker(b.cfg.Resync)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan struct{}, b.cfg.Handoffs)
	for {
		b.balance(ctx, abort, &wg, done)
		select {
		case <-ctx.Done():
			return nil
		case <-b.kick:
		case <-done:
		case <-tick.C:
		}
	}
}

// Wants reports whether the ring gives partition p to this node now (it
// is in its own view of the cluster and not draining, or every node left
// is draining).
func (b *Balancer) Wants(p uint32) bool {
	rec := b.own.Record()
	ring, fallback := b.ring()
	if rec.Draining && !fallback {
		return false
	}
	return slices.Contains(ring, rec.NodeID) && placement.Owner(p, ring) == rec.NodeID
}

// ring returns the nodes the ring is computed over, sorted: the eligible
// ones, or, when there are none, the draining ones (fallback true).
func (b *Balancer) ring() (nodes []string, fallback bool) {
	eligible := b.cfg.Eligible()
	var draining []string
	if len(eligible) == 0 && b.cfg.Draining != nil {
		draining = b.cfg.Draining()
	}
	return placement.Ring(eligible, draining)
}

// staleRecord reports whether the owner record of p, which names this
// node with token tok (0 if unknown), is a claim it has released since
// (the table lags behind): claiming p back would take a partition just
// handed off from its next owner.
func (b *Balancer) staleRecord(p uint32, tok int64) bool {
	return tok != 0 && tok <= b.own.ReleasedToken(p)
}

// adoptable reports whether p, which the owners table names this node
// (self) for although it does not hold it, is a claim of its own to adopt:
// p's record, owner and token read together now, still names this node
// and is not a claim it has released since. The owner and the token are
// not taken from two reads of a table that changes in between: the
// table's owner read before a release's delete and the token read after
// it (none, 0: "unknown") made a node claim back the partition it had
// just handed off, serve it for a moment and hand it off again (an
// actor loaded meanwhile ran OnSleep twice).
func (b *Balancer) adoptable(self string, p uint32, record func(p uint32) (string, int64)) bool {
	owner, tok := record(p)
	return owner == self && !b.staleRecord(p, tok)
}

// plan returns the partitions to claim and to hand off, for the ring over
// eligible (sorted) and the owners table owners (indexed by partition; ""
// for none); record reads a partition's owner record (owner and token) as
// adoptable takes it.
func (b *Balancer) plan(self string, eligible, owners []string, record func(p uint32) (string, int64)) (claim, leave []uint32) {
	for p := range b.host.cfg.Partitions {
		want := ""
		if len(eligible) > 0 {
			want = placement.Owner(p, eligible)
		}
		cur := ""
		if int(p) < len(owners) {
			cur = owners[p]
		}
		owned := b.own.Owns(p)
		switch {
		case want == self && cur == "" && !owned:
			claim = append(claim, p)
		case cur == self && !b.own.Holds(p) && b.adoptable(self, p, record):
			// Ours on record but not held: a claim whose reply was lost
			// (or that was given up and applied late). Claim adopts it,
			// even if the ring now wants it elsewhere: not held, it is
			// served by no one, and no other node claims a partition
			// owned on record. Once held, the case below hands it off.
			claim = append(claim, p)
		case owned && want != self && want != "":
			leave = append(leave, p)
		}
	}
	return claim, leave
}

// storedOwners reads the owners table from storage, as plan takes it:
// the owners and their records from one read.
func (b *Balancer) storedOwners(ctx context.Context) (owners []string, record func(p uint32) (string, int64), err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	claims, err := b.own.store.Claims(ctx)
	if err != nil {
		return nil, nil, err
	}
	owners = make([]string, b.host.cfg.Partitions)
	tokens := make(map[uint32]int64, len(claims))
	for _, c := range claims {
		if c.Partition < uint32(len(owners)) {
			owners[c.Partition], tokens[c.Partition] = c.Node, c.Token
		}
	}
	return owners, func(p uint32) (string, int64) { return owners[p], tokens[p] }, nil
}

// balance looks once: claims what it should, and starts handoffs up to the
// bound. Handoffs run in the background, cancelled only by abort (or
// their timeout), and signal done when they end.
func (b *Balancer) balance(ctx, abort context.Context, wg *sync.WaitGroup, done chan struct{}) {
	lease := b.own.Lease()
	if lease == 0 {
		return
	}
	// Read before the view's tables: a look counts as settled only if
	// its view already showed this lease's registration.
	current := b.cfg.Registered == nil || b.cfg.Registered() == lease
	rec := b.own.Record()
	self := rec.NodeID
	eligible, fallback := b.ring()
	if (!rec.Draining || fallback) && !slices.Contains(eligible, self) {
		// This node is not in its own view of the cluster yet (its
		// registration was just rewritten, or gossip has not caught up):
		// a ring without it would hand everything off, to take it back a
		// moment later.
		return
	}
	owners := b.cfg.Owners()
	record := func(p uint32) (string, int64) { // the table's word, token unknown
		if int(p) < len(owners) {
			return owners[p], 0
		}
		return "", 0
	}
	if b.cfg.OwnerRecord != nil {
		record = b.cfg.OwnerRecord
	}
	claim, leave := b.plan(self, eligible, owners, record)
	if current && len(claim) == 0 && len(leave) == 0 && !b.verified(lease) {
		// Settled for the first time under this lease, by the view's
		// owners table: after the node was cut off from storage, that
		// table may still lack releases made meanwhile. Storage's own
		// table says whether a free partition is left to claim.
		owners, stored, err := b.storedOwners(ctx)
		if err != nil {
			current = false // not settled: the next look asks again
			if ctx.Err() == nil {
				b.log.Warn("reading the owners table failed", zap.Error(err))
			}
		} else {
			claim, leave = b.plan(self, eligible, owners, stored)
		}
	}
	if len(claim) > 0 {
		got, err := b.own.Claim(ctx, claim)
		if err != nil && ctx.Err() == nil {
			b.log.Warn("claiming partitions failed", zap.Error(err))
		}
		if len(got) > 0 {
			b.log.Info("partitions claimed", zap.Int("claimed", len(got)), zap.Int("owned", b.own.Owned()))
			if b.cfg.OnMoved != nil {
				b.cfg.OnMoved(len(got), 0)
			}
		}
	}
	b.mu.Lock()
	b.settled = current && len(claim) == 0 && len(leave) == 0 && b.moving == 0
	b.settledLease = lease
	if b.settled {
		b.verifiedLease = lease
	}
	free := b.cfg.Handoffs - b.moving
	b.mu.Unlock()
	for _, p := range leave {
		if free <= 0 {
			break
		}
		if !b.own.Owns(p) {
			continue
		}
		b.mu.Lock()
		if b.handing[p] {
			b.mu.Unlock()
			continue
		}
		if b.handing == nil {
			b.handing = map[uint32]bool{}
		}
		b.handing[p] = true
		b.moving++
		b.mu.Unlock()
		free--
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(abort, b.cfg.HandoffTimeout)
			t0 := time.Now()
			// Only a handoff that took p out of service counts: a look
			// made before an earlier look's handoff of p began plans p
			// again, and that second handoff finds it released already.
			began, err := b.host.handoff(hctx, p, true)
			cancel()
			if err != nil {
				b.log.Warn("handoff failed", zap.Uint32("partition", p), zap.Error(err))
			} else if !began {
				b.idle.Add(1)
			} else {
				b.log.Debug("partition handed off", zap.Uint32("partition", p), zap.Duration("took", time.Since(t0)))
				if b.cfg.OnMoved != nil {
					b.cfg.OnMoved(0, 1)
				}
			}
			b.mu.Lock()
			b.moving--
			delete(b.handing, p)
			b.mu.Unlock()
			select {
			case done <- struct{}{}:
			default:
			}
		}()
	}
}
