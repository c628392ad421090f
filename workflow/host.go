package workflow

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"time"

	"github.com/rivet-go/rivet/caller"
)

// Clock is the workflow's only source of time, so that tests can use a fake
// one.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Timer returns a channel that receives once the clock reaches at (at
	// once if it already has), and a func that releases the timer early.
	Timer(at time.Time) (c <-chan time.Time, stop func())
}

// SystemClock is the Clock of the real world.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Timer returns a channel that receives at at.
func (SystemClock) Timer(at time.Time) (<-chan time.Time, func()) {
	if monotonic(at) {
		t := time.NewTimer(time.Until(at))
		return t.C, func() { t.Stop() }
	}
	c := make(chan time.Time, 1)
	stop := startWallTimer(at, func() { c <- time.Now() })
	return c, func() { stop() }
}

// AfterFunc calls f in its own goroutine at at, unless stop (which
// reports whether it stopped the call) comes first.
func (SystemClock) AfterFunc(at time.Time, f func()) (stop func() bool) {
	if monotonic(at) {
		return time.AfterFunc(time.Until(at), f).Stop
	}
	return startWallTimer(at, f)
}

// monotonic reports whether t carries a monotonic clock reading: a time
// from Now plus a duration (a step's timeout) rather than one read back
// from history.
func monotonic(t time.Time) bool { return t != t.Round(0) }

// wallRecheck bounds how long a timer of SystemClock sleeps without
// looking at the clock again. A workflow's deadlines (a Sleep's, a
// receive's) are wall-clock times read back from its history, and a
// time.Timer counts down on the monotonic clock: a wall clock stepped
// forward (NTP after a suspend, an operator's fix) left a sleep of an actor
// kept in memory waiting for the rest of a countdown computed before the
// step, up to the sleep's whole length. A deadline that carries a
// monotonic reading (a step's timeout, from Now) is a duration, and stays
// one: a plain time.Timer. A variable for tests.
var wallRecheck = 30 * time.Second

// wallNow is time.Now, for tests that step the wall clock.
var wallNow = time.Now

// wallTimer calls f at a time, waiting at most wallRecheck at a time.
type wallTimer struct {
	at time.Time
	f  func()

	mu   sync.Mutex
	t    *time.Timer
	done bool // fired or stopped
}

// startWallTimer calls f in its own goroutine at at, unless the returned
// stop (which reports whether it stopped the call) comes first.
func startWallTimer(at time.Time, f func()) func() bool {
	w := &wallTimer{at: at, f: f}
	w.mu.Lock()
	w.t = time.AfterFunc(w.wait(), w.check)
	w.mu.Unlock()
	return w.stop
}

func (w *wallTimer) wait() time.Duration { return min(w.at.Sub(wallNow()), wallRecheck) }

func (w *wallTimer) check() {
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	if d := w.wait(); d > 0 {
		w.t = time.AfterFunc(d, w.check)
		w.mu.Unlock()
		return
	}
	w.done = true
	w.mu.Unlock()
	w.f()
}

func (w *wallTimer) stop() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return false
	}
	w.done = true
	w.t.Stop()
	return true
}

// afterFuncClock is a Clock that can call a func at a time without a
// goroutine waiting for it (SystemClock can). Step timeouts use it when the
// host's clock has it, so it must keep the time Timer keeps: a host that
// embeds SystemClock but fakes Timer must fake AfterFunc too.
type afterFuncClock interface {
	AfterFunc(at time.Time, f func()) (stop func() bool)
}

// StepEnv is what the host gives a step body besides time: the actor's
// state and a client bound to the step's turn.
type StepEnv struct {
	// State is the actor's state, a *S for the workflow's S.
	State any
	// Path is the step's history path; the driver sets it (a host
	// leaves it empty).
	Path string
	// Client calls actors; calls made through it belong to the step's turn
	// (so that a call back into this actor re-enters rather than waits).
	Client caller.Client
	// Events publishes the actor's events: the host publishes those of an
	// attempt that succeeded once its commit is durable (nil: none).
	Events Broadcaster
	// Vars is the activation's vars (rivet.Actor.CreateVars), nil if none.
	Vars any
	// Destroy asks for the actor's destruction once the attempt's commit
	// is durable (nil: the host offers none).
	Destroy func() error
	// Schedule is the actor's scheduled calls; what the attempt changes
	// commits with its record (nil: the host offers none).
	Schedule caller.Scheduler
	// Enqueue stages a message on one of the actor's own queues, which
	// commits with the attempt's record (nil: the host offers none).
	Enqueue Enqueuer
	// Tasks starts background work the actor owns (StepCtx.KeepAwake)
	// as the attempt's events go (nil: the host offers none).
	Tasks KeepAwaker
	// Check, if not nil, is called once the attempt's body has returned,
	// before its record is made, with the body's output (nil if it
	// failed). An error says that what the attempt wrote is beyond the
	// host's limits (the state or the output too large, a state that does
	// not encode): the host has discarded the attempt's changes (state,
	// scheduled calls, events) and the attempt fails for good
	// (FailureCritical, the error recorded, no output; for a step with a
	// rollback handler whose output the host's OutputChecker takes, the
	// output, and the step's compensation runs when the workflow rolls
	// back: its side effect happened). It is the step's
	// own doing, checked on its own writes alone, so the workflow's code
	// sees it as the step's error (to handle, or to roll back for), where
	// a refusal of the whole commit (with writes the step did not make)
	// fails the run.
	Check func(output json.RawMessage) error
}

// OutputChecker is implemented by a host that bounds the output of a step
// that takes no turn (Do): its StepEnv's Check.
type OutputChecker interface {
	CheckOutput(output json.RawMessage) error
}

// KeepAwaker starts background work that keeps its actor in memory
// (rivet.ActionCtx.KeepAwake).
type KeepAwaker interface {
	KeepAwake(fn func(ctx context.Context, client caller.Client)) error
}

// Enqueuer stages a message on one of the actor's own queues
// (rivet.ActionCtx.Enqueue). An interface, not a func: the host passes the
// pointer it has, where a method value would cost an allocation per step.
type Enqueuer interface {
	Enqueue(queue string, body any) error
}

// Broadcaster publishes an actor's events (rivet.Broadcaster).
type Broadcaster interface {
	Broadcast(name string, data any) error
}

// Host is what a workflow run needs from the actor runtime: exclusive turns
// on the actor's state, atomic commits of history (with state and queue
// changes), the actor's queues, and time. The workflow decides every
// history write; the host only applies them. The methods are called from
// several goroutines at once (join and race branches): each must be safe for
// concurrent use.
//
// Writes within one batch apply in order, and all of a batch applies or
// none does. A batch never writes one path twice and never puts an entry
// under a tree it deletes (AppendWrites keeps them so), so it maps onto one
// etcd transaction. A write with Requeue puts messages the run took back in
// their queues, each under its own ID, as if they had never been taken (and
// wakes what waits for messages): in the same batch as the deletion of the
// entries that recorded them, so that each message is either recorded or
// queued, never both and never neither.
//
// Errors: a method that fails because ctx is done may return ctx.Err(). An
// error that wraps ErrEvicted stops the run without failing the workflow
// (use it for a lost partition, a node shutting down, a transient storage
// error): the next activation replays from what was committed. Any other
// error fails the workflow. In both cases the driver stops calling the
// host for this run: whether the failed commit applied or not, the next
// activation reads the truth from storage.
//
// The entries of the writes a host is given (HistoryWrite.Put) are the
// run's history itself, which the driver keeps without copying and reads
// from several goroutines: a host reads them (to encode, to count) and
// never changes them.
type Host interface {
	Clock

	// RunStep runs fn holding the actor's turn (no action and no other
	// step touches the state meanwhile), then commits, atomically, the
	// state as fn left it and the writes fn returned. A failed attempt
	// still returns writes (its failure record): commit them with the
	// state too, since the original engine never undoes the state changes
	// of failed attempts (roll-forward).
	//
	// If fn returns no writes the attempt was abandoned because ctx was
	// cancelled: commit nothing, and put the state back as it was before
	// fn, so that no later commit carries what the attempt changed (a race
	// loser's attempt never runs again to make it good).
	//
	// If ctx is done before the turn starts, return without calling fn.
	// RunStep returns nil only after fn ran and its commit is durable.
	// It calls fn at most once: the attempt's variables (its context
	// among them) are made for one call. And only before it returns,
	// whatever it returns: the thread's next attempt hands RunStep the
	// same fn, so a late call would run that attempt's body.
	//
	// If ephemeral, the host may defer the commit: it must then commit the
	// state and these writes no later than, and atomically with, the next
	// commit of this actor (of any kind, including an action's), in order.
	RunStep(ctx context.Context, ephemeral bool, fn func(env StepEnv) []HistoryWrite) error

	// Commit commits history writes, atomically, in one batch.
	Commit(ctx context.Context, writes []HistoryWrite) error

	// Client returns a client for the body of a Do step, which runs
	// outside the actor's turn: its calls carry no turn's call chain.
	Client() caller.Client

	// Receive takes, without waiting, up to max messages that are in the
	// actor's queues now, from the queues listed in names (any queue if
	// names is empty), lowest ID first. If there are none it returns
	// (nil, nil) and commits nothing. Otherwise it calls record once with
	// the messages, and commits in ONE batch their deletion from the queues
	// and the writes record returned: a message is either still queued or
	// recorded in history, never lost and never taken twice. If record
	// returns no writes (the receiving race branch lost meanwhile), take
	// nothing: commit nothing and return (nil, nil).
	Receive(ctx context.Context, names []string, max int, record func(msgs []RawMessage) []HistoryWrite) ([]RawMessage, error)

	// MessageNotify returns a channel that is closed when a message is
	// enqueued for this actor after the call. The driver takes it before
	// each Receive and waits on it if the Receive found nothing, so no
	// message can arrive unnoticed in between.
	MessageNotify() <-chan struct{}

	// Complete commits writes (which record the completion) and then hands
	// response to the sender waiting for message id, if any. A replay does
	// not call it again for a completion already recorded.
	Complete(ctx context.Context, id uint64, response json.RawMessage, writes []HistoryWrite) error

	// Actor is the actor the run belongs to: its type name and its key
	// (rivet.ActionCtx's Name and Key), which Ctx.Name and Key, and those
	// of step bodies, return. They never change, so reading them records
	// nothing. The driver asks once per run and never changes the key it
	// is given (its accessors return copies).
	Actor() (name string, key []string)

	// Waiting tells the host that every part of the run is blocked until
	// w (a hint, for deciding to evict: cancel the run's ctx, persist a
	// wakeup for w, and deactivate). It is called with the driver's lock
	// held: it must not block and must not call back into the run.
	Waiting(w Wake)
}

// MessagePeeker is an optional interface of a Host. Queued reports,
// without the actor's turn and without blocking, whether a Receive from
// the queues in names (any queue if empty) might find messages now: false
// must mean none is queued (one enqueued after the call closes the channel
// MessageNotify returned before it), true may find none. The driver asks
// before each Receive: a receive from an empty queue then waits for the
// actor's turn not at all, and in a race it does not hold the right to
// take messages meanwhile (which holds the race's decision: a timeout
// branch could not win while a step of a third branch held the turn).
//
// first is when the first message such a Receive would take was enqueued
// (its CreatedAt), or zero if the host does not know. A run that gets to
// a receive late (woken late, replayed after a crash) ranks it by that
// time, as it would have gone on time: a message that came at or after
// the receive's deadline, or after another branch of its race finished,
// loses to them.
//
// A message's CreatedAt is taken when it first becomes visible here,
// under the lock Queued reads under, never before: a message a call does
// not see is stamped no earlier than a Now read before the call. The
// driver times a receive out on a look that began at or after its
// deadline, so every message stamped before the deadline was seen, and a
// replay that finds the timeout unrecorded (it waits for the next commit)
// times out too. A message stamped early and made visible late (after a
// storage read, say) would be taken by that replay, which the first run
// did not take. One such case remains: a message a race's loser took and
// puts back (HistoryWrite.Requeue) keeps its first CreatedAt, so stamps
// rise with IDs and "first" (the first message by ID) has the earliest
// time, but a join sibling's receive of its queue that timed out while
// the loser held it, its deadline after that time, takes it on such a
// replay (docs/architecture.md, the ranking of a late receive).
type MessagePeeker interface {
	Queued(names []string) (first time.Time, ok bool)
}

// QueueChecker is an optional interface of a Host. CheckQueues fails if a
// name in names is none of the actor's queues: a receive that names one
// then fails (ErrInvalid) rather than wait for ever for a message that no
// send can queue (a typo of a queue's name). The driver asks before a
// receive that has no result recorded yet waits or takes anything.
type QueueChecker interface {
	CheckQueues(names []string) error
}

// Incarnationer is an optional interface of a Host. Incarnation tells the
// actor from one of the same name and key that was destroyed before it
// was created again (its creation time, say), the same for every run of
// this one: StepCtx.IdempotencyKey mixes it in, so that a re-created
// actor's steps do not find the records their namesakes' calls left
// (a callee would answer the new run's charge with the old one's result).
type Incarnationer interface {
	Incarnation() string
}

// QueueTyper is an optional interface of a Host. QueueTypes returns the
// message type each of the actor's queues declares (rivet.QueueOf), nil
// if the host does not know them. A receive without NextOptions.Names then
// takes only from the queues whose messages are of its type (see Next).
type QueueTyper interface {
	QueueTypes() map[string]reflect.Type
}

// BodyGuard is an optional interface of a Host. A Do step's body runs
// outside the actor's turn, so nothing in RunStep can stop it where the
// host may no longer run the actor (its node stopped serving the actor's
// partition, and the next owner may be replaying this very step): the
// driver asks MayRunBody just before each such body, and an error (wrap
// ErrEvicted to stop the run without failing the workflow) stops the run
// as a failed host call does. A Host without it runs every body.
type BodyGuard interface {
	MayRunBody() error
}

// BodyTracker is an optional interface of a Host with a BodyGuard: the
// driver calls BodyEnded once a Do step's body that MayRunBody let start
// has ended and its attempt has been committed, or given up. A host that
// lets the bodies in flight end before it stops a run (a graceful stop)
// learns from it when none is left.
type BodyTracker interface {
	BodyEnded()
}

// StepTracer is an optional interface of a Host that traces step attempts
// (a node's, with tracing on). TraceStep is called from the step's thread
// as attempt (from 1) of the step at path starts its body, with the
// context the body would run in; the body runs in the context it returns
// (which must end when ctx does), and end is called once with the
// attempt's error (nil: success) when the body has returned. A replay,
// which runs no body, calls neither; nor does a rollback handler's
// attempt. Nor, for a run that starts when Tracing says false (a node's
// with tracing off), any step: the run then makes no call per step.
type StepTracer interface {
	Tracing() bool
	TraceStep(ctx context.Context, path string, attempt int) (_ context.Context, end func(error))
}

// StepObserver is an optional interface of a Host that shows which steps
// a run has in flight (Temporal's pending activities): the driver tells it
// when a step's body starts and ends, and when a step waits out the
// backoff after a failed attempt. The calls come from the step's thread
// (several at once under a join or race), the body's two from inside
// RunStep's fn for a Step (in the actor's turn) and outside any turn for
// a Do; each must be cheap (every step makes two), must not block and
// must not call back into the run.
//
// A rollback handler's attempts are not told; nor is a step a replay
// returns from its history (it runs nothing).
type StepObserver interface {
	// StepStarted: attempt (from 1, as StepCtx.Attempt) of the step at
	// path, of at most maxAttempts (1 + its options' MaxRetries), starts
	// its body at at (the start its record keeps as
	// Entry.LastAttemptAt). lastErr is the message of the step's
	// previous attempt's error, recorded in its history (by this
	// activation or an earlier one), "" for a first attempt.
	StepStarted(path string, attempt, maxAttempts int, at time.Time, lastErr string)
	// StepBackingOff: the step at path failed its attempt attempt-1 with
	// lastErr and waits until next to run attempt (of maxAttempts).
	StepBackingOff(path string, attempt, maxAttempts int, next time.Time, lastErr string)
	// StepIdle: the step at path has no body running and waits no
	// backoff any more: its body returned (its attempt is then recorded
	// and committed, or given up), or the wait for its backoff ended.
	// It may come twice, and for a path the host has no record of.
	StepIdle(path string)
}

// AttemptMarker is an optional interface of a Host that counts the step
// attempts a crash of its node cut short (kill -9, OOM, a panic in a
// goroutine a body started, os.Exit), as Temporal counts an activity's
// attempt that its start-to-close timeout ends: without it such an attempt
// leaves no record, and its step runs again as attempt 1 after the
// restart, its retries counted from none, for ever if the step crashes its
// node each time.
//
// MarkAttempt is called just before the body of attempt n of the step at
// path starts (at is its start, as its record will keep it): in the
// step's turn for a Step, outside any turn for a Do. Not for an ephemeral
// step (its record may be lost with the node, its attempt counted as
// abandoned though it ran to its end) nor for a rollback handler. A host
// may make a durable marker of it, for a later run to find, and returns
// once it is durable; it may also let most attempts go unmarked (a write
// per step would double the cost of a step), and then returns at once. It
// removes a marker in the commit that records the step's entry (the
// attempt's, or the abandoned attempt's, see AbandonedAttempt). An error
// stops the run as a failed host call does (wrap ErrEvicted to stop it
// without failing the workflow): the body does not run.
//
// AbandonedAttempt reports the attempt of the step at path that a marker
// of an earlier run says started and never recorded its end: its number
// and start, ok false if none. The driver asks when a step has no record,
// or a record of a failed attempt: if attempt is past the ones recorded,
// it first records that attempt as failed (its message says it ended with
// its node; exhausted if it was the step's last), then goes on as after
// any failed attempt (the backoff, from its start; the next attempt's
// number one more). It must be cheap: the driver asks for every step
// that runs a body.
type AttemptMarker interface {
	MarkAttempt(path string, attempt int, at time.Time) error
	AbandonedAttempt(path string) (attempt int, at time.Time, ok bool)
}

// PanicReporter is an optional interface of a Host. A panic in a step
// body or a rollback handler is a failed attempt, and the history records
// only its value (as "workflow: step panicked: ..."): the driver calls
// StepPanicked once for each such panic, with the step's path, whether it
// was in the step's rollback handler, the panic's value and the stack
// where it panicked, so that the host can log the stack. (A panic in
// workflow code outside steps ends the run: its *PanicError, in the
// Outcome's Err, holds the stack.)
type PanicReporter interface {
	StepPanicked(path string, rollback bool, value any, stack []byte)
}

// OverrunReporter is an optional interface of a Host. A step body (or a
// rollback handler) that returns well after its timeout (a quarter of a
// second or more) did not stop when its context was cancelled: the
// attempt fails as timed out, but the body held the run (a Step's, the
// actor's turn) until it returned. The driver calls StepOverran once for
// each such attempt, with the step's path, whether it was the rollback
// handler, the timeout and how long after it the body returned, so that
// the host can log it.
type OverrunReporter interface {
	StepOverran(path string, rollback bool, timeout, late time.Duration)
}

// SlotHost is a Host that may keep a loop's iterations in storage slots:
// a loop first recorded while LoopSlots says yes records Slots (its prune
// interval plus its history size) in its entry, and its prunes are marked
// (HistoryWrite.Prune), so that the host overwrites pruned iterations
// instead of deleting them. A Host without it keeps every iteration
// under its own path.
type SlotHost interface {
	LoopSlots() bool
}

// JoinOutputsHost is a Host that may have a join's branch values, when
// large together, committed apart from its record (Entry.OutputParts,
// spillOutputs). An engine of a build before it reads such a join's values
// as zero values, so a host in a cluster that may replay its workflows on
// such a build answers false until none is left. A Host without it keeps
// every value in the join's record.
type JoinOutputsHost interface {
	JoinOutputsApart() bool
}

// HeldBranchesHost is a Host that may have the failure of a join's
// branch that fails while its other branches go on committed in an entry
// of its own (KindHeldBranch, "name/~held/<branch>", a few hundred bytes
// whatever the join's size) rather than in the join's record, which is
// then rewritten whole, every branch's name and status, for each such
// failure: a fan-out of N branches that fail one by one wrote O(N²)
// bytes, 200 branches of 6-byte names 2.3 MB where their own entries
// write 57 KB, 1,000 branches 58 MB against 282 KB
// (TestAJoinsFailingBranchesWriteLinearBytes). The join's record is
// still written as it opens and when it settles, which deletes the
// entries. An engine of a build before it does not know them: replaying
// a pending join that has some, it runs the failed branches again and
// then fails the workflow with a divergence at them (and it refuses an
// export of such a history, HistoryExport, for their unknown kind), so a
// host in a cluster that may replay its workflows on such a build
// answers false until none is left. It is asked at each failure, not
// once a join's run: a gate that closes while a join runs has the join's
// next failures go in its record (a replay reads both ways). A Host
// without it keeps the failures in the join's record, as before.
type HeldBranchesHost interface {
	HeldBranchesApart() bool
}

// RunStatus is how a run ended.
type RunStatus string

// The run statuses.
const (
	// RunCompleted: the workflow function returned nil.
	RunCompleted RunStatus = "completed"
	// RunFailed: the workflow failed (Outcome.Err says why: a *StepError,
	// *DivergenceError, the function's own error, ...). Its rollback
	// handlers have run. Running it again replays to the same failure.
	RunFailed RunStatus = "failed"
	// RunYielded: the run stopped before the workflow finished (evicted,
	// or a host error wrapping ErrEvicted). Run it again after
	// Outcome.Wake.
	RunYielded RunStatus = "yielded"
)

// Outcome is how a run ended.
type Outcome struct {
	Status RunStatus
	// Err is the failure (RunFailed), or what stopped the run (RunYielded:
	// the ctx's cause, or the host error).
	Err error
	// Wake is when a yielded workflow can make progress: At is set to the
	// time of the yield if it could continue at once.
	Wake Wake
}
