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

// taskFn is a KeepAwake function.
type taskFn = func(ctx context.Context, c rivet.Client)

// KeepAwake is rivet.Env's Tasks for one turn: fn goes as the turn's
// events go (finishTurnEvents), and starts as they are handed out, at the
// turn's end, if its changes are kept. A task asked for by a turn that
// then failed would act on changes that were discarded; by a re-entrant
// read, on changes of the turn it re-entered that may still be discarded;
// by a wake that failed, it would load the actor again with its calls,
// whose wake would start another, and so on (a wake's hooks hold theirs:
// holdTasks). Started while the turn holds the gate, a task is counted
// before the reaper, a handoff or a stop can look.
func (t *turnEvents) KeepAwake(fn func(ctx context.Context, c rivet.Client)) error {
	if fn == nil {
		return rivet.Errorf(rivet.ErrInvalidArgument, "KeepAwake: fn is nil")
	}
	a := t.a
	a.taskMu.Lock()
	ended := a.tasks.ended
	a.taskMu.Unlock()
	if ended || a.stopped.Load() {
		return errLeaving(a)
	}
	a.evMu.Lock()
	defer a.evMu.Unlock()
	if t.ended {
		return rivet.Errorf(rivet.ErrInternal, "actor %s: KeepAwake after its turn ended (an ActionCtx kept past its turn)", a.describe())
	}
	t.tasks = append(t.tasks, fn)
	return nil
}

// takeTasks takes the tasks t collected so far (a wake's hooks: the wake
// starts them once both succeeded).
func (t *turnEvents) takeTasks() []taskFn {
	t.a.evMu.Lock()
	defer t.a.evMu.Unlock()
	fns := t.tasks
	t.tasks = nil
	return fns
}

// startTasks starts fns, the tasks of a turn that ended, by the holder of
// the gate (lock order: Host.mu, then a.taskMu).
func (a *activation) startTasks(fns []taskFn) {
	for _, fn := range fns {
		if err := a.startTask(fn); err != nil {
			a.h.log.Warn("a KeepAwake function did not start", actorField(a), errField(err))
		}
	}
}

func errLeaving(a *activation) error {
	return rivet.Errorf(rivet.ErrUnavailable, "actor %s is leaving memory: KeepAwake starts nothing now", a.describe())
}

// startTask starts fn as a task of a; it fails only once the host no
// longer waits for tasks (its stop). If a began to leave memory since the
// turn that asked for fn (a handoff, an eviction), fn starts all the same,
// with its context ended: its KeepAwake returned nil, so it runs, if only
// to see that it must stop.
func (a *activation) startTask(fn taskFn) error {
	h := a.h
	// The host's count first: its lock is never taken under taskMu (the
	// reaper and a stop take taskMu under it).
	if !h.taskStarted() {
		return rivet.Errorf(rivet.ErrUnavailable, "node %s is stopping: KeepAwake starts nothing now", h.cfg.NodeID)
	}
	a.taskMu.Lock()
	defer a.taskMu.Unlock()
	t := &a.tasks
	if t.ctx == nil {
		// The node's base context: a hard stop ends the tasks too.
		t.ctx, t.cancel = context.WithCancel(h.baseCtx)
	}
	if t.ended || a.stopped.Load() {
		t.cancel()
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
		// No chain: each call starts one of its own (callChain), so that
		// a task's call into its actor waits for the gate as a client's
		// does (but is an actor's call, never refused as overloaded).
		// Calls still wait for the actor's pending writes.
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

// tasksDeadline is when an orderly leave that begins now stops waiting for
// a's tasks: the actor's SleepTimeout.
func (a *activation) tasksDeadline() time.Time { return time.Now().Add(a.sleepTimeout()) }

// endTasksWithin ends a's tasks and waits for them, until deadline or ctx:
// an orderly leave lets them finish before OnSleep. A task that outlives
// the wait is logged; its vars close once it ends. A leave calls it twice,
// with one deadline: before it takes the gate (tasks may be in a call into
// the actor), and after (the tasks of the turns that ended meanwhile;
// their calls into the actor do not wait for that gate: the partition
// being handed off, or the node stopping, refuses them at once).
func (a *activation) endTasksWithin(ctx context.Context, deadline time.Time) {
	a.endTasks()
	a.taskMu.Lock()
	done, n := a.tasks.done, a.tasks.n
	a.taskMu.Unlock()
	if done == nil {
		return
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		a.h.log.Warn("actor tasks did not end within the sleep timeout after their context ended; the actor leaves memory without them", actorField(a), zap.Int("tasks", n))
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

// endAllTasks ends the host's tasks (those of activations no longer in
// memory were ended as they left) and returns a channel closed once none
// runs, and how many ran. No task starts after it.
func (h *Host) endAllTasks() (<-chan struct{}, int) {
	h.mu.Lock()
	h.tasksClosed = true
	idle, n := h.tasksIdle, h.nTasks
	acts := make([]*activation, 0, len(h.actors))
	for _, a := range h.actors {
		acts = append(acts, a)
	}
	h.mu.Unlock()
	if idle == nil {
		idle = make(chan struct{})
		close(idle)
		return idle, 0
	}
	for _, a := range acts {
		a.endTasks()
	}
	return idle, n
}
