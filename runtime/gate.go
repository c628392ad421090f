package runtime

import (
	"context"
	"sync"
)

// turnGate lets one turn at a time into an actor, in arrival order, except
// that a turn of the call chain that already holds the gate re-enters it:
// A -> B -> A runs the inner call of A while A's outer turn is blocked on B,
// instead of deadlocking. The outer turn is parked in its call, so the two
// never touch the state at the same time.
//
// It is a lock rather than a mailbox goroutine because re-entrancy needs the
// inner turn to run on the caller's goroutine while the holder is blocked.
type turnGate struct {
	mu      sync.Mutex
	holder  string // chain ID of the holder; "" when free
	depth   int    // re-entrant depth of the holder
	waiters []*gateWaiter
}

type gateWaiter struct {
	chain string
	ready chan struct{} // closed when the gate was handed to this waiter
}

// acquire waits for the gate. chain must not be "".
func (g *turnGate) acquire(ctx context.Context, chain string) error {
	g.mu.Lock()
	if g.holder == "" && len(g.waiters) == 0 {
		g.holder, g.depth = chain, 1
		g.mu.Unlock()
		return nil
	}
	if g.holder == chain {
		g.depth++
		g.mu.Unlock()
		return nil
	}
	w := &gateWaiter{chain: chain, ready: make(chan struct{})}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		for i, x := range g.waiters {
			if x == w {
				g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
				g.mu.Unlock()
				return ctx.Err()
			}
		}
		g.mu.Unlock()
		// Handed over while giving up: pass it on.
		g.release()
		return ctx.Err()
	}
}

// tryAcquire takes the gate only if it is free and nobody waits.
func (g *turnGate) tryAcquire(chain string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holder != "" || len(g.waiters) > 0 {
		return false
	}
	g.holder, g.depth = chain, 1
	return true
}

func (g *turnGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.depth--
	if g.depth > 0 {
		return
	}
	g.holder = ""
	if len(g.waiters) == 0 {
		return
	}
	w := g.waiters[0]
	g.waiters = g.waiters[1:]
	g.holder, g.depth = w.chain, 1
	close(w.ready)
}

// reentered reports whether the holder's chain entered the gate more than
// once: the caller, the holder, runs a re-entrant turn.
func (g *turnGate) reentered() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.depth > 1
}

// heldBy reports whether chain holds the gate.
func (g *turnGate) heldBy(chain string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holder == chain
}

// busy reports whether a turn holds the gate or waits for it.
func (g *turnGate) busy() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holder != "" || len(g.waiters) > 0
}
