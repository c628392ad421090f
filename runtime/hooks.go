package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/storage"
	"go.uber.org/zap"
)

// The actor's lifecycle hooks (rivet.Actor's CreateVars, OnWake, OnSleep,
// OnDestroy) run as turns of their own: the gate is held, their changes to
// the state and the scheduled calls commit as an action's do, and their
// events go out with that commit.

// defaultSleepTimeout bounds OnSleep when the actor type sets no
// SleepTimeout: long enough to tell another actor, short enough that a
// drain or a stop is not held up for long by one actor.
const defaultSleepTimeout = 10 * time.Second

// sleepTimeout bounds a's OnSleep, and an orderly leave's wait for its
// tasks: its type's SleepTimeout, or defaultSleepTimeout.
func (a *activation) sleepTimeout() time.Duration {
	if d := a.spec.SleepTimeout; d > 0 {
		return d
	}
	return defaultSleepTimeout
}

// maxSleeps bounds the OnSleep hooks the reaper, or a stopping host, runs
// at once.
const maxSleeps = 64

func hasWake(sp *rivet.Spec) bool { return sp.CreateVars != nil || sp.Wake != nil }

// hookTurn runs fn, one of the actor's hooks, as a turn body. The caller
// holds the gate with chain. On an error or a panic the hook's changes are
// discarded.
//
// The tasks it asks for (KeepAwake) go as its events go; or, with
// wakeTasks set, are added to it, for the wake to start once both its hooks
// have succeeded.
//
// It runs aside: a hook that calls runtime.Goexit fails as one that
// panicked does, rather than end the goroutine of the request, wakeup,
// reaper or stop that runs it, with the actor's gate held.
func (h *Host) hookTurn(ctx context.Context, a *activation, chain, name string, wakeTasks *[]taskFn, fn func(env rivet.Env) error) (err error) {
	if aside(func() { err = h.hookTurnAside(ctx, a, chain, name, wakeTasks, fn) }) {
		h.log.Error("actor hook called runtime.Goexit", actorField(a), zap.String("hook", name))
		// Aside too: the state's decoder may call runtime.Goexit as well,
		// and this goroutine may be the reaper's.
		aside(a.restoreState)
		return rivet.Errorf(rivet.ErrInternal, "%s of %s called runtime.Goexit", name, a.describe())
	}
	return err
}

// hookTurnAside is hookTurn's body, on a goroutine of its own.
func (h *Host) hookTurnAside(ctx context.Context, a *activation, chain, name string, wakeTasks *[]taskFn, fn func(env rivet.Env) error) (err error) {
	te := a.beginTurnEvents(chain, false)
	ts := a.newTurnSchedule(false, te)
	te.holdTasks = wakeTasks != nil
	kept, wrote := false, false
	defer func() {
		if wakeTasks != nil {
			if fns := te.takeTasks(); kept {
				*wakeTasks = append(*wakeTasks, fns...)
			}
		}
		a.finishTurnEvents(te, kept, wrote)
	}()
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("actor hook panicked", actorField(a), zap.String("hook", name), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			a.restoreState()
			kept = false
			err = rpcerr.Logged(rivet.Errorf(rivet.ErrInternal, "%s of %s panicked", name, a.describe()))
		}
	}()
	env := rivet.Env{Ctx: ctx, Name: a.ref.Name, Key: a.ref.Key, Client: &hostClient{h: h, chain: chain, from: a}, Schedule: ts, Destroy: ts.destroy, Enqueue: ts, Events: te, Vars: a.vars, Tasks: te}
	if err := fn(env); err != nil {
		a.restoreState()
		return h.hookError(a, name, err)
	}
	w, err := a.saveState()
	if err != nil {
		if errors.Is(err, rivet.ErrTooLarge) {
			// The hook's change was refused (discarded): the hook failed,
			// as if it had returned the error. RESOURCE_EXHAUSTED would
			// tell the caller that its own request was too large.
			return h.hookError(a, name, err)
		}
		return err
	}
	kept, wrote = true, w
	return nil
}

// hookError is actionError for a hook, except that a rivet error from the
// hook is INTERNAL too, with its message: its kind would say something of
// the actor called (NOT_FOUND would tell a caller, a wakeup or a scheduled
// call that the actor is gone, and they would give up on it).
func (h *Host) hookError(a *activation, name string, err error) error {
	var re *rivet.Error
	if errors.As(err, &re) {
		return rivet.Errorf(rivet.ErrInternal, "%s of %s failed: %s", name, a.describe(), re.Message)
	}
	return h.codeError(a, name, zap.String("hook", name), err)
}

// wake makes the vars and runs OnWake of a new activation, before any
// other turn: the caller holds the gate with chain, and no workflow runs.
// Bounded by the waking request's context and the action timeout.
func (h *Host) wake(ctx context.Context, a *activation, chain string) error {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.ActionTimeout)
	defer cancel()
	var tasks []taskFn
	if fn := a.spec.CreateVars; fn != nil {
		err := h.hookTurn(ctx, a, chain, "CreateVars", &tasks, func(env rivet.Env) error {
			v, err := fn(env, a.state)
			if err != nil {
				// What it opened before it failed, returned with the
				// error, is nobody's if not closed here: the activation
				// never keeps it. A nil pointer is what `return
				// newVars()` passes on from a constructor that failed:
				// nothing to close, and its Close would likely panic.
				if c, ok := v.(io.Closer); ok && !isNilPointer(v) {
					a.closeValue(c)
				}
				return err
			}
			a.vars = v
			if _, ok := v.(io.Closer); ok {
				a.closable.Store(true)
			}
			return nil
		})
		if err != nil {
			h.wakeFailed.Add(1)
			return err
		}
	}
	if fn := a.spec.Wake; fn != nil && !a.stopped.Load() {
		if err := h.hookTurn(ctx, a, chain, "OnWake", &tasks, func(env rivet.Env) error { return fn(env, a.state) }); err != nil {
			h.wakeFailed.Add(1)
			return err
		}
	}
	a.startTasks(tasks) // (with their contexts ended if it was evicted meanwhile)
	return nil
}

// wakeLoaded runs the hooks of an activation the caller just loaded, with
// its gate taken by chain (hold's, if not "": the holder keeps the gate),
// and then starts its workflow (unless held). If they fail, the activation
// is evicted and the error returned, unless held: a holder's turn (Destroy,
// a workflow cancel) goes on, and turnFor drops the activation after it.
// It closes a.woken whatever happens.
func (h *Host) wakeLoaded(ctx context.Context, a *activation, chain, hold string) error {
	defer func() {
		// The hooks' turn, commit included, was the actor's last: its
		// idle time starts now, not when it was loaded.
		a.lastTurn.Store(time.Now().UnixNano())
		close(a.woken)
	}()
	err := h.wake(ctx, a, chain)
	if err == nil && a.stopped.Load() {
		// Evicted while its hooks ran (a lost claim, a handoff that gave
		// up waiting): it never serves.
		a.closeVars()
		err = rivet.Errorf(rivet.ErrUnavailable, "actor %s was deactivated while it woke", a.describe())
	}
	if err != nil && hold == "" {
		if a.created {
			// A create is all or nothing: its records go again before
			// anyone else can see the actor (the gate is still held).
			err = h.undoCreate(a, err)
		}
		// Turns waiting for its gate find it stopped and load the actor
		// again (or, if its create was taken back, find none, or create
		// it themselves).
		h.evict(a)
		a.gate.release(chain)
		return err
	}
	if err != nil {
		a.wakeFailed = true
		h.log.Warn("waking the actor failed; the operation that loaded it goes on", actorField(a), zap.Error(err))
		return nil
	}
	if hold != "" {
		return nil
	}
	v := a.currentVersion() // the hooks' writes, not the workflow's
	history := a.history
	a.history = nil
	a.startWorkflow(history)
	a.gate.release(chain)
	// A create or a wakeup that loaded the actor answers once the hooks'
	// writes are durable, as a turn does.
	if err := a.waitDurable(ctx, v); err != nil {
		if ctx.Err() != nil && !a.stopped.Load() {
			// The caller gave up, not the writes: the activation serves
			// (its hooks ran, its workflow runs), and no load of it comes
			// again to arm its calls' timer (activateFor's armSchedules,
			// which this error skips).
			a.armSchedules()
		}
		return wakeWriteError(ctx, a, err)
	}
	return nil
}

// undoCreate takes back the create of an activation whose creation hooks
// (CreateVars, OnWake) failed, so that a create is all or nothing: the
// caller gets the hooks' error and no actor is left (a retried create
// creates it). The caller holds the gate with the wake's chain, and no
// workflow, task or turn of anyone else has run: everything stored for the
// actor was written by this create and its hooks (and their re-entrant
// turns), and is deleted, fenced, once their writes have settled (a late
// write would land after the delete and resurrect part of the actor). It
// returns the error for the caller: err, saying whether the actor was
// created. If the delete fails, the actor stays (as far as is known), as
// after a later wake's failure: the next request wakes it again.
//
// The hooks run after the create's commit, not before it in one
// transaction with it, because a hook's turn keeps the output gate: a call
// it makes to another actor, or back into its own, first waits for the
// actor's writes to be durable, its creation included.
func (h *Host) undoCreate(a *activation, err error) error {
	if a.stopped.Load() {
		// Evicted while it woke (a lost claim, a partition handed off
		// meanwhile): its claim is not this activation's to write on any
		// more, and another may load the actor once it has left.
		return noteError(err, "the actor was created, and this node, which no longer serves it, did not take the create back")
	}
	// Not the caller's context: a caller that gave up (often why the
	// hooks failed) must not leave the actor behind.
	cctx, cancel := h.commitContext()
	defer cancel()
	derr := a.waitCommitted(cctx, a.currentVersion())
	if derr == nil {
		a.mu.Lock()
		if a.failed == nil {
			a.failed = errDestroyed // nothing more is written
		}
		a.mu.Unlock()
		derr = h.commit.Commit(cctx, storage.Txn{Fence: a.fence, Ops: actorDeleteOps(a.part, a.ref.Name, a.enc, a.prefix)})
		if derr != nil {
			a.mu.Lock()
			if errors.Is(a.failed, errDestroyed) {
				a.failed = errRetired
			}
			a.mu.Unlock()
		}
	}
	if derr != nil {
		h.log.Warn("a create whose hooks failed could not be taken back: the actor exists", actorField(a), zap.Error(derr))
		return noteError(err, fmt.Sprintf("the actor was created, and taking the create back failed (%v): it may exist; if it does, the next request wakes it again", derr))
	}
	h.timers.cancel(a.id)
	h.timers.cancel(schedTimer(a.id))
	h.events.endIf(func(s *Subscription) bool { return s.id == a.id }, func(*Subscription) error {
		return rivet.Errorf(rivet.ErrNotFound, "actor %s was not created: its hooks failed", a.describe())
	})
	return noteError(err, "the actor was not created")
}

// noteError adds note to err's message, keeping its kind: in a rivet
// error's own message, which is what crosses the wire.
func noteError(err error, note string) error {
	var re *rivet.Error
	if errors.As(err, &re) {
		c := *re
		c.Message += " (" + note + ")"
		return &c
	}
	return fmt.Errorf("%w (%s)", err, note)
}

// wakeWriteError is the error of a request whose activation's hook writes
// failed: the request itself did not run, so it may be retried
// (UNAVAILABLE), whatever became of those writes.
func wakeWriteError(ctx context.Context, a *activation, err error) error {
	if ctx.Err() != nil {
		return ctxError(ctx)
	}
	msg := fmt.Sprintf("actor %s: the writes of its wake failed: %v", a.describe(), err)
	if a.created {
		msg += " (the actor was created)"
	}
	return rivet.Errorf(rivet.ErrUnavailable, "%s", msg)
}

// sleep runs OnSleep of an activation leaving memory in an orderly way.
// The caller holds the gate with chain and has stopped the workflow. A
// failure is logged: the actor sleeps all the same.
func (h *Host) sleep(ctx context.Context, a *activation, chain string) {
	fn := a.spec.Sleep
	if fn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, a.sleepTimeout())
	defer cancel()
	// Calls from this hook to an actor whose OnSleep runs fail at once
	// (turnFor), and so do theirs to this one.
	h.sleepChains.Store(chain, struct{}{})
	a.sleeping.Store(true)
	defer func() { a.sleeping.Store(false); h.sleepChains.Delete(chain) }()
	if err := h.hookTurn(ctx, a, chain, "OnSleep", nil, func(env rivet.Env) error { return fn(env, a.state) }); err != nil {
		h.sleepFailed.Add(1)
		h.log.Warn("OnSleep failed; the actor sleeps all the same", actorField(a), errField(err))
	}
}

// destroyHook runs OnDestroy in Destroy's turn (chain), after the workflow
// stopped. A failure is logged: the actor is destroyed all the same.
func (h *Host) destroyHook(ctx context.Context, a *activation, chain string) {
	fn := a.spec.Destroy
	if fn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.ActionTimeout)
	defer cancel()
	if err := h.hookTurn(ctx, a, chain, "OnDestroy", nil, func(env rivet.Env) error { return fn(env, a.state) }); err != nil {
		h.destroyFailed.Add(1)
		h.log.Warn("OnDestroy failed; the actor is destroyed all the same", actorField(a), errField(err))
	}
}

// closeVars closes the activation's vars if they are an io.Closer, once.
// Called by the gate holder of an activation that runs no more turns
// (stopped), or by the Host's own goroutine that took the gate for it.
func (a *activation) closeVars() {
	if a.closable.Load() && a.deferVarsClose() {
		return // the last of its tasks closes them
	}
	if !a.closable.CompareAndSwap(true, false) {
		return
	}
	v := a.vars
	a.vars = nil
	a.closeValue(v.(io.Closer))
}

func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// closeValue closes vars of the activation.
//
// A panic is the actor's own bug, as a failed close is: logged. It runs on
// the reaper's, a stop's or a request's goroutine, and would take the node
// down. It runs aside, as hooks do: a Close that calls runtime.Goexit
// would end that goroutine, often with the actor's gate held (the reaper
// then puts no actor to sleep again).
func (a *activation) closeValue(c io.Closer) {
	if aside(func() {
		defer func() {
			if r := recover(); r != nil {
				a.h.log.Error("closing the actor's vars panicked", actorField(a), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			}
		}()
		if err := c.Close(); err != nil {
			a.h.log.Warn("closing the actor's vars failed", actorField(a), errField(err))
		}
	}) {
		a.h.log.Error("closing the actor's vars called runtime.Goexit", actorField(a))
	}
}

// closeVarsLater closes the vars of an evicted activation once no turn
// holds it: a turn still running (a step that ignores its context) may be
// using them.
func (h *Host) closeVarsLater(a *activation) {
	if !a.closable.Load() {
		return
	}
	h.mu.Lock()
	if h.hooksDone {
		// The host has stopped (a late eviction: a lost lease, a
		// handoff): no goroutine may start now.
		h.mu.Unlock()
		if chain := h.newChain(); a.gate.tryAcquire(chain) {
			a.closeVars()
			a.gate.release(chain)
		}
		return
	}
	h.hookRuns.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.hookRuns.Done()
		chain := h.newChain()
		if err := a.gate.acquire(h.baseCtx, chain); err != nil {
			// The host stopped with a turn still holding the actor: the
			// vars stay open rather than close under that turn.
			h.log.Warn("the actor's vars were not closed: a turn still held it when the node stopped", actorField(a))
			return
		}
		// No turn runs its code with the vars closed: one that reaches
		// the gate later finds the activation stopped.
		a.stopped.Store(true)
		a.closeVars()
		a.gate.release(chain)
	}()
}

// sleepAll runs OnSleep for every activation in memory and closes their
// vars, when the host stops: its workflows have stopped, and requests are
// refused (those in progress have ended, or the stop is running short of
// time: Stop). Each actor's turn comes after those holding or waiting for
// its gate, until ctx ends. At most maxSleeps run at once.
func (h *Host) sleepAll(ctx context.Context) {
	h.mu.Lock()
	var acts, busy []*activation
	for _, a := range h.actors {
		if a.spec.Sleep != nil || a.closable.Load() || a.tasksRunning() {
			if a.gate.busy() {
				busy = append(busy, a)
			} else {
				acts = append(acts, a)
			}
		}
	}
	h.mu.Unlock()
	// The actors no turn holds first: one stuck in a turn (its code
	// ignoring its context) keeps its place among the maxSleeps until ctx
	// ends, and enough of them would keep the others waiting.
	acts = append(acts, busy...)
	// Every task's context ends at once, not as its actor's turn comes:
	// they finish side by side.
	for _, a := range acts {
		a.endTasks()
	}
	sem := make(chan struct{}, maxSleeps)
	var wg sync.WaitGroup
	for _, a := range acts {
		select {
		case <-a.ready:
		default:
			continue
		}
		if a.loadErr != nil {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			// Its tasks end first: they may call the actor, which needs
			// the gate; then those of turns that ended meanwhile.
			deadline := a.tasksDeadline()
			a.endTasksWithin(ctx, deadline)
			chain := h.newChain()
			if err := a.gate.acquire(ctx, chain); err != nil {
				return
			}
			defer a.gate.release(chain)
			if a.stopped.Load() {
				return
			}
			a.endTasksWithin(ctx, deadline)
			// Past the lease's local deadline (a stall before the
			// watchdog ran) the partition's next owner may run the
			// actor's OnWake and turns: no OnSleep here then.
			if a.claimHeld() {
				h.sleep(ctx, a, chain)
			}
			a.stopped.Store(true)
			a.closeVars()
		}()
	}
	wg.Wait()
}

// deactivateIdleEach is the reaper's tryDeactivate of each of cands. Those
// with an OnSleep run on goroutines of their own (counted in sleeps, which
// the reaper waits for before it returns), at most maxSleeps at once, and
// the pass does not wait for them: a slow hook holds up neither the other
// actors nor the next pass. One past the bound is left to a later pass.
// Those with a workflow in memory and no OnSleep are stopped up to
// maxSleeps at once, and the pass waits for them: each stop commits the
// workflow's wakeup record, and one after another a node held 47,000
// sleeping workflows (2 GB) for over a minute past their idle timeout,
// about 450 stopped a second (a user trial).
func (h *Host) deactivateIdleEach(cands []*activation, sleeps *sync.WaitGroup) {
	stops := make(chan struct{}, maxSleeps)
	var stopping sync.WaitGroup
	defer stopping.Wait()
	for _, a := range cands {
		select {
		case <-h.stopCh:
			return
		default:
		}
		if a.spec.Sleep == nil {
			if a.runner() == nil {
				h.tryDeactivate(a)
				continue
			}
			select {
			case stops <- struct{}{}:
			case <-h.stopCh:
				return
			}
			stopping.Add(1)
			go func() {
				defer func() { <-stops; stopping.Done() }()
				h.tryDeactivate(a)
			}()
			continue
		}
		select {
		case h.reapSleeps <- struct{}{}:
		default:
			continue
		}
		sleeps.Add(1)
		go func() {
			defer func() { <-h.reapSleeps; sleeps.Done() }()
			h.tryDeactivate(a)
		}()
	}
}
