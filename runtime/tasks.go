package runtime

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/rivet-go/rivet"
	"go.uber.org/zap"
)

// An actor's tasks (rivet.ActionCtx.KeepAwake) are goroutines its
// activation owns: Rivet's c.keepAwake and c.waitUntil, and Orleans'
// grain timers' work, for Go, where a plain `go` statement would leave the
// goroutine without an owner. While one runs the actor does not go to
// sleep when idle and its vars stay open. When the actor must leave memory
// (a handoff, a node stop, a destroy, an eviction) their context ends, and
// an orderly leave waits for them, up to the actor's SleepTimeout, before
// OnSleep runs: they are done with the vars and with calls into the actor
// before OnSleep sees the state. A task holds no turn: it reaches the
// actor's state through calls, like any client, each on a call chain of
// its own.

// actorTasks is an activation's tasks. Guarded by its own lock: tasks end
// on their own goroutines, outside any turn.
type actorTasks struct {
	n int
	// ended: the activation is leaving memory; no task may start, and
	// ctx is cancelled.
	ended  bool
	ctx    context.Context
	cancel context.CancelFunc
	// done is closed when n falls to 0 (nil while none runs).
	done chan struct{}
	// closeVars: the vars were to close while tasks ran (closeVars); the
	// last to end closes them.
	closeVars bool
}

// KeepAwake is rivet.Env's Tasks for one turn: fn starts when the turn
// ends, if it succeeded (startTasks). A task started by a turn that then
// failed would act on changes that were discarded; one started by a wake
// that failed would load the actor again with its calls, whose wake would
// start another, and so on.
func (s *turnSchedule) KeepAwake(fn func(ctx context.Context, c rivet.Client)) error {
	if fn == nil {
		return rivet.Errorf(rivet.ErrInvalidArgument, "KeepAwake: fn is nil")
	}
	a := s.a
	a.taskMu.Lock()
	ended := a.tasks.ended
	a.taskMu.Unlock()
	if ended || a.stopped.Load() {
		return errLeaving(a)
	}
	s.tasks = append(s.tasks, fn)
	return nil
}

// startTasks starts the tasks of a turn that ended, if it succeeded
// (kept), and forgets them.
func (s *turnSchedule) startTasks(kept bool) {
	fns := s.tasks
	s.tasks = nil
	if !kept {
		return
	}
	s.a.startTasks(fns)
}

// startTasks starts fns as tasks of a; a task that cannot start now (the
// actor left memory since its turn asked for it) is logged.
func (a *activation) startTasks(fns []func(context.Context, rivet.Client)) {
	for _, fn := range fns {
		if err := a.keepAwake(fn); err != nil {
			a.h.log.Warn("a KeepAwake function did not start", actorField(a), errField(err))
		}
	}
}

func errLeaving(a *activation) error {
	return rivet.Errorf(rivet.ErrUnavailable, "actor %s is leaving memory: KeepAwake starts nothing now", a.describe())
}

// keepAwake starts fn as a task of a, or says why not.
func (a *activation) keepAwake(fn func(ctx context.Context, c rivet.Client)) error {
	h := a.h
	// The host's count first: its lock is never taken under taskMu (the
	// reaper and a stop take taskMu under it).
	if !h.taskStarted() {
		return rivet.Errorf(rivet.ErrUnavailable, "node %s is stopping: KeepAwake starts nothing now", h.cfg.NodeID)
	}
	a.taskMu.Lock()
	t := &a.tasks
	if t.ended || a.stopped.Load() {
		a.taskMu.Unlock()
		h.taskEnded()
		return errLeaving(a)
	}
	defer a.taskMu.Unlock()
	if t.ctx == nil {
		// The node's base context: a hard stop ends the tasks too.
		t.ctx, t.cancel = context.WithCancel(h.baseCtx)
	}
	if t.n == 0 {
		t.done = make(chan struct{})
	}
	t.n++
	ctx := t.ctx
	go func() {
		defer h.taskEnded()
		defer a.taskEnded()
		defer func() {
			if r := recover(); r != nil {
				h.log.Error("actor task panicked", actorField(a), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			}
		}()
		// No chain: each call starts one of its own (Host.Call), so that
		// a task's call into its actor waits for the gate as a client's
		// does. Calls still wait for the actor's pending writes.
		fn(ctx, &hostClient{h: h, from: a})
	}()
	return nil
}

// taskEnded counts one of a's tasks out. The last one restarts the idle
// clock (the actor sleeps a whole idle timeout after its work ended) and
// closes the vars if they were due to close.
func (a *activation) taskEnded() {
	a.taskMu.Lock()
	t := &a.tasks
	if t.n == 1 {
		// Before the count falls: a reaper that sees no task sees the
		// new time too.
		a.lastTurn.Store(time.Now().UnixNano())
	}
	t.n--
	closeVars := false
	if t.n == 0 {
		close(t.done)
		t.done = nil
		closeVars, t.closeVars = t.closeVars, false
	}
	a.taskMu.Unlock()
	if closeVars {
		a.h.closeVarsLater(a)
	}
}

// tasksRunning reports whether a task of a runs.
func (a *activation) tasksRunning() bool {
	a.taskMu.Lock()
	defer a.taskMu.Unlock()
	return a.tasks.n > 0
}

// endTasks refuses new tasks of a and ends the context of those running.
func (a *activation) endTasks() {
	a.taskMu.Lock()
	defer a.taskMu.Unlock()
	a.tasks.ended = true
	if a.tasks.cancel != nil {
		a.tasks.cancel()
	}
}

// deferVarsClose reports whether tasks of a run, and if so leaves the
// closing of its vars to the last of them.
func (a *activation) deferVarsClose() bool {
	a.taskMu.Lock()
	defer a.taskMu.Unlock()
	if a.tasks.n == 0 {
		return false
	}
	a.tasks.closeVars = true
	return true
}

// endTasksWithin ends a's tasks and waits for them, up to the actor's
// SleepTimeout or ctx: an orderly leave lets them finish before OnSleep.
// A task that outlives the wait is logged; its vars close once it ends.
func (a *activation) endTasksWithin(ctx context.Context) {
	a.endTasks()
	a.taskMu.Lock()
	done, n := a.tasks.done, a.tasks.n
	a.taskMu.Unlock()
	if done == nil {
		return
	}
	d := a.spec.SleepTimeout
	if d <= 0 {
		d = defaultSleepTimeout
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		a.h.log.Warn("actor tasks did not end within the sleep timeout after their context ended; the actor leaves memory without them", actorField(a), zap.Int("tasks", n), zap.Duration("timeout", d))
	case <-ctx.Done():
	}
}

// taskStarted counts a task in for Stop, unless Stop no longer waits for
// them.
func (h *Host) taskStarted() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tasksClosed {
		return false
	}
	if h.nTasks == 0 {
		h.tasksIdle = make(chan struct{})
	}
	h.nTasks++
	return true
}

func (h *Host) taskEnded() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nTasks--
	if h.nTasks == 0 {
		close(h.tasksIdle)
		h.tasksIdle = nil
	}
}

// waitTasks ends the host's tasks (those of evicted activations too) and
// waits for them until ctx ends. No task starts after it.
func (h *Host) waitTasks(ctx context.Context) error {
	h.mu.Lock()
	h.tasksClosed = true
	idle, n := h.tasksIdle, h.nTasks
	acts := make([]*activation, 0, len(h.actors)+len(h.retiring))
	for _, a := range h.actors {
		acts = append(acts, a)
	}
	for _, a := range h.retiring {
		acts = append(acts, a)
	}
	h.mu.Unlock()
	if idle == nil {
		return nil
	}
	for _, a := range acts {
		a.endTasks()
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		h.log.Warn("actor tasks still run after their context ended; the node stops without them", zap.Int("tasks", n))
		return ctx.Err()
	}
}
