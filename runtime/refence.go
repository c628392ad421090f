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
		if h.stopping || h.refencing[f.Partition] {
			h.mu.Unlock()
			continue
		}
		if h.refencing == nil {
			h.refencing = map[uint32]bool{}
		}
		h.refencing[f.Partition] = true
		h.loops.Add(1) // under mu, with stopping false: before Stop waits
		h.mu.Unlock()
		go h.refence(f)
	}
}

// refence replaces the claim f, if it is still the one served.
func (h *Host) refence(f storage.Fence) {
	defer h.loops.Done()
	defer func() {
		h.mu.Lock()
		delete(h.refencing, f.Partition)
		h.mu.Unlock()
	}()
	if tok, ok := h.own.Token(f.Partition); !ok || tok != f.Token {
		return // moved, lost, or replaced already
	}
	h.refences.Add(1)
	t0 := time.Now()
	h.log.Warn("a write on this partition has an unknown outcome: claiming it again before its actors write again",
		zap.Uint32("partition", f.Partition), zap.Int64("token", f.Token))
	ctx, cancel := context.WithTimeout(h.baseCtx, refenceDrain)
	err := h.Handoff(ctx, f.Partition)
	cancel()
	if err != nil {
		return // the host stops
	}
	// The balancer would claim it too (it is free and the ring's choice is
	// still this node), but only at its next look: claim it now.
	ctx, cancel = context.WithTimeout(h.baseCtx, 10*time.Second)
	got, err := h.own.Claim(ctx, []uint32{f.Partition})
	cancel()
	if err != nil || len(got) == 0 {
		h.log.Warn("claiming a re-fenced partition again failed; the balancer will", zap.Uint32("partition", f.Partition), zap.Error(err))
		return
	}
	tok, _ := h.own.Token(f.Partition)
	h.log.Info("partition re-fenced", zap.Uint32("partition", f.Partition), zap.Int64("token", tok), zap.Duration("took", time.Since(t0)))
}
