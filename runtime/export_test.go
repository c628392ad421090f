package runtime

import (
	"time"

	"github.com/rivet-go/rivet/storage"
)

// ShortStepGrace is the StepGrace of the tests' hosts (newEnv's, and the
// internal tests' retryHost): many tests' step bodies wait until they are
// cancelled, which a handoff or a stop gives them only after the grace,
// and the default (5 s) added that much to each such test. One constant,
// here, where both packages' tests see it, so that the hosts agree.
const ShortStepGrace = 300 * time.Millisecond

// Hooks of the host's timers for the tests of package runtime_test.

// SetWakeClock makes the host's timers read the time from clock.
func (h *Host) SetWakeClock(clock func() time.Time) {
	h.timers.mu.Lock()
	h.timers.clock = clock
	h.timers.mu.Unlock()
	h.KickWakeups()
}

// SetWakeLoopMaxWait sets how long the wake loop sleeps at most, and
// returns the setting before.
func SetWakeLoopMaxWait(d time.Duration) time.Duration {
	old := wakeLoopMaxWait
	wakeLoopMaxWait = d
	return old
}

// WakeKickPending reports whether the wake loop has yet to take a kick.
func (h *Host) WakeKickPending() bool { return len(h.timers.kick) > 0 }

// KickWakeups makes the wake loop look for due wakeups now.
func (h *Host) KickWakeups() {
	select {
	case h.timers.kick <- struct{}{}:
	default:
	}
}

// ScheduleWakeup schedules an activation of ref at at, as a workflow's
// wakeup is.
func (h *Host) ScheduleWakeup(ref Ref, at time.Time) error {
	enc, _, _, err := h.locate(ref)
	if err != nil {
		return err
	}
	h.timers.schedule(ref, ref.Name+"/"+enc, at)
	return nil
}

// NextWakeup returns when an activation of ref is scheduled, if one is.
func (h *Host) NextWakeup(ref Ref) (time.Time, bool) {
	enc, _, _, err := h.locate(ref)
	if err != nil {
		return time.Time{}, false
	}
	h.timers.mu.Lock()
	defer h.timers.mu.Unlock()
	it, ok := h.timers.byID[ref.Name+"/"+enc]
	if !ok {
		return time.Time{}, false
	}
	return it.at, true
}

// GateWaiters returns how many turns wait for the gate of ref's
// activation (-1: not in memory).
func (h *Host) GateWaiters(ref Ref) int {
	a := h.loaded(ref)
	if a == nil {
		return -1
	}
	a.gate.mu.Lock()
	defer a.gate.mu.Unlock()
	return len(a.gate.waiters)
}

// TasksEnded reports whether the tasks of ref's activation were ended (the
// actor is leaving memory); false if it is not in memory.
func (h *Host) TasksEnded(ref Ref) bool {
	a := h.loaded(ref)
	if a == nil {
		return false
	}
	a.taskMu.Lock()
	defer a.taskMu.Unlock()
	return a.tasks.ended
}

// ReapPasses returns how many passes the reaper made.
func (h *Host) ReapPasses() int64 { return h.reapPasses.Load() }

// InFlight returns how many requests (calls, wakeups, scheduled runs) the
// host has in progress.
func (h *Host) InFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inflight
}

// ExpireLocally makes the lease's local deadline pass now, as a stall (a
// GC pause, a frozen VM) does before the watchdog gets to run: Token then
// reports nothing served, while the claims are still held in memory.
func (o *Ownership) ExpireLocally() {
	o.mu.Lock()
	o.validUntil = time.Now().Add(-time.Millisecond)
	o.mu.Unlock()
}

// SetResolveWait sets how long a reply waits to learn the outcome of a
// write in doubt, for a test that waits it out; it returns the restore.
func SetResolveWait(d time.Duration) (restore func()) {
	old := resolveWait
	resolveWait = d
	return func() { resolveWait = old }
}

// SetListPage sets how many keys one read of a partition's wakeups or
// scheduled calls returns, and returns the setting before.
func SetListPage(n int) int {
	old := listPage
	listPage = n
	return old
}

// SetLoadWakeupsPageTimeout sets how long each read of a retried wakeup
// load may take, and returns the setting before.
func SetLoadWakeupsPageTimeout(d time.Duration) time.Duration {
	old := loadWakeupsPageTimeout
	loadWakeupsPageTimeout = d
	return old
}

// SetWorkflowRerunMin sets the first backoff of a workflow that storage
// stopped, and returns the setting before.
func SetWorkflowRerunMin(d time.Duration) time.Duration {
	old := wfRerunMin
	wfRerunMin = d
	return old
}

// WorkflowLeaving reports whether ref's workflow run here was told that
// its actor leaves the node (finishStep): no step body starts from then.
func (h *Host) WorkflowLeaving(ref Ref) bool {
	leaving, _ := h.workflowLeaving(ref)
	return leaving
}

// WorkflowParked reports how many threads of ref's workflow run here were
// refused a body as it leaves, and wait for the bodies in flight.
func (h *Host) WorkflowParked(ref Ref) int {
	_, parked := h.workflowLeaving(ref)
	return parked
}

func (h *Host) workflowLeaving(ref Ref) (bool, int) {
	a := h.loaded(ref)
	if a == nil {
		return false, 0
	}
	r := a.runner()
	if r == nil {
		return false, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leaving, r.parked
}

// SetCallKeysKept sets how many call idempotency keys an actor keeps, and
// returns the setting before.
func SetCallKeysKept(n int) int {
	old := callKeysKept
	callKeysKept = n
	return old
}

// MaxKeptCallResult is the largest call result kept with its key.
const MaxKeptCallResult = maxKeptCallResult

// PendingCreates returns how many creates of ref wait for another
// caller's load of it.
func (h *Host) PendingCreates(ref Ref) int {
	id := ref.Name + "/" + storage.EncodeKey(ref.Key)
	h.mu.Lock()
	defer h.mu.Unlock()
	if p := h.creators[id]; p != nil {
		return p.n
	}
	return 0
}
