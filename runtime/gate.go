package runtime

import (
	"context"
	"strings"
	"sync"
)

// turnGate lets one turn at a time into an actor, in arrival order, except
// that a call made by the turn inside re-enters it: A -> B -> A runs the
// inner call of A while A's outer turn is blocked on B, instead of
// deadlocking. The outer turn is parked in its call, so the two never touch
// the state at the same time.
//
// Which calls re-enter is decided by their chain, a path: a call chain's
// root (newChain), then one segment per turn it passed through
// (turnChain). A turn's calls carry its own chain, so a call re-enters only
// if it descends from the innermost turn inside the gate. Two calls that
// one turn made at the same time (from two goroutines) carry the same
// chain; the first to arrive re-enters and the second waits for it, as its
// chain descends from the outer turn but not from the first one's: sharing
// the root is not enough, or both would run on the state at once.
//
// It is a lock rather than a mailbox goroutine because re-entrancy needs the
// inner turn to run on the caller's goroutine while the holder is blocked.
type turnGate struct {
	mu     sync.Mutex
	holder string   // root of the chain whose turns are inside; "" when free
	turns  []string // their chains, outermost first: each re-entered the one before
	// waiters wait in arrival order: other chains' turns, and turns of the
	// holding chain that do not descend from the innermost turn.
	waiters []*gateWaiter
}

type gateWaiter struct {
	chain string
	ready chan struct{} // closed when the waiter was let in
}

// chainSep separates a chain's segments. newChain keeps it out of roots.
const chainSep = "/"

// chainRoot is the root of chain: the call chain it belongs to.
func chainRoot(chain string) string {
	if i := strings.Index(chain, chainSep); i >= 0 {
		return chain[:i]
	}
	return chain
}

// chainParent is the chain of the turn whose call started a turn on chain
// ("" for a root: a chain nothing called it from).
func chainParent(chain string) string {
	if i := strings.LastIndex(chain, chainSep); i >= 0 {
		return chain[:i]
	}
	return ""
}

// descends reports whether a call made with chain came from the turn on
// turn, directly or through other actors' turns.
func descends(chain, turn string) bool {
	return len(chain) >= len(turn) && chain[:len(turn)] == turn && (len(chain) == len(turn) || strings.HasPrefix(chain[len(turn):], chainSep))
}

// reenters reports whether a turn on chain may enter now, inside the turns
// that hold the gate. Called with mu held, the gate held.
func (g *turnGate) reenters(chain string) bool {
	parent := chainParent(chain)
	return parent != "" && chainRoot(chain) == g.holder && descends(parent, g.turns[len(g.turns)-1])
}

// enter lets a turn on chain in. Called with mu held.
func (g *turnGate) enter(chain string) {
	if len(g.turns) == 0 {
		g.holder = chainRoot(chain)
	}
	g.turns = append(g.turns, chain)
}

// acquire waits for the gate, for a turn on chain (not "", and not the
// chain of a turn inside). release(chain) must follow.
func (g *turnGate) acquire(ctx context.Context, chain string) error {
	g.mu.Lock()
	if (len(g.turns) == 0 && len(g.waiters) == 0) || (len(g.turns) > 0 && g.reenters(chain)) {
		g.enter(chain)
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
		// Let in while giving up: pass it on.
		g.release(chain)
		return ctx.Err()
	}
}

// tryAcquire takes the gate only if it is free and nobody waits.
func (g *turnGate) tryAcquire(chain string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.turns) > 0 || len(g.waiters) > 0 {
		return false
	}
	g.enter(chain)
	return true
}

// release ends the turn on chain. It is usually the innermost, but not
// always: an outer turn whose call gave up (its deadline) may end first.
func (g *turnGate) release(chain string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.turns) - 1; i >= 0; i-- {
		if g.turns[i] == chain {
			g.turns = append(g.turns[:i], g.turns[i+1:]...)
			break
		}
	}
	if len(g.turns) == 0 {
		g.holder = ""
		if len(g.waiters) > 0 {
			g.admit(0)
		}
		return
	}
	// A nested turn ended: a waiter that descends from the turn now
	// innermost (the other call of a turn that made two) goes in.
	for i, w := range g.waiters {
		if g.reenters(w.chain) {
			g.admit(i)
			return
		}
	}
}

// admit lets waiter i in. Called with mu held.
func (g *turnGate) admit(i int) {
	w := g.waiters[i]
	g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
	g.enter(w.chain)
	close(w.ready)
}

// reentered reports whether more than one turn is inside: the caller, a
// turn inside, runs re-entrant.
func (g *turnGate) reentered() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.turns) > 1
}

// heldBy reports whether turns of chain's call chain hold the gate.
func (g *turnGate) heldBy(chain string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holder != "" && g.holder == chainRoot(chain)
}

// heldAbove reports whether a turn holding the gate made, directly or
// through other actors' turns, the call on chain: a turn that cannot end
// before that call has. Unlike heldBy, a sibling's turn of the same chain
// does not count: it does not wait for the call (unless it calls back into
// the caller's actor, a cycle of siblings, which waits until its deadline
// as such calls do).
func (g *turnGate) heldAbove(chain string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.turns {
		if descends(chain, t) {
			return true
		}
	}
	return false
}

// busy reports whether a turn holds the gate or waits for it.
func (g *turnGate) busy() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.turns) > 0 || len(g.waiters) > 0
}
