package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// LoopOptions configure LoopWith.
type LoopOptions[L any] struct {
	// Name is the loop's history entry name.
	Name string
	// State is the loop state the first iteration gets. It must marshal
	// to JSON and decode back: it is recorded with the loop's progress,
	// and each iteration gets the state as decoded back, live as on
	// replay. A state that does not (this one, or one an iteration
	// returns) fails the run with ErrInvalid naming the loop (and the
	// iteration), when it is returned.
	State L
	// HistoryPruneInterval: every this many iterations (and at the end)
	// the history of old iterations is deleted, so that a loop that runs
	// forever keeps a bounded history. 0: 20. NoPrune: never.
	HistoryPruneInterval int
	// HistorySize is how many of the latest iterations pruning keeps. 0:
	// HistoryPruneInterval. At most HistoryPruneInterval+HistorySize
	// iterations are kept at any time.
	HistorySize int
}

// Loop runs fn again and again, each iteration in its own scope (entries of
// iteration i live under "name/~i"), until fn returns Break (the loop then
// returns nil) or another error (returned). After a restart a loop resumes
// at its last checkpoint (every prune interval, at most 20 iterations
// apart) and replays the iterations after it from their records; the ones
// before are not re-run, so keep data that must survive from one iteration
// to the next in LoopWith's state, not in variables the closure captures.
// Replayed iterations that had completed are sealed: a change to the body
// must be gated with GetVersion, which takes the old path in them.
func (c *Ctx[S]) Loop(name string, fn func(*Ctx[S]) error) error {
	_, err := LoopWith(c, LoopOptions[struct{}]{Name: name}, func(c *Ctx[S], s struct{}) (struct{}, error) {
		return s, fn(c)
	})
	return err
}

// LoopWith is a loop with a state of type L: each iteration gets the state
// the previous one returned, and the loop returns the state of the
// iteration that returned Break:
//
//	total, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "sum"},
//		func(ctx *workflow.Ctx[S], total int) (int, error) {
//			...
//			if done {
//				return total, workflow.Break
//			}
//			return total + n, nil
//		})
func LoopWith[S, L any](c *Ctx[S], opts LoopOptions[L], fn func(*Ctx[S], L) (L, error)) (L, error) {
	var zero L
	initial, err := json.Marshal(opts.State)
	if err != nil {
		return zero, fmt.Errorf("%w: loop %q: state does not marshal to JSON: %v", ErrInvalid, opts.Name, err)
	}
	// One variable for every iteration's state (decoding into it moves
	// it to the heap), zeroed before each decode so that nothing of the
	// last iteration's value leaks into the next: the body gets a copy.
	// It holds the state as decoded back from its JSON (as a replay
	// reads it): the first state, checked here, then each one an
	// iteration returns, decoded back as it is recorded (roundTripState),
	// so that the next iteration decodes nothing.
	var s L
	if err := roundTripState(initial, &s); err != nil {
		return zero, fmt.Errorf("%w: loop %q: the first state, of type %T, does not decode back from its JSON, so no replay could read it: %v", ErrInvalid, opts.Name, opts.State, err)
	}
	interval := opts.HistoryPruneInterval
	if interval == 0 {
		interval = DefaultHistoryPruneInterval
	}
	size := opts.HistorySize
	if size <= 0 {
		size = interval
	}
	// broke: the loop ended in this call, on the state s holds.
	broke := false
	out, path, err := c.x.loop(opts.Name, interval, size, initial, func(ix *cx, state json.RawMessage, carried bool, dst []byte) (json.RawMessage, bool, error) {
		if !carried {
			// Recorded (a resume): read as any recorded value.
			s = zero
			if !decodeIntState(state, &s) {
				if err := decodeInto(ix.sc.pathOf(), state, &s); err != nil {
					return nil, false, err
				}
			}
		}
		ns, err := fn(ctxOf[S](ix), s)
		err = tame(err)
		brk := errors.Is(err, Break) && !isControl(err)
		if err != nil && !brk {
			return nil, false, err
		}
		b, err := encodeIntState(dst, &ns)
		if b != nil {
			s = ns // an int or int64: decodes back as it is
		} else {
			b, err = json.Marshal(ns)
			if err == nil {
				if derr := roundTripState(b, &s); derr != nil {
					// Misuse, as a state that does not marshal is: no
					// replay could read it.
					ip := ix.sc.pathOf()
					loop := ParentOf(ip)
					return nil, false, fmt.Errorf("%w: loop %q: the state iteration %s returned, of type %T, does not decode back from its JSON, so no replay could read it: %v", ErrInvalid, loop, ip[len(loop)+len("/~"):], ns, derr)
				}
			}
		}
		if err != nil {
			// Misuse, as a first state that does not marshal is: the
			// run fails as after a bad option, with no rollback. (An
			// iteration's path is its loop's and "/~" and its number.)
			ip := ix.sc.pathOf()
			loop := ParentOf(ip)
			return nil, false, fmt.Errorf("%w: loop %q: the state iteration %s returned does not marshal to JSON: %v", ErrInvalid, loop, ip[len(loop)+len("/~"):], err)
		}
		broke = brk
		return b, brk, nil
	})
	if err != nil {
		return zero, err
	}
	if broke {
		return s, nil
	}
	var v L
	if err := decodeInto(path, out, &v); err != nil {
		return zero, err
	}
	return v, nil
}

// roundTripState decodes a loop state's JSON b into *s (zeroed first), as
// a replay reads it.
func roundTripState[L any](b []byte, s *L) error {
	var zero L
	*s = zero
	if decodeIntState(b, s) {
		return nil
	}
	return json.Unmarshal(b, s)
}

// Every iteration of a loop decodes the state the last one encoded, and a
// counter or a cursor (an int) is the usual state: decodeIntState and
// encodeIntState do it for int and int64 without encoding/json's
// reflection, and give what it gives. Anything else is left to json.

// decodeIntState decodes raw into *p if L is int or int64 and raw is a
// plain JSON integer that fits; false leaves *p alone, for
// json.Unmarshal (null, spaces, a fraction, an exponent, a larger number:
// its value or its error).
func decodeIntState[L any](raw []byte, p *L) bool {
	switch q := any(p).(type) {
	case *int:
		n, ok := plainInt(raw)
		if !ok || int64(int(n)) != n {
			return false
		}
		*q = int(n)
		return true
	case *int64:
		n, ok := plainInt(raw)
		if ok {
			*q = n
		}
		return ok
	}
	return false
}

// plainInt parses -?(0|[1-9][0-9]*) of at most 18 digits: a JSON number
// that json decodes into an int64 as this does, with no room to overflow.
func plainInt(raw []byte) (int64, bool) {
	b := raw
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 || b[0] == '0' && len(b) > 1 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if raw[0] == '-' {
		n = -n
	}
	return n, true
}

// encodeIntState returns json.Marshal(*p) if L is int or int64, appended
// to dst (nil: a new slice); nil, nil for any other type.
func encodeIntState[L any](dst []byte, p *L) ([]byte, error) {
	var n int64
	switch q := any(p).(type) {
	case *int:
		n = int64(*q)
	case *int64:
		n = *q
	default:
		return nil, nil
	}
	if dst == nil {
		dst = make([]byte, 0, 20)
	}
	return strconv.AppendInt(dst, n, 10), nil
}

// pendingPrune reports whether ws deletes a tree.
func pendingPrune(ws []HistoryWrite) bool {
	for _, w := range ws {
		if w.DeleteTree != "" {
			return true
		}
	}
	return false
}

// loop runs iterations of body from the recorded one on. Its progress (next
// iteration, state, time) is recorded at checkpoints only: every interval
// iterations, where it prunes, and at the end. Rivet writes the loop entry
// after every iteration; that doubles the keys a step in a loop writes
// (its entry, the state, and the loop's progress), and etcd's cost is per
// key. Between checkpoints nothing is lost: a replay starts at the last
// checkpoint and re-runs the body of the iterations after it from their
// recorded entries, which pruning has kept (it never deletes past the
// checkpoint it records with). The end commits at once; a periodic
// checkpoint and its prune go with the next commit (usually the next
// iteration's first step), which saves a commit round trip per interval:
// until then the stored history holds at most interval+size iterations,
// the bound pruning promises, and a replay that finds the prune lost
// prunes again. A prune still pending at the next one is committed on its
// own first.
//
// body gets each iteration's state as recorded, and carried: the state is
// the one body returned last, or the first one of a new loop, which
// LoopWith holds decoded already; not carried, a recorded one. dst, if
// not nil, is a buffer body may return the state it encodes in: that of
// the state before, which nothing else holds (the loop's progress between
// checkpoints, in memory only), so that an iteration that is no
// checkpoint allocates none.
func (x *cx) loop(name string, interval, size int, initial json.RawMessage, body func(ix *cx, state json.RawMessage, carried bool, dst []byte) (json.RawMessage, bool, error)) (json.RawMessage, string, error) {
	if err := x.begin("loop", name); err != nil {
		return nil, "", err
	}
	defer x.end()
	t, r := x.t, x.t.r
	path, seq, err := x.sc.claim("loop", name)
	if err != nil {
		return nil, "", err
	}
	// lastRecorded is the latest iteration with recorded entries: on a
	// resume, the iterations before it completed under the code that
	// recorded them.
	lastRecorded := -1
	carried := false
	e, err := r.visit(x.sc, path, KindLoop)
	if err != nil {
		return nil, path, err
	}
	switch {
	case e != nil && e.Status == StatusCompleted:
		r.visitTree(path)
		t.advance(e.Time)
		return e.Output, path, nil
	case e != nil:
		r.mu.Lock()
		r.hist.VisitIterationsBefore(path, e.Iteration)
		lastRecorded = r.hist.LastIteration(path)
		r.mu.Unlock()
		t.advance(e.Time)
	default:
		carried = true
		e = &Entry{Path: path, Seq: seq, TryPlaces: x.sc.tryPlaces, Kind: KindLoop, Status: StatusPending, State: initial}
		if sh, ok := r.host.(SlotHost); ok && interval > 0 && sh.LoopSlots() {
			// At most interval+size iterations are kept at any time
			// (prunePlan), so iteration i-(interval+size) is pruned
			// before iteration i writes; and a replay needs only the
			// iterations since the last checkpoint, at most interval back.
			e.Slots = interval + size
		}
		t.record(HistoryWrite{Put: e})
	}
	if e.Slots > 0 && (interval <= 0 || interval+size > e.Slots) {
		// Recorded with slots by code that pruned more (a deploy since
		// changed the options): its iterations still overwrite those
		// e.Slots before, so it prunes within them, NoPrune or not, or
		// an iteration would overwrite one a replay needs.
		if interval <= 0 || interval >= e.Slots {
			interval = e.Slots / 2
		}
		if size <= 0 || size > e.Slots-interval {
			size = e.Slots - interval
		}
	}
	// Checkpoints come every interval iterations, and at least every 20
	// (a loop that prunes rarely or never still checkpoints, so that a
	// replay does not re-run its whole history).
	every := DefaultHistoryPruneInterval
	if interval > 0 && interval < every {
		every = interval
	}
	// owned says that e is the loop's own copy, which no history write
	// holds (the progress of iterations between checkpoints): the next
	// iteration updates it in place rather than cloning it again.
	owned := false
	for {
		if err := t.stopped(true); err != nil {
			return nil, path, err
		}
		ix := newIterationCx(t, path, e.Iteration)
		if e.Iteration < lastRecorded {
			// A replayed iteration that completed before: it re-runs
			// only to rebuild the loop's state from its entries, so
			// changed code must not add work to it.
			r.mu.Lock()
			r.seal(ix.sc.pathOf())
			r.mu.Unlock()
		}
		// A rollback checkpoint taken in an iteration holds for the rest
		// of that iteration only, as one taken in a join or race branch
		// holds for that branch: a replay does not run a finished loop,
		// or the iterations before its last checkpoint, again, so one
		// that held past its iteration would hold in the first run and
		// not after a restart.
		checkpoint := t.checkpoint
		var dst []byte
		if owned {
			dst = e.State[:0]
		}
		state, brk, err := body(ix, e.State, carried, dst)
		carried = true
		t.checkpoint = checkpoint
		if cerr := ix.close(); cerr != nil {
			err = cerr
		}
		if err != nil {
			return nil, path, err
		}
		if err := r.checkEnd(ix.sc.pathOf()); err != nil {
			return nil, path, err
		}
		ne := e
		if !owned {
			ne = e.clone()
		}
		ne.Iteration++
		ne.State = state
		ne.Time = t.now
		prune := interval > 0 && (brk || ne.Iteration%interval == 0)
		due := prune || ne.Iteration%every == 0
		var trees []string
		if prune {
			trees, ne.PrunedBefore = prunePlan(path, e.PrunedBefore, ne.Iteration, size)
			if len(t.races) > 0 && !ne.TookMessages {
				r.mu.Lock()
				ne.TookMessages = slices.ContainsFunc(trees, func(tr string) bool { return holdsMessagesNow(r.hist, tr) })
				r.mu.Unlock()
			}
		}
		if brk {
			ne.Status = StatusCompleted
			ne.Output, ne.State = state, nil
		}
		if !brk && !due {
			// Not a checkpoint: the progress lives in memory only.
			e, owned = ne, true
			continue
		}
		if len(trees) > 0 && pendingPrune(t.pending) {
			// The last prune has not gone out yet (the iterations since
			// committed nothing): send it first, so that pending prunes
			// do not pile up into a commit too large for one transaction.
			if err := t.commit(); err != nil {
				return nil, path, err
			}
		}
		ws := make([]HistoryWrite, 0, len(trees)+1)
		for _, tr := range trees {
			ws = append(ws, HistoryWrite{DeleteTree: tr, Prune: true})
		}
		t.record(append(ws, HistoryWrite{Put: ne})...)
		e, owned = ne, false
		if brk {
			if err := t.commit(); err != nil {
				return nil, path, err
			}
		}
		if brk {
			return state, path, nil
		}
	}
}
