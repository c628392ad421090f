package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
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
//
// One exception to one turn at a time: while a workflow Step's body runs
// (openLane to closeLane), a send's turn may run beside it (turnSend),
// one send at a time, and only while no turn re-entered the step's. A
// step body may run for seconds (a payment call): a message sent then must
// not wait for it, as a Temporal signal does not wait for an activity. The
// two touch different things: the body the state, through its StepEnv; a
// send the queues, its idempotency keys and the write log (under the
// activation's locks), none of which a step body reaches. The step's own
// bookkeeping after its body (its writes, the messages it puts back) waits
// for the send to leave (closeLane).
//
// Queries (read-only actions) go in beside a step's body too
// (turnQuery), any number at once, as readers, while the body is alone
// inside: each runs on a copy of the state as last saved, taken as it goes
// in. The body changes the activation's state, saved only after
// closeLane, so the query answers from what the actor committed before the
// step (and what a call of the body's back into its actor saved since), as
// a Temporal query answers while an activity runs. closeLane waits for
// them to leave as for the send, so that no query outlives the step's
// turn: the turns after it (an OnSleep closing the vars, a state-changing
// action) still run alone. So the step's turn waits for its readers: the
// wait graph counts them (heldAbove too). A call made by a query beside a
// step, back into the same actor, goes in beside too if it is a query or
// a send; a state-changing one could only wait for the step, which waits
// for the query: it fails at once (actor.deadlock).
type turnGate struct {
	mu     sync.Mutex
	holder string   // root of the chain whose turns are inside; "" when free
	turns  []string // their chains, outermost first: each re-entered the one before
	// waiters wait in arrival order: other chains' turns, and turns of the
	// holding chain that do not descend from the innermost turn.
	waiters []*gateWaiter

	// lane: the one turn inside is a step's body, beside which a send may
	// run. side is the chain of the send running beside it ("" if none);
	// sideLeft, if not nil, is closed when it leaves (closeLane waits).
	lane     bool
	side     string
	sideLeft chan struct{}
	// readers are the chains of the queries beside the step's body, one
	// entry per query (each turn's chain is its own); readersLeft,
	// if not nil, is closed when the last leaves (closeLane waits).
	readers     []string
	readersLeft chan struct{}

	// graph, if set, is the host's record of the turns waiting for its
	// gates, in which acquireAs looks for a cycle of waits (a deadlock)
	// before waiting; name is the actor's, for the error.
	graph *waitGraph
	name  string

	// shedAt, if above 0, is Config.MaxWaitingCalls: a call's turn
	// (acquireAs with shed) that would wait behind that many is refused.
	shedAt int
}

type gateWaiter struct {
	chain string
	ready chan struct{} // closed when the waiter was let in
	gate  *turnGate
	done  bool // let in, or given up; under gate.mu
	// send: a send's turn, which may run beside a step's body; query: a
	// query's, which may too; beside: it was let in so (under gate.mu,
	// before ready is closed).
	send, query, beside bool
	// onBeside, for a query, is called under gate.mu as it is let in
	// beside a step's body: it takes the state the query reads, which no
	// turn may save again before the query leaves.
	onBeside func()
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
	return g.acquireWith(ctx, chain, false)
}

func (g *turnGate) acquireWith(ctx context.Context, chain string, detect bool) error {
	_, err := g.acquireAs(ctx, chain, detect, turnPlain, nil, false)
	return err
}

// turnMode is what kind of turn acquireAs lets in.
type turnMode int

const (
	turnPlain turnMode = iota // one turn at a time, re-entrant calls aside
	turnSend                  // may run beside a step's body, one at a time
	turnQuery                 // may run beside a step's body, any number
)

// acquireAs lets a turn of mode in on chain. With detect, a wait that
// would close a cycle of waits (a deadlock) fails at once with an error
// naming the actors of the cycle (rivet.ErrFailedPrecondition, reason
// actor.deadlock) instead of waiting until its deadline. A turnSend or
// turnQuery turn may run beside a step's body: beside says it did (it
// holds no turn of the gate's, and must not wait for one or run the
// actor's code). A send's ends with release(chain) all the same, a
// query's with releaseQuery(chain); a query's runs on a copy of the state
// that onBeside takes (called under the gate's lock as it goes in so). A
// send or query from a call the step made re-enters its turn, as any call
// does. shed refuses it rather than wait behind shedAt
// turns: rivet.ErrUnavailable, reason actor.overloaded
// (Config.MaxWaitingCalls, isOverloaded). A turn that needs no wait (a
// free gate, a re-entry, a turn beside a step's body) is never refused.
func (g *turnGate) acquireAs(ctx context.Context, chain string, detect bool, mode turnMode, onBeside func(), shed bool) (beside bool, _ error) {
	g.mu.Lock()
	switch {
	case len(g.turns) == 0 && len(g.waiters) == 0, len(g.turns) > 0 && g.side == "" && g.reenters(chain):
		g.enter(chain)
		g.mu.Unlock()
		return false, nil
	case mode == turnSend && g.sideOpen(chain):
		g.side = chain
		g.mu.Unlock()
		return true, nil
	case mode == turnQuery && g.readerOpen(chain):
		g.readers = append(g.readers, chain)
		onBeside()
		g.mu.Unlock()
		return true, nil
	case mode == turnPlain && len(g.turns) > 0 && g.fromReader(chain):
		name := g.name
		g.mu.Unlock()
		return false, rivet.Reasonf(rivet.ErrFailedPrecondition, "actor", "deadlock",
			"deadlock: this call comes from a query of %s that runs beside its workflow's step, and changes the state of %s: it would wait for the step, which waits for the query to end; a query beside a step may call back its own actor's queries and sends only", name, name)
	}
	if shed && g.shedAt > 0 && len(g.waiters) >= g.shedAt {
		name, n := g.name, len(g.waiters)
		g.mu.Unlock()
		return false, rivet.Reasonf(rivet.ErrUnavailable, "actor", "overloaded",
			"%s is overloaded: %d turns wait for it already, its limit (MaxWaitingCalls); this call did not run (but for the actor's create, if it asked for one): retry with backoff", name, n)
	}
	w := &gateWaiter{chain: chain, ready: make(chan struct{}), gate: g, send: mode == turnSend, query: mode == turnQuery, onBeside: onBeside}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()

	if detect {
		cycle := g.graph.add(w)
		defer g.graph.remove(w)
		if cycle != nil {
			if !g.withdraw(w) {
				return g.wasBeside(w), nil // let in meanwhile: the gate is this turn's
			}
			return false, deadlockError(cycle)
		}
	}
	select {
	case <-w.ready:
		return g.wasBeside(w), nil
	case <-ctx.Done():
		if g.withdraw(w) {
			return false, ctx.Err()
		}
		// Let in while giving up: pass it on.
		if w.query && g.wasBeside(w) {
			g.releaseQuery(chain)
		} else {
			g.release(chain)
		}
		return false, ctx.Err()
	}
}

// wasBeside reports whether w, let in, runs beside a step's body.
func (g *turnGate) wasBeside(w *gateWaiter) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return w.beside
}

// readerOpen reports whether a query on chain may go in beside the turn
// inside now: a step's body, alone inside, and the query not a call of
// its (which re-enters the step's turn). Once the step's body has ended
// (the lane closed), only a query that a query beside it made: the step
// waits for that one. Called with mu held.
func (g *turnGate) readerOpen(chain string) bool {
	return len(g.turns) == 1 && (g.lane || g.fromReader(chain)) && !g.reenters(chain)
}

// sideOpen reports whether a send on chain may go in beside the turn
// inside now: as readerOpen, one send at a time. Called with mu held.
func (g *turnGate) sideOpen(chain string) bool {
	return g.side == "" && g.readerOpen(chain)
}

// fromReader reports whether a query beside the step's body made the call
// on chain, directly or through other actors' turns. Called with mu held.
func (g *turnGate) fromReader(chain string) bool {
	for _, r := range g.readers {
		if descends(chain, r) && chain != r {
			return true
		}
	}
	return false
}

// admitBeside lets in beside a step's body every query that waits and
// may, and the first send that waits and may. Not a send or query that
// re-enters the turn inside: it is a call of the step's, let in as such.
// Called with mu held.
func (g *turnGate) admitBeside() {
	if len(g.turns) != 1 || (!g.lane && len(g.readers) == 0) {
		return
	}
	kept := g.waiters[:0]
	for _, w := range g.waiters {
		switch {
		case w.query && g.readerOpen(w.chain):
			g.readers = append(g.readers, w.chain)
			w.onBeside()
		case w.send && g.sideOpen(w.chain):
			g.side = w.chain
		default:
			kept = append(kept, w)
			continue
		}
		w.done, w.beside = true, true
		close(w.ready)
	}
	clear(g.waiters[len(kept):])
	g.waiters = kept
}

// openLane lets sends run beside the turn inside, a step's body: the only
// turn inside, which calls closeLane before it does anything else.
func (g *turnGate) openLane() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lane = true
	g.admitBeside()
}

// closeLane lets no more sends or queries in beside the step's body
// (only those the queries beside it make) and waits for all that run
// beside it to leave.
func (g *turnGate) closeLane() {
	g.mu.Lock()
	g.lane = false
	for g.side != "" || len(g.readers) > 0 {
		var left chan struct{}
		if g.side != "" {
			if g.sideLeft == nil {
				g.sideLeft = make(chan struct{})
			}
			left = g.sideLeft
		} else {
			if g.readersLeft == nil {
				g.readersLeft = make(chan struct{})
			}
			left = g.readersLeft
		}
		g.mu.Unlock()
		<-left
		g.mu.Lock()
	}
	g.mu.Unlock()
}

// releaseQuery ends a query's turn on chain that ran beside a step's body
// (acquireAs said beside).
func (g *turnGate) releaseQuery(chain string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, r := range g.readers {
		if r == chain {
			g.readers = append(g.readers[:i], g.readers[i+1:]...)
			break
		}
	}
	if len(g.readers) == 0 && g.readersLeft != nil {
		close(g.readersLeft)
		g.readersLeft = nil
	}
	// A send or query that a query beside made, and that waited for a
	// send beside (which may have been this one's), may go in now.
	g.admitBeside()
}

// withdraw takes w out of the waiters; false if it was let in already.
func (g *turnGate) withdraw(w *gateWaiter) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, x := range g.waiters {
		if x == w {
			g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
			w.done = true
			return true
		}
	}
	return false
}

// deadlockError says which actors wait for each other. cycle lists the
// gates from the one the failing call waited for to the one a turn it came
// from holds.
func deadlockError(cycle []string) error {
	path := strings.Join(append([]string{cycle[len(cycle)-1]}, cycle...), " -> ")
	var via string
	if len(cycle) > 1 {
		via = fmt.Sprintf(", which waits for %s", cycle[len(cycle)-1])
		if len(cycle) > 2 {
			via = fmt.Sprintf(", which waits (through %s) for %s", strings.Join(cycle[1:len(cycle)-1], ", "), cycle[len(cycle)-1])
		}
	}
	return rivet.Reasonf(rivet.ErrFailedPrecondition, "actor", "deadlock",
		"deadlock: this call would wait for ever for %s, whose turn is another call's%s, held by a turn this call came from (%s): a call re-enters only an actor whose turn it came from, so none of these calls could go on before its deadline, and this one fails now instead", cycle[0], via, path)
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
	if g.side != "" && g.side == chain {
		g.side = ""
		if g.sideLeft != nil {
			close(g.sideLeft)
			g.sideLeft = nil
		}
		// A call of the step's that re-enters it waited for the send.
		for i, w := range g.waiters {
			if len(g.turns) > 0 && g.reenters(w.chain) {
				g.admit(i)
				return
			}
		}
		g.admitBeside()
		return
	}
	for i := len(g.turns) - 1; i >= 0; i-- {
		if g.turns[i] == chain {
			g.turns = append(g.turns[:i], g.turns[i+1:]...)
			break
		}
	}
	if len(g.turns) == 0 {
		g.holder = ""
		g.lane = false // closeLane's work, should a step's turn end without it
		if len(g.waiters) > 0 {
			g.admit(0)
		}
		return
	}
	// A nested turn ended: a waiter that descends from the turn now
	// innermost (the other call of a turn that made two) goes in, or else
	// a send beside the step's body, if that is the turn now inside.
	for i, w := range g.waiters {
		if g.reenters(w.chain) {
			g.admit(i)
			return
		}
	}
	g.admitBeside()
}

// admit lets waiter i in. Called with mu held.
func (g *turnGate) admit(i int) {
	w := g.waiters[i]
	g.waiters = append(g.waiters[:i], g.waiters[i+1:]...)
	w.done = true
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
// as such calls do). A query beside a step's body counts: the step's turn
// does not end before it.
func (g *turnGate) heldAbove(chain string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.turns {
		if descends(chain, t) {
			return true
		}
	}
	for _, r := range g.readers {
		if descends(chain, r) {
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

// waitGraph records the turns that wait for a host's gates, by their
// chain's root, to find a cycle of waits as a wait begins: A's turn calls
// B and waits for B's gate, which a turn of another chain holds while it
// waits for A's (two callers that each call the other's actor), or two
// calls one turn made at once wait each for an actor the other holds. No
// such wait ends before its deadline: a turn does not end before its
// calls do, and a waiter that does not descend from the turn inside a
// gate (it would have re-entered) gets in only once that turn has ended.
//
// A turn blocks on a waiter that descends from it (a call it made,
// directly or through other actors' turns), and a waiter on every turn
// inside its gate from the innermost down to the one it would re-enter
// (all of them if none): those must end before it gets in, the outer ones
// too (blockingTurns). So from the gate a new waiter waits for, the walk
// goes to the turns it waits on, to the waiters that descend from those
// turns, to their gates, and so on: a turn the new waiter descends from
// closes the cycle. Looking at the innermost turn alone missed a cycle
// through an outer one (A's turn calls B, whose turn calls back into A
// and at once into C, held by a turn that waits for A): once the
// re-entrant turn ended, the calls waited until their deadline. Each step
// reads a gate's turns and whether the waiter that led there still waits
// under that gate's lock, and a wait in a cycle never ends, so a cycle
// the walk finds is one. Only this host's waits are seen: a cycle
// through an actor another node serves is not found, and waits until its
// deadline as before (an edge through another node counts, as a turn
// waits for a call it made there).
type waitGraph struct {
	mu     sync.Mutex
	byRoot map[string]map[*gateWaiter]struct{}
}

// add records w, which waits for its gate, and returns the names of the
// gates of a cycle of waits it closes (nil if none): from w's gate to the
// gate a turn w descends from holds.
func (wg *waitGraph) add(w *gateWaiter) []string {
	wg.mu.Lock()
	defer wg.mu.Unlock()
	root := chainRoot(w.chain)
	if wg.byRoot == nil {
		wg.byRoot = make(map[string]map[*gateWaiter]struct{})
	}
	m := wg.byRoot[root]
	if m == nil {
		m = make(map[*gateWaiter]struct{})
		wg.byRoot[root] = m
	}
	m[w] = struct{}{}
	seen := make(map[string]bool) // turns walked from
	var walk func(x *gateWaiter) []string
	walk = func(x *gateWaiter) []string {
		g := x.gate
		var blocking []string
		g.mu.Lock()
		if !x.done {
			turns := g.turns
			if (x.send || x.query) && len(turns) > 0 && (g.lane || g.fromReader(x.chain)) && !g.reenters(x.chain) {
				// It goes in beside the step's body, once the send beside
				// (which waits for no gate; a query does not wait for it)
				// and any turn that re-entered the step's have left: not
				// after the step's turn, whose calls it does not wait for
				// (a cycle through them was found that was none).
				turns = turns[1:]
			}
			blocking = blockingTurns(turns, x.chain)
			if n := len(blocking); n > 0 && len(g.readers) > 0 && blocking[n-1] == g.turns[0] {
				// The step's turn (the readers are beside turns[0], a
				// step's body) ends only after the queries beside it:
				// the waiter waits for them too.
				blocking = append(blocking, g.readers...)
			}
		}
		g.mu.Unlock()
		for _, turn := range blocking {
			if seen[turn] {
				continue
			}
			seen[turn] = true
			if descends(w.chain, turn) {
				return []string{g.name}
			}
			for y := range wg.byRoot[chainRoot(turn)] {
				if y != w && descends(y.chain, turn) {
					if rest := walk(y); rest != nil {
						return append([]string{g.name}, rest...)
					}
				}
			}
		}
		return nil
	}
	return walk(w)
}

// blockingTurns returns (a copy of) the turns inside a gate, innermost
// first, that must end before a waiter on chain gets in: down to the one
// it would re-enter, the innermost that the turn it came from descends
// from, or all of them if none. (Each turn inside descends from the one
// before it, so none that comes in meanwhile lets it in sooner.) Called
// with the gate's mu held.
func blockingTurns(turns []string, chain string) []string {
	parent := chainParent(chain)
	var out []string
	for i := len(turns) - 1; i >= 0; i-- {
		if parent != "" && descends(parent, turns[i]) {
			break
		}
		out = append(out, turns[i])
	}
	return out
}

// remove forgets w once it no longer waits.
func (wg *waitGraph) remove(w *gateWaiter) {
	wg.mu.Lock()
	defer wg.mu.Unlock()
	root := chainRoot(w.chain)
	delete(wg.byRoot[root], w)
	if len(wg.byRoot[root]) == 0 {
		delete(wg.byRoot, root)
	}
}

// shedLogEvery is how often at most a node logs the calls it refused as
// overloaded (MaxWaitingCalls): a flood refuses thousands a second.
const shedLogEvery = 10 * time.Second

// shedCall says whether a call on chain may be refused rather than wait
// (Config.MaxWaitingCalls): a client's (forwarded or not), which comes
// with no chain. A call an actor makes (its turn's, or its KeepAwake
// task's: hostClient.callChain) is not: refused, it would fail the turn
// (a step's retries run out in a second, a one-shot scheduled call is
// used up), where it waited before; and its caller holds a goroutine (and
// a turn) all the same, so refusing it frees nothing.
func shedCall(c Chain) bool { return c.ID == "" }

// IsOverloaded reports whether err is a node's refusal of a call that
// found Config.MaxWaitingCalls turns waiting for its actor
// (actor.overloaded): the call did not run.
func IsOverloaded(err error) bool {
	if err == nil {
		return false // before rerr, which escapes: no allocation per turn
	}
	var rerr *rivet.Error
	return errors.As(err, &rerr) && errors.Is(rerr.Kind, rivet.ErrUnavailable) && rerr.Group == "actor" && rerr.Code == "overloaded"
}

// noteShed counts a call refused as overloaded, and logs it if none was
// logged for shedLogEvery, with the node's count so far: the operator
// learns of a flooded actor (the one of the call that logged) without a
// line per call.
func (h *Host) noteShed(a *activation) {
	n := h.callsShed.Add(1)
	if !h.shedLog.Allow(shedLogEvery) {
		return
	}
	h.log.Warn("calls refused: too many turns wait for an actor (MaxWaitingCalls); clients retry them with backoff",
		zap.String("actor", a.describe()), zap.Int("max_waiting_calls", h.cfg.MaxWaitingCalls), zap.Uint64("refused_total", n))
}
