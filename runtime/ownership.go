package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivet-go/rivet/storage"
	"go.uber.org/zap"
)

// NodeRecord is a node's registration in storage (storage.NodeKey), on the
// node's lease: it vanishes when the node does. Every node mirrors these
// records: they are where peers find each other's gRPC and gossip
// addresses, and the ring is computed only over nodes that have one (a
// node whose lease expired is out of the ring at once, whatever gossip
// still believes).
type NodeRecord struct {
	NodeID     string          `json:"node_id"`
	GRPCAddr   string          `json:"grpc_addr"`
	GossipAddr string          `json:"gossip_addr,omitempty"`
	HTTPAddr   string          `json:"http_addr,omitempty"`
	StartedAt  time.Time       `json:"started_at"`
	Lease      storage.LeaseID `json:"lease"`
	// Draining asks the cluster to move every partition off this node.
	Draining bool `json:"draining,omitempty"`
	// StorageFormat is the newest storage format the node reads and
	// writes (runtime.StorageFormat); builds before format 2 set none.
	StorageFormat int `json:"storage_format,omitempty"`
	// Security is how the node's gRPC port is secured, "plaintext", "tls"
	// or "mtls", with "+token" if it wants a bearer token (never the token
	// itself): a node with less than every live node is refused
	// (node/samesecurity.go). Builds before it set none.
	Security string `json:"security,omitempty"`
	// Build is the node's build (internal/buildinfo), for rivetctl
	// members. Builds before it set none.
	Build string `json:"build,omitempty"`
	// LeaseTTLMillis is the TTL, in milliseconds, of the lease the record
	// is on, as storage granted it: how long the node's registration and
	// claims may outlive it if it dies (TTLs are per node), which its
	// peers wait out before they take a failing connection to it for a
	// network fault (node/peerwatch.go). Builds before it set none.
	LeaseTTLMillis int64 `json:"lease_ttl_ms,omitempty"`
	// ActorTypes are the names of the actor types the node registers
	// (rivet.Registry.Names), sorted: every node must register the same
	// ones, since a partition's owner serves every actor of it. Always
	// written, [] for none; nil (the field absent) is a build before it,
	// whose types are unknown, not none (KnownTypes).
	ActorTypes []string `json:"actor_types"`
}

// Format is the newest storage format the record's node reads and writes:
// its StorageFormat, or 1 for a build before format 2, which sets none.
func (r NodeRecord) Format() int { return max(r.StorageFormat, 1) }

// KnownTypes reports whether the record says which actor types its node
// registers: false for a record of a build before ActorTypes.
func (r NodeRecord) KnownTypes() bool { return r.ActorTypes != nil }

// Registers reports whether the record's node registers the actor type
// name, and whether the record says (KnownTypes): a build before
// ActorTypes answers false, false.
func (r NodeRecord) Registers(name string) (registers, known bool) {
	if r.ActorTypes == nil {
		return false, false
	}
	_, found := slices.BinarySearch(r.ActorTypes, name)
	return found, true
}

// grantedTTL returns the TTL store granted lease, asked for ttl: the
// store's word if it has one (storage.GrantedTTLs), else ttl rounded up to
// whole seconds, as etcd and the memory store keep it.
func grantedTTL(store storage.Store, lease storage.LeaseID, ttl time.Duration) time.Duration {
	if g, ok := store.(storage.GrantedTTLs); ok {
		if granted := g.GrantedTTL(lease); granted > 0 {
			return granted
		}
	}
	return max((ttl+time.Second-1)/time.Second, 1) * time.Second
}

// Ownership holds this node's lease and the partition claims on it. Claims
// die with the lease: when the lease is lost, every claim is dropped at once
// (and any write fenced on them already fails in storage).
//
// The node stops serving its partitions when the lease may have expired in
// storage, judged by its own clock (the time each renewal was sent plus the
// TTL, minus a safety margin), not when storage says so: a node cut off
// from etcd hears nothing, and by then another node may have claimed its
// partitions. So two nodes never serve one partition, not even reads.
type Ownership struct {
	store storage.Store
	ttl   time.Duration
	log   *zap.Logger

	// registering is a lock (a token in a channel of one, so that a
	// waiter can give up) held by Establish and SetDraining: the writes of
	// the node's registration go one at a time, each with the record left
	// by the one before, so that record is what storage holds.
	registering chan struct{}
	// lockWaitHook, set by tests only, runs as a caller is about to wait
	// for the registering lock.
	lockWaitHook func()

	// lossTimes are the lease losses of the last flapWindow (Run's own).
	lossTimes []time.Time

	mu     sync.RWMutex
	record NodeRecord
	// recordRev is the revision of record's last write (SetDraining's,
	// read back), below which SyncRecord takes nothing from a copy; 0
	// after Establish (every record of its lease is as new as its own).
	recordRev int64
	lease     storage.LeaseID
	// lostLease is the lease drop took away (0 if none): its record in
	// storage, if still there when Establish runs, is this run's last word
	// (a write given up on may have applied under it after the loss).
	lostLease storage.LeaseID
	claims    map[uint32]storage.Claim
	// releasing holds claims being handed off: no longer served (Token
	// says not owned), but still held in storage until the drain ends.
	releasing map[uint32]storage.Claim
	// released is, per partition, the newest token this node released:
	// a claim listed before its release must not be adopted after it.
	released map[uint32]int64
	// ended holds the store revisions of the latest releases (at most
	// maxEnded, oldest dropped first), for ClaimEnd; endedOrder is their
	// order.
	ended      map[storage.Fence]int64
	endedOrder []storage.Fence
	// changed is closed and replaced whenever a claim ends, for ClaimEnd.
	changed chan struct{}
	// validUntil is when the lease may expire in storage, by this node's
	// clock, minus the margin.
	validUntil time.Time
	renewed    chan struct{}
	// resigned is set by Resign: Run then ends instead of re-establishing.
	resigned bool
	// established is set by this run's first successful Establish: from
	// then on, a registration of another run under this node's ID is a
	// newer process's (ErrReplaced), not a previous run's.
	established bool
	// renewals and losses count lease renewals and losses, for metrics.
	renewals, losses atomic.Uint64
	// onLost is called, without mu held, when claims are dropped.
	onLost []func()
	// onClaimed is called, without mu held, with the partitions just
	// claimed (not after the first Establish: the host starts after it).
	onClaimed []func(ctx context.Context, parts []uint32)
	// onEstablished is called after the lease was re-established.
	onEstablished []func()
}

// NewOwnership returns an Ownership for the node described by record. It
// starts nothing; call Establish, then Run.
func NewOwnership(store storage.Store, record NodeRecord, ttl time.Duration, log *zap.Logger) *Ownership {
	if log == nil {
		log = zap.NewNop()
	}
	return &Ownership{
		store: store, record: record, ttl: ttl, log: log,
		claims: map[uint32]storage.Claim{}, releasing: map[uint32]storage.Claim{}, released: map[uint32]int64{},
		ended: map[storage.Fence]int64{}, changed: make(chan struct{}),
		renewed: make(chan struct{}, 1), registering: make(chan struct{}, 1),
	}
}

// lockRegistration takes the registering lock, or fails when ctx ends; if
// leased, also with ErrLeaseNotFound when the node has no lease, or loses
// it while this waits (it would wait behind the lease's re-establishment,
// for as long as etcd takes).
func (o *Ownership) lockRegistration(ctx context.Context, leased bool) error {
	for {
		o.mu.RLock()
		lease, changed := o.lease, o.changed
		o.mu.RUnlock()
		if !leased {
			changed = nil // waits for the lock or ctx only
		} else if lease == 0 {
			return storage.ErrLeaseNotFound
		}
		if o.lockWaitHook != nil {
			o.lockWaitHook()
		}
		select {
		case o.registering <- struct{}{}:
			return nil
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (o *Ownership) unlockRegistration() { <-o.registering }

// OnLost registers fn to be called when the node's claims are lost.
func (o *Ownership) OnLost(fn func()) {
	o.mu.Lock()
	o.onLost = append(o.onLost, fn)
	o.mu.Unlock()
}

// OnClaimed registers fn to be called with the partitions of every claim
// made after the host started (by Claim, or by Run re-establishing).
func (o *Ownership) OnClaimed(fn func(ctx context.Context, parts []uint32)) {
	o.mu.Lock()
	o.onClaimed = append(o.onClaimed, fn)
	o.mu.Unlock()
}

// OnEstablished registers fn to be called after Run re-established the
// lease following a loss.
func (o *Ownership) OnEstablished(fn func()) {
	o.mu.Lock()
	o.onEstablished = append(o.onEstablished, fn)
	o.mu.Unlock()
}

// margin is how long before the lease's possible expiry the node stops
// serving: room for clock rate differences and for the drop itself.
func (o *Ownership) margin() time.Duration {
	return max(o.ttl/10, 200*time.Millisecond)
}

// ErrReplaced is Run's error when another process registered under this
// node's ID after this one did, revoking this one's lease: a restart of
// the node while its previous process still lived (frozen, say), or a
// second node started with the same ID by mistake. This one gives way and
// stops for good: re-establishing would revoke the other's lease in turn,
// and the two would take the node's partitions from each other for as
// long as both ran.
var ErrReplaced = errors.New("another process registered under this node's ID")

// sameRun reports whether a and b are registrations of the same run of a
// node (one process's): a run's start time is written in every record it
// writes, under any of its leases.
func sameRun(a, b NodeRecord) bool {
	return a.NodeID == b.NodeID && a.StartedAt.Equal(b.StartedAt)
}

// unusedLeaseRevoke bounds the revoke of a lease granted by an Establish
// that failed to register the node with it.
const unusedLeaseRevoke = 2 * time.Second

// revokeUnused revokes lease, granted by an Establish that failed before
// anything but, perhaps, the node's record was written on it, within
// unusedLeaseRevoke, even if ctx is done.
func (o *Ownership) revokeUnused(ctx context.Context, lease storage.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unusedLeaseRevoke)
	_ = o.store.RevokeLease(rctx, lease)
	cancel()
}

// Establish grants the node's lease, registers the node and claims the
// given partitions (those that have no owner). If a previous run of this
// node (same node ID) left a registration, its lease is revoked once the
// new registration has replaced it, before claiming, as is every other
// lease that holds a claim of this node's (a run before it), so that a node
// restarted after a crash serves at once instead of waiting for its old
// claims to expire. Node IDs must therefore be unique. Once this run has
// registered, a registration of another run found here is a newer
// process's: Establish then fails with ErrReplaced, revoking nothing.
func (o *Ownership) Establish(ctx context.Context, partitions []uint32) error {
	if err := o.lockRegistration(ctx, false); err != nil {
		return err
	}
	defer o.unlockRegistration()
	key := storage.NodeKey(o.Record().NodeID)
	var revoke storage.LeaseID
	if kv, err := o.store.Get(ctx, key); err == nil {
		var prev NodeRecord
		if json.Unmarshal(kv.Value, &prev) == nil && prev.Lease != 0 && prev.Lease != o.currentLease() {
			o.mu.RLock()
			replaced := o.established && !sameRun(prev, o.record)
			o.mu.RUnlock()
			if replaced {
				return fmt.Errorf("%w (gRPC %s, started %s) and revoked this one's lease: node IDs must be unique; this process gives way and serves nothing",
					ErrReplaced, prev.GRPCAddr, prev.StartedAt.Format(time.RFC3339Nano))
			}
			revoke = prev.Lease
			o.mu.Lock()
			if prev.Lease == o.lostLease {
				o.record.Draining = prev.Draining // this run's last word in storage
			}
			o.mu.Unlock()
		}
	} else if !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("read node record: %w", err)
	}
	sent := time.Now()
	lease, err := o.store.GrantLease(ctx, o.ttl)
	if err != nil {
		return fmt.Errorf("grant lease: %w", err)
	}
	rec := o.Record()
	rec.Lease = lease
	rec.LeaseTTLMillis = grantedTTL(o.store, lease, o.ttl).Milliseconds()
	b, _ := json.Marshal(rec)
	// The new registration is written before the previous lease is
	// revoked, which moves the record to the new lease: the revoke then
	// deletes only the previous run's claims, and the node never looks
	// unregistered to the others. Revoked first, the record vanished for
	// the few milliseconds until this write: long enough for every other
	// node to leave this one out of its ring and claim the partitions the
	// revoke had just freed, to hand them back once the record was back (a
	// crash and quick restart moved all of a node's partitions twice).
	if err := o.store.PutLeased(ctx, key, b, lease); err != nil {
		// Nothing holds the new lease (or, if the write applied after
		// all, only the record, which the next Establish writes again):
		// revoked now, rather than left to expire in storage and tracked
		// by the store for good, one per failed attempt.
		o.revokeUnused(ctx, lease)
		return fmt.Errorf("register node: %w", err)
	}
	// The record names the previous run's lease only if that run wrote
	// it: a run that failed (or crashed) between its registration and its
	// revoke left its own lease there, and the one before's claims on
	// theirs. Every lease that holds a claim of this node's is a previous
	// run's (node IDs are unique), and is revoked too.
	revokes, err := o.previousLeases(ctx, revoke, lease)
	if err != nil {
		return fmt.Errorf("list claims: %w", err)
	}
	if len(revokes) > 0 {
		for _, l := range revokes {
			o.log.Info("revoking the lease of this node's previous run", zap.Int64("lease", int64(l)))
			if err := o.store.RevokeLease(ctx, l); err != nil {
				return fmt.Errorf("revoke previous lease: %w", err)
			}
		}
		// A write of the previous lease's that was given up on (a drain
		// during a cut) may have applied in between, taking the record
		// back to that lease, and the revoke deleted it: write it again.
		// No such write applies after the revoke.
		kv, err := o.store.Get(ctx, key)
		if err != nil && !errors.Is(err, storage.ErrNotFound) {
			return fmt.Errorf("read node record: %w", err)
		}
		if err != nil || kv.Lease != lease {
			if err := o.store.PutLeased(ctx, key, b, lease); err != nil {
				// The record is not on the new lease, and nothing is
				// claimed on it yet: as after a failed first write,
				// nothing holds it, and no later Establish would find
				// it to revoke (it finds leases by the record and by
				// claims).
				o.revokeUnused(ctx, lease)
				return fmt.Errorf("register node: %w", err)
			}
		}
	}
	var claims []storage.Claim
	if len(partitions) > 0 {
		if claims, err = o.store.Claim(ctx, rec.NodeID, lease, partitions); err != nil {
			return fmt.Errorf("claim partitions: %w", err)
		}
	}
	o.mu.Lock()
	if o.resigned {
		// Resign ran meanwhile (a stopping node): this lease must not
		// hold anything.
		o.mu.Unlock()
		_ = o.store.RevokeLease(ctx, lease)
		return errors.New("ownership resigned")
	}
	o.lease = lease
	o.record = rec
	o.recordRev = 0
	o.established = true
	o.validUntil = sent.Add(o.ttl - o.margin())
	for _, c := range claims {
		o.claims[c.Partition] = c
	}
	o.mu.Unlock()
	o.log.Info("lease granted", zap.Int("claimed", len(claims)), zap.Int("asked", len(partitions)), zap.Int64("lease", int64(lease)))
	return nil
}

// previousLeases returns the leases of this node's previous runs to revoke:
// recorded (the one the node's record was on, 0 if none) and every other
// lease that holds a claim of this node's, but not lease (the new run's)
// or the one this run holds.
func (o *Ownership) previousLeases(ctx context.Context, recorded, lease storage.LeaseID) ([]storage.LeaseID, error) {
	claims, err := o.store.Claims(ctx)
	if err != nil {
		return nil, err
	}
	var out []storage.LeaseID
	if recorded != 0 {
		out = append(out, recorded)
	}
	id, current := o.Record().NodeID, o.currentLease()
	for _, c := range claims {
		if c.Node == id && c.Lease != 0 && c.Lease != lease && c.Lease != current && !slices.Contains(out, c.Lease) {
			out = append(out, c.Lease)
		}
	}
	// The lease this run lost, also once it has expired (its record and
	// claims went with it, so nothing above names it): revoking it is
	// how the store forgets it, which otherwise kept it, one per lease
	// lost by expiry (a stall past the TTL).
	o.mu.RLock()
	lost := o.lostLease
	o.mu.RUnlock()
	if lost != 0 && lost != lease && lost != current && !slices.Contains(out, lost) {
		out = append(out, lost)
	}
	return out, nil
}

// Claim claims those of partitions that have no owner, and returns the
// ones it claimed. A partition owned in storage on this node's lease but
// not held (a claim that committed with its reply lost, here or in an
// earlier Claim) is adopted and returned too: it would otherwise be owned
// on record and served by no one until the lease ended. The OnClaimed
// callbacks run before it returns, so the wakeups of the new partitions
// are scheduled.
func (o *Ownership) Claim(ctx context.Context, partitions []uint32) ([]uint32, error) {
	lease := o.currentLease()
	if lease == 0 {
		return nil, storage.ErrLeaseNotFound
	}
	claims, err := o.store.Claim(ctx, o.Record().NodeID, lease, partitions)
	if err != nil || len(claims) < len(partitions) {
		if orphans, lerr := o.onLease(ctx, lease, partitions); lerr == nil {
			claims = append(claims, orphans...)
		}
	}
	o.mu.Lock()
	if o.lease != lease {
		// The lease was lost while claiming: these claims died with it.
		o.mu.Unlock()
		return nil, storage.ErrLeaseNotFound
	}
	parts := make([]uint32, 0, len(claims))
	for _, c := range claims {
		// Only claims not held yet, and not released or replaced since
		// storage was listed (tokens only grow).
		held, have := o.claims[c.Partition]
		_, leaving := o.releasing[c.Partition]
		if leaving || (have && held.Token >= c.Token) || c.Token <= o.released[c.Partition] {
			continue
		}
		o.claims[c.Partition] = c
		parts = append(parts, c.Partition)
	}
	fns := append([]func(context.Context, []uint32){}, o.onClaimed...)
	o.mu.Unlock()
	if err != nil && len(parts) == 0 {
		return nil, err
	}
	if len(parts) > 0 {
		// Bounded by the lease's local deadline: past it nothing they
		// load is served, and a storage that went away would hold the
		// caller (the balancer) until it came back.
		cctx, ccancel := context.WithDeadline(ctx, o.deadline())
		for _, fn := range fns {
			fn(cctx, parts)
		}
		ccancel()
	}
	return parts, nil
}

// onLease returns the claims storage holds on lease among partitions.
func (o *Ownership) onLease(ctx context.Context, lease storage.LeaseID, partitions []uint32) ([]storage.Claim, error) {
	all, err := o.store.Claims(ctx)
	if err != nil {
		return nil, err
	}
	var out []storage.Claim
	for _, c := range all {
		if c.Lease == lease && slices.Contains(partitions, c.Partition) {
			out = append(out, c)
		}
	}
	return out, nil
}

// Holds reports whether p is held, served or being released: false means
// this node has no claim on p that it knows of.
func (o *Ownership) Holds(p uint32) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	_, have := o.claims[p]
	_, leaving := o.releasing[p]
	return have || leaving
}

// Claimed reports whether this node holds partition p's claim to serve
// it: not handed off, nor being handed off. Unlike Token, it says so past
// the lease's local deadline too, until the claim is dropped.
func (o *Ownership) Claimed(p uint32) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	_, have := o.claims[p]
	return have
}

// Releasing returns the token of partition p's claim if a handoff has
// taken p out of service (BeginRelease) and not yet released it.
func (o *Ownership) Releasing(p uint32) (int64, bool) {
	o.mu.RLock()
	defer o.mu.RUnlock()
	c, ok := o.releasing[p]
	// As for Token: past the lease's local deadline the claim may be gone
	// from storage, and the partition served elsewhere, before the
	// release (or the watchdog) runs. What it lets run (a handoff's
	// OnSleep, turns re-entering it) must not.
	return c.Token, ok && time.Now().Before(o.validUntil)
}

// BeginRelease stops serving partition p (Token reports it not owned, so
// no new activation starts) while keeping its claim in storage, so that
// the activations already running can finish their turns and flush. It
// returns false if p is not owned.
func (o *Ownership) BeginRelease(p uint32) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.claims[p]
	if !ok {
		return false
	}
	delete(o.claims, p)
	o.releasing[p] = c
	return true
}

// FinishRelease deletes the claim of a partition BeginRelease took out of
// service, so that its next owner can claim it. Later writes fenced with
// the claim fail.
func (o *Ownership) FinishRelease(ctx context.Context, p uint32) error {
	o.mu.Lock()
	c, ok := o.releasing[p]
	o.mu.Unlock()
	if !ok {
		return nil
	}
	rev, err := o.store.Release(ctx, c)
	if err == nil || errors.Is(err, storage.ErrLeaseNotFound) {
		o.mu.Lock()
		delete(o.releasing, p)
		o.released[p] = max(o.released[p], c.Token)
		if rev > 0 {
			f := storage.Fence{Partition: p, Token: c.Token}
			o.ended[f] = rev
			o.endedOrder = append(o.endedOrder, f)
			if len(o.endedOrder) > maxEnded {
				delete(o.ended, o.endedOrder[0])
				o.endedOrder = slices.Delete(o.endedOrder, 0, 1)
			}
		}
		o.notifyLocked()
		o.mu.Unlock()
		return nil
	}
	return err
}

// maxEnded bounds the releases Ownership remembers for ClaimEnd: a caller
// asks within seconds of its write, and a re-fence releases one claim.
const maxEnded = 1024

// notifyLocked wakes ClaimEnd's waiters.
func (o *Ownership) notifyLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// errClaimEndUnknown: the claim ended other than by a release of this
// node's that said at which revision (its lease was lost, say).
var errClaimEndUnknown = errors.New("the claim ended without a known revision")

// ClaimEnd waits until the claim f is no longer held by this node and
// returns the store revision of the release that ended it: a write fenced
// on f applied before that revision, or never will. It fails if the claim
// ended otherwise (its lease was lost, or it was already gone when
// released), or when ctx ends.
func (o *Ownership) ClaimEnd(ctx context.Context, f storage.Fence) (int64, error) {
	for {
		o.mu.RLock()
		rev, ended := o.ended[f]
		held := o.claims[f.Partition].Token == f.Token || o.releasing[f.Partition].Token == f.Token
		ch := o.changed
		o.mu.RUnlock()
		switch {
		case ended:
			return rev, nil
		case !held:
			return 0, errClaimEndUnknown
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// ReleasedToken returns the newest token of partition p this node has
// released (0 if none).
func (o *Ownership) ReleasedToken(p uint32) int64 {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.released[p]
}

// Run keeps the lease alive until ctx is done. If the lease may have
// expired (no renewal in time) or is known lost, every claim is dropped
// first, the OnLost callbacks run, and Run re-establishes the lease and
// claims the same partitions again, with backoff, until ctx is done. It
// returns nil then, or an error wrapping ErrReplaced, without a lease,
// once another process has registered under this node's ID.
func (o *Ownership) Run(ctx context.Context) error {
	// claimed, after a lease came back, runs the callbacks of the claims
	// taken again: on their own goroutine while this loop renews and
	// watches the new lease, under a context that ends when the lease may
	// be lost. Run inline, nothing renewed the lease while they read
	// storage: with many partitions, or a slow etcd, the lease could
	// expire right after it came back.
	var claimed func(ctx context.Context)
	for {
		lease := o.currentLease()
		kctx, cancel := context.WithCancel(ctx)
		var callbacks chan struct{}
		if claimed != nil {
			callbacks = make(chan struct{})
			go func(fn func(context.Context)) {
				defer close(callbacks)
				fn(kctx)
			}(claimed)
			claimed = nil
		}
		kaErr := make(chan error, 1)
		go func() {
			kaErr <- o.store.KeepAlive(kctx, lease, func(validUntil time.Time) {
				o.renewals.Add(1)
				o.mu.Lock()
				if o.lease == lease {
					o.validUntil = validUntil.Add(-o.margin())
				}
				o.mu.Unlock()
				select {
				case o.renewed <- struct{}{}:
				default:
				}
			})
		}()
		err, kaEnded := o.watch(ctx, kaErr)
		cancel()
		if !kaEnded {
			<-kaErr
		}
		if callbacks != nil {
			// Before the claims are dropped: a callback still loading a
			// partition must not arm its timers after OnLost.
			<-callbacks
		}
		if ctx.Err() != nil || o.isResigned() {
			return nil
		}
		o.log.Error("lease lost: dropping every partition claim", zap.Error(err))
		o.losses.Add(1)
		parts := o.drop(true)
		if o.isResigned() {
			return nil
		}
		if n, hold := o.flapHold(time.Now()); hold > 0 {
			// Registered again at once, a node whose link to etcd flaps
			// took its partitions back from the nodes that had taken
			// them over, to lose them again at the next cut: a trial's
			// flapping link moved 352 partitions 20 times in 90 s, each
			// move failing calls in flight with their outcome unknown.
			if o.waitSteady(ctx, hold, n) != nil || o.isResigned() {
				return nil
			}
		}
		var rerr error
		if claimed, rerr = o.reestablish(ctx, parts); rerr != nil {
			if errors.Is(rerr, ErrReplaced) {
				o.log.Error("this node's ID was registered by another process: stopping", zap.Error(rerr))
				return rerr
			}
			return nil // ctx done
		}
	}
}

// A node that loses its lease flapWindow or less after an earlier loss
// waits, before it registers again, until storage has answered steadily
// for steadyBase, doubled for each further recent loss, at most
// steadyMax: long enough that a flapping link stops moving partitions,
// short enough that a node whose link recovered serves again soon.
var (
	flapWindow = 2 * time.Minute
	steadyBase = 2 * time.Second
	steadyMax  = 10 * time.Second
)

// flapHold records a lease loss at now and returns the losses of the last
// flapWindow and how steadily storage must answer before the node
// registers again (0: at once, the first loss in a while).
func (o *Ownership) flapHold(now time.Time) (int, time.Duration) {
	kept := o.lossTimes[:0]
	for _, t := range o.lossTimes {
		if now.Sub(t) < flapWindow {
			kept = append(kept, t)
		}
	}
	o.lossTimes = append(kept, now)
	n := len(o.lossTimes)
	if n < 2 {
		return n, 0
	}
	hold := steadyBase
	for i := 2; i < n && hold < steadyMax; i++ {
		hold *= 2
	}
	return n, min(hold, steadyMax)
}

// waitSteady returns once storage has answered every read for d, at most
// steadyWaitMax after it began (a lossy link where the lease would hold
// must not keep the node out for ever), or at once if no other node could
// have taken this one's partitions: its lost lease still stands in
// storage (lost by the local deadline only: registered again at once,
// the node takes its claims back and nothing moves), or no other node is
// registered (one node alone, or a loss every node had at once: an etcd
// restart; holding then would leave the whole cluster serving nothing).
// With ctx's error if it ends first.
func (o *Ownership) waitSteady(ctx context.Context, d time.Duration, losses int) error {
	o.mu.RLock()
	self, lost := o.record.NodeID, o.lostLease
	o.mu.RUnlock()
	begun, since := time.Now(), time.Now()
	warned := false
	for time.Since(since) < d && time.Since(begun) < steadyWaitMax {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		kvs, err := o.store.List(rctx, storage.NodesPrefix, storage.ListOptions{})
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch {
		case err != nil:
			since = time.Now()
		case !o.othersMayTakeOver(kvs, self, lost):
			return nil
		case !warned:
			warned = true
			o.log.Warn("lease lost again soon after the last loss: waiting until etcd answers steadily before registering again, so that a flapping link does not move this node's partitions back and forth",
				zap.Int("losses_recently", losses), zap.Duration("steady_for", d))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

// steadyWaitMax bounds waitSteady.
var steadyWaitMax = 30 * time.Second

// othersMayTakeOver says, of the registrations kvs, whether another node
// is registered and this one's lost lease no longer holds its record.
func (o *Ownership) othersMayTakeOver(kvs []storage.KV, self string, lost storage.LeaseID) bool {
	others := false
	for _, kv := range kvs {
		var rec NodeRecord
		if json.Unmarshal(kv.Value, &rec) != nil || rec.NodeID == "" {
			continue
		}
		if rec.NodeID == self {
			if lost != 0 && rec.Lease == lost {
				return false
			}
			continue
		}
		if !rec.Draining { // a draining node takes no partitions
			others = true
		}
	}
	return others
}

// watch waits until the lease is lost: KeepAlive failed, or the lease's
// local deadline passed without a renewal. kaEnded says whether it took
// KeepAlive's result from kaErr.
func (o *Ownership) watch(ctx context.Context, kaErr <-chan error) (err error, kaEnded bool) {
	timer := time.NewTimer(time.Until(o.deadline()))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err(), false
		case err := <-kaErr:
			if ctx.Err() != nil {
				return ctx.Err(), true
			}
			if err == nil {
				err = errors.New("keep-alive ended")
			}
			return err, true
		case <-o.renewed:
			timer.Reset(time.Until(o.deadline()))
		case <-timer.C:
			if d := time.Until(o.deadline()); d > 0 {
				timer.Reset(d)
				continue
			}
			return fmt.Errorf("no lease renewal in time: the lease may expire in %v", o.margin()), false
		}
	}
}

func (o *Ownership) isResigned() bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.resigned
}

// reestablish gets a new lease and claims parts again, with backoff, and
// returns the OnClaimed and OnEstablished callbacks to run for them, which
// Run calls as it renews and watches the new lease.
func (o *Ownership) reestablish(ctx context.Context, parts []uint32) (func(ctx context.Context), error) {
	backoff := 100 * time.Millisecond
	var (
		failed   int       // tries that failed
		warned   time.Time // when the last WARN was
		unlogged int       // failed tries since it
	)
	for {
		err := o.Establish(ctx, parts)
		if err == nil {
			if failed > 0 {
				o.log.Info("re-established ownership", zap.Int("failed_tries", failed))
			}
			o.mu.RLock()
			claimed := make([]uint32, 0, len(o.claims))
			for p := range o.claims {
				claimed = append(claimed, p)
			}
			fns := append([]func(context.Context, []uint32){}, o.onClaimed...)
			est := append([]func(){}, o.onEstablished...)
			o.mu.RUnlock()
			sort.Slice(claimed, func(i, j int) bool { return claimed[i] < claimed[j] })
			return func(cctx context.Context) {
				if len(claimed) > 0 {
					// cctx ends when the new lease may be lost: the
					// callbacks read storage, which may be unreachable
					// again already (the host retries a load cut short in
					// the background). Without that bound a node cut off
					// again right after a lease came back kept its claims,
					// and said it served, for as long as the cut lasted.
					for _, fn := range fns {
						fn(cctx, claimed)
					}
				}
				for _, fn := range est {
					fn()
				}
			}, nil
		}
		if errors.Is(err, ErrReplaced) {
			return nil, err
		}
		if ctx.Err() != nil || o.isResigned() {
			return nil, errors.New("stopped")
		}
		// Jittered, so that the nodes an etcd outage cut off together do
		// not all try again in the same instant when it ends.
		wait := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		failed++
		unlogged++
		// One WARN per reestablishWarnEvery, with the count of tries since
		// the last: a try a second through an outage of minutes was a
		// WARN a second.
		if now := time.Now(); warned.IsZero() || now.Sub(warned) >= reestablishWarnEvery {
			o.log.Warn("re-establishing ownership failed", zap.Error(err), zap.Int("failed_tries", unlogged), zap.Int("failed_tries_total", failed), zap.Duration("retry_in", wait))
			warned, unlogged = now, 0
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		backoff = min(backoff*2, reestablishBackoffMax)
	}
}

// reestablishBackoffMax caps the backoff between tries to re-establish
// the lease; each wait is jittered by ±20% around it, so it reaches 1.2 s
// at most. A try while etcd cannot answer is slow by itself (it waits for
// etcd's own timeout: 6 s on an embedded member without a leader), so a
// short wait costs etcd little; a try that fails at once is most often
// the last of an outage (etcd's "leader changed" as a member that was cut
// off rejoins), and a wait of 5 s after it kept a healed node from
// serving for 5 s more. About once a second is cheap for etcd either way.
const reestablishBackoffMax = time.Second

// reestablishWarnEvery is how often a node that cannot re-establish its
// lease says so (WARN, with the count of tries since it last did).
const reestablishWarnEvery = 10 * time.Second

func (o *Ownership) deadline() time.Time {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.validUntil
}

// drop forgets every claim and returns their partitions; if lost, the
// OnLost callbacks run.
func (o *Ownership) drop(lost bool) []uint32 {
	o.mu.Lock()
	parts := make([]uint32, 0, len(o.claims))
	for p := range o.claims {
		parts = append(parts, p)
	}
	o.claims = map[uint32]storage.Claim{}
	o.releasing = map[uint32]storage.Claim{}
	if o.lease != 0 {
		o.lostLease = o.lease
	}
	o.lease = 0
	o.notifyLocked()
	var fns []func()
	if lost {
		fns = append(fns, o.onLost...)
	}
	o.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	return parts
}

// Resign revokes the node's lease, which deletes its registration and every
// claim at once, so another run or another node can take over without
// waiting for the TTL. For a clean shutdown, after the last write.
func (o *Ownership) Resign(ctx context.Context) error {
	o.mu.Lock()
	o.resigned = true
	o.mu.Unlock()
	lease := o.currentLease()
	o.drop(false) // the host has stopped: nothing to evict
	if lease == 0 {
		return nil
	}
	return o.store.RevokeLease(ctx, lease)
}

// SetDraining updates the node's registration: a draining node is left out
// of every node's ring, so its partitions move to the others. The write
// applies only if conds hold (ErrConditionFailed otherwise), and the record
// this node keeps (Record) changes only once it applied: a refused or
// failed write leaves the node as it was.
func (o *Ownership) SetDraining(ctx context.Context, draining bool, conds ...storage.Cond) error {
	if err := o.lockRegistration(ctx, true); err != nil {
		return err
	}
	defer o.unlockRegistration()
	o.mu.RLock()
	rec, lease := o.record, o.lease
	o.mu.RUnlock()
	if lease == 0 {
		return storage.ErrLeaseNotFound
	}
	rec.Draining = draining
	b, _ := json.Marshal(rec)
	key := storage.NodeKey(rec.NodeID)
	err := o.store.PutLeased(ctx, key, b, lease, conds...)
	for _, definite := range []error{storage.ErrConditionFailed, storage.ErrLeaseNotFound, storage.ErrTooLarge, storage.ErrInvalidTxn} {
		if errors.Is(err, definite) {
			return err
		}
	}
	// Read back, for the write's revision (a copy of storage older than
	// it must not undo it: SyncRecord) and, if its reply was lost (a
	// timeout, a broken connection after etcd took it), for whether it
	// applied: storage then holds the value written, which is all the
	// caller wants of it. Without this, a drain whose reply was lost left
	// storage draining and this node not, so its balancer moved nothing.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	kv, gerr := o.store.Get(rctx, key)
	cancel()
	if err != nil && (gerr != nil || !bytes.Equal(kv.Value, b)) {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var stored NodeRecord
	if gerr == nil && json.Unmarshal(kv.Value, &stored) == nil && stored.Lease == lease {
		if kv.ModRevision > o.recordRev {
			// Storage's (a write of ours given up earlier may have
			// overtaken this one), unless SyncRecord took a newer copy
			// meanwhile.
			o.record.Draining, o.recordRev = stored.Draining, kv.ModRevision
		}
		return nil
	}
	// Applied (its reply said so), at a revision the read-back could not
	// tell: its mark, which any copy of this lease's record may correct
	// (the copy ends on storage's latest; refusing them all would keep a
	// write of ours that applied later from ever being taken).
	o.record.Draining, o.recordRev = draining, 0
	return nil
}

// SyncRecord takes the draining mark of this node's registration as a
// copy of storage holds it (stored, last written at modRev) if that is
// this lease's record and newer than the last one this node wrote or read
// back: a write whose reply was lost may apply after SetDraining gave up
// on it, and the node must then act by what storage says (its balancer;
// Establish writes the record again after a lease loss). An older copy (a
// lagging mirror) says nothing.
func (o *Ownership) SyncRecord(stored NodeRecord, modRev int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lease != 0 && stored.Lease == o.lease && stored.NodeID == o.record.NodeID && modRev > o.recordRev {
		o.record.Draining, o.recordRev = stored.Draining, modRev
	}
}

// Record returns the node's registration as last written.
func (o *Ownership) Record() NodeRecord {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.record
}

// Token returns the fencing token of partition p if this node serves it.
func (o *Ownership) Token(p uint32) (int64, bool) {
	o.mu.RLock()
	c, ok := o.claims[p]
	valid := time.Now().Before(o.validUntil)
	o.mu.RUnlock()
	// Past the lease's local deadline the claim is not served, even if
	// the watchdog has not run yet (it may be as stalled as this caller).
	return c.Token, ok && valid
}

// Owned returns how many partitions this node serves.
func (o *Ownership) Owned() int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return len(o.claims)
}

// Partitions returns the partitions this node serves, in order.
func (o *Ownership) Partitions() []uint32 {
	o.mu.RLock()
	out := make([]uint32, 0, len(o.claims))
	for p := range o.claims {
		out = append(out, p)
	}
	o.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// LeaseStats returns how many times the lease was renewed and lost.
func (o *Ownership) LeaseStats() (renewals, losses uint64) {
	return o.renewals.Load(), o.losses.Load()
}

// Lease returns the current lease (0 while there is none).
func (o *Ownership) Lease() storage.LeaseID { return o.currentLease() }

func (o *Ownership) currentLease() storage.LeaseID {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.lease
}

// AllPartitions returns [0, n).
func AllPartitions(n uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(i)
	}
	return out
}

// Leased reports whether this node holds a lease it may serve on: one
// that storage granted and that has not run past its local deadline.
func (o *Ownership) Leased() bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return o.lease != 0 && time.Now().Before(o.validUntil)
}

// Owns reports whether this node serves partition p.
func (o *Ownership) Owns(p uint32) bool {
	_, ok := o.Token(p)
	return ok
}
