package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivet-go/rivet/internal/errtext"
)

// Run runs the workflow fn once against history: it re-runs fn from the
// start, returning recorded results without re-running them, and calls the
// host for everything new. It returns when fn returns, or when ctx is
// cancelled (eviction: every primitive then returns ErrEvicted), or when a
// host call fails. It starts goroutines only for the code of fn, of join and
// race branches and of rollback handlers (see callThread) and for step
// timeouts, and has joined all of them when it returns; it waits too for
// a primitive still running, from a goroutine the workflow code started,
// on a Ctx whose function returned (see waitStrays).
func Run[S any](ctx context.Context, fn func(*Ctx[S]) error, host Host, history []Entry) Outcome {
	ended := make(chan Outcome, 1)
	Start(ctx, fn, host, history, func(out Outcome) { ended <- out })
	return <-ended
}

// Start is Run without a goroutine waiting for it: it runs the workflow on
// a goroutine of its own and calls done with the outcome on that goroutine,
// once everything Run would have joined has ended, as its last act. A
// host keeps a workflow in memory while it waits (for a message, a
// timer), possibly for hours: Run would hold two goroutines meanwhile, the
// caller's and fn's, where Start holds one (about 4 KiB of stack less per
// waiting workflow; the caller's could not shrink further, fn's carries
// the code's frames).
func Start[S any](ctx context.Context, fn func(*Ctx[S]) error, host Host, history []Entry, done func(Outcome)) {
	go func() {
		h, err := NewHistory(history)
		if err != nil {
			done(Outcome{Status: RunFailed, Err: err})
			return
		}
		rctx, abort := context.WithCancelCause(ctx)
		r := &run{host: host, ctx: rctx, abort: abort, hist: h, active: 1}
		if replayOnly(host) {
			r.host, r.replay, r.parked = newReplayHost(host, r, history), true, map[context.Context]int{}
		}
		if oc, ok := host.(OutputChecker); ok {
			r.checkOutput = oc.CheckOutput
		}
		if so, ok := host.(StepObserver); ok && !r.replay {
			r.observer = so
		}
		if st, ok := host.(StepTracer); ok && !r.replay && st.Tracing() {
			r.tracer = st
		}
		if am, ok := host.(AttemptMarker); ok && !r.replay {
			r.marker = am
		}
		r.name, r.key = host.Actor()
		if ih, ok := host.(Incarnationer); ok {
			r.incarnation = ih.Incarnation()
		}
		r.started = startedAt(host, history)
		root := &thread{r: r, ctx: rctx}
		c := &Ctx[S]{x: &cx{t: root, sc: newScope("")}}
		// The run ends in runThread's deferred call, whether fn returned,
		// panicked or called runtime.Goexit.
		runThread(root, func() error { return fn(c) }, func(err error) {
			out := r.end(c.x, root, err)
			abort(nil)
			done(out)
		})
	}()
}

// startedAt is when the workflow whose history this is started: what its
// entries say (the topLevel ones carry it), the host's clock now if it
// has none (this run records it), or zero if it has entries but none says
// (recorded before StartedAt was: its runs go on reading the clock, as
// they did).
func startedAt(host Host, history []Entry) time.Time {
	for i := range history {
		if e := &history[i]; !e.StartedAt.IsZero() {
			return e.StartedAt
		}
	}
	if len(history) > 0 {
		return time.Time{}
	}
	return host.Now().Round(0)
}

// markStart sets when the workflow started on the top-level entries ws
// put (Entry.StartedAt, topLevel), so that it stays recorded while any of
// them does. The entries are fresh ones the engine is about to record, not
// yet in the run's history (History.Apply's rule), or ones that carry it
// already.
func (r *run) markStart(ws []HistoryWrite) {
	for _, w := range ws {
		r.markEntry(w.Put)
	}
}

// markEntry is markStart for one entry (nil: none).
func (r *run) markEntry(e *Entry) {
	if e != nil && !r.started.IsZero() && e.StartedAt.IsZero() && topLevel(e) {
		e.StartedAt = r.started
	}
}

// topLevel says that e is in the workflow's own scope, or in try blocks
// there (a block has no entry of its own, and its entries are the ones a
// workflow that starts with one records first), not in a loop's
// iteration or a join's or race's branch: such an entry stays until a
// retry deletes it, and the first commit of any run holds one.
func topLevel(e *Entry) bool {
	return strings.Count(e.Path, "/") == len(e.TryPlaces)
}

// end ends a run whose root function returned err: it decides and records
// the outcome, and waits for the primitives still running on a Ctx.
func (r *run) end(x *cx, root *thread, err error) Outcome {
	if breaks(err) {
		err = fmt.Errorf("%w: Break reached the end of the workflow (it ends only the Loop or LoopWith whose body returns it): %s", ErrInvalid, errtext.Of(err))
	}
	if cerr := x.close(); cerr != nil {
		err = cerr
	}
	out := r.finish(root, err)
	r.waitStrays()
	return out
}

// waitStrays waits for the primitives that still ran on a Ctx when its
// function returned (see cx.close), on goroutines the workflow code
// started, once the run's outcome is decided: it stops them (their waits
// and the host's calls see the run's context cancelled; a step they are
// recording is refused), so that none writes after Run returned, when the
// host records the outcome. A step body among them that ignores its
// context holds Run until it returns, as it would hold the actor's turn.
func (r *run) waitStrays() {
	r.mu.Lock()
	strays := r.strays
	r.mu.Unlock()
	if len(strays) == 0 {
		return
	}
	r.abort(errors.New("workflow: the run ended"))
	for _, ended := range strays {
		<-ended
	}
}

// breaks reports whether err is a Break that no loop took: one the
// workflow's function returned, itself or from a branch.
func breaks(err error) bool {
	return err != nil && errors.Is(err, Break) && !isControl(err)
}

// run is one Run: the state its threads share.
type run struct {
	host Host
	// checkOutput is the host's OutputChecker's, nil if none: made once,
	// a method value made per Do step would be an allocation each.
	checkOutput func(json.RawMessage) error
	// observer is the host's StepObserver, nil if none (or a replay's,
	// which runs no body).
	observer StepObserver
	// tracer is the host's StepTracer, nil if none, or off, or a
	// replay's.
	tracer StepTracer
	// marker is the host's AttemptMarker, nil if none (or a replay's).
	marker AttemptMarker
	ctx    context.Context // done on eviction (the caller's ctx) or abort
	abort  context.CancelCauseFunc
	// name and key are the actor's (Host.Actor), shared: accessors copy
	// the key.
	name string
	key  []string
	// incarnation tells this actor from one of the same name and key
	// destroyed before it (Incarnationer), for step keys.
	incarnation string
	// started is when the workflow started (Entry.StartedAt), what
	// Ctx.Now is before any entry that records a time; zero for a history
	// recorded before it was kept, whose runs read the host's clock
	// there. Set before the code runs, never changed.
	started time.Time

	mu sync.Mutex // guards everything below
	// hist is the run's view of the history: what was committed plus what
	// threads recorded and will commit with their next commit.
	hist *History
	// sealed holds the scopes that a replay re-runs although they
	// completed under earlier code (a loop's iterations between its last
	// checkpoint and its latest one, see loop; settled joins and races
	// replayed for their rollback handlers, see replaySettled): new
	// entries in them are divergence, and version gates in them take the
	// old path, as if they were not re-run.
	sealed map[string]bool
	// retired holds the paths whose recorded entries this run's code
	// retired with Removed: a rollback then knows why a step under one
	// has no handler (ErrRollbackRemoved).
	retired   []string
	rollbacks []rollbackAction
	// active counts threads that are not blocked; waiting holds the
	// blocked ones (each with what it waits for in its waitFor). When
	// active drops to 0, the host hears of it. (A slice, not a map: most
	// runs have one thread, and a one-entry map of waitFors cost a run
	// about 850 bytes for as long as it waited.)
	active  int
	waiting []*thread
	// yield accumulates what evicted threads were waiting for; yieldNow
	// is set if one had work to do at once.
	yield    Wake
	yieldNow bool
	// failure is a host error that fails the run (not wrapping ErrEvicted).
	failure error
	// strays are closed as the primitives that still ran on a Ctx when
	// its function returned end (cx.close): Run waits for them.
	strays []chan struct{}
	// replay is set for a replay-only run (ReplayOnlyHost), whose host
	// calls past the history park (replayHost.park): parked counts them by
	// their thread's context, blocked as waits are.
	replay bool
	parked map[context.Context]int
}

// thread is one goroutine of a run: the root, or a join or race branch.
// Everything here is owned by that goroutine.
type thread struct {
	r *run
	// ctx is the run's ctx, or a branch's child of it (cancelled when the
	// branch loses its race or a sibling hits a fatal error).
	ctx context.Context
	// pending holds writes recorded but not committed yet: bookkeeping
	// that a replay would recompute identically if it were lost (a sleep's
	// end, a loop's progress, version checks). They go out with the
	// thread's next commit, so every commit of a thread carries everything
	// the thread recorded before it.
	pending []HistoryWrite
	// now is the thread's workflow time (Ctx.Now).
	now time.Time
	// races are the race branches this thread runs under, outermost first;
	// allLive caches that goLive marked them all.
	races   []raceSlot
	allLive bool
	// forked is set while the thread waits in a join or race; it is read
	// by Message.Complete, which may be called from any goroutine.
	forked atomic.Bool
	// ended is set once a join or race branch's thread has returned: a
	// message it received can no longer be completed (Message.Complete).
	ended      atomic.Bool
	checkpoint bool
	// floor is the earliest workflow time the thread may still record
	// (hasFloor unset: none before now), for the races it runs under: a
	// race's finisher waits for a running branch that may finish earlier
	// (see race.heldLocked). Guarded by r.mu, kept only under races.
	floor    time.Time
	hasFloor bool
	// primed counts the races (the first of races) in which the thread,
	// or the thread it branched from, began a primitive (cx.begin): at
	// work at a race receive's time, it then holds the receive as a
	// thread at work before that time does (see mayRecordEarlierLocked).
	// Written under r.mu, kept only under races.
	primed int
	// uncompleted are completable messages not completed yet.
	uncompleted []*msgRef
	// goexitIn names the step whose body called runtime.Goexit, for the
	// error of the thread it ended.
	goexitIn string
	// waitFor is what the thread waits for while it is in r.waiting, at
	// waitAt. Guarded by r.mu.
	waitFor waitFor
	waitAt  int
	// stepFn is the fn a step attempt (cx.attempt) gives the host's
	// RunStep, made once per thread: it runs attempting, the attempt
	// that holds it while RunStep runs. A thread runs one attempt at a
	// time, but a stray step of a closed Ctx may run beside it: that
	// one makes a fn of its own. Written only by the attempt that set
	// attempting.
	stepFn     func(StepEnv) []HistoryWrite
	attempting atomic.Pointer[attemptVars]
}

// cx is one scope on one thread: the untyped half of a Ctx.
type cx struct {
	t    *thread
	sc   *scope
	busy atomic.Bool
	// closed is set once the function the Ctx was given to returned: a
	// primitive called on it then would record an entry in a scope that
	// has ended.
	closed atomic.Bool
	// curKind and curName name the entry in progress while busy, for the
	// error of a primitive called meanwhile (no allocation per entry).
	curMu            sync.Mutex
	curKind, curName string
	// stray, set by close (under curMu) if a primitive still ran, is
	// closed by end when it ends.
	stray chan struct{}
	// self is the Ctx of x, of any state type (Ctx's underlying type),
	// for ctxOf; set by newScopedCx.
	self struct{ x *cx }
}

// ctxOf returns the Ctx of x: from a scope's cx (newScopedCx), a loop
// iteration's, it allocates nothing (a Ctx was one allocation per
// iteration).
func ctxOf[S any](x *cx) *Ctx[S] {
	if x.self.x != x {
		return &Ctx[S]{x: x}
	}
	return (*Ctx[S])(&x.self)
}

func (r *run) now() time.Time { return r.host.Now().Round(0) }

// begin starts the primitive kind name on x: one at a time per Ctx, and
// none once the run or branch is stopping.
func (x *cx) begin(kind, name string) error {
	if !x.busy.CompareAndSwap(false, true) {
		if x.closed.Load() {
			return x.closedErr(kind, name)
		}
		x.curMu.Lock()
		curKind, curName := x.curKind, x.curName
		x.curMu.Unlock()
		sp := x.sc.pathOf()
		return fmt.Errorf("%w: %s %q called while %s %q runs (code in a step's body, a join or race branch, a try block or a loop body uses the Ctx it is given, not an outer one)",
			ErrEntryInProgress, kind, joinPath(sp, name), curKind, joinPath(sp, curName))
	}
	if x.closed.Load() {
		// Checked after busy is set, as close sets closed before it
		// looks at busy: one of the two sees the other.
		x.end()
		return x.closedErr(kind, name)
	}
	x.curMu.Lock()
	x.curKind, x.curName = kind, name
	x.curMu.Unlock()
	if err := x.t.stopped(true); err != nil {
		x.end()
		return err
	}
	if t := x.t; t.primed < len(t.races) {
		t.r.mu.Lock()
		t.primed = len(t.races)
		t.r.mu.Unlock()
	}
	return nil
}

func (x *cx) end() {
	x.busy.Store(false)
	if x.closed.Load() {
		// A primitive that close may have seen running: Run waits for
		// it. (closed is set under curMu, with stray, and before close
		// looks at busy: if close saw it busy, stray is set by the time
		// this takes the lock.)
		x.curMu.Lock()
		if x.stray != nil {
			close(x.stray)
			x.stray = nil
		}
		x.curMu.Unlock()
	}
}

// close ends x when the function it was given to returns. It fails if a
// primitive still runs on x: one called from a goroutine that function
// started, which would record its entry in the ended scope. That one is
// refused the record it makes from now on (cx.stopped), and Run waits for
// it to end (run.waitStrays).
func (x *cx) close() error {
	x.curMu.Lock()
	x.closed.Store(true)
	if !x.busy.Load() {
		x.curMu.Unlock()
		return nil
	}
	kind, name := x.curKind, x.curName
	x.stray = make(chan struct{})
	ended := x.stray
	x.curMu.Unlock()
	r := x.t.r
	r.mu.Lock()
	r.strays = append(r.strays, ended)
	r.mu.Unlock()
	return fmt.Errorf("%w: %s %q still runs on the Ctx of %s, whose function returned (called from a goroutine it started? use Join or Race)",
		ErrInvalid, kind, joinPath(x.sc.pathOf(), name), x.scopeName())
}

// strayErr is the error of the primitive kind name, which still ran on x
// when its function returned, once x is closed: what it records from then
// on is refused.
func (x *cx) strayErr(kind, name string) error {
	return fmt.Errorf("%w: %s %q ran on the Ctx of %s after its function returned (called from a goroutine it started? use Join or Race): not recorded",
		ErrInvalid, kind, joinPath(x.sc.pathOf(), name), x.scopeName())
}

func (x *cx) closedErr(kind, name string) error {
	return fmt.Errorf("%w: %s %q called on the Ctx of %s, whose function returned (a Ctx is valid only in the function it is given to)",
		ErrInvalid, kind, joinPath(x.sc.pathOf(), name), x.scopeName())
}

func (x *cx) scopeName() string {
	p := x.sc.pathOf()
	if p == "" {
		return "the workflow"
	}
	return fmt.Sprintf("%q", p)
}

// stopped returns ErrEvicted or ErrCancelled if the thread must stop. atWork
// says the thread would otherwise do something now, so the yielded run must
// be woken at once.
func (t *thread) stopped(atWork bool) error {
	if t.r.ctx.Err() != nil {
		if atWork {
			t.r.mu.Lock()
			t.r.yieldNow = true
			t.r.mu.Unlock()
		}
		return ErrEvicted
	}
	if t.ctx.Err() != nil {
		return ErrCancelled
	}
	return nil
}

// hostErr turns a failed host call into the error the primitive returns,
// and stops the run: after a failed commit the run's view of the history may
// be wrong, and only storage knows the truth.
func (t *thread) hostErr(err error) error {
	r := t.r
	if r.ctx.Err() == nil && t.ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The branch lost its race while the host waited for it.
		return ErrCancelled
	}
	r.mu.Lock()
	r.yieldNow = true
	if r.ctx.Err() == nil && !errors.Is(err, ErrEvicted) && r.failure == nil {
		r.failure = fmt.Errorf("workflow: host: %w", err)
	}
	r.mu.Unlock()
	r.abort(err)
	return fmt.Errorf("%w: %v", ErrEvicted, err)
}

// stamp is the time to record on an entry the thread makes now: the
// host's clock, but never before the workflow time it has reached. After a
// move to a node whose clock is behind, entries would otherwise say that
// they completed before the entries they followed, and rollback (which
// runs handlers latest completion first) and retry (which deletes what
// came after an entry) go by those times.
func (t *thread) stamp() time.Time {
	if now := t.r.now(); now.After(t.now) {
		return now
	}
	return t.now
}

// endedAt is the time to record for a wait that ended at its deadline
// (a sleep, a receive that timed out): the deadline itself if the run got
// there late (woken late, replayed after a crash), so that the recorded
// time, and with it a race's winner, is what it would have been on time.
func (t *thread) endedAt(deadline time.Time) time.Time {
	at := t.stamp()
	if deadline.After(t.now) && deadline.Before(at) {
		return deadline
	}
	return at
}

// advance moves the thread's workflow time to that of an entry it passed.
func (t *thread) advance(at time.Time) {
	if at.After(t.now) {
		t.now = at
		t.setFloor(t.now, true)
	}
}

// setFloor is setFloorLocked for a thread that does not hold r.mu.
func (t *thread) setFloor(at time.Time, ok bool) {
	if len(t.races) > 0 {
		t.r.mu.Lock()
		t.setFloorLocked(at, ok)
		t.r.mu.Unlock()
	}
}

// record applies writes to the run's history now and queues them for the
// thread's next commit.
func (t *thread) record(ws ...HistoryWrite) {
	t.r.markStart(ws)
	t.r.mu.Lock()
	t.r.hist.Apply(ws)
	t.r.mu.Unlock()
	t.pending = AppendWrites(t.pending, ws...)
}

// commit commits the thread's pending writes and ws in one batch.
func (t *thread) commit(ws ...HistoryWrite) error {
	t.r.markStart(ws)
	batch := AppendWrites(append([]HistoryWrite(nil), t.pending...), ws...)
	if len(batch) == 0 {
		return nil
	}
	// Nothing is committed once the run or branch is stopping, whatever
	// the code did with the ErrEvicted it got.
	if err := t.stopped(true); err != nil {
		return err
	}
	t.goLive()
	if err := t.r.host.Commit(t.ctx, batch); err != nil {
		return t.hostErr(err)
	}
	t.committed(batch)
	return nil
}

// committed notes that batch, built from the thread's pending writes, is
// durable.
func (t *thread) committed(batch []HistoryWrite) {
	t.r.mu.Lock()
	t.r.hist.Apply(batch)
	t.r.mu.Unlock()
	t.pending = nil
}

// waitFor is what a blocked thread waits for; zero fields are ignored.
type waitFor struct {
	at     time.Time
	reason string          // what at is the deadline of (Wake.AtReason)
	notify <-chan struct{} // new messages
	names  []string        // the queues it receives from (nil: any)
	change *change         // a race's state changed
	// floor, if hasFloor, is the earliest time the thread may record
	// when it wakes, if earlier than at (see thread.floor). keepFloor
	// says the caller set the thread's floor already, and sets it after:
	// the wait leaves it as it is.
	floor     time.Time
	hasFloor  bool
	keepFloor bool
}

func (w waitFor) wake() Wake {
	wk := Wake{At: w.at}
	if !w.at.IsZero() {
		wk.AtReason = w.reason
	}
	if w.notify != nil {
		if len(w.names) == 0 {
			wk.AnyQueue = true
		} else {
			wk.Queues = append([]string(nil), w.names...)
			sort.Strings(wk.Queues)
		}
	}
	return wk
}

// wait blocks until w fires or the thread must stop. A due deadline
// returns at once, and so does a run stopped already while a race's
// finisher waits on the thread (ErrEvicted).
func (t *thread) wait(w waitFor) error {
	r := t.r
	var timer <-chan time.Time
	if !w.at.IsZero() {
		if !w.at.After(r.now()) {
			return nil
		}
		c, stop := r.host.Timer(w.at)
		defer stop()
		timer = c
	}
	r.mu.Lock()
	if r.ctx.Err() != nil && t.holdsARaceLocked() {
		// Stopped before it blocked, while a race's finisher waits on
		// this thread (it might still finish first): it was at work when
		// the stop came, as one that begins a primitive then is
		// (cx.begin), and the run must be woken at once. This wait says
		// only when this thread would act next; the finisher waits for
		// nothing the host can wake, and its finish is lost with the run.
		// Yielded until this wait's deadline, the race was decided that
		// late, and every timeout the code after it counts from the
		// host's clock with it. Any other wait begun after the stop keeps
		// its own wake (below): a stop just after a sleep's commit wakes
		// the workflow at the sleep's end, not for a replay at once.
		r.yieldNow = true
		r.mu.Unlock()
		return ErrEvicted
	}
	r.active--
	t.waitFor, t.waitAt = w, len(r.waiting)
	r.waiting = append(r.waiting, t)
	switch {
	case w.keepFloor:
	case w.hasFloor:
		t.setFloorLocked(w.floor, true)
	case !w.at.IsZero():
		// Woken by its timer, a thread may record the deadline (see
		// endedAt); by a message, the time it came, which is later.
		t.setFloorLocked(w.at, true)
	default:
		t.setFloorLocked(time.Time{}, false)
	}
	r.reportLocked()
	r.mu.Unlock()

	woke := true
	select {
	case <-timer:
	case <-w.notify:
	case <-w.change.done():
	case <-t.ctx.Done():
		woke = false
	}
	// Woken by what it waited for before the run was stopped, the thread
	// was at work when the stop came, however late it sees it: the run
	// must be woken at once (a race's change says nothing the host can
	// wake it for). A race's change says itself whether it came before
	// the stop (race.signalLocked), whichever case the select took and
	// however late; a change the stop itself made (a sibling that left)
	// comes after it, and is not work. A timer or a message is looked at
	// here, before the lock, which the thread may wait for long after.
	woke = woke && r.ctx.Err() == nil

	r.mu.Lock()
	if w.change != nil && w.change.live {
		woke = true
	}
	r.active++
	last := r.waiting[len(r.waiting)-1]
	r.waiting[t.waitAt], last.waitAt = last, t.waitAt
	r.waiting[len(r.waiting)-1] = nil
	r.waiting = r.waiting[:len(r.waiting)-1]
	t.waitFor = waitFor{}
	if !w.hasFloor && !w.keepFloor {
		t.setFloorLocked(t.now, true)
	}
	// (A wait with a floor leaves it set: its caller looks again, and
	// sets it again if it waits again. Reset to now, then set back, the
	// floor would signal the race twice a wake, waking any other thread
	// waiting on the race's floors, which would do the same: two of them
	// would wake each other for as long as they wait.)
	evicted := r.ctx.Err() != nil
	if evicted {
		r.yield = mergeWake(r.yield, w.wake())
	}
	r.mu.Unlock()
	return t.stopped(woke)
}

// holdsARaceLocked reports whether a finisher of a race t runs under
// waits for the floors of its threads, t's among them, or did when the run
// was stopped: one that noticed the stop first has left its wait, but its
// finish is lost with the run all the same.
func (t *thread) holdsARaceLocked() bool {
	for _, s := range t.races {
		if s.r.holding > 0 || s.r.heldAtStop {
			return true
		}
	}
	return false
}

// reportLocked tells the host the run is blocked, if it is: every thread
// waits, and none of them is about to wake (a cancelled race loser, a timer
// that fired, a message that came).
func (r *run) reportLocked() {
	if r.active > 0 || r.ctx.Err() != nil {
		return
	}
	now := r.now()
	var w Wake
	for _, t := range r.waiting {
		wf := &t.waitFor
		if t.ctx.Err() != nil || (!wf.at.IsZero() && !wf.at.After(now)) || closed(wf.notify) || closed(wf.change.done()) {
			return
		}
		w = mergeWake(w, wf.wake())
	}
	for ctx := range r.parked {
		if ctx.Err() != nil {
			return // a parked part is about to return (its branch stopped)
		}
	}
	r.host.Waiting(w)
}

func closed(c <-chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// fork runs body for n child threads concurrently and returns when all have
// exited. The parent counts as blocked meanwhile; the last child to exit
// hands its activity back to the parent, so the run never looks blocked
// while it is in fact moving on.
func (t *thread) fork(n int, child func(i int) *thread, body func(i int, c *thread)) {
	if n == 0 {
		// Nothing to run (a join recorded pending with no branches): t
		// would leave the run's count of threads at work and its races
		// for children that never come back.
		return
	}
	r := t.r
	children := make([]*thread, n)
	for i := range children {
		children[i] = child(i)
	}
	r.mu.Lock()
	r.active += n - 1
	left := n
	// The children stand for t in the races it runs under meanwhile.
	t.setFloorLocked(time.Time{}, false)
	for _, c := range children {
		c.floor, c.hasFloor = c.now, true
		c.enterRacesLocked()
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(n)
	for i, c := range children {
		go func() {
			defer wg.Done()
			defer c.ended.Store(true)
			defer func() {
				r.mu.Lock()
				c.leaveRacesLocked()
				left--
				if left > 0 {
					r.active--
					r.reportLocked()
				} else {
					// t goes on from here, at its time before the fork
					// at the earliest.
					t.setFloorLocked(t.now, true)
				}
				r.mu.Unlock()
			}()
			body(i, c)
		}()
	}
	wg.Wait()
}

// callGuarded turns a panic in workflow code into a *PanicError; the
// error it returns is tamed.
func callGuarded(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return tame(fn())
}

// callThread is callGuarded for the code a thread runs (a join or race
// branch's function, the rollback handlers), on a goroutine of its own
// (see runThread): runtime.Goexit there (testing's t.FailNow calls it)
// ends that goroutine, not the engine's, and becomes a *PanicError too. On
// the engine's, it would have left a join taking the branch for a success
// with no value, or the run's end waiting for ever.
func callThread(t *thread, fn func() error) (err error) {
	done := make(chan struct{})
	go runThread(t, fn, func(e error) { err = e; close(done) })
	<-done
	return err
}

// runThread runs a thread's code fn on the calling goroutine and calls
// then with its error, tamed, in a deferred call: also after a panic in
// fn, or a runtime.Goexit, which ends the goroutine whatever its callers
// do, each then a *PanicError. The run's root function runs so on the
// run's own goroutine (Start), a branch's on one callThread starts.
func runThread(t *thread, fn func() error, then func(error)) {
	t.goexitIn = "" // a step's whose Goexit ended an earlier call is not this one's
	var err error
	returned := false
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		} else if !returned {
			err = &PanicError{Value: goexit{in: t.goexitIn}, Stack: debug.Stack()}
		}
		then(err)
	}()
	err = tame(fn())
	returned = true
}

// finish turns how the root function ended into the run's outcome.
func (r *run) finish(root *thread, err error) Outcome {
	if r.ctx.Err() != nil {
		return r.stoppedAtEnd()
	}
	if err == nil {
		r.mu.Lock()
		err = r.hist.CheckEnd("")
		r.mu.Unlock()
		if err == nil {
			if cerr := root.commit(); cerr != nil {
				return r.stoppedAtEnd()
			}
			return Outcome{Status: RunCompleted}
		}
	}
	// A panic in the workflow's code (outside steps) is its failure, as
	// an exception thrown by the original's code is: it rolls back like
	// an error returned. (It is a control error only so that no join or
	// race records it as a branch's failure and no Try catches it.)
	var pe *PanicError
	panicked := errors.As(err, &pe)
	if !isControl(err) || panicked {
		// Ended with an error before reaching entries recorded by an
		// earlier run: unchanged code, replaying the same results, fails
		// where it failed then, with nothing recorded after that point;
		// so the code changed, and the error is that, not the workflow's
		// own. (Host failures and eviction end the run as control errors,
		// and a stopping run yields above.)
		// A panic there is kept as it is, the bug to fix, but it too
		// runs no compensation: the old code did not fail there.
		r.mu.Lock()
		derr := r.hist.CheckEnd("")
		r.mu.Unlock()
		switch {
		case derr != nil && panicked:
			return Outcome{Status: RunFailed, Err: err}
		case derr != nil:
			err = derr
		}
	}
	if isControl(err) && !panicked || r.replay {
		// The history no longer describes this code (or the code misused
		// the API): record nothing more and run no compensation. (A
		// replay-only run runs none either: its failure is what it
		// checks.)
		return Outcome{Status: RunFailed, Err: err}
	}
	if rerr := callThread(root, func() error { return r.rollback(root) }); rerr != nil {
		if r.ctx.Err() != nil {
			return r.yielded()
		}
		err = errors.Join(err, rerr)
	}
	if cerr := root.commit(); cerr != nil {
		return r.yielded()
	}
	return Outcome{Status: RunFailed, Err: err}
}

// stoppedAtEnd is yielded for a run stopped once its code had returned:
// unless a thread the stop cut short said what it waited for (the code
// returned because of the stop), its outcome is what is left to record,
// at once. Yielding with no wake at all, it waited for any message: a
// node stopped between a workflow's last step and its end left it asleep
// for good.
func (r *run) stoppedAtEnd() Outcome {
	r.mu.Lock()
	if r.yield.IsZero() {
		r.yieldNow = true
	}
	r.mu.Unlock()
	return r.yielded()
}

func (r *run) yielded() Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failure != nil {
		return Outcome{Status: RunFailed, Err: r.failure}
	}
	w := r.yield
	if r.yieldNow {
		w = mergeWake(w, Wake{At: r.now()})
	}
	return Outcome{Status: RunYielded, Err: context.Cause(r.ctx), Wake: w}
}
