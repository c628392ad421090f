package runtime

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/rivet-go/rivet/placement"
	"go.uber.org/zap"
)

// BalancerConfig says where a Balancer reads the cluster from.
type BalancerConfig struct {
	// Eligible returns the IDs of the nodes the ring is computed over:
	// alive, registered in storage and not draining. This node takes no
	// partition while it is not among them.
	Eligible func() []string
	// Owners returns the owner of each partition as storage last said
	// ("" for none), indexed by partition.
	Owners func() []string
	// OwnerToken, if set, returns the token of partition p's owner record
	// as storage last said (0 if none): a record of this node no newer
	// than a claim it released is the table lagging behind the release,
	// not a claim whose reply was lost, and is not claimed back.
	OwnerToken func(p uint32) int64
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

	mu      sync.Mutex
	moving  int // handoffs in progress
	settled bool
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

// Settled reports whether the last look found nothing to move.
func (b *Balancer) Settled() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.settled
}

// Run balances until ctx is done.
func (b *Balancer) Run(ctx context.Context) error {
	tick := time.NewTicker(b.cfg.Resync)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan struct{}, b.cfg.Handoffs)
	for {
		b.balance(ctx, &wg, done)
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
// is in its own view of the cluster and not draining).
func (b *Balancer) Wants(p uint32) bool {
	rec := b.own.Record()
	if rec.Draining {
		return false
	}
	eligible := b.cfg.Eligible()
	return slices.Contains(eligible, rec.NodeID) && placement.Owner(p, eligible) == rec.NodeID
}

// staleRecord reports whether the owner record of p, which names this
// node, is a claim it has released since (the table lags behind): claiming
// p back would take a partition just handed off from its next owner.
func (b *Balancer) staleRecord(p uint32) bool {
	if b.cfg.OwnerToken == nil {
		return false
	}
	tok := b.cfg.OwnerToken(p)
	return tok != 0 && tok <= b.own.ReleasedToken(p)
}

// balance looks once: claims what it should, and starts handoffs up to the
// bound. Handoffs run in the background and signal done when they end.
func (b *Balancer) balance(ctx context.Context, wg *sync.WaitGroup, done chan struct{}) {
	if b.own.Lease() == 0 {
		return
	}
	rec := b.own.Record()
	self := rec.NodeID
	eligible := b.cfg.Eligible()
	slices.Sort(eligible)
	if !rec.Draining && !slices.Contains(eligible, self) {
		// This node is not in its own view of the cluster yet (its
		// registration was just rewritten, or gossip has not caught up):
		// a ring without it would hand everything off, to take it back a
		// moment later.
		return
	}
	owners := b.cfg.Owners()
	n := b.host.cfg.Partitions
	var claim, leave []uint32
	for p := range n {
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
		case cur == self && !b.own.Holds(p) && !b.staleRecord(p):
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
	b.settled = len(claim) == 0 && len(leave) == 0 && b.moving == 0
	free := b.cfg.Handoffs - b.moving
	b.mu.Unlock()
	for _, p := range leave {
		if free <= 0 {
			break
		}
		if !b.own.Owns(p) {
			continue
		}
		free--
		b.mu.Lock()
		b.moving++
		b.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(ctx, b.cfg.HandoffTimeout)
			t0 := time.Now()
			err := b.host.Handoff(hctx, p)
			cancel()
			if err != nil {
				b.log.Warn("handoff failed", zap.Uint32("partition", p), zap.Error(err))
			} else {
				b.log.Debug("partition handed off", zap.Uint32("partition", p), zap.Duration("took", time.Since(t0)))
				if b.cfg.OnMoved != nil {
					b.cfg.OnMoved(0, 1)
				}
			}
			b.mu.Lock()
			b.moving--
			b.mu.Unlock()
			select {
			case done <- struct{}{}:
			default:
			}
		}()
	}
}
