package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// stepSpec is a step with its types erased.
type stepSpec struct {
	opts StepOptions
	pol  retryPolicy
	// body runs the user's function and returns its value as JSON.
	body stepRunner
	// rollback, if set, compensates the step given its recorded value
	// (attempt: the handler's, from 1).
	rollback func(env StepEnv, ctx context.Context, output json.RawMessage, attempt int) error
	// stateless: the body cannot touch the state (Do), so it runs outside
	// the actor's turn and its record commits alone.
	stateless bool
}

// stepRunner is a step's body: run runs the user's function and returns
// its value as JSON; vars returns a new attempt's attemptVars, zero. An
// interface rather than a func, so that a Step's body (stepBody) is one
// allocation, not also a closure over it, and holds its first attempt's
// variables too.
type stepRunner interface {
	run(env StepEnv, ctx context.Context, attempt int) (json.RawMessage, error)
	vars() *attemptVars
}

// bodyFunc is a stepRunner that is a function.
type bodyFunc func(env StepEnv, ctx context.Context, attempt int) (json.RawMessage, error)

func (f bodyFunc) run(env StepEnv, ctx context.Context, attempt int) (json.RawMessage, error) {
	return f(env, ctx, attempt)
}

func (bodyFunc) vars() *attemptVars { return new(attemptVars) }

// attemptVars are the variables of a step attempt (cx.attempt) that its
// fn sets, which the host may run on another goroutine; RunStep returning
// orders those writes before the attempt's reads. (One struct that fn
// shares, rather than several variables each moved to the heap.) The
// step's spec is copied into it too: captured, the whole spec (large)
// would be moved to the heap on its own. Each attempt has its own: a body
// may keep its context past the attempt.
type attemptVars struct {
	ne        *Entry
	batch     []HistoryWrite
	abandoned bool
	refused   bool // x was closed: see cx.close
	ephemeral bool // the step's: not marked (AttemptMarker)
	// markErr is the host's AttemptMarker's refusal: the body did not
	// start.
	markErr     error
	body        stepRunner
	pol         retryPolicy
	hasRollback bool
	lastErr     string // for the observer
	// one holds the batch of an attempt with no pending writes (the
	// usual case): no slice of its own to allocate.
	one [1]HistoryWrite
	// ctx is the body's context (runBodyIn): no allocation of its own.
	ctx attemptCtx
	// The attempt: its step's cx, path and place, and its number.
	x      *cx
	path   string
	seq, n int
}

// visit looks path up for a new primitive of kind in scope: the recorded
// entry, or nil if the code is ahead of the history (after checking that it
// has not skipped part of it).
func (r *run) visit(sc *scope, path string, kind Kind) (*Entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, err := r.hist.Visit(path, kind)
	if e != nil {
		sc.reach(e.Seq)
	}
	if err != nil || e != nil {
		return e, err
	}
	if it, ok := r.sealedLocked(sc.pathOf()); ok {
		return nil, &DivergenceError{Path: path,
			Expected: fmt.Sprintf("nothing: %s completed under code that recorded no entry here", it),
			Found:    fmt.Sprintf("new %s %q", kind, path)}
	}
	// A try block has no entry of its own, so its scope alone would not
	// show a block inserted (or renamed) before entries of the scope
	// that holds it: its new steps would run, and an inserted one would
	// never be caught. The scopes it stands in are checked too.
	for s := sc; s != nil; s = s.outer {
		if err := r.hist.CheckNew(s.pathOf(), path, kind); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// seal marks scope sealed; r.mu must be held.
func (r *run) seal(scope string) {
	if r.sealed == nil {
		r.sealed = map[string]bool{}
	}
	r.sealed[scope] = true
}

// sealedLocked returns the sealed scope that holds scope, if any: scope
// itself or one of the scopes that enclose it (a walk up its path, not a
// scan of every sealed scope).
func (r *run) sealedLocked(scope string) (string, bool) {
	if len(r.sealed) == 0 {
		return "", false
	}
	for s := scope; s != ""; s = ParentOf(s) {
		if r.sealed[s] {
			return s, true
		}
	}
	return "", false
}

func (r *run) checkEnd(scope string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hist.CheckEnd(scope)
}

func (r *run) visitTree(tree string) {
	r.mu.Lock()
	r.hist.VisitTree(tree)
	r.mu.Unlock()
}

// step runs a step to its end: replays it, or runs attempts and waits out
// backoffs until it completes or fails for good.
func (x *cx) step(sp stepSpec) (json.RawMessage, string, error) {
	if err := x.begin("step", sp.opts.Name); err != nil {
		return nil, "", err
	}
	defer x.end()
	out, path, err := x.runStep(sp)
	if err != nil && x.closed.Load() && (errors.Is(err, ErrEvicted) || errors.Is(err, ErrCancelled)) {
		// Called from a goroutine, the step outlived the function of its
		// Ctx, and was stopped as its run ended: that, not an eviction,
		// is what the caller has to fix.
		err = x.strayErr("step", sp.opts.Name)
	}
	return out, path, err
}

func (x *cx) runStep(sp stepSpec) (json.RawMessage, string, error) {
	t, r := x.t, x.t.r
	if sp.rollback != nil && !t.checkpoint {
		return nil, "", fmt.Errorf("%w (step %q)", ErrRollbackCheckpoint, sp.opts.Name)
	}
	path, seq, err := x.sc.claim("step", sp.opts.Name)
	if err != nil {
		return nil, "", err
	}
	e, err := r.visit(x.sc, path, KindStep)
	if err != nil {
		return nil, path, err
	}
	if r.marker != nil && (e == nil || e.Status == StatusFailed) {
		if n, at, ok := r.marker.AbandonedAttempt(path); ok && (e == nil || n > e.Attempts) {
			if e, err = x.abandonedAttempt(path, seq, n, at, sp.pol); err != nil {
				return nil, path, err
			}
		}
	}
	for {
		p := planStep(e, sp.pol, r.now())
		switch p.action {
		case stepReplay:
			t.advance(e.Time)
			if sp.rollback != nil {
				r.registerRollback(e, sp.rollback, sp.pol)
			}
			return e.Output, path, nil
		case stepFail:
			t.advance(e.Time)
			if e.HasRollback && sp.rollback != nil {
				// A success whose state the host refused (attempt).
				r.registerRollback(e, sp.rollback, sp.pol)
			}
			return nil, path, stepErrorOf(e)
		case stepWait:
			t.goLive()
			o := r.observer
			if o != nil {
				o.StepBackingOff(path, e.Attempts+1, sp.pol.maxRetries+1, p.at, e.Error.message())
			}
			err := t.wait(waitFor{at: p.at, reason: WakeRetry})
			if o != nil {
				o.StepIdle(path)
			}
			if err != nil {
				return nil, path, err
			}
		case stepRun:
			t.goLive()
			// The attempt's record is stamped when it ends, after now.
			t.setFloor(time.Time{}, false)
			var lastErr string
			if e != nil {
				lastErr = e.Error.message()
			}
			ne, err := x.attempt(path, seq, p.attempt, sp, lastErr)
			t.setFloor(t.now, true)
			if err != nil {
				return nil, path, err
			}
			e = ne
		}
	}
}

// abandonedAttempt records attempt n of the step at path, started at at,
// which the host's marker says ended without its outcome recorded
// (AttemptMarker: its node crashed, or could not write its record): failed,
// counted as any failed attempt is, or exhausted if it was the step's last.
// Recorded (not only counted in memory), so that the history shows it,
// replays find it as any failed attempt, and the host's marker goes with
// its commit.
func (x *cx) abandonedAttempt(path string, seq, n int, at time.Time, pol retryPolicy) (*Entry, error) {
	t := x.t
	t.goLive()
	ne := &Entry{Path: path, Seq: seq, TryPlaces: x.sc.tryPlaces, Kind: KindStep, Attempts: n, LastAttemptAt: at, Time: t.stamp(),
		Status: StatusFailed, Error: &RecordedError{Message: AbandonedAttemptMessage(n)}}
	if n > pol.maxRetries {
		ne.Status, ne.Failure = StatusExhausted, FailureExhausted
	}
	if err := t.commit(HistoryWrite{Put: ne}); err != nil {
		return nil, err
	}
	if ne.Status != StatusFailed {
		t.advance(ne.Time)
	}
	return ne, nil
}

// AbandonedAttemptMessage is the error recorded for attempt n of a step
// whose outcome was never recorded (AttemptMarker): its node crashed while
// the body ran, or the body ended and its record could not be written.
func AbandonedAttemptMessage(n int) string {
	return fmt.Sprintf("attempt %d ended without its outcome recorded (its node stopped or could not write)", n)
}

// attempt runs attempt n in the actor's turn and commits its record with
// the state it left. lastErr is the error of the step's previous attempt,
// for the host's StepObserver.
func (x *cx) attempt(path string, seq, n int, sp stepSpec, lastErr string) (*Entry, error) {
	t, r := x.t, x.t.r
	res := sp.body.vars()
	res.body, res.pol, res.hasRollback, res.lastErr, res.ephemeral = sp.body, sp.pol, sp.rollback != nil, lastErr, sp.opts.Ephemeral
	res.x, res.path, res.seq, res.n = x, path, seq, n
	// The thread's stepFn runs the attempt that holds t.attempting: a
	// closure (or method value) of its own was an allocation per step.
	var fn func(StepEnv) []HistoryWrite
	if t.attempting.CompareAndSwap(nil, res) {
		defer t.attempting.Store(nil)
		if t.stepFn == nil {
			t.stepFn = func(env StepEnv) []HistoryWrite {
				if res := t.attempting.Load(); res != nil {
					return res.run(env)
				}
				return nil // called after RunStep returned: nothing to record
			}
		}
		fn = t.stepFn
	} else {
		// Another attempt on this thread holds it: a step of a Ctx
		// that outlived its function, run from a goroutine.
		fn = res.run
	}
	if len(t.pending) > 0 && payloadBytes(t.pending) > MaxRidingBytes {
		// What the thread recorded before (a settled join's outputs, a
		// loop's state) goes out alone first, so that a host that bounds
		// the attempt's own writes (StepEnv.Check) never refuses them
		// for writes the step did not make.
		if err := t.commit(); err != nil {
			return nil, err
		}
	}
	if sp.stateless {
		// No turn: other steps (of other join or race branches, or
		// actions) run meanwhile. Only the record is committed. No turn
		// either to check that the host may still run the actor, as
		// RunStep does: the guard does.
		if rh, ok := r.host.(*replayHost); ok {
			// A replay runs no body: its step is past the history.
			return nil, t.hostErr(rh.park(t.ctx))
		}
		if g, ok := r.host.(BodyGuard); ok {
			if err := g.MayRunBody(); err != nil {
				return nil, t.hostErr(err)
			}
			if bt, ok := r.host.(BodyTracker); ok {
				defer bt.BodyEnded()
			}
		}
		writes := fn(StepEnv{Client: r.host.Client(), Check: r.checkOutput})
		if res.markErr != nil {
			return nil, t.hostErr(res.markErr)
		}
		if res.refused {
			return nil, x.strayErr("step", sp.opts.Name)
		}
		if res.abandoned {
			return nil, t.stopped(true)
		}
		if err := r.host.Commit(t.ctx, writes); err != nil {
			return nil, t.hostErr(err)
		}
	} else if err := r.host.RunStep(t.ctx, sp.opts.Ephemeral, fn); err != nil || res.markErr != nil {
		if err == nil {
			err = res.markErr
		}
		if res.ne != nil && !res.refused && !res.abandoned {
			// The body ran and the host refused its writes (too large,
			// say): the run's failure names the step.
			err = fmt.Errorf("step %q: %w", path, err)
		}
		return nil, t.hostErr(err)
	}
	if res.refused {
		return nil, x.strayErr("step", sp.opts.Name)
	}
	if res.abandoned {
		return nil, t.stopped(true)
	}
	ne := res.ne
	if ne == nil {
		return nil, t.hostErr(errors.New("the host's RunStep returned nil without running the step"))
	}
	t.committed(res.batch)
	if ne.Status != StatusFailed {
		t.advance(ne.Time)
	}
	if ne.HasRollback && sp.rollback != nil {
		r.registerRollback(ne, sp.rollback, sp.pol)
	}
	return ne, nil
}

// run is an attempt's fn for the host's RunStep (see cx.attempt).
func (res *attemptVars) run(env StepEnv) []HistoryWrite {
	x, t, path, seq, n := res.x, res.x.t, res.path, res.seq, res.n
	if x.closed.Load() {
		// Run from a goroutine, the step outlived the function of
		// its Ctx: it records nothing (nor runs its body), as the
		// run has ended or is ending.
		res.refused = true
		return nil
	}
	if t.lostARace() {
		// The branch lost its race while it waited for the turn. Its
		// context may not be cancelled yet: the decision cancels the
		// losers one by one, and another loser's step, cancelled
		// first, may have handed the turn over already. A loser's
		// body must not start. (lostARace waits for the decision to
		// end, and costs nothing outside races.)
		res.abandoned = true
		return nil
	}
	env.Path = path
	start := t.stamp()
	if m := t.r.marker; m != nil && !res.ephemeral {
		// Durable before the body starts: a crash in it must leave
		// the attempt's trace.
		if err := m.MarkAttempt(path, n, start); err != nil {
			res.markErr = err
			return nil
		}
	}
	exited := true
	traced := func(error) {}
	defer func() {
		if exited {
			// runtime.Goexit in the body: the thread ends here.
			t.goexitIn = fmt.Sprintf("step %q", path)
			if o := t.r.observer; o != nil {
				o.StepIdle(path)
			}
			traced(ErrGoexit) // its span too (a second end is none)
		}
	}()
	if o := t.r.observer; o != nil {
		o.StepStarted(path, n, res.pol.maxRetries+1, start, res.lastErr)
	}
	parent := t.ctx
	if tr := t.r.tracer; tr != nil {
		parent, traced = tr.TraceStep(t.ctx, path, n)
	}
	out, err, timedOut, late := runBodyIn(&res.ctx, parent, res.pol.timeout, t.r.host, func(ctx context.Context) (json.RawMessage, error) {
		return res.body.run(env, ctx, n)
	})
	exited = false
	if timedOut && err == nil {
		traced(context.DeadlineExceeded)
	} else {
		traced(err)
	}
	if o := t.r.observer; o != nil {
		o.StepIdle(path)
	}
	t.r.reportPanic(err, path, false)
	if timedOut {
		t.r.reportOverrun(path, false, res.pol.timeout, late)
	}
	if x.closed.Load() {
		// As above: the function of its Ctx returned while the body
		// ran. What it did to the state goes too.
		res.refused = true
		return nil
	}
	if !timedOut && t.ctx.Err() != nil && (err != nil || t.lostARace()) {
		// Evicted or lost the race mid-attempt: a failure says
		// nothing about the step, so it is not recorded, and the
		// attempt runs again on the next activation. (On a host that
		// marks attempts, AttemptMarker, an eviction that is not a
		// graceful leave keeps the marker, and the next activation
		// counts the attempt, as after a crash; a graceful leave
		// deletes it.) A success after its branch lost a race is not
		// recorded either: recorded, the late result could be durable
		// before the race's decision, and a replay after a crash in
		// between would pick it as the winner by its time. (Any other
		// cancelled success is recorded: an evicted run's, a join
		// sibling's of a branch that failed, to save running the step
		// again.)
		res.abandoned = true
		return nil
	}
	// compensable: the body's side effect happened (a charge) and
	// only the state it left was refused, so the failure records the
	// output (none for a null value) and the step's compensation
	// runs when the workflow rolls back, as a completed step's does.
	compensable, body := false, out
	if env.Check != nil {
		// The host encodes the state here: its encoder is the
		// actor's code, which may call runtime.Goexit too.
		exited = true
		var refusedSuccess bool
		out, err, timedOut, refusedSuccess = checkAttempt(env.Check, out, err, timedOut)
		exited = false
		compensable = refusedSuccess && res.hasRollback && t.r.outputFits(body)
	}
	res.ne = recordAttempt(path, n, attemptResult{start: start, end: t.stamp(), output: out, err: err, timedOut: timedOut}, res.pol)
	res.ne.Seq, res.ne.TryPlaces = seq, x.sc.tryPlaces
	res.ne.HasRollback = res.hasRollback && res.ne.Status == StatusCompleted
	if compensable {
		res.ne.Output, res.ne.HasRollback = body, true
	}
	t.r.markEntry(res.ne)
	res.batch = AppendWrites(append(res.one[:0], t.pending...), HistoryWrite{Put: res.ne})
	return res.batch
}

// outputFits reports whether a step's output is within the host's bound
// (OutputChecker; none: any is).
func (r *run) outputFits(out json.RawMessage) bool {
	return r.checkOutput == nil || r.checkOutput(out) == nil
}

// MaxRidingBytes bounds the payload (outputs, states, errors, message
// bodies) of the writes a thread recorded but has not committed yet that
// go out with a step attempt's record: more goes out on its own first. A
// host's bound on the attempt's own writes (StepEnv.Check) plus this one
// fits its transaction.
const MaxRidingBytes = 64 << 10

// payloadBytes is what ws carry beyond their entries' fixed fields, and a
// few hundred bytes per write for those.
func payloadBytes(ws []HistoryWrite) int {
	n := 0
	for _, w := range ws {
		n += 256 + len(w.DeleteTree)
		for _, m := range w.Requeue {
			n += len(m.Body)
		}
		e := w.Put
		if e == nil {
			continue
		}
		n += len(e.Path) + len(e.Output) + len(e.State) + e.Error.size() + e.RollbackError.size() + e.RollbackRetryError.size()
		for _, m := range e.Messages {
			n += len(m.Body)
		}
		for name, b := range e.Branches {
			n += len(name) + len(b.Output) + b.Error.size()
		}
	}
	return n
}

// checkAttempt asks the host whether it can commit what an attempt wrote
// (check is StepEnv.Check), and returns the attempt's result as it is to
// be recorded, and whether it was a success the host refused. Refused, an
// attempt that succeeded fails for good (critical): the same writes would
// be refused again. One that failed keeps its failure, and how the policy
// takes it (a retry, a Rollback error), its message saying that its
// changes were discarded: it would have committed them (roll-forward).
func checkAttempt(check func(json.RawMessage) error, out json.RawMessage, err error, timedOut bool) (json.RawMessage, error, bool, bool) {
	failed := err != nil || timedOut
	var cerr error
	if failed {
		cerr = check(nil)
	} else {
		cerr = check(out)
	}
	switch {
	case cerr == nil:
		return out, err, timedOut, false
	case !failed:
		return nil, Critical(cerr), false, true
	case err == nil:
		// Timed out with no error of its own: recorded as a timeout,
		// whose message the policy makes (classify), saying why.
		err = context.DeadlineExceeded
	}
	return nil, &discardedError{err: err, why: cerr}, timedOut, false
}

// discardedError is a failed attempt's error whose changes the host could
// not commit: it is err (its kind, its code) and says why.
type discardedError struct {
	err error
	why error
}

func (e *discardedError) Error() string {
	return e.err.Error() + " (" + e.why.Error() + ")"
}

func (e *discardedError) Unwrap() error { return e.err }

// runBody runs body with a context that is cancelled after timeout (0:
// never; with the system clock, also its deadline), and reports whether
// the timeout fired before body returned and, if it did, how long after
// its deadline body returned.
func runBody(parent context.Context, timeout time.Duration, clk Clock, body func(context.Context) (json.RawMessage, error)) (out json.RawMessage, err error, timedOut bool, late time.Duration) {
	return runBodyIn(nil, parent, timeout, clk, body)
}

// runBodyIn is runBody with ac, zero, as the attempt's context if the
// clock is an afterFuncClock (nil: one of its own).
func runBodyIn(ac *attemptCtx, parent context.Context, timeout time.Duration, clk Clock, body func(context.Context) (json.RawMessage, error)) (out json.RawMessage, err error, timedOut bool, late time.Duration) {
	if _, ok := clk.(afterFuncClock); ok {
		// No goroutine to wait for the timer: a node runs thousands of
		// steps a second, each with a timeout that almost never fires;
		// and no timer or context at all unless the body asks for them.
		ctx := ac
		if ctx == nil {
			ctx = new(attemptCtx)
		}
		ctx.init(parent, timeout, clk)
		ended := false
		defer func() {
			if !ended {
				ctx.end() // runtime.Goexit in the body: its timer goes too
			}
		}()
		out, err := callBody(ctx, body)
		ended = true
		if ctx.end() {
			// Read only then: the clock is not read again for the
			// steps that end in time, nearly all of them.
			return out, err, true, clk.Now().Sub(ctx.deadline)
		}
		return out, err, false, 0
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var fired atomic.Bool
	var wg sync.WaitGroup
	done := make(chan struct{})
	// Deferred, so that the timer's goroutine ends after a runtime.Goexit
	// in the body too.
	defer func() {
		close(done)
		wg.Wait()
	}()
	var deadline time.Time
	if timeout > 0 {
		deadline = clk.Now().Add(timeout)
		tc, stop := clk.Timer(deadline)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer stop()
			select {
			case <-tc:
				fired.Store(true)
				cancel()
			case <-done:
			}
		}()
	}
	out, err = callBody(ctx, body)
	// A body that returns past its deadline timed out, whether or not
	// the timer's goroutine has run yet.
	if deadline.IsZero() {
		return out, err, false, 0
	}
	now := clk.Now()
	if fired.Load() || !now.Before(deadline) {
		return out, err, true, now.Sub(deadline)
	}
	return out, err, false, 0
}

// overrunGrace is how long after its timeout an attempt's body may return
// before the host is told it overran (OverrunReporter): a body that
// watches its context returns about when it is cancelled; one that does
// not held the workflow (a Step's, the actor's turn) meanwhile.
const overrunGrace = 250 * time.Millisecond

// reportOverrun tells a host that logs it that the attempt of the step at
// path, or of its rollback handler, returned late after its timeout.
func (r *run) reportOverrun(path string, rollback bool, timeout, late time.Duration) {
	if late < overrunGrace {
		return
	}
	if or, ok := r.host.(OverrunReporter); ok {
		or.StepOverran(path, rollback, timeout, late)
	}
}

// callBody turns a panic in a step body into a failed attempt, its error
// a *bodyPanic.
func callBody(ctx context.Context, body func(context.Context) (json.RawMessage, error)) (out json.RawMessage, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &bodyPanic{msg: fmt.Sprintf("workflow: step panicked: %v", v), value: v, stack: debug.Stack()}
		}
	}()
	out, err = body(ctx)
	return out, tame(err)
}

// bodyPanic is the error of an attempt whose body (a step's, or a
// rollback handler's) panicked. The history records its message only;
// the stack, taken where it panicked, goes to the host's log
// (PanicReporter), once.
type bodyPanic struct {
	msg   string
	value any
	stack []byte
}

func (p *bodyPanic) Error() string { return p.msg }

// reportPanic hands the panic of an attempt (err, if it is one) of the
// step at path, or of its rollback handler, to a host that logs it.
func (r *run) reportPanic(err error, path string, rollback bool) {
	p, ok := err.(*bodyPanic)
	if !ok {
		return
	}
	if pr, ok := r.host.(PanicReporter); ok {
		pr.StepPanicked(path, rollback, p.value, p.stack)
	}
}

// rollbackAction is the compensation of one completed step.
type rollbackAction struct {
	path string
	at   time.Time
	pol  retryPolicy // the step's: its handler's attempts follow it too
	run  func(env StepEnv, ctx context.Context, attempt int) error
	// missing: the step has a handler that this run did not register.
	missing bool
}

// registerRollback takes the handler and its policy rather than the
// step's spec, which its closure would otherwise move to the heap on every
// step, with a handler or not.
func (r *run) registerRollback(e *Entry, handler func(StepEnv, context.Context, json.RawMessage, int) error, pol retryPolicy) {
	if e.RollbackDone {
		return
	}
	out := e.Output
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rollbacks = append(r.rollbacks, rollbackAction{
		path: e.Path, at: e.Time, pol: pol,
		run: func(env StepEnv, ctx context.Context, attempt int) error { return handler(env, ctx, out, attempt) },
	})
}

// rollbackKeyMark sets a rollback handler's step keys apart from its
// body's (stepKey length-prefixes each part, so no path and name make it).
const rollbackKeyMark = "\x00rollback"

// rollback runs the registered compensations, latest completion first, each
// attempt in a turn that records it, so that a rollback cut short resumes
// where it stopped. A handler that fails is retried as its step is (see
// compensate); the rollback stops at the first one that fails for good.
func (r *run) rollback(root *thread) error {
	r.mu.Lock()
	acts := append([]rollbackAction(nil), r.rollbacks...)
	// Steps whose handlers this run never got: they are in scopes a
	// replay does not re-enter (a completed loop, a loop's iterations
	// before its checkpoint, a settled branch whose code changed). Their
	// compensation cannot run; the rollback fails there, in its order,
	// rather than silently leave them done.
	registered := make(map[string]bool, len(acts))
	for _, a := range acts {
		registered[a.path] = true
	}
	for _, e := range r.hist.Entries() {
		if e.HasRollback && !e.RollbackDone && e.RollbackError == nil && !registered[e.Path] {
			acts = append(acts, rollbackAction{path: e.Path, at: e.Time, missing: true})
		}
	}
	// Latest completion first; steps that completed at the same time
	// (workflowtest's clock stands still) in the reverse of the code's
	// order, not of when this run registered them, which differs from
	// run to run between branches and leaves out the steps it does not
	// have.
	sort.SliceStable(acts, func(i, j int) bool {
		if !acts[i].at.Equal(acts[j].at) {
			return acts[i].at.After(acts[j].at)
		}
		return codeOrderBefore(r.hist, acts[j].path, acts[i].path)
	})
	r.mu.Unlock()
	for _, a := range acts {
		r.mu.Lock()
		e := r.hist.Get(a.path)
		r.mu.Unlock()
		if e == nil || e.RollbackDone {
			// Gone with a pruned loop iteration or a race loser.
			continue
		}
		if e.RollbackError != nil {
			return &RollbackFailedError{Path: a.path, Err: e.RollbackError}
		}
		if a.missing {
			r.mu.Lock()
			retired := slices.ContainsFunc(r.retired, func(p string) bool { return Under(a.path, p) })
			r.mu.Unlock()
			if retired {
				return &RollbackFailedError{Path: a.path, Err: ErrRollbackRemoved}
			}
			return &RollbackFailedError{Path: a.path, Err: ErrRollbackNotReplayed}
		}
		if err := r.compensate(root, a); err != nil {
			return err
		}
	}
	return nil
}

// codeOrderBefore reports whether the code made the step at path a before
// the one at b, for two that completed at the same time: compared where
// their paths part, by codePlace, then by name, so that the order is the
// same in every run and a strict weak one (a key for each path segment).
func codeOrderBefore(h *History, a, b string) bool {
	sa, sb := strings.Split(a, "/"), strings.Split(b, "/")
	i := 0
	for i < len(sa) && i < len(sb) && sa[i] == sb[i] {
		i++
	}
	if i == len(sa) || i == len(sb) {
		return len(sa) < len(sb)
	}
	if pa, pb := codePlace(h, sa, i), codePlace(h, sb, i); pa != pb {
		return pa < pb
	}
	return sa[i] < sb[i]
}

// codePlace is where segment i of the path sp comes in the code, among the
// segments of its scope (sp[:i]): a loop iteration's number; 0 for the
// branches of a join or race, which ran side by side (their names decide);
// an entry's place (Seq); for a try block, which records no entry of its
// own, its place as the first entry recorded under it has it (TryPlaces);
// unknown places (entries of builds from before them) last.
func codePlace(h *History, sp []string, i int) int {
	scope := strings.Join(sp[:i], "/")
	if n, ok := iterationIn(scope, strings.Join(sp[:i+1], "/")); ok {
		return n
	}
	if se := h.Get(scope); se != nil && (se.Kind == KindJoin || se.Kind == KindRace) {
		return 0
	}
	if e := h.Get(joinPath(scope, sp[i])); e != nil {
		if e.Seq > 0 {
			return e.Seq
		}
		return math.MaxInt
	}
	// A try block: the segments from i to the first entry below it are
	// try blocks, whose places that entry's TryPlaces hold, innermost
	// first.
	for k := i + 1; k < len(sp); k++ {
		if e := h.Get(strings.Join(sp[:k+1], "/")); e != nil {
			if d := k - 1 - i; d < len(e.TryPlaces) {
				return e.TryPlaces[d]
			}
			break
		}
	}
	return math.MaxInt
}

// compensate runs the handler of a until it succeeds or fails for good:
// under its step's policy, a failed attempt is recorded (its count, start
// and error in the step's entry) and followed by the backoff a failed
// attempt of the step would be, waited as the step's is. An eviction
// during it yields the run until its end, so that the next activation,
// which resumes the rollback, runs the handler again then.
func (r *run) compensate(root *thread, a rollbackAction) error {
	for {
		r.mu.Lock()
		e := r.hist.Get(a.path)
		r.mu.Unlock()
		p := planRollback(e, a.pol, r.now())
		switch p.action {
		case stepWait:
			if err := root.wait(waitFor{at: p.at, reason: WakeRetry}); err != nil {
				return err
			}
			continue
		case stepFail:
			ne := e.clone()
			ne.RollbackError, ne.RollbackRetryError = e.RollbackRetryError, nil
			if ne.RollbackError == nil {
				ne.RollbackError = &RecordedError{Message: "unknown error"}
			}
			if err := root.commit(HistoryWrite{Put: ne}); err != nil {
				return err
			}
			return &RollbackFailedError{Path: a.path, Err: ne.RollbackError}
		}
		ne, err := r.compensateOnce(root, a, e, p.attempt)
		if err != nil {
			return err
		}
		if ne.RollbackError != nil {
			return &RollbackFailedError{Path: a.path, Err: ne.RollbackError}
		}
		if ne.RollbackDone {
			return nil
		}
	}
}

// compensateOnce runs attempt n of a's handler in the actor's turn and
// commits its record, e updated, with the state it left.
func (r *run) compensateOnce(root *thread, a rollbackAction, e *Entry, n int) (*Entry, error) {
	var (
		ne        *Entry
		batch     []HistoryWrite
		abandoned bool
	)
	fn := func(env StepEnv) []HistoryWrite {
		// The step's path, marked as its handler's: a refund named as
		// the charge it undoes ("payment") must not find the charge's
		// record.
		env.Path = a.path + rollbackKeyMark
		root.goexitIn = fmt.Sprintf("the rollback handler of step %q", a.path) // for a runtime.Goexit in it
		start := root.stamp()
		_, err, timedOut, late := runBody(root.ctx, a.pol.timeout, r.host, func(ctx context.Context) (json.RawMessage, error) {
			return nil, a.run(env, ctx, n)
		})
		root.goexitIn = ""
		r.reportPanic(err, a.path, true)
		if timedOut {
			r.reportOverrun(a.path, true, a.pol.timeout, late)
		}
		if err != nil && !timedOut && root.ctx.Err() != nil {
			// Evicted mid-attempt: not counted, as a step's.
			abandoned = true
			return nil
		}
		ne = e.clone()
		r.markEntry(ne)
		ne.RollbackAttempts, ne.RollbackAttemptAt, ne.RollbackRetryError = n, start, nil
		if timedOut || err != nil {
			// The body's NonRetryable is not the compensation's: a
			// refund keeps retrying what a charge gave up on.
			pol := a.pol
			pol.nonRetryable = nil
			rec, kind := classify("rollback", attemptResult{err: err, timedOut: timedOut}, pol)
			if kind != "" || n > a.pol.maxRetries {
				ne.RollbackError = rec
			} else {
				ne.RollbackRetryError = rec
			}
		} else {
			ne.RollbackDone = true
		}
		batch = AppendWrites(append([]HistoryWrite(nil), root.pending...), HistoryWrite{Put: ne})
		return batch
	}
	if err := r.host.RunStep(root.ctx, false, fn); err != nil {
		return nil, root.hostErr(err)
	}
	if abandoned {
		return nil, root.stopped(true)
	}
	if ne == nil {
		return nil, root.hostErr(errors.New("the host's RunStep returned nil without running the rollback"))
	}
	root.committed(batch)
	return ne, nil
}
