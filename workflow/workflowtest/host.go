package workflowtest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/internal/defaults"
	"github.com/rivet-go/rivet/internal/queuenames"
	"github.com/rivet-go/rivet/workflow"
)

// What Drive stops a run with: the Err of the yield it returns, which
// says why (a run's Err is what stopped it: context.Canceled read as a
// failure). Each wraps workflow.ErrEvicted, as a host's "stop, come back
// later" errors must.
var (
	// ErrWaitsForMessages: the run waits for messages only, and none it
	// waits for is queued.
	ErrWaitsForMessages = fmt.Errorf("workflowtest: evicted: the run waits for messages that are not queued: %w", workflow.ErrEvicted)
	// ErrEvicted: DriveOptions.Evict said to evict the run.
	ErrEvicted = fmt.Errorf("workflowtest: evicted (DriveOptions.Evict): %w", workflow.ErrEvicted)
	// ErrStopped: DriveOptions.Stop said to stop.
	ErrStopped = fmt.Errorf("workflowtest: stopped (DriveOptions.Stop): %w", workflow.ErrEvicted)
)

// ErrCrash is the error of an injected crash. It wraps workflow.ErrEvicted,
// as a host's "stop, come back later" errors must.
var ErrCrash = fmt.Errorf("workflowtest: injected crash: %w", workflow.ErrEvicted)

// Host is an in-memory actor for workflow tests: durable state, history and
// queues, and activations that each run the workflow once against them, as
// the runtime does. What an activation holds in memory (the state being
// changed, deferred ephemeral steps) is lost when it crashes; only
// commits survive.
//
// Commits are counted from 1 across activations (every RunStep commit,
// Commit, Receive that took messages, and Complete); CrashAt makes one of
// them crash its activation.
type Host[S any] struct {
	// Clock is the fake time of the actor.
	Clock *Clock
	// Client is what step bodies get from StepCtx.Client. Nil: a client
	// whose every call and send fails, saying that Client is not set (it
	// was a nil interface, and a step that called an actor panicked).
	Client caller.Client
	// Name and Key are the actor's type name and key, what the workflow
	// reads with Ctx.Name and Key (and StepCtx's, DoCtx's). NewHost sets
	// them to "test" and ["test"]; set them before the first Run.
	Name string
	Key  []string
	// OnCommit, if set, is called after each commit with the history's
	// paths, sorted, with the host's lock held.
	OnCommit func(paths []string)
	// OnBatch, if set, is called with each batch of history writes as it
	// commits, with the host's lock held.
	OnBatch func(batch []workflow.HistoryWrite)
	// FailCommit, if set, is asked before commit number n applies: an
	// error fails the commit (nothing applies) and is returned to the run,
	// as a storage error would be.
	FailCommit func(n int) error
	// MaxStateBytes and MaxStepOutputBytes bound what a step attempt
	// writes, as a node's limits of the same names do (NewHost sets
	// them to the node's defaults, 1 MiB each; 0: no bound). A step over
	// them, or whose state does not marshal, fails for good
	// (workflow.FailureCritical) with its changes discarded, as on a node.
	MaxStateBytes      int
	MaxStepOutputBytes int
	// MaxMessageBytes and MaxQueueDepth bound what a step's Enqueue
	// queues, as a node's limits of the same names do (NewHost sets them
	// to the node's defaults, 64 KiB and 1000 messages in a queue; 0: no
	// bound): past them it fails with rivet.ErrTooLarge, ErrQueueFull.
	// Send, the test's own, is not bounded.
	MaxMessageBytes int
	MaxQueueDepth   int
	// IdleTimeout is a node's (NewHost sets its default, 30 s; 0: never;
	// set it to the actor's Options.IdleTimeout if that is set, or to
	// the node's if it is not 30 s): a node unloads a workflow that
	// waits on the clock while the actor has had no turn (the load, a
	// commit) for IdleTimeout and the wake is still further than
	// IdleTimeout away, and the wake starts a new run, which marks its
	// first step body again (attempts.go). Drive, which moves the clock
	// in place, does the same for a wait in which that happens: longer
	// than IdleTimeout, its wake more than twice IdleTimeout after the
	// last commit (or the run's load), and no SendWait sender waiting.
	// The run's next body is then marked, so that a crash in it counts,
	// as it does on a node. Only Drive does this: a test that calls Run
	// and moves the clock itself gets no such restart.
	IdleTimeout time.Duration
	// Queues, if set, are the actor's queue names, as its rivet.Actor's
	// Queues: a receive that names another fails (workflow.ErrInvalid)
	// and Send to another panics, as a node refuses them, so that a
	// queue's misspelt name fails the test instead of leaving the run
	// waiting for a message that never comes (Drive returns its yield).
	// Nil (and QueueTypes nil): any name, as the host does not know the
	// actor's queues; a misspelt one then waits (Drive yields,
	// ErrWaitsForMessages, or the receive times out).
	Queues []string
	// QueueTypes, if set, are the actor's queues' message types, as its
	// rivet.Actor declares them (Actor.Queues.Types()): a receive without
	// names then takes only from the queues of its message type, as on a
	// node (workflow.NextOptions.Names), and Queues, if nil, are their
	// names.
	QueueTypes map[string]reflect.Type
	// HeldBranchesApart holds the failure of a join's branch that fails
	// while others go on in an entry of its own
	// (workflow.HeldBranchesHost), a format that no node writes until
	// every node reads it (storage format 4). False, the default: in the
	// join's record, rewritten whole for each, as every build writes and
	// reads it.
	//
	// The join's branches read it, on goroutines of their own, without a
	// lock: set it before a run, or, to close or open the gate while one
	// goes on, only after a call of the host's that orders the change
	// after what the branches did (History, say, as a branch that waits
	// for another's failure in it).
	HeldBranchesApart bool

	mu          sync.Mutex
	events      []Event
	state       []byte
	history     map[string][]byte
	queue       []workflow.RawMessage
	nextID      uint64
	notify      chan struct{}
	waiters     map[uint64]chan json.RawMessage
	completions map[uint64]int
	commits     int
	crashes     map[int]bool // commit number -> crash after applying it
	wakes       chan workflow.Wake
	hangs       chan struct{}
	// marks are the attempt markers, by step path (attempts.go).
	marks map[string]attemptMark
	// noMarks turns them off (hosthook.NoAttemptMarkers).
	noMarks bool
	// current is the activation Run runs (nil between runs), for Drive's
	// simulated unload (wakeIdleLocked); wakeFrom is the activation whose
	// report is the latest sent on wakes.
	current, wakeFrom *activation[S]
	// lastTurn is the clock's time of the actor's last turn, as a node's
	// reaper counts them: the load of the run and each commit that
	// applies (wakeIdleLocked).
	lastTurn time.Time
}

// Event is an event a step published (StepCtx.Broadcast), its data as
// JSON.
type Event struct {
	Name string
	Data json.RawMessage
}

// Events returns the events the workflow's steps published, in order: as
// on a node, those of attempts whose commit applied (a failed attempt's
// too: roll-forward), not those of an attempt abandoned, refused by the
// limits, or lost to a crash before its commit (whose run publishes them
// again).
func (h *Host[S]) Events() []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// stepEvents collects one attempt's events until its commit.
type stepEvents struct {
	actor string

	mu     sync.Mutex
	events []Event
	over   bool // the attempt's body has returned
}

// Broadcast stages an event for the attempt's commit; after the attempt,
// from a StepCtx kept past it, it fails as on a node (runtime/events.go),
// where the event would otherwise be lost without a word.
func (e *stepEvents) Broadcast(name string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("workflowtest: event %q's data does not marshal: %w", name, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.over {
		return rivet.Errorf(rivet.ErrInternal, "actor %s broadcast event %q after its step's attempt ended (a StepCtx kept past its turn)", e.actor, name)
	}
	e.events = append(e.events, Event{Name: name, Data: b})
	return nil
}

// end closes the attempt to Broadcast and returns what it staged (nil if
// drop: its changes are discarded).
func (e *stepEvents) end(drop bool) []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.over = true
	evs := e.events
	e.events = nil
	if drop {
		return nil
	}
	return evs
}

// NewHost returns an actor whose committed state is initial.
func NewHost[S any](initial S, clock *Clock) *Host[S] {
	b, err := json.Marshal(initial)
	if err != nil {
		panic(fmt.Sprintf("workflowtest: initial state does not marshal: %v", err))
	}
	return &Host[S]{
		Clock: clock, Name: "test", Key: []string{"test"}, state: b, history: map[string][]byte{}, nextID: 1,
		MaxStateBytes: defaults.StateBytes, MaxStepOutputBytes: defaults.StepOutputBytes, MaxMessageBytes: defaults.MessageBytes,
		MaxQueueDepth: defaults.QueueDepth, IdleTimeout: defaults.IdleTimeout,
		notify: make(chan struct{}), waiters: map[uint64]chan json.RawMessage{},
		completions: map[uint64]int{}, crashes: map[int]bool{}, wakes: make(chan workflow.Wake, 1),
		hangs: make(chan struct{}, 1), marks: map[string]attemptMark{},
	}
}

// Send enqueues a message and returns its id. Its CreatedAt is the
// Clock's time: sent with the clock stopped at a waiting receive's
// deadline, it came too late for that receive (see the package doc).
func (h *Host[S]) Send(queue string, body any) uint64 {
	id, _ := h.send(queue, body, false)
	return id
}

// SendWait enqueues a message whose sender waits for its completion: the
// channel receives the response the workflow completes it with.
func (h *Host[S]) SendWait(queue string, body any) (uint64, <-chan json.RawMessage) {
	return h.send(queue, body, true)
}

func (h *Host[S]) send(queue string, body any, wait bool) (uint64, <-chan json.RawMessage) {
	b, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("workflowtest: message body does not marshal: %v", err))
	}
	if err := h.checkQueues([]string{queue}); err != nil {
		panic("workflowtest: send: " + err.Error())
	}
	// As a node refuses a body its queue's type does not take
	// (rivet.QueueOf).
	if err := h.checkBody(queue, b); err != nil {
		panic(fmt.Sprintf("workflowtest: send to queue %q: %v", queue, err))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.nextID
	h.nextID++
	h.queue = append(h.queue, workflow.RawMessage{ID: id, Queue: queue, Body: b, CreatedAt: h.Clock.Now()})
	var ch chan json.RawMessage
	if wait {
		ch = make(chan json.RawMessage, 1)
		h.waiters[id] = ch
	}
	close(h.notify)
	h.notify = make(chan struct{})
	return id, ch
}

// checkQueues fails if a name is none of h.Queues (or of QueueTypes), if
// set, with a node's rule and error. Empty but set, they are an actor's
// that has no queue, which a node refuses every name of.
func (h *Host[S]) checkQueues(names []string) error {
	switch {
	case h.Queues != nil:
		queues := make(map[string]struct{}, len(h.Queues))
		for _, q := range h.Queues {
			queues[q] = struct{}{}
		}
		return queuenames.Check(h.Name, names, queues)
	case h.QueueTypes != nil:
		return queuenames.Check(h.Name, names, h.QueueTypes)
	}
	return nil
}

// CrashAt makes commit number n (counted from 1 since the host was made)
// crash its activation: the commit is not applied, or, if after, applied
// just before the crash. Several crashes may be scheduled.
//
// A crash before the commit of a marked attempt's record (the first step
// body of a run, and the Do bodies beside it; attempts.go) loses that
// record as a node's crash does, and the attempt counts as on a node: the
// next run records it as failed (workflow.AbandonedAttemptMessage), one
// commit more, and runs the step's next attempt after its backoff, or
// ends the step exhausted if it was its last. So CrashAt(n, false) can
// fail a workflow that completes without it: a step with MaxRetries
// workflow.NoRetries whose record was commit n is exhausted.
func (h *Host[S]) CrashAt(n int, after bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.crashes[n] = after
}

// Commits returns the number of commits so far.
func (h *Host[S]) Commits() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.commits
}

// State returns the committed state.
func (h *Host[S]) State() S {
	h.mu.Lock()
	defer h.mu.Unlock()
	var s S
	if err := json.Unmarshal(h.state, &s); err != nil {
		panic(err)
	}
	return s
}

// History returns the committed history, ordered by path.
func (h *Host[S]) History() []workflow.Entry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.historyLocked()
}

func (h *Host[S]) historyLocked() []workflow.Entry {
	out := make([]workflow.Entry, 0, len(h.history))
	for _, b := range h.history {
		var e workflow.Entry
		if err := json.Unmarshal(b, &e); err != nil {
			panic(err)
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// SetHistory replaces the committed history with entries: a history as
// another build recorded it (an older one, for a test of code deployed
// while workflows are in flight). It deletes the attempt markers too, as a
// node's retry of a workflow, which rewrites its history, does.
func (h *Host[S]) SetHistory(entries []workflow.Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.history = make(map[string][]byte, len(entries))
	// As a node's retry, which rewrites the history: the markers of the
	// runs before would count against the steps the next run runs.
	clear(h.marks)
	for i := range entries {
		b, err := json.Marshal(&entries[i])
		if err != nil {
			panic(err)
		}
		h.history[entries[i].Path] = b
	}
}

// HistoryJSON returns the committed history as JSON, ordered by path: two
// runs that committed the same history return the same bytes.
func (h *Host[S]) HistoryJSON() string {
	b, err := json.Marshal(h.History())
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Queue returns the messages still queued, by id.
func (h *Host[S]) Queue() []workflow.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]workflow.RawMessage(nil), h.queue...)
}

// Completions returns how many times each message's sender was answered.
func (h *Host[S]) Completions() map[uint64]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[uint64]int, len(h.completions))
	for k, v := range h.completions {
		out[k] = v
	}
	return out
}

// Wakes delivers the run's reports that it is blocked (Host.Waiting); only
// the latest unread one is kept.
func (h *Host[S]) Wakes() <-chan workflow.Wake { return h.wakes }

// Run activates the actor and runs fn once, as the runtime would: from the
// committed state and history, until fn returns, ctx is cancelled
// (eviction) or an injected crash stops it.
func (h *Host[S]) Run(ctx context.Context, fn func(*workflow.Ctx[S]) error) workflow.Outcome {
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a := &activation[S]{h: h, kill: cancel, state: new(S)}
	actx = context.WithValue(actx, activationKey{}, a) // for Crash
	h.mu.Lock()
	if err := json.Unmarshal(h.state, a.state); err != nil {
		h.mu.Unlock()
		panic(err)
	}
	hist := h.historyLocked()
	a.loadMarksLocked()
	h.current = a
	h.lastTurn = h.Clock.Now() // the load is a turn
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		a.ended = true // Crash panics from now on
		if h.current == a {
			h.current = nil
		}
		h.mu.Unlock()
	}()
	select {
	case <-h.wakes: // a report of an earlier activation
	default:
	}
	out := workflow.Run(actx, fn, a, hist)
	// An eviction (ctx cancelled) is not a crash: the activation flushes
	// on its way out, as the original engine does, rather than lose its
	// deferred steps and run them again next time.
	evicted := out.Status == workflow.RunYielded && ctx.Err() != nil
	if out.Status == workflow.RunCompleted || out.Status == workflow.RunFailed || evicted {
		// The run's end is the last chance to commit the ephemeral
		// steps this host deferred (workflow.Host.RunStep's "next
		// commit"): a run ending with one would never commit it. (The
		// runtime defers none: it commits every step at once.)
		h.mu.Lock()
		// The outcome is decided: a Crash now (a fake's function that
		// outlived its step) has nothing left to crash, and must not
		// undo the end recorded below.
		a.ended = true
		if len(a.deferred) > 0 && !a.dead {
			if err := a.commitLocked(nil, nil, nil); err != nil && !evicted {
				out = workflow.Outcome{Status: workflow.RunYielded}
			}
		}
		switch {
		case a.dead:
			// A crash: the markers stay, for the next run to count.
		case out.Status == workflow.RunCompleted || out.Status == workflow.RunFailed:
			// As a node's record of the workflow's end.
			a.dropMarksLocked()
		case evicted:
			// The host's graceful stop: the bodies it cut off are not
			// counted.
			a.dropOwnMarksLocked()
		}
		h.mu.Unlock()
	}
	return out
}

// DriveOptions shape Drive.
type DriveOptions struct {
	// MaxActivations bounds the activations; 0: 10000.
	MaxActivations int
	// Evict, if set, is asked each time the run reports that it is blocked
	// until a deadline: true evicts the activation (it yields, the clock
	// moves to the wake time, a new activation runs), false moves the clock
	// in place. Nil: always in place.
	Evict func(w workflow.Wake) bool
	// Stop, if set, is asked first each time the run is blocked: true
	// evicts it and Drive returns its yield (for workflows that never end).
	Stop func(w workflow.Wake) bool
}

// Drive runs activations of fn until the workflow completes or fails, as a
// deterministic simulation: whenever every part of the run is blocked, time
// jumps to the earliest deadline. A run blocked only on messages that are
// not queued is evicted, and Drive returns its yield. Crashes (CrashAt)
// start a new activation at once. It returns the last outcome and the
// number of activations.
func (h *Host[S]) Drive(ctx context.Context, fn func(*workflow.Ctx[S]) error, opts DriveOptions) (workflow.Outcome, int) {
	max := opts.MaxActivations
	if max == 0 {
		max = 10000
	}
	var out workflow.Outcome
	for n := 1; n <= max; n++ {
		select {
		case <-h.hangs: // of a body the last activation ended
		default:
		}
		actx, cancel := context.WithCancelCause(ctx)
		done := make(chan workflow.Outcome, 1)
		go func() { done <- h.Run(actx, fn) }()
		stop := false
	wait:
		for {
			select {
			case out = <-done:
				break wait
			case <-h.hangs:
				// A step body hangs until its timeout: the clock moves
				// to it. (Never an eviction here: an attempt cut off
				// before its timeout runs again from its start, with a
				// timeout of its own, so the run would end later than a
				// run without it, which a simulation compares with.)
				if ts := h.Clock.Timers(); len(ts) > 0 {
					h.Clock.Set(ts[0])
				}
			case w := <-h.wakes:
				switch {
				case opts.Stop != nil && opts.Stop(w):
					stop = true
					cancel(ErrStopped)
				case w.At.IsZero():
					cancel(ErrWaitsForMessages)
				case opts.Evict != nil && opts.Evict(w):
					cancel(ErrEvicted)
				default:
					h.mu.Lock()
					if h.wakeFrom == h.current {
						h.wakeIdleLocked(w.At)
					}
					h.mu.Unlock()
					h.Clock.Set(w.At)
				}
			}
		}
		cancel(nil)
		if out.Status == workflow.RunYielded && ctx.Err() != nil && out.Err != nil {
			// Drive moves the clock whenever the run waits on it, so a
			// run still going when ctx ended was mostly held by a step
			// body (a user trial's fake call waiting for its context
			// left the clock where it was, silently).
			out.Err = fmt.Errorf("workflowtest: Drive's context ended before the run did (%w); a step body blocked on something other than the clock? (a fake that waits for its context calls Host.Hang, which moves the clock to the step's timeout)", out.Err)
		}
		if out.Status != workflow.RunYielded || ctx.Err() != nil || stop {
			return out, n
		}
		if out.Wake.At.IsZero() {
			if !h.hasMessagesFor(out.Wake) {
				return out, n
			}
			continue
		}
		h.Clock.Set(out.Wake.At)
	}
	return out, max
}

// Hang blocks a step body until ctx (its StepCtx's context) ends, and
// tells Drive that the run now waits on the clock: Drive moves the clock to
// the earliest pending timer (the step's timeout), as it does for a run
// that reports it waits (but never evicts it there: DriveOptions.Evict is
// not asked). A body blocked on its own timeout is not a wait the run can
// report, so without Hang a simulation's clock would never reach it. Use
// it only where the step's timeout is the earliest timer and stays so: the
// rest of the workflow done, or blocked on messages only (not beside a
// branch that sleeps, waits with a timeout or runs steps: the clock would
// jump past that branch's deadline, or stop at it).
func (h *Host[S]) Hang(ctx context.Context) {
	select {
	case h.hangs <- struct{}{}:
	default:
	}
	<-ctx.Done()
}

func (h *Host[S]) hasMessagesFor(w workflow.Wake) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.queue {
		if w.AnyQueue {
			return true
		}
		for _, q := range w.Queues {
			if q == m.Queue {
				return true
			}
		}
	}
	return false
}

// activation is one Run of the actor: the workflow.Host the run talks to.
type activation[S any] struct {
	h    *Host[S]
	kill context.CancelCauseFunc
	// turn serialises step bodies: they own the state while they run.
	turn  sync.Mutex
	state *S

	// Guarded by h.mu.
	dead          bool
	deferred      []workflow.HistoryWrite
	deferredState []byte
	// deferredEvents are the events of the deferred steps, and of an
	// attempt whose commit is being made, published when a commit applies.
	deferredEvents []Event
	// marks are the attempt markers the activation knows (as a node's
	// activation.marks), marking says that its run marks the bodies it
	// starts, markedN counts those it marked (attempts.go).
	marks   map[string]markEntry
	marking bool
	markedN int
	// ended says that Run has returned: Crash refuses it.
	ended bool
}

var _ workflow.Host = (*activation[struct{}])(nil)

func (a *activation[S]) Now() time.Time { return a.h.Clock.Now() }

// JoinOutputsApart implements workflow.JoinOutputsHost: a join's large
// values are committed apart, as a runtime of a cluster that reads them
// has them.
func (a *activation[S]) JoinOutputsApart() bool { return true }

// HeldBranchesApart implements workflow.HeldBranchesHost: with
// Host.HeldBranchesApart, a join's failed branches are held in entries of
// their own. Read without a lock (see Host.HeldBranchesApart).
func (a *activation[S]) HeldBranchesApart() bool { return a.h.HeldBranchesApart }

// Actor returns the host's Name and a copy of its Key, so that a test
// that changes its Key later changes no run's.
func (a *activation[S]) Actor() (string, []string) {
	return a.h.Name, append([]string(nil), a.h.Key...)
}

func (a *activation[S]) Timer(at time.Time) (<-chan time.Time, func()) { return a.h.Clock.Timer(at) }

// Waiting takes h.mu while the engine holds its run's lock (r.mu), the
// reverse of Receive's (h.mu held, its record callback takes r.mu): safe
// only because the engine reports waiting (reportLocked) when none of the
// run's threads is active, so none is in a host call that could wait for
// r.mu.
func (a *activation[S]) Waiting(w workflow.Wake) {
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	a.h.wakeFrom = a
	select {
	case <-a.h.wakes:
	default:
	}
	select {
	case a.h.wakes <- w:
	default:
	}
}

func (a *activation[S]) MessageNotify() <-chan struct{} {
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	return a.h.notify
}

// Queued implements workflow.MessagePeeker, as the runtime's host does:
// a run woken late ranks what it receives by when it was sent.
func (a *activation[S]) Queued(names []string) (time.Time, bool) {
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	for _, m := range a.h.queue {
		if len(names) == 0 || contains(names, m.Queue) {
			return m.CreatedAt, true
		}
	}
	return time.Time{}, false
}

func (a *activation[S]) RunStep(ctx context.Context, ephemeral bool, fn func(workflow.StepEnv) []workflow.HistoryWrite) error {
	a.turn.Lock()
	defer a.turn.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	a.h.mu.Lock()
	dead := a.dead
	a.h.mu.Unlock()
	if dead {
		return ErrCrash
	}
	var checked []byte // the state as check encoded it
	pub := &stepEvents{actor: a.h.Name}
	msgs := &stepMessages[S]{h: a.h, a: a}
	refused := false
	refuse := func(why error) error { // the attempt's changes go, its events and messages too
		refused = true
		return a.discard(why)
	}
	check := func(out json.RawMessage) error {
		if err := a.CheckOutput(out); err != nil {
			return refuse(err)
		}
		b, err := marshalGuarded(a.state)
		if err != nil {
			return refuse(fmt.Errorf("workflowtest: the state does not marshal to JSON: %w; the attempt's changes were discarded", err))
		}
		if lim := a.h.MaxStateBytes; lim > 0 && len(b) > lim && !bytes.Equal(b, a.committedState()) {
			return refuse(fmt.Errorf("workflowtest: the state would be %d bytes, the limit is %d; the attempt's changes were discarded", len(b), lim))
		}
		checked = b
		return nil
	}
	writes := fn(workflow.StepEnv{State: a.state, Client: a.h.client(), Events: pub, Enqueue: msgs, Check: check})
	staged := msgs.end(writes == nil || refused)
	events := pub.end(writes == nil || refused)
	if writes == nil {
		// Abandoned attempt (its race lost, the run evicted): it commits
		// nothing, so memory goes back to what this activation holds as
		// committed, as the runtime's does. Kept, its changes would ride
		// with the next commit of a run that goes on (a race's winner).
		return a.restore()
	}
	snap := checked
	if snap == nil {
		// Not checked (a rollback handler's attempt), or refused by
		// check, which put the committed state back.
		var err error
		if snap, err = json.Marshal(a.state); err != nil {
			return fmt.Errorf("workflowtest: state does not marshal: %w", err)
		}
	}
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	if a.dead {
		// Crashed while the attempt ran: it commits nothing, and its
		// events and messages go with it.
		return ErrCrash
	}
	// An ephemeral step that enqueued commits now: its messages are
	// for the workflow's next receive, which would otherwise wait for a
	// commit that may not come before the run is evicted (a node defers
	// no commit).
	if ephemeral && len(staged) == 0 {
		a.deferred = workflow.AppendWrites(a.deferred, writes...)
		a.deferredState = snap
		a.deferredEvents = append(a.deferredEvents, events...)
		return nil
	}
	before := len(a.deferredEvents)
	a.deferredEvents = append(a.deferredEvents, events...)
	// The messages queue with the commit, or not at all: none outlives it.
	err := a.commitLocked(writes, snap, nil, func() { a.queueStagedLocked(staged) })
	if err != nil && !a.dead {
		// Not committed: the attempt's own go.
		a.deferredEvents = a.deferredEvents[:before]
	}
	return err
}

// marshalGuarded is json.Marshal with a panic of the value's encoder (the
// actor's code) taken as its error, as a node takes it.
func marshalGuarded(v any) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			b, err = nil, fmt.Errorf("its encoder panicked: %v", p)
		}
	}()
	return json.Marshal(v)
}

// committedState is the state this activation holds as committed.
func (a *activation[S]) committedState() []byte {
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	if a.deferredState != nil {
		return a.deferredState
	}
	return a.h.state
}

// restore puts memory back to the state this activation holds as
// committed.
func (a *activation[S]) restore() error {
	snap := a.committedState()
	var zero S
	*a.state = zero
	if err := json.Unmarshal(snap, a.state); err != nil {
		return fmt.Errorf("workflowtest: committed state does not unmarshal: %w", err)
	}
	return nil
}

// discard drops a refused attempt's changes to the state and returns why
// it was refused (an error restoring the state joined to it).
func (a *activation[S]) discard(why error) error {
	return errors.Join(why, a.restore())
}

// CheckOutput implements workflow.OutputChecker: a step's output within
// MaxStepOutputBytes, as a node's.
func (a *activation[S]) CheckOutput(out json.RawMessage) error {
	if lim := a.h.MaxStepOutputBytes; lim > 0 && len(out) > lim {
		return fmt.Errorf("workflowtest: the output of a step is %d bytes, the limit is %d; the attempt's changes were discarded", len(out), lim)
	}
	return nil
}

var _ workflow.OutputChecker = (*activation[struct{}])(nil)

// Client is the Host's Client, for Do steps.
func (a *activation[S]) Client() caller.Client { return a.h.client() }

// client is Client, or unsetClient if it is nil.
func (h *Host[S]) client() caller.Client {
	if h.Client == nil {
		return unsetClient{}
	}
	return h.Client
}

// unsetClient is the client of a Host whose Client is not set.
type unsetClient struct{}

func (unsetClient) GetOrCreate(name string, key ...string) caller.Handle { return unsetHandle{name} }
func (unsetClient) Get(name string, key ...string) caller.Handle         { return unsetHandle{name} }

// CreateWith implements caller.Creator, so that a create says what is
// missing rather than that the client cannot create.
func (unsetClient) CreateWith(_ context.Context, name string, _ []string, _ any, _ caller.CreateOptions) (caller.CreateResult, error) {
	return caller.CreateResult{}, fmt.Errorf("create of actor %s: %w", name, errUnsetClient)
}

type unsetHandle struct{ name string }

var errUnsetClient = errors.New("workflowtest: Host.Client is not set: give the host a caller.Client (a fake of the actors the workflow calls)")

func (h unsetHandle) Call(context.Context, string, ...any) (json.RawMessage, error) {
	return nil, fmt.Errorf("call of actor %s: %w", h.name, errUnsetClient)
}

func (h unsetHandle) Send(context.Context, string, any) error {
	return fmt.Errorf("send to actor %s: %w", h.name, errUnsetClient)
}

func (a *activation[S]) Commit(ctx context.Context, writes []workflow.HistoryWrite) error {
	a.h.mu.Lock()
	defer a.h.mu.Unlock()
	return a.commitLocked(writes, nil, nil)
}

// CheckQueues implements workflow.QueueChecker with Host.Queues.
func (a *activation[S]) CheckQueues(names []string) error { return a.h.checkQueues(names) }

// QueueTypes implements workflow.QueueTyper with Host.QueueTypes.
func (a *activation[S]) QueueTypes() map[string]reflect.Type { return a.h.QueueTypes }

func (a *activation[S]) Receive(ctx context.Context, names []string, max int, record func([]workflow.RawMessage) []workflow.HistoryWrite) ([]workflow.RawMessage, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h := a.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.dead {
		return nil, ErrCrash
	}
	var msgs []workflow.RawMessage
	for _, m := range h.queue {
		if len(msgs) == max {
			break
		}
		if len(names) == 0 || contains(names, m.Queue) {
			msgs = append(msgs, m)
		}
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	writes := record(msgs)
	if len(writes) == 0 {
		return nil, nil // the receiving race branch lost meanwhile
	}
	if err := a.commitLocked(writes, nil, msgs); err != nil {
		return nil, err
	}
	return msgs, nil
}

func (a *activation[S]) Complete(ctx context.Context, id uint64, response json.RawMessage, writes []workflow.HistoryWrite) error {
	h := a.h
	h.mu.Lock()
	defer h.mu.Unlock()
	return a.commitLocked(writes, nil, nil, func() {
		h.completions[id]++
		if w, ok := h.waiters[id]; ok {
			w <- response
			delete(h.waiters, id)
		}
	})
}

// commitLocked applies one atomic batch: the activation's deferred
// ephemeral steps, writes, the state snapshot (nil: the deferred one, if
// any), the removal of taken messages, and then the effects of after. It
// refuses what etcd would refuse, so that the engine cannot rely on a
// laxer store than the real one.
func (a *activation[S]) commitLocked(writes []workflow.HistoryWrite, snap []byte, taken []workflow.RawMessage, after ...func()) error {
	h := a.h
	if a.dead {
		return ErrCrash
	}
	batch := workflow.AppendWrites(append([]workflow.HistoryWrite(nil), a.deferred...), writes...)
	if snap == nil {
		snap = a.deferredState
	}
	if err := validate(batch); err != nil {
		return err
	}
	for _, w := range batch {
		for _, m := range w.Requeue {
			if slices.ContainsFunc(h.queue, func(q workflow.RawMessage) bool { return q.ID == m.ID }) {
				return fmt.Errorf("workflowtest: batch puts message %d back in its queue, where it still is", m.ID)
			}
		}
	}
	encoded := make([][]byte, len(batch))
	for i, w := range batch {
		if w.Put != nil {
			b, err := json.Marshal(w.Put)
			if err != nil {
				return fmt.Errorf("workflowtest: entry %q does not marshal: %w", w.Put.Path, err)
			}
			encoded[i] = b
		}
	}
	h.commits++
	if h.FailCommit != nil {
		if err := h.FailCommit(h.commits); err != nil {
			return err
		}
	}
	crashAfter, crash := h.crashes[h.commits]
	if crash && !crashAfter {
		a.die()
		return ErrCrash
	}
	if h.OnBatch != nil {
		h.OnBatch(batch)
	}
	a.applyMarksLocked(batch)
	for i, w := range batch {
		if w.Put != nil {
			h.history[w.Put.Path] = encoded[i]
			continue
		}
		if len(w.Requeue) > 0 {
			for _, m := range w.Requeue {
				i, _ := slices.BinarySearchFunc(h.queue, m.ID, func(q workflow.RawMessage, id uint64) int { return cmp.Compare(q.ID, id) })
				h.queue = slices.Insert(h.queue, i, m)
			}
			close(h.notify)
			h.notify = make(chan struct{})
			continue
		}
		for p := range h.history {
			if workflow.Under(p, w.DeleteTree) {
				delete(h.history, p)
			}
		}
	}
	if snap != nil {
		h.state = snap
	}
	for _, m := range taken {
		for i, q := range h.queue {
			if q.ID == m.ID {
				h.queue = append(h.queue[:i], h.queue[i+1:]...)
				break
			}
		}
	}
	a.deferred, a.deferredState = nil, nil
	h.lastTurn = h.Clock.Now() // a commit is a turn
	h.events = append(h.events, a.deferredEvents...)
	a.deferredEvents = nil
	for _, f := range after {
		f()
	}
	if h.OnCommit != nil {
		paths := make([]string, 0, len(h.history))
		for p := range h.history {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		h.OnCommit(paths)
	}
	if crash {
		a.die()
		return ErrCrash
	}
	return nil
}

// die loses the activation's memory and stops its run, as a crashed node
// would.
func (a *activation[S]) die() {
	a.dead = true
	a.deferred, a.deferredState, a.deferredEvents = nil, nil, nil
	a.kill(ErrCrash)
}

// validate refuses a batch that writes one path twice or puts a path under
// a tree it deletes (etcd refuses such a transaction).
func validate(batch []workflow.HistoryWrite) error {
	puts := map[string]bool{}
	var trees []string
	for _, w := range batch {
		switch {
		case w.Put != nil && w.DeleteTree != "":
			return errors.New("workflowtest: a write with both Put and DeleteTree")
		case len(w.Requeue) > 0 && (w.Put != nil || w.DeleteTree != ""):
			return errors.New("workflowtest: a write with Requeue and Put or DeleteTree")
		case len(w.Requeue) > 0:
		case w.Put != nil:
			if puts[w.Put.Path] {
				return fmt.Errorf("workflowtest: batch puts %q twice", w.Put.Path)
			}
			puts[w.Put.Path] = true
		case w.DeleteTree != "":
			trees = append(trees, w.DeleteTree)
		default:
			return errors.New("workflowtest: an empty write")
		}
	}
	for p := range puts {
		for _, t := range trees {
			if workflow.Under(p, t) {
				return fmt.Errorf("workflowtest: batch puts %q under the tree %q it deletes", p, t)
			}
		}
	}
	return nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
