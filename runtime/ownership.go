package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rivet-go/rivet/storage"
	"go.uber.org/zap"
)

// NodeRecord is a node's registration in storage (storage.NodeKey), on the
// node's lease: it vanishes when the node does.
type NodeRecord struct {
	NodeID    string          `json:"node_id"`
	GRPCAddr  string          `json:"grpc_addr"`
	StartedAt time.Time       `json:"started_at"`
	Lease     storage.LeaseID `json:"lease"`
}

// Ownership holds this node's lease and the partition claims on it. Claims
// die with the lease: when the lease is lost, every claim is dropped at once
// (and any write fenced on them already fails in storage).
type Ownership struct {
	store  storage.Store
	record NodeRecord
	ttl    time.Duration
	log    *zap.Logger

	mu     sync.RWMutex
	lease  storage.LeaseID
	claims map[uint32]storage.Claim
	// onLost is called, without mu held, when claims are dropped.
	onLost []func()
	// onClaimed is called, without mu held, when claims were re-established
	// after a loss (not after the first Establish: the host starts after it).
	onClaimed []func(context.Context)
}

// NewOwnership returns an Ownership for the node described by record. It
// starts nothing; call Establish, then Run.
func NewOwnership(store storage.Store, record NodeRecord, ttl time.Duration, log *zap.Logger) *Ownership {
	if log == nil {
		log = zap.NewNop()
	}
	return &Ownership{store: store, record: record, ttl: ttl, log: log, claims: map[uint32]storage.Claim{}}
}

// OnLost registers fn to be called when the node's claims are lost.
func (o *Ownership) OnLost(fn func()) {
	o.mu.Lock()
	o.onLost = append(o.onLost, fn)
	o.mu.Unlock()
}

// OnClaimed registers fn to be called when claims are re-established after
// a loss.
func (o *Ownership) OnClaimed(fn func(context.Context)) {
	o.mu.Lock()
	o.onClaimed = append(o.onClaimed, fn)
	o.mu.Unlock()
}

// Establish grants the node's lease, registers the node and claims the
// given partitions (those that have no owner). If a previous run of this
// node (same node ID) left a registration, its lease is revoked first, so
// that a node restarted after a crash serves at once instead of waiting for
// its old claims to expire. Node IDs must therefore be unique.
func (o *Ownership) Establish(ctx context.Context, partitions []uint32) error {
	if kv, err := o.store.Get(ctx, storage.NodeKey(o.record.NodeID)); err == nil {
		var prev NodeRecord
		if json.Unmarshal(kv.Value, &prev) == nil && prev.Lease != 0 && prev.Lease != o.currentLease() {
			o.log.Info("revoking the lease of this node's previous run", zap.Int64("lease", int64(prev.Lease)))
			if err := o.store.RevokeLease(ctx, prev.Lease); err != nil {
				return fmt.Errorf("revoke previous lease: %w", err)
			}
		}
	} else if !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("read node record: %w", err)
	}
	lease, err := o.store.GrantLease(ctx, o.ttl)
	if err != nil {
		return fmt.Errorf("grant lease: %w", err)
	}
	rec := o.record
	rec.Lease = lease
	b, _ := json.Marshal(rec)
	if err := o.store.PutLeased(ctx, storage.NodeKey(rec.NodeID), b, lease); err != nil {
		return fmt.Errorf("register node: %w", err)
	}
	claims, err := o.store.Claim(ctx, rec.NodeID, lease, partitions)
	if err != nil {
		return fmt.Errorf("claim partitions: %w", err)
	}
	o.mu.Lock()
	o.lease = lease
	o.record = rec
	for _, c := range claims {
		o.claims[c.Partition] = c
	}
	o.mu.Unlock()
	o.log.Info("partitions claimed", zap.Int("claimed", len(claims)), zap.Int("asked", len(partitions)), zap.Int64("lease", int64(lease)))
	return nil
}

// Run keeps the lease alive until ctx is done. If the lease is lost (etcd
// unreachable past the TTL), every claim is dropped, the OnLost callbacks
// run, and Run re-establishes the lease and claims the same partitions
// again, with backoff, until ctx is done.
func (o *Ownership) Run(ctx context.Context) error {
	for {
		err := o.store.KeepAlive(ctx, o.currentLease())
		if ctx.Err() != nil {
			return nil
		}
		o.log.Error("lease lost: dropping every partition claim", zap.Error(err))
		parts := o.drop(true)
		backoff := 100 * time.Millisecond
		for {
			if err := o.Establish(ctx, parts); err == nil {
				o.mu.RLock()
				fns := append([]func(context.Context){}, o.onClaimed...)
				o.mu.RUnlock()
				for _, fn := range fns {
					fn(ctx)
				}
				break
			} else if ctx.Err() != nil {
				return nil
			} else {
				o.log.Warn("re-establishing ownership failed", zap.Error(err), zap.Duration("retry_in", backoff))
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
		}
	}
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
	o.lease = 0
	var fns []func()
	if lost {
		fns = append(fns, o.onLost...)
	}
	o.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	return parts
}

// Resign revokes the node's lease, which deletes its registration and every
// claim at once, so another run or another node can take over without
// waiting for the TTL. For a clean shutdown, after the last write.
func (o *Ownership) Resign(ctx context.Context) error {
	lease := o.currentLease()
	o.drop(false) // the host has stopped: nothing to evict
	if lease == 0 {
		return nil
	}
	return o.store.RevokeLease(ctx, lease)
}

// Token returns the fencing token of partition p if this node owns it.
func (o *Ownership) Token(p uint32) (int64, bool) {
	o.mu.RLock()
	c, ok := o.claims[p]
	o.mu.RUnlock()
	return c.Token, ok
}

// Owned returns how many partitions this node owns.
func (o *Ownership) Owned() int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return len(o.claims)
}

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
