package runtime

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// enterAsync starts acquire(chain) and returns a channel that gets its
// result.
func enterAsync(g *turnGate, ctx context.Context, chain string) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- g.acquire(ctx, chain) }()
	return ch
}

func waitWaiters(t *testing.T, g *turnGate, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		got := len(g.waiters)
		g.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func mustEnter(t *testing.T, ch <-chan error, who string) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never entered", who)
	}
}

func mustWait(t *testing.T, ch <-chan error, who string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s entered (%v), want it waiting", who, err)
	default:
	}
}

func TestGateLetsInOnlyCallsOfTheInnermostTurn(t *testing.T) {
	ctx := context.Background()
	var g turnGate
	mustEnter(t, enterAsync(&g, ctx, "r"), "root turn")
	// The root turn's call comes back: it re-enters.
	mustEnter(t, enterAsync(&g, ctx, "r/a"), "call of the root turn")
	// The root turn's second call, made at the same time: it waits for
	// the first one's turn.
	sibling := enterAsync(&g, ctx, "r/b")
	// Another chain waits its turn.
	other := enterAsync(&g, ctx, "q")
	waitWaiters(t, &g, 2)
	// A call from the first one's turn, through two other actors: it
	// re-enters, ahead of both.
	mustEnter(t, enterAsync(&g, ctx, "r/a/x/y"), "call nested in the re-entrant turn")
	if !g.reentered() {
		t.Fatal("three turns inside, reentered false")
	}
	g.release("r/a/x/y")
	mustWait(t, sibling, "sibling while the first call's turn is inside")
	g.release("r/a")
	mustEnter(t, sibling, "sibling once the first call's turn ended")
	mustWait(t, other, "other chain")
	g.release("r/b")
	g.release("r")
	mustEnter(t, other, "other chain once the root turn ended")
	if !g.heldBy("q/z") || g.heldBy("r/a") || g.reentered() {
		t.Fatal("heldBy/reentered wrong after the other chain entered")
	}
	g.release("q")
	if g.busy() {
		t.Fatal("gate busy after every turn ended")
	}
}

// heldAbove tells the turns that made a call (which cannot end before it
// has) from siblings' turns of the same chain (which can).
func TestGateHeldAboveACall(t *testing.T) {
	ctx := context.Background()
	var g turnGate
	mustEnter(t, enterAsync(&g, ctx, "r/a"), "a turn")
	mustEnter(t, enterAsync(&g, ctx, "r/a/x/y"), "a call nested in it")
	for chain, want := range map[string]bool{
		"r/a":       true,  // the turn itself, sending to its own actor
		"r/a/z":     true,  // a call it made, through another actor
		"r/a/x/y/w": true,  // a call the nested turn made
		"r/b":       false, // a sibling of the holding turn
		"r/ab":      false, // not a path below r/a
		"r":         false, // the root, above every turn inside
		"q/a":       false, // another chain
	} {
		if got := g.heldAbove(chain); got != want {
			t.Errorf("heldAbove(%q) = %v, want %v", chain, got, want)
		}
	}
	g.release("r/a/x/y")
	g.release("r/a")
	if g.heldAbove("r/a") {
		t.Fatal("heldAbove after every turn ended")
	}
}

func TestGateOuterTurnEndingFirst(t *testing.T) {
	ctx := context.Background()
	var g turnGate
	mustEnter(t, enterAsync(&g, ctx, "r"), "root turn")
	mustEnter(t, enterAsync(&g, ctx, "r/a"), "call of the root turn")
	// The root turn's call gave up and the turn ended: the re-entrant one
	// is still inside, alone.
	g.release("r")
	if g.reentered() || !g.heldBy("r") {
		t.Fatal("after the outer turn ended: want one turn of r inside")
	}
	// A later call of the ended root turn descends from no turn inside.
	late := enterAsync(&g, ctx, "r/b")
	waitWaiters(t, &g, 1)
	mustEnter(t, enterAsync(&g, ctx, "r/a/c"), "call of the turn inside")
	g.release("r/a/c")
	mustWait(t, late, "call of the ended turn")
	g.release("r/a")
	mustEnter(t, late, "call of the ended turn, once the gate is free")
	g.release("r/b")
	if g.busy() {
		t.Fatal("gate busy")
	}
}

func TestGateWaiterGivesUp(t *testing.T) {
	var g turnGate
	if !g.tryAcquire("r") {
		t.Fatal("free gate refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := enterAsync(&g, ctx, "q")
	waitWaiters(t, &g, 1)
	cancel()
	select {
	case err := <-w:
		if err == nil {
			t.Fatal("gave up, got the gate")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter did not give up")
	}
	waitWaiters(t, &g, 0)
	if g.tryAcquire("s") {
		t.Fatal("held gate taken")
	}
	g.release("r")
	if !g.tryAcquire("s") {
		t.Fatal("gate not free after the holder left and the waiter gave up")
	}
}

func TestChainPaths(t *testing.T) {
	for _, c := range []struct {
		chain, turn string
		want        bool
	}{
		{"r/a", "r/a", true},
		{"r/a/b", "r/a", true},
		{"r/ab", "r/a", false},
		{"r", "r/a", false},
		{"q/a", "r", false},
	} {
		if got := descends(c.chain, c.turn); got != c.want {
			t.Errorf("descends(%q, %q) = %v", c.chain, c.turn, got)
		}
	}
	if chainRoot("r/a/b") != "r" || chainRoot("r") != "r" || chainParent("r/a/b") != "r/a" || chainParent("r") != "" {
		t.Error("chainRoot/chainParent")
	}
}

func TestChainRootsAreShortAndHaveNoSeparator(t *testing.T) {
	if p := chainPrefix("node-1"); p != "node-1-" {
		t.Errorf("chainPrefix(node-1) = %q", p)
	}
	if p := chainPrefix("rack/7"); strings.Contains(p, chainSep) {
		t.Errorf("chainPrefix(rack/7) = %q holds the separator", p)
	}
	long := strings.Repeat("x", 200)
	a, b := chainPrefix(long+"a"), chainPrefix(long+"b")
	if len(a) > 30 || a == b {
		t.Errorf("long IDs: %q and %q, want short and distinct", a, b)
	}
}

// A step's chain is made in its stepTurn's buffer (newChainIn), which
// holds the longest root: a node ID cut to its hash, and the largest
// number.
func TestChainRootFitsItsBuffer(t *testing.T) {
	h := &Host{chainPrefix: chainPrefix(strings.Repeat("x", 200))}
	h.chainSeq.Store(math.MaxUint64 - 1)
	var buf chainRootBuf
	c := h.newChainIn(&buf)
	want := h.chainPrefix + strconv.FormatUint(math.MaxUint64, 36) + "."
	if !strings.HasPrefix(c, want) || len(c) > len(want)+13 {
		t.Fatalf("chain %q, want %q and at most 13 digits", c, want)
	}
	if unsafe.StringData(c) != &buf[0] {
		t.Errorf("chain %q (%d bytes) made outside its %d-byte buffer", c, len(c), len(buf))
	}
	if c2 := h.newChain(); c2 == c || chainRoot(c2) != c2 {
		t.Errorf("next chain %q after %q", c2, c)
	}
	// The random part is rarely at its longest: the buffer must hold it
	// all the same.
	if longest := len(want) + len(strconv.FormatUint(math.MaxUint64, 32)); longest > len(buf) {
		t.Errorf("the longest root is %d bytes, its buffer %d", longest, len(buf))
	}
	// A root costs a call no allocation in a buffer, and one (its string)
	// otherwise: it starts every client's call.
	if n := testing.AllocsPerRun(100, func() { h.newChainIn(&buf) }); n != 0 {
		t.Errorf("newChainIn: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { h.newChain() }); n != 1 {
		t.Errorf("newChain: %v allocations, want 1", n)
	}
}

// Many chains at once, each a tree of calls back into the actor (a turn
// makes up to two at once, through other actors, and waits for them),
// some giving up early: at most one turn runs at a time, every chain gets
// through, and the gate ends free.
func TestGateUnderConcurrentChains(t *testing.T) {
	t.Parallel()
	var (
		g              turnGate
		running, most  atomic.Int32
		entered, given atomic.Int32
		seq            atomic.Uint64
	)
	tok := func() string { return strconv.FormatUint(seq.Add(1), 36) }
	var turn func(ctx context.Context, chain string, depth int)
	turn = func(ctx context.Context, chain string, depth int) {
		if err := g.acquire(ctx, chain); err != nil {
			given.Add(1)
			return
		}
		entered.Add(1)
		defer g.release(chain)
		run := func() {
			n := running.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(20 * time.Microsecond) // the turn's work, for others to pile up behind
			running.Add(-1)
		}
		run()
		if depth == 3 {
			return
		}
		var wg sync.WaitGroup
		for range rand.IntN(3) { // 0, 1 or 2 calls at once
			wg.Go(func() {
				cctx := ctx
				if rand.IntN(8) == 0 { // one in eight gives up soon
					var cancel context.CancelFunc
					cctx, cancel = context.WithTimeout(ctx, time.Millisecond)
					defer cancel()
				}
				// Through another actor's turn, then back here.
				turn(cctx, chain+chainSep+tok()+chainSep+tok(), depth+1)
			})
		}
		wg.Wait()
		run()
	}
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() { turn(context.Background(), "root"+tok(), 0) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the chains did not all get through")
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d turns ran at once", m)
	}
	if g.busy() {
		t.Fatal("gate busy after every chain ended")
	}
	t.Logf("%d turns entered, %d gave up waiting", entered.Load(), given.Load())
}

// Chains that wait for gates only in one order (a chain waits only for a
// gate above every gate it holds, and otherwise calls back into gates it
// holds, which it re-enters) can never wait for each other in a cycle: however their waits interleave, and some give up early, the
// search for a cycle as a wait begins (acquireTurn) must find none, and
// every chain gets through.
func TestWaitGraphFindsNoCycleWhereNoneCanBe(t *testing.T) {
	t.Parallel()
	var graph waitGraph
	gates := make([]*turnGate, 5)
	for i := range gates {
		gates[i] = &turnGate{graph: &graph, name: "g" + strconv.Itoa(i)}
	}
	var (
		seq               atomic.Uint64
		entered, given    atomic.Int32
		reentered, errorN atomic.Int32
		firstErr          atomic.Value
	)
	tok := func() string { return strconv.FormatUint(seq.Add(1), 36) }
	var turn func(ctx context.Context, chain string, gate int, held []int, depth int)
	turn = func(ctx context.Context, chain string, gate int, held []int, depth int) {
		if err := gates[gate].acquireTurn(ctx, chain); err != nil {
			if ctx.Err() == nil {
				errorN.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			given.Add(1)
			return
		}
		entered.Add(1)
		defer gates[gate].release(chain)
		held = append(held, gate)
		time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond)
		if depth == 4 {
			return
		}
		for range rand.IntN(3) { // 0, 1 or 2 calls, one after the other
			cctx := ctx
			var cancel context.CancelFunc = func() {}
			if rand.IntN(8) == 0 { // one in eight gives up soon
				cctx, cancel = context.WithTimeout(ctx, time.Millisecond)
			}
			top := slices.Max(held)
			if next := top + 1 + rand.IntN(len(gates)); next < len(gates) && rand.IntN(3) > 0 {
				turn(cctx, chain+chainSep+tok(), next, held, depth+1)
			} else {
				// Back into a gate the chain holds: re-entered at once.
				reentered.Add(1)
				turn(cctx, chain+chainSep+tok(), held[rand.IntN(len(held))], held, depth+1)
			}
			cancel()
		}
	}
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			for range 20 {
				turn(context.Background(), "root"+tok(), rand.IntN(len(gates)), nil, 0)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the chains did not all get through")
	}
	if n := errorN.Load(); n > 0 {
		t.Fatalf("%d waits refused although no cycle can form; the first: %v", n, firstErr.Load())
	}
	for _, g := range gates {
		if g.busy() {
			t.Fatalf("%s busy after every chain ended", g.name)
		}
	}
	graph.mu.Lock()
	left := len(graph.byRoot)
	graph.mu.Unlock()
	if left != 0 {
		t.Fatalf("the wait graph keeps %d chains' waits after every chain ended", left)
	}
	t.Logf("%d turns entered (%d re-entering), %d gave up waiting", entered.Load(), reentered.Load(), given.Load())
}

// Chains that wait for gates in any order do wait for each other in
// cycles; a turn here waits for each call it makes, and no wait gives up,
// so only the search for a cycle as a wait begins breaks them: every
// chain must get through, as a cycle it missed would wait for ever.
func TestWaitGraphBreaksEveryCycle(t *testing.T) {
	t.Parallel()
	var graph waitGraph
	gates := make([]*turnGate, 4)
	for i := range gates {
		gates[i] = &turnGate{graph: &graph, name: "g" + strconv.Itoa(i)}
	}
	var (
		seq              atomic.Uint64
		entered, refused atomic.Int32
	)
	tok := func() string { return strconv.FormatUint(seq.Add(1), 36) }
	var turn func(chain string, gate int, depth int)
	turn = func(chain string, gate int, depth int) {
		if err := gates[gate].acquireTurn(context.Background(), chain); err != nil {
			if !strings.Contains(err.Error(), "deadlock") {
				t.Errorf("acquireTurn: %v", err)
			}
			refused.Add(1)
			return
		}
		entered.Add(1)
		defer gates[gate].release(chain)
		time.Sleep(time.Duration(rand.IntN(50)) * time.Microsecond)
		if depth == 4 {
			return
		}
		for range rand.IntN(3) { // 0, 1 or 2 calls, one after the other, to any gate
			turn(chain+chainSep+tok(), rand.IntN(len(gates)), depth+1)
		}
	}
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			for range 20 {
				turn("root"+tok(), rand.IntN(len(gates)), 0)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("chains still wait for each other (%d turns entered, %d waits refused)", entered.Load(), refused.Load())
	}
	for _, g := range gates {
		if g.busy() {
			t.Fatalf("%s busy after every chain ended", g.name)
		}
	}
	t.Logf("%d turns entered, %d waits refused as cycles", entered.Load(), refused.Load())
}

// A cycle of waits through a turn under the innermost one of a gate is
// found too: A's turn T called B, whose turn called back into A (inside,
// re-entrant, over T) and at once into C, held by a turn of another chain
// that calls A. That call waits for T, which waits for B's turn, which
// waits for C: a cycle, whichever of the two waits comes last. Only the
// innermost turn of A was looked at (B's call back, which ends), so
// neither wait was refused, and once B's call back into A ended, both
// waited until their deadline.
func TestWaitGraphFindsACycleThroughAnOuterTurn(t *testing.T) {
	for _, cFirst := range []bool{false, true} {
		name := "the wait for C last"
		if cFirst {
			name = "the wait for A last"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var graph waitGraph
			a := &turnGate{graph: &graph, name: "A"}
			c := &turnGate{graph: &graph, name: "C"}
			mustEnter(t, enterAsync(a, ctx, "t"), "T in A")
			mustEnter(t, enterAsync(a, ctx, "t/b/a"), "B's call back into A")
			mustEnter(t, enterAsync(c, ctx, "z"), "Z in C")
			waiting := func(root string) bool {
				graph.mu.Lock()
				defer graph.mu.Unlock()
				return len(graph.byRoot[root]) > 0
			}
			// The first wait, which closes no cycle yet, then the one
			// that does: that one must fail at once (its context ends
			// only long after).
			first, firstGate, firstChain := a, "A", "z/a" // Z's call to A
			last, lastChain := c, "t/b/c"                 // B's call to C
			if cFirst {
				first, firstGate, firstChain = c, "C", "t/b/c"
				last, lastChain = a, "z/a"
			}
			firstErr := make(chan error, 1)
			go func() { firstErr <- first.acquireTurn(ctx, firstChain) }()
			deadline := time.Now().Add(10 * time.Second)
			for !waiting(chainRoot(firstChain)) {
				if time.Now().After(deadline) {
					t.Fatalf("%s never waited for %s", firstChain, firstGate)
				}
				time.Sleep(time.Millisecond)
			}
			mustWait(t, firstErr, firstChain)
			lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			err := last.acquireTurn(lctx, lastChain)
			if err == nil || lctx.Err() != nil || !strings.Contains(err.Error(), "deadlock") {
				t.Fatalf("%s's wait closing the cycle: %v (its context: %v), want a deadlock refused at once", lastChain, err, lctx.Err())
			}
			// From the gate the refused call waited for, round to it.
			want := "(A -> C -> A)"
			if cFirst {
				want = "(C -> A -> C)"
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%v: want it to name the cycle %s", err, want)
			}
			// The cycle broken, every turn gets through.
			if cFirst {
				c.release("z") // Z's turn, its call refused, ends
				mustEnter(t, firstErr, "B's call to C, once Z's turn ended")
				c.release("t/b/c")
				a.release("t/b/a")
				a.release("t")
			} else {
				a.release("t/b/a")
				a.release("t") // T's turn, B's call to C refused, ends
				mustEnter(t, firstErr, "Z's call to A, once T's turn ended")
				a.release("z/a")
				c.release("z")
			}
			if a.busy() || c.busy() {
				t.Fatal("a gate is busy after every turn ended")
			}
			graph.mu.Lock()
			left := len(graph.byRoot)
			graph.mu.Unlock()
			if left != 0 {
				t.Fatalf("the wait graph keeps %d chains' waits", left)
			}
		})
	}
}

// sendAsync starts acquireSend(chain) and returns a channel that gets
// whether it went in beside a step's body, or its error.
func sendAsync(g *turnGate, ctx context.Context, chain string) (<-chan bool, <-chan error) {
	beside, errc := make(chan bool, 1), make(chan error, 1)
	go func() {
		b, err := g.acquireSend(ctx, chain)
		beside <- b
		errc <- err
	}()
	return beside, errc
}

// While a step's body runs (its lane open), sends go in beside it one at
// a time, in arrival order; a call the step made that re-enters it waits
// for the send beside it, and the send after waits for that call; closing
// the lane waits for the send beside; sends that wait when the step ends
// take turns as usual.
func TestGateLetsSendsInBesideAStepBody(t *testing.T) {
	ctx := context.Background()
	var g turnGate
	mustEnter(t, enterAsync(&g, ctx, "step"), "the step's turn")
	// Before the lane opens, a send waits like any turn.
	early, earlyErr := sendAsync(&g, ctx, "s0")
	waitWaiters(t, &g, 1)
	g.openLane()
	mustEnter(t, earlyErr, "send waiting as the body began")
	if !<-early {
		t.Fatal("a send waiting as the lane opened went in as a turn, want beside the step")
	}
	// One beside at a time: the next waits, and so does a call of the
	// step's that re-enters its turn, and an action.
	next, nextErr := sendAsync(&g, ctx, "s1")
	waitWaiters(t, &g, 1)
	call := enterAsync(&g, ctx, "step/c")
	action := enterAsync(&g, ctx, "a")
	waitWaiters(t, &g, 3)
	mustWait(t, nextErr, "second send while the first is beside the step")
	mustWait(t, call, "the step's call while a send is beside it")
	// The send leaves: the step's call goes first (it may be what the
	// body waits for), the second send waits for it.
	g.release("s0")
	mustEnter(t, call, "the step's call once the send left")
	mustWait(t, nextErr, "second send while the step's call is inside")
	if g.reentered() != true {
		t.Fatal("the step's call inside: reentered false")
	}
	g.release("step/c")
	mustEnter(t, nextErr, "second send once the step's call ended")
	if !<-next {
		t.Fatal("second send went in as a turn, want beside the step")
	}
	mustWait(t, action, "an action while the step's body runs")
	// The body returns: closeLane waits for the send beside it.
	closed := make(chan struct{})
	go func() { g.closeLane(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("closeLane returned with a send beside the step")
	case <-time.After(20 * time.Millisecond):
	}
	// A send now waits: the lane is closing.
	late, lateErr := sendAsync(&g, ctx, "s2")
	waitWaiters(t, &g, 2)
	g.release("s1")
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("closeLane did not return once the send left")
	}
	mustWait(t, lateErr, "send after the body returned, before the step's turn ended")
	mustWait(t, action, "an action before the step's turn ended")
	// The step's turn ends: the action (first in line) goes in, then the
	// send, as a turn.
	g.release("step")
	mustEnter(t, action, "the action after the step")
	mustWait(t, lateErr, "send behind the action")
	g.release("a")
	mustEnter(t, lateErr, "send after the action")
	if <-late {
		t.Fatal("a send after the step went in beside, want as a turn")
	}
	g.release("s2")
	if g.busy() {
		t.Fatal("gate busy after every turn ended")
	}
}

// A send waiting to go in beside a step's body gives up at its deadline
// and leaves the gate as it was.
func TestGateSendWaitingBesideAStepGivesUp(t *testing.T) {
	var g turnGate
	ctx := context.Background()
	mustEnter(t, enterAsync(&g, ctx, "step"), "the step's turn")
	g.openLane()
	_, firstErr := sendAsync(&g, ctx, "s0")
	mustEnter(t, firstErr, "first send beside")
	cctx, cancel := context.WithCancel(ctx)
	_, secondErr := sendAsync(&g, cctx, "s1")
	waitWaiters(t, &g, 1)
	cancel()
	select {
	case err := <-secondErr:
		if err == nil {
			t.Fatal("a cancelled send went in")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled send did not give up")
	}
	waitWaiters(t, &g, 0)
	g.release("s0")
	g.closeLane()
	g.release("step")
	if g.busy() {
		t.Fatal("gate busy after every turn ended")
	}
}

// A send that waits to go in beside a step's body waits for the send
// beside it, which waits for no gate, not for the step's turn and the
// calls its body makes: no cycle runs through those. Both orders: the
// waiting send (of a turn T that holds C) found a cycle through the body's
// call to C, or the body's call to C found one through the waiting send;
// either was refused as a deadlock, where the send beside leaving lets
// both go on.
func TestGateFindsNoCycleThroughAStepBesideWhichASendWaits(t *testing.T) {
	for _, sendFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("send waits first %v", sendFirst), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var graph waitGraph
			a := &turnGate{graph: &graph, name: "A"}
			c := &turnGate{graph: &graph, name: "C"}
			mustEnter(t, enterAsync(a, ctx, "n"), "the step's turn in A")
			a.openLane()
			if beside, err := a.acquireSend(ctx, "x"); err != nil || !beside {
				t.Fatalf("first send: beside %v, %v", beside, err)
			}
			mustEnter(t, enterAsync(c, ctx, "t"), "T's turn in C")
			call := make(chan error, 1)
			send := make(chan error, 1)
			startCall := func() {
				go func() { call <- c.acquireTurn(ctx, "n/c") }() // the step body's call to C
				waitWaiters(t, c, 1)
			}
			startSend := func() {
				go func() {
					beside, err := a.acquireSend(ctx, "t/s") // T's send to A
					if err == nil && !beside {
						err = fmt.Errorf("went in as a turn, want beside the step")
					}
					send <- err
				}()
				waitWaiters(t, a, 1)
			}
			if sendFirst {
				startSend()
				startCall()
			} else {
				startCall()
				startSend()
			}
			mustWait(t, send, "T's send while a send is beside the step")
			mustWait(t, call, "the body's call while T holds C")
			a.release("x")
			mustEnter(t, send, "T's send once the send beside left")
			a.release("t/s")
			c.release("t")
			mustEnter(t, call, "the body's call once T left C")
			c.release("n/c")
			a.closeLane()
			a.release("n")
		})
	}
}

// queryAsync starts acquireQuery(chain) and returns a channel that gets
// whether it went in beside a step's body, or its error; took is closed
// when its onBeside ran.
func queryAsync(g *turnGate, ctx context.Context, chain string) (beside <-chan bool, errc <-chan error, took <-chan struct{}) {
	b, e, tk := make(chan bool, 1), make(chan error, 1), make(chan struct{})
	go func() {
		in, err := g.acquireQuery(ctx, chain, func() { close(tk) })
		b <- in
		e <- err
	}()
	return b, e, tk
}

// While a step's body runs, queries go in beside it, any number at once,
// and so do those that waited for the step's turn as its body began; a
// query the step made re-enters its turn; closing the lane waits for
// every query beside; a call back into the actor from a query beside goes
// in beside too if it is a query or a send, and fails at once if it would
// change the state (it would wait for the step, which waits for it).
func TestGateLetsQueriesInBesideAStepBody(t *testing.T) {
	ctx := context.Background()
	var g turnGate
	mustEnter(t, enterAsync(&g, ctx, "step"), "the step's turn")
	early, earlyErr, earlyTook := queryAsync(&g, ctx, "q0")
	waitWaiters(t, &g, 1)
	action := enterAsync(&g, ctx, "a")
	waitWaiters(t, &g, 2)
	g.openLane()
	mustEnter(t, earlyErr, "query waiting as the body began")
	if !<-early {
		t.Fatal("a query waiting as the lane opened went in as a turn, want beside the step")
	}
	<-earlyTook
	// Several at once, not behind the action that waits.
	q1, q1Err, _ := queryAsync(&g, ctx, "q1")
	mustEnter(t, q1Err, "second query beside the step")
	if !<-q1 {
		t.Fatal("second query went in as a turn, want beside")
	}
	mustWait(t, action, "an action while the step's body runs")
	// A query the step makes re-enters its turn, as a call.
	inner, innerErr, _ := queryAsync(&g, ctx, "step/c")
	mustEnter(t, innerErr, "the step's own query")
	if <-inner {
		t.Fatal("the step's own query went in beside, want re-entering the step's turn")
	}
	g.release("step/c")
	// A query beside calls back into the actor: a state-changing call
	// fails at once, a query goes in beside.
	if err := g.acquireTurn(ctx, "q1/x"); err == nil || !strings.Contains(err.Error(), "deadlock") {
		t.Fatalf("a state-changing call from a query beside the step: %v, want a deadlock error at once", err)
	}
	// The body returns: closeLane waits for both queries.
	closed := make(chan struct{})
	go func() { g.closeLane(); close(closed) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		g.mu.Lock()
		open := g.lane
		g.mu.Unlock()
		if !open {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("closeLane did not close the lane")
		}
	}
	// A new query now waits for the step's turn, but one the query
	// beside makes goes in (the step waits for that query).
	late, lateErr, _ := queryAsync(&g, ctx, "q2")
	waitWaiters(t, &g, 2)
	nested, nestedErr, _ := queryAsync(&g, ctx, "q1/y")
	mustEnter(t, nestedErr, "a query a query beside the step made, the lane closing")
	if !<-nested {
		t.Fatal("the nested query went in as a turn, want beside")
	}
	g.releaseQuery("q0")
	g.releaseQuery("q1/y")
	select {
	case <-closed:
		t.Fatal("closeLane returned with a query beside the step")
	case <-time.After(20 * time.Millisecond):
	}
	g.releaseQuery("q1")
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("closeLane did not return once the queries left")
	}
	mustWait(t, lateErr, "query after the body returned, before the step's turn ended")
	g.release("step")
	mustEnter(t, action, "the action after the step")
	mustWait(t, lateErr, "query behind the action")
	g.release("a")
	mustEnter(t, lateErr, "query after the action")
	if <-late {
		t.Fatal("a query after the step went in beside, want as a turn")
	}
	g.release("q2")
	if g.busy() {
		t.Fatal("gate busy after every turn ended")
	}
}

// A query let in beside a step's body as its deadline ends gives the gate
// back as a query: the step's closeLane does not wait for it for ever.
func TestGateQueryGivingUpAsItGoesInBesideLeaves(t *testing.T) {
	var g turnGate
	ctx := context.Background()
	mustEnter(t, enterAsync(&g, ctx, "step"), "the step's turn")
	for i := range 50 {
		qctx, cancel := context.WithCancel(ctx)
		_, errc, _ := queryAsync(&g, qctx, fmt.Sprintf("q%d", i))
		go cancel()
		g.openLane()
		if err := <-errc; err == nil {
			g.releaseQuery(fmt.Sprintf("q%d", i))
		}
		closed := make(chan struct{})
		go func() { g.closeLane(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: closeLane waits for a query that gave up", i)
		}
	}
	g.release("step")
	if g.busy() {
		t.Fatal("gate busy after every turn ended")
	}
}

// acquireTurn is acquireAs for a call's turn, as the host asks for it.
func (g *turnGate) acquireTurn(ctx context.Context, chain string) error {
	return g.acquireWith(ctx, chain, g.graph != nil)
}

// acquireSend is acquireAs for a send's turn, as the host asks for it.
func (g *turnGate) acquireSend(ctx context.Context, chain string) (beside bool, _ error) {
	return g.acquireAs(ctx, chain, g.graph != nil, turnSend, nil, false)
}

// acquireQuery is acquireAs for a query's turn, as the host asks for it.
func (g *turnGate) acquireQuery(ctx context.Context, chain string, onBeside func()) (beside bool, _ error) {
	return g.acquireAs(ctx, chain, g.graph != nil, turnQuery, onBeside, false)
}
