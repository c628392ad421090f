package runtime

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet/storage"
)

// refenceDrain bounds how long the actors of a partition being re-fenced
// may take to end their turns before they are evicted.
const refenceDrain = 5 * time.Second

// InDoubt replaces the claims named by fences: each had a write whose
// outcome is unknown, so the committer refuses every later write fenced on
// it (storage.CommitterConfig.OnInDoubt, which a node wires to this). For
// each such partition the host stops serving it, ends its actors (their
// pending writes fail, unsent), releases the claim and claims the
// partition again, with a new token. The doubtful write then either
// applied before the release, and the actors loaded again after it see it,
// or it fails its fence whenever it reaches etcd: it can never land on top
// of a newer write. Requests meanwhile get UNAVAILABLE, which clients
// retry, as in a handoff. It never blocks.
func (h *Host) InDoubt(fences []storage.Fence) {
	for _, f := range fences {
		h.mu.Lock()
		if h.stopping {
			h.mu.Unlock()
			return
		}
		if h.refencing == nil {
			h.refencing = map[uint32][]storage.Fence{}
		}
		queued, running := h.refencing[f.Partition]
		// A claim made by a re-fence may go in doubt before that re-fence
		// ends: it is queued for the same goroutine, not dropped.
		h.refencing[f.Partition] = append(queued, f)
		if !running {
			h.loops.Add(1) // under mu, with stopping false: before Stop waits
		}
		h.mu.Unlock()
		if !running {
			go h.refenceLoop(f.Partition)
		}
	}
}

// refenceLoop replaces the doubted claims of partition p, one after the
// other, until none is left.
func (h *Host) refenceLoop(p uint32) {
	defer h.loops.Done()
	for {
		h.mu.Lock()
		queued := h.refencing[p]
		if len(queued) == 0 || h.stopping {
			delete(h.refencing, p)
			h.mu.Unlock()
			return
		}
		f := queued[0]
		h.refencing[p] = queued[1:]
		h.mu.Unlock()
		h.refence(f)
	}
}

// SetWants sets what says whether the ring gives a partition to this node
// (Balancer.Wants); a host without one (a node alone) claims back every
// partition it re-fences.
func (h *Host) SetWants(fn func(p uint32) bool) {
	h.mu.Lock()
	h.wants = fn
	h.mu.Unlock()
}

// refence replaces the claim f, if it is still the one held.
func (h *Host) refence(f storage.Fence) {
	// The token of the claim held, served or not: a claim past its lease's
	// local deadline may yet be renewed and served again.
	if tok, _ := h.own.Token(f.Partition); tok != f.Token {
		return // released, lost, or replaced already: the token is dead
	}
	h.refences.Add(1)
	t0 := time.Now()
	h.log.Warn("a write on this partition has an unknown outcome: claiming it again before its actors write again",
		zap.Uint32("partition", f.Partition), zap.Int64("token", f.Token))
	ctx, cancel := context.WithTimeout(h.baseCtx, refenceDrain)
	// No OnSleep: the committer refuses every write on the doubted claim,
	// so what it changed would be lost.
	began, err := h.handoff(ctx, f.Partition, false)
	cancel()
	if err != nil || !began {
		// The host stops, or another handoff of the partition runs: its
		// claim goes all the same, and whoever claims it next gets a new
		// token.
		return
	}
	// Claim it now rather than at the balancer's next look, unless the
	// ring gives it to another node meanwhile (or this one drains): then
	// it is left free for that node.
	backoff := 100 * time.Millisecond
	for failed := 0; ; failed++ {
		h.mu.Lock()
		stopping, wants := h.stopping, h.wants
		h.mu.Unlock()
		if stopping || (wants != nil && !wants(f.Partition)) {
			return
		}
		ctx, cancel := context.WithTimeout(h.baseCtx, 10*time.Second)
		_, err := h.own.Claim(ctx, []uint32{f.Partition})
		cancel()
		if err == nil {
			break
		}
		if failed == 0 {
			// Once: etcd out of space refuses the claim until an
			// operator frees space, which may take hours.
			h.log.Warn("claiming a re-fenced partition again failed; retrying until it succeeds", zap.Uint32("partition", f.Partition), zap.Error(err))
		}
		select {
		case <-h.baseCtx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
	tok, owned := h.own.Token(f.Partition)
	h.log.Info("partition re-fenced", zap.Uint32("partition", f.Partition), zap.Bool("owned", owned),
		zap.Int64("token", tok), zap.Duration("took", time.Since(t0)))
}
