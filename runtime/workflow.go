package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/internal/errtext"
	"github.com/rivet-go/rivet/internal/queuenames"
	"github.com/rivet-go/rivet/internal/tracing"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Workflow statuses, as Inspect reports them.
const (
	WorkflowRunning   = "running"
	WorkflowSleeping  = "sleeping"
	WorkflowCompleted = "completed"
	WorkflowFailed    = "failed"
	// WorkflowCancelled: stopped for good by CancelWorkflow, until a
	// RetryWorkflow resumes it.
	WorkflowCancelled = "cancelled"
)

// workflowEnded reports whether status is one a workflow ends in: nothing
// runs it, or will complete a message sent to it, until it is retried.
func workflowEnded(status string) bool {
	return status == WorkflowCompleted || status == WorkflowFailed || status == WorkflowCancelled
}

// workflowStatus is stored at <actor>/wfstatus.
type workflowStatus struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// FailedAt is the entry whose failure ended the workflow (a step, a
	// join or a race), or noEntry if the error names none (the workflow
	// returned its own error, diverged, panicked): a retry without --from
	// retries the failures there, not those a Try caught elsewhere. Empty
	// in a status written before it was recorded.
	FailedAt string `json:"failed_at,omitempty"`
}

// noEntry is FailedAt when the error names no entry.
const noEntry = workflow.NoEntry

// failedAt returns the path of the entry whose failure err reports.
func failedAt(err error) string { return workflow.FailedAt(err) }

// msgRef is a pending queue message an activation knows of. Body is kept
// for messages sent while the actor is in memory (the common case: they are
// taken soon after), and read from storage otherwise.
type msgRef struct {
	seq   uint64
	queue string
	body  json.RawMessage
	at    time.Time
}

// wfRunner is an activation's running workflow.
type wfRunner struct {
	cancel context.CancelFunc
	done   chan struct{}
	// rerun asks for the activation to be evicted, and the workflow run
	// again from storage, once this run has ended: for a run stopped by
	// a cancel whose turn never came (CancelWorkflow), which nothing in
	// memory would start again, and whose step may still be running.
	rerun atomic.Bool

	mu      sync.Mutex
	waiting bool
	wake    workflow.Wake
	// leaving is set when the actor leaves the node gracefully
	// (finishStep): no step body starts any more, and the run is
	// cancelled as soon as it waits, or no body is left in flight.
	leaving bool
	// bodies counts the step bodies in flight (RunStep's, and Do bodies
	// between MayRunBody and BodyEnded); parked, the threads refused a
	// body that wait for them (refusal).
	bodies, parked int
	// ctx is the run's context, which cancel ends.
	ctx context.Context

	// stepsMu guards steps, the run's steps in flight as the engine
	// tells them (workflow.StepObserver; Inspect reads them without the
	// turn, which a Step's body holds), and stepAt, their indexes by
	// path once they have been stepIndexMin at once (nil before: see
	// stepIndex): a small lock of their own, taken twice a step, whose
	// slice and map are reused (no allocation per step). Removed by
	// swapping in the last (a join of thousands of branches moved the
	// slice's tail at each step's end), in the order they started by seq.
	stepsMu sync.Mutex
	steps   []pendingEntry
	stepAt  map[string]int
	stepSeq uint64
}

// stepIndexMin is how many steps in flight at once make a run index them
// by path (stepAt). Fewer are found sooner by a scan than by a map's
// hashing: a sequential workflow has one in flight, and the map's work
// (a lookup, an insert and a delete) was most of what setStep and
// clearStep cost each of its steps.
const stepIndexMin = 8

// stepIndex returns the index in steps of the step at path. Called with
// stepsMu held.
func (r *wfRunner) stepIndex(path string) (int, bool) {
	if r.stepAt != nil {
		i, ok := r.stepAt[path]
		return i, ok
	}
	for i := range r.steps {
		if r.steps[i].ps.Path == path {
			return i, true
		}
	}
	return 0, false
}

// pendingEntry is a step in flight and when it came, for their order.
type pendingEntry struct {
	seq uint64
	ps  PendingStep
}

// setStep records the step at ps.Path as in flight, in place of what it
// was (a backoff before its attempt).
func (r *wfRunner) setStep(ps PendingStep) {
	r.stepsMu.Lock()
	defer r.stepsMu.Unlock()
	if i, ok := r.stepIndex(ps.Path); ok {
		r.steps[i].ps = ps
		return
	}
	r.stepSeq++
	r.steps = append(r.steps, pendingEntry{r.stepSeq, ps})
	switch {
	case r.stepAt != nil:
		r.stepAt[ps.Path] = len(r.steps) - 1
	case len(r.steps) >= stepIndexMin:
		r.stepAt = make(map[string]int, len(r.steps))
		for i, e := range r.steps {
			r.stepAt[e.ps.Path] = i
		}
	}
}

// clearStep records that the step at path is not in flight any more.
func (r *wfRunner) clearStep(path string) {
	r.stepsMu.Lock()
	defer r.stepsMu.Unlock()
	i, ok := r.stepIndex(path)
	if !ok {
		return
	}
	delete(r.stepAt, path) // a no-op on the nil map of a run that never needed one
	last := len(r.steps) - 1
	if i != last {
		r.steps[i] = r.steps[last]
		if r.stepAt != nil {
			r.stepAt[r.steps[i].ps.Path] = i
		}
	}
	// Zeroed: it would keep the error's text alive.
	r.steps[last] = pendingEntry{}
	r.steps = r.steps[:last]
	if last == 0 {
		// Emptied: cleared, so that the deleted keys' marks do not make
		// the map grow again.
		clear(r.stepAt)
	}
}

// maxPendingSteps bounds the steps in flight Inspect returns: a join may
// run thousands at once, and an Inspect over the transport's bound would
// fail whole (a review's find).
const maxPendingSteps = 1000

// pendingSteps returns a copy of the run's steps in flight, in the order
// they started, the first maxPendingSteps, and how many more there are.
func (r *wfRunner) pendingSteps() ([]PendingStep, int) {
	r.stepsMu.Lock()
	es := slices.Clone(r.steps)
	r.stepsMu.Unlock()
	if len(es) == 0 {
		return nil, 0
	}
	slices.SortFunc(es, func(a, b pendingEntry) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]PendingStep, 0, min(len(es), maxPendingSteps))
	for _, e := range es[:min(len(es), maxPendingSteps)] {
		out = append(out, e.ps)
	}
	return out, len(es) - len(out)
}

// bodyStarted counts a body about to start, unless the actor is leaving:
// then false, and the caller returns refusal's error.
func (r *wfRunner) bodyStarted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leaving {
		return false
	}
	r.bodies++
	// A body after a wake (a sleep's, a backoff's): the run is at work,
	// whatever the last Waiting said (leave reads it).
	r.waiting = false
	return true
}

// bodyEnded counts a body that ended; the last to end while the actor
// leaves ends the run.
func (r *wfRunner) bodyEnded() {
	r.mu.Lock()
	r.bodies--
	last := r.leaving && r.bodies == 0
	r.mu.Unlock()
	if last {
		r.cancel()
	}
}

// refusal is the error of a step body that may not start: its actor is
// leaving the node (finishStep), and the step runs on its next owner. The
// run is cancelled with it once no other body is in flight (another
// branch's, of a join: cancelled now, it would run again on the next
// owner), so that it ends as a deactivated run does (its wakeup recorded,
// due now), not as one a storage error stopped, whose actor is evicted
// without its OnSleep (a review's find). Until then the refused thread
// waits here.
func (r *wfRunner) refusal() error {
	r.mu.Lock()
	leaving, busy := r.leaving, r.bodies > 0
	r.mu.Unlock()
	if !leaving {
		return nil
	}
	if busy {
		r.mu.Lock()
		r.parked++
		r.mu.Unlock()
		<-r.ctx.Done() // the last body's end, or the grace's
		r.mu.Lock()
		r.parked--
		r.mu.Unlock()
	} else {
		r.cancel()
	}
	return fmt.Errorf("%w: the actor is leaving this node; the step runs on its next owner", workflow.ErrEvicted)
}

// wfState is the workflow part of an activation. msgs is owned by the turn
// holder; status, wakeAt and runner are guarded by activation.mu (the
// runner goroutine reads and writes them outside turns).
type wfState struct {
	status workflowStatus
	// msgs are the pending messages, by seq. Changed in turns, and under
	// notifyMu too, so that Queued can read it outside turns.
	msgs []msgRef
	// wakeAt is the At (unix ms) of the stored wakeup record: 0 means the
	// record does not ask for a timer (the workflow waits for a message).
	wakeAt int64
	// arrivals counts the messages sent to the workflow (guarded, like
	// wakeAt, by activation.mu), so that a yield that raced a Send (a
	// stop does not hold the turn) sees it. It only rises: a send or a
	// step's messages refused after they were counted stay counted here
	// (uncountArrivedLocked), costing a yield a wakeup at most.
	arrivals uint64

	// notify is closed and replaced when a message is enqueued; guarded
	// by notifyMu so that the workflow can take it outside turns.
	notifyMu sync.Mutex
	notify   chan struct{}

	// completions are the senders waiting for a message's completion
	// (the first send, and duplicates of its idempotency key), guarded by
	// notifyMu; closed is set (under notifyMu) once no run of this
	// activation will complete anything any more.
	completions map[uint64][]chan json.RawMessage
	// taken marks the messages of waiting senders that the workflow has
	// received (and not completed yet), so that a wait that runs out can
	// say whether its message is still queued. Guarded by notifyMu.
	taken  map[uint64]bool
	closed bool
	// pending counts the queued messages per queue, guarded by
	// notifyMu, for decisions made outside turns (yieldWorkflow).
	pending map[string]int
	// queued is the Host's count of queued messages in memory, which
	// countPending keeps in step with pending while the activation is the
	// Host's; nil once dropQueued took its messages out. Guarded by
	// notifyMu.
	queued *atomic.Int64

	runner *wfRunner // nil when not running
	// marking says that the run marks the step attempts it starts
	// (attempts.go): set as a run starts, cleared once a marked attempt
	// of it records its end.
	marking atomic.Bool
	// markedN counts the attempts the run marked (maxRunMarks).
	markedN atomic.Int32
	// deferred holds the history of the run a load did not start, as the
	// workflow waits out the backoff of its runs that storage stopped
	// (timers.backingOff): the wakeup at the backoff's end starts it
	// (startDeferred). Guarded by activation.mu.
	deferred *[]workflow.Entry
}

func (w *wfState) messageNotify() <-chan struct{} {
	w.notifyMu.Lock()
	defer w.notifyMu.Unlock()
	if w.notify == nil {
		w.notify = make(chan struct{})
	}
	return w.notify
}

func (w *wfState) messageArrived() {
	w.notifyMu.Lock()
	if w.notify != nil {
		close(w.notify)
		w.notify = nil
	}
	w.notifyMu.Unlock()
}

func historyKey(prefix, path string) string { return prefix + storage.WorkflowSuffix + path }

// historyOps turns the workflow's history writes into storage ops. The
// messages its Requeue writes put back in their queues are returned too: the
// caller puts them back in memory (putBack) once the ops are sure to go to
// storage, as the retry does, or as a receive forgets those it takes.
//
// The entries of a loop that keeps its iterations in slots (Entry.Slots)
// go to their slot's key (slotPath), and its prunes delete only what the
// iteration after them in their slot did not overwrite (loopslots.go).
//
// step is the index in ops of the put of the last step entry of ws, -1 if
// none: the op a step's state may ride in (statehome.go). Found here, as
// the ops are made: what a write turns into depends on the slots that the
// writes before it in ws left.
func (a *activation) historyOps(ws []workflow.HistoryWrite) (ops []storage.Op, back []msgRef, step int, err error) {
	prefix := a.prefix
	a.slotMu.Lock()
	defer a.slotMu.Unlock()
	for _, w := range ws {
		// Before any key is made: a loop is recorded with its first
		// iteration's entries.
		if e := w.Put; e != nil && e.Kind == workflow.KindLoop && e.Slots > 0 {
			a.noteSlots(e.Path, e.Slots)
		}
	}
	ops = make([]storage.Op, 0, len(ws)+1)
	step = -1
	var stale map[string]bool // slot keys to delete, after ops (step)
	for _, w := range ws {
		switch {
		case len(w.Requeue) > 0:
			for _, m := range w.Requeue {
				b, _ := json.Marshal(newQueueMessage(m.Body, m.CreatedAt))
				ops = append(ops, storage.Put(queueKey(prefix, m.ID, m.Queue), b))
				back = append(back, msgRef{seq: m.ID, queue: m.Queue, body: m.Body, at: m.CreatedAt})
			}
		case w.Put != nil:
			b, err := workflow.MarshalEntry(w.Put)
			if err != nil {
				return nil, nil, -1, fmt.Errorf("history entry %s does not marshal: %w", w.Put.Path, err)
			}
			// The op's key made in one allocation (every step writes
			// one), and the slot key cut from it, under "wf/".
			head := a.historyPrefix()
			full := slotKeyIn(a.slots, head, w.Put.Path)
			key := full[len(head):]
			a.noteSlotKey(key, w.Put.Path)
			delete(stale, key)
			if w.Put.Kind == workflow.KindStep {
				step = len(ops)
			}
			ops = append(ops, storage.Put(full, b))
		case w.DeleteTree != "":
			slotted := w.Prune && a.inSlots(w.DeleteTree)
			key := a.slotPath(w.DeleteTree)
			a.forgetSlotsUnder(w.DeleteTree)
			if slotted {
				stale = a.staleInSlot(w.DeleteTree, key, stale)
				continue
			}
			a.forgetSlotKeysUnder(key)
			// Pruned loop iterations hold no entry at their own path: one
			// op each instead of two.
			if !workflow.IsIteration(w.DeleteTree) {
				ops = append(ops, storage.Delete(historyKey(prefix, key)))
			}
			ops = append(ops, storage.DeletePrefix(historyKey(prefix, key)+"/"))
		}
	}
	if len(stale) > 0 {
		// Guarded: the iterator of an empty set still costs allocations.
		for _, k := range slices.Sorted(maps.Keys(stale)) {
			ops = append(ops, storage.Delete(historyKey(prefix, k)))
		}
	}
	if n := a.nextSeq.Load(); n > 1 && n != a.nextMark && deletesHistory(ws) {
		// The receives deleted may be all that named the highest IDs
		// given: the next load must not give them again (a workflow may
		// tell messages apart by ID).
		b, _ := json.Marshal(nextMessageMark{Next: n})
		ops = append(ops, storage.Put(prefix+storage.NextMessageSuffix, b))
	}
	// After the step's op (its index, step, stays): the markers its
	// record supersedes.
	ops = a.markOps(ops, ws)
	return ops, back, step, nil
}

// deletesHistory reports whether ws deletes entries (a prune, a retry, a
// race's losers).
func deletesHistory(ws []workflow.HistoryWrite) bool {
	for _, w := range ws {
		if w.DeleteTree != "" {
			return true
		}
	}
	return false
}

// putBack puts messages that the workflow had taken back in memory's
// queues, by seq (their keys keep them ahead of those sent since), once
// their queue keys are written: the turn holder calls it.
func (a *activation) putBack(back []msgRef) {
	for _, m := range back {
		i, _ := slices.BinarySearchFunc(a.wf.msgs, m.seq, func(r msgRef, seq uint64) int { return cmp.Compare(r.seq, seq) })
		a.wf.notifyMu.Lock()
		a.wf.msgs = slices.Insert(a.wf.msgs, i, m)
		a.wf.notifyMu.Unlock()
		a.depth[m.queue]++
		a.wf.countPending(m.queue, 1)
		// A sender waiting for its completion whose wait runs out is told
		// it is queued again.
		a.wf.notifyMu.Lock()
		delete(a.wf.taken, m.seq)
		a.wf.notifyMu.Unlock()
	}
	if len(back) > 0 {
		a.wf.messageArrived()
	}
}

// storedWorkflow is an actor's workflow as storage holds it.
type storedWorkflow struct {
	status workflowStatus
	// history is the entries, without the leftovers of iterations that
	// their loop, which keeps slots, pruned.
	history []workflow.Entry
	// folded is the newest state an entry carries (statehome.go).
	folded foldedState
	// slotKeys are the keys of the entries in loops that keep slots,
	// stale ones included, as activation.slotKeys holds them.
	slotKeys map[string]string
	// seen is what the history's keys were when read (historyKeys), and
	// size the bytes read.
	seen historyKeys
	size int
}

// historyKeys sums up the keys of a history as read: while neither their
// count nor the newest revision among them changes, no key was written or
// deleted since (a write gives its key a revision above every earlier one;
// a delete alone lowers the count), so what was read still holds.
type historyKeys struct {
	count  int
	newest int64
}

func sumKeys(kvs []storage.KV) historyKeys {
	k := historyKeys{count: len(kvs)}
	for _, kv := range kvs {
		k.newest = max(k.newest, kv.ModRevision)
	}
	return k
}

// readWorkflow reads the workflow of the actor at prefix.
func (h *Host) readWorkflow(ctx context.Context, prefix string) (storedWorkflow, error) {
	var sw storedWorkflow
	var err error
	if sw.status, err = h.readWorkflowStatus(ctx, prefix); err != nil {
		return sw, err
	}
	kvs, err := h.store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{})
	if err != nil {
		return sw, err
	}
	hist := make([]workflow.Entry, 0, len(kvs))
	for _, kv := range kvs {
		var e workflow.Entry
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return sw, fmt.Errorf("history entry %s does not decode: %w", kv.Key, err)
		}
		hist = append(hist, e)
	}
	if sw.folded, err = newestFolded(prefix, kvs); err != nil {
		return sw, err
	}
	sw.slotKeys = storedSlotKeys(prefix, kvs, hist)
	sw.history = dropPrunedSlots(hist)
	sw.seen = sumKeys(kvs)
	for _, kv := range kvs {
		sw.size += len(kv.Key) + len(kv.Value)
	}
	return sw, nil
}

// startWorkflow starts the actor's workflow on history if it has one, it
// is not running and it has not finished.
func (a *activation) startWorkflow(history []workflow.Entry) {
	if a.spec.Run == nil || a.stopped.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wf.runner != nil || workflowEnded(a.wf.status.Status) {
		return
	}
	if a.h.timers.backingOff(a.id) {
		// A load (a client's call) does not cut the backoff short: each
		// started a run, which storage stopped at its first commit.
		a.wf.deferred = &history
		return
	}
	if _, releasing := a.h.own.Releasing(a.part); releasing {
		// Loaded by a call that a handoff of its partition waits for
		// (Host.letIn), it leaves with the handoff's next round: its
		// workflow runs on the partition's next owner, from its wakeup
		// record. Started here, its step in flight was cancelled there
		// and ran again on the next owner.
		return
	}
	a.wf.deferred = nil
	// Adding to the WaitGroup under h.mu, after checking stopping, keeps
	// Stop's Wait from racing a late start.
	h := a.h
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return
	}
	h.workflows.Add(1)
	h.mu.Unlock()
	a.wfs.running.Add(1)
	ctx, cancel := context.WithCancel(h.wfCtx)
	r := &wfRunner{cancel: cancel, done: make(chan struct{}), ctx: ctx}
	a.wf.runner = r
	a.wf.marking.Store(true)
	a.wf.markedN.Store(0)
	a.wf.status.Status = WorkflowRunning
	a.runWorkflow(ctx, r, history)
}

// startDeferred starts the run a load deferred (startWorkflow), if any.
func (a *activation) startDeferred() {
	a.mu.Lock()
	d := a.wf.deferred
	a.wf.deferred = nil
	a.mu.Unlock()
	if d != nil {
		a.startWorkflow(*d)
	}
}

// runWorkflow starts the workflow on a goroutine of its own, which runs it
// until it finishes or is stopped. Owned by Host.workflows; stopped by
// cancelling its ctx (deactivation, eviction, node stop).
func (a *activation) runWorkflow(ctx context.Context, r *wfRunner, history []workflow.Entry) {
	wh := &wfHost{a: a, r: r}
	wh.check = wh.checkStep
	a.spec.Start(ctx, wh, history, func(out workflow.Outcome) { a.ranWorkflow(ctx, r, out) })
}

// ranWorkflow records how a run ended, on the run's goroutine, as its last
// act.
func (a *activation) ranWorkflow(ctx context.Context, r *wfRunner, out workflow.Outcome) {
	defer a.h.workflows.Done()
	defer a.wfs.running.Add(-1)
	defer func() {
		// After close(r.done): rerunAfter, which may see done closed,
		// and this take the flag by Swap, so exactly one evicts.
		if r.rerun.Swap(false) {
			a.h.evictWhenFree(a)
		}
	}()
	defer close(r.done)
	defer r.cancel()
	defer func() {
		a.mu.Lock()
		if a.wf.runner == r {
			a.wf.runner = nil
		}
		a.mu.Unlock()
	}()
	switch out.Status {
	case workflow.RunCompleted:
		// Counted once recorded: a run whose end failed to commit replays
		// to it again, and would count twice.
		if a.finishWorkflow(workflowStatus{Status: WorkflowCompleted}) {
			a.h.log.Info("workflow completed", actorField(a))
			a.wfs.completed.Add(1)
		}
	case workflow.RunFailed:
		if a.finishWorkflow(workflowStatus{Status: WorkflowFailed, Error: errtext.Of(out.Err), FailedAt: failedAt(out.Err)}) {
			var pe *workflow.PanicError
			if errors.As(out.Err, &pe) {
				// The history keeps the panic's value only: its stack is
				// logged here, once, as an action's panic is.
				a.h.log.Error("workflow code panicked", actorField(a), zap.Any("panic", pe.Value), zap.Error(out.Err), zap.ByteString("stack", pe.Stack))
			} else {
				a.h.log.Warn("workflow failed", actorField(a), zap.Error(out.Err))
			}
			a.wfs.failed.Add(1)
		}
	case workflow.RunYielded:
		if ctx.Err() == nil {
			// A host error stopped the run (a failed commit or read), not
			// a deactivation: this memory may be behind storage. Drop it
			// and run the workflow again from storage soon.
			a.h.evict(a)
			fails, delay := a.rerunLater()
			a.h.log.Warn("workflow stopped by a storage error: retrying from storage", actorField(a), zap.Error(out.Err), zap.Int("failures", fails), zap.Duration("retry_in", delay))
			return
		}
		r.mu.Lock()
		leaving := r.leaving
		r.mu.Unlock()
		// A run that started as the host began to stop (its actor still
		// loading when the stop marked the runs leaving) is left
		// gracefully too: a lost lease fences the commit anyway.
		a.yieldWorkflow(out.Wake, leaving || a.h.isStopping())
	}
}

// finishWorkflow records a finished workflow and drops its wakeup; it
// reports whether the record committed.
func (a *activation) finishWorkflow(st workflowStatus) bool {
	b, _ := json.Marshal(st)
	ctx, cancel := context.WithTimeout(a.h.baseCtx, 30*time.Second)
	defer cancel()
	// The failed-workflow index lists the actor exactly while its status
	// says failed.
	index := storage.Delete(storage.FailedKey(a.ref.Name, a.enc))
	if st.Status == WorkflowFailed {
		msg := st.Error
		if len(msg) > maxFailedError {
			msg = strings.ToValidUTF8(msg[:maxFailedError], "") + "…"
		}
		fb, _ := json.Marshal(failedEntry{
			indexEntry: indexEntry{Partition: a.part, CreatedAt: a.meta.CreatedAt},
			FailedAt:   time.Now().UnixMilli(), Error: msg,
		})
		index = storage.Put(storage.FailedKey(a.ref.Name, a.enc), fb)
	}
	ops := []storage.Op{
		storage.Put(a.key(storage.WorkflowStatusSuffix), b),
		storage.Delete(storage.WakeupKey(a.part, a.ref.Name, a.enc)),
		index,
	}
	// Markers no step of it will supersede (a race's losers', steps the
	// code no longer reaches, markers not in memory: undecodable ones, or
	// one whose step's record commit was refused): a retry must not count
	// them. Always, as memory may not know them all.
	ops = a.dropMarksOps(ops)
	v, err := a.enqueue(ops...)
	if err == nil {
		err = a.waitCommitted(ctx, v)
	}
	if err != nil {
		if a.h.isStopping() {
			a.h.log.Warn("recording the workflow's end failed; it will replay to it again", actorField(a), zap.Error(err))
			return false
		}
		// Soon, from storage (the failed commit evicted the actor), not
		// only when a request comes.
		fails, delay := a.rerunLater()
		a.h.log.Warn("recording the workflow's end failed; it will replay to it again", actorField(a), zap.Error(err), zap.Int("failures", fails), zap.Duration("retry_in", delay))
		return false
	}
	a.mu.Lock()
	a.wf.status = st
	a.wf.wakeAt = 0
	a.mu.Unlock()
	a.h.timers.cancel(a.id)
	a.failWaiters()
	return true
}

// failWaiters answers senders waiting for completions of a workflow that
// will never complete them.
func (a *activation) failWaiters() {
	a.wf.notifyMu.Lock()
	defer a.wf.notifyMu.Unlock()
	a.wf.closed = true
	for id, chs := range a.wf.completions {
		for _, ch := range chs {
			close(ch)
		}
		delete(a.wf.completions, id)
	}
}

// yieldWorkflow records when a stopped workflow must run again, so that a
// timer (on this node, or on the partition's next owner) wakes it. leaving
// says the run was stopped by a graceful leave (a stop, a drain, a
// handoff: finishStep): the attempt markers of its bodies, which it
// abandons (their grace ran out) without their having crashed, go in the
// same commit, so that the next owner does not count them; if it fails,
// they stay, as after a crash (the node could not write).
func (a *activation) yieldWorkflow(w workflow.Wake, leaving bool) {
	a.mu.Lock()
	arrivals := a.wf.arrivals
	a.mu.Unlock()
	rec := wakeupRecord{Queues: w.Queues, Any: w.AnyQueue}
	if !w.At.IsZero() {
		rec.At, rec.Why = w.At.UnixMilli(), w.AtReason
	}
	// A message it waits for may have arrived after it last looked: then
	// it must run again now, not at its next deadline.
	if a.hasPendingFor(w) {
		rec.At, rec.Why = time.Now().UnixMilli(), ""
	}
	at := rec.At
	b, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(a.h.baseCtx, 10*time.Second)
	defer cancel()
	ops := []storage.Op{storage.Put(storage.WakeupKey(a.part, a.ref.Name, a.enc), b)}
	var left []string
	if leaving {
		ops, left = a.ownMarksOps(ops)
	}
	v, err := a.enqueue(ops...)
	if err == nil {
		err = a.waitCommitted(ctx, v)
	}
	if err == nil {
		a.forgetMarks(left)
	}
	if err != nil {
		// The record keeps its older time, and this node retries from
		// storage soon (waking early is harmless: the workflow waits
		// again). If the partition moved, the new owner has the record.
		if !a.h.isStopping() {
			a.rerunLater()
		}
		return
	}
	a.h.timers.forgetWorkflowFailures(a.id)
	a.mu.Lock()
	a.wf.wakeAt = at
	if a.wf.status.Status == WorkflowRunning {
		a.wf.status.Status = WorkflowSleeping
	}
	// A Send that decided on the wakeup record before the line above saw
	// the older time and wrote none; one after it writes its own.
	raced := a.wf.arrivals != arrivals && (at == 0 || at > time.Now().UnixMilli())
	a.mu.Unlock()
	if raced {
		now := time.Now().UnixMilli()
		b, _ := json.Marshal(wakeupRecord{At: now})
		v, err := a.enqueue(storage.Put(storage.WakeupKey(a.part, a.ref.Name, a.enc), b))
		if err == nil {
			err = a.waitCommitted(ctx, v)
		}
		if err == nil {
			a.mu.Lock()
			a.wf.wakeAt = now
			a.mu.Unlock()
		}
		// Failed, the older record stands, and the retry below comes.
		a.h.timers.schedule(a.ref, a.id, time.UnixMilli(now))
		return
	}
	if at != 0 {
		a.h.timers.schedule(a.ref, a.id, time.UnixMilli(at))
	}
}

// wfHost implements workflow.Host for one run on one activation.
type wfHost struct {
	workflow.SystemClock
	a *activation
	r *wfRunner
	// check is checkStep, made with the wfHost (a method value made per
	// step would be an allocation per step), and checked what it found,
	// for the step's commit: both guarded by the step's turn.
	check   func(json.RawMessage) error
	checked checkedAttempt
}

// checkedAttempt is the state an attempt left, encoded by checkStep.
type checkedAttempt struct {
	events  *turnEvents // the attempt's turn's, to drop if it is refused
	state   []byte
	changed bool
	ok      bool
}

// checkStep is a step attempt's StepEnv.Check: the attempt's own writes,
// its output and the state it left, each within its limit. Refused, the
// attempt's changes are discarded (its state, scheduled calls, events) and
// the engine records it as failed for good, with this error: the same
// writes would be refused again, and the workflow's code can handle the
// failure (or roll back for it), where a run failed by its host could only
// be retried into the same wall. The state's encoding is kept for the
// commit, which would otherwise encode it again.
func (w *wfHost) checkStep(out json.RawMessage) error {
	a := w.a
	if err := w.CheckOutput(out); err != nil {
		w.discardAttempt()
		return err
	}
	b, changed, err := a.encodeStateGuarded()
	if err != nil {
		w.discardAttempt()
		return fmt.Errorf("the state of %s does not marshal to JSON: %w; the attempt's changes were discarded", a.describe(), err)
	}
	if changed && len(b) > a.h.cfg.MaxStateBytes {
		w.discardAttempt()
		return rivet.Errorf(rivet.ErrTooLarge, "the state of %s would be %d bytes, the limit is %d; the attempt's changes were discarded", a.describe(), len(b), a.h.cfg.MaxStateBytes)
	}
	own := len(out) + a.stagedBytes()
	if changed {
		own += len(b)
	}
	if own > ownWritesChecked {
		// Each within its limit, but the step's record and the state go
		// to storage in one transaction (or one key), with the calls the
		// attempt scheduled. What its thread's earlier writes add is not
		// the step's doing (at most workflow.MaxRidingBytes ride with
		// it): if only they make the commit too large, the host's
		// refusal fails the run.
		l := a.h.store.Limits()
		room := l.MaxTxnBytes - recordOverhead
		l.MaxTxnBytes = room
		ops := append(make([]storage.Op, 0, 2), storage.Put(a.stateKey(), out))
		if changed {
			ops = append(ops, storage.Put(a.stateKey(), b))
		}
		// The messages it enqueued too: the attempt is discarded, as
		// for its calls, rather than the run failing at the commit.
		ops = append(append(ops, a.schedOps()...), a.stagedWrites(a.stagedMsgs())...)
		if err := l.Check(storage.Txn{Fence: a.fence, Ops: ops}); err != nil {
			w.discardAttempt()
			what := fmt.Sprintf("the step's output (%d bytes)", len(out))
			if changed {
				what += fmt.Sprintf(" and the state of %s (%d bytes)", a.describe(), len(b))
			}
			return rivet.Errorf(rivet.ErrTooLarge, "%s, with the calls it scheduled and the messages it enqueued, are too large for one transaction (about %d bytes); the attempt's changes were discarded", what, room)
		}
	}
	w.checked.state, w.checked.changed, w.checked.ok = b, changed, true
	return nil
}

// ownWritesChecked is the size of a step's output and state below which
// they fit one transaction whatever its other limits: checkStep counts
// only larger ones.
const ownWritesChecked = 256 << 10

// recordOverhead bounds what a step's record adds to its output (its path,
// its other fields, their JSON) and what rides with it (at most
// workflow.MaxRidingBytes of its thread's earlier writes).
const recordOverhead = 4<<10 + workflow.MaxRidingBytes

// CheckOutput implements workflow.OutputChecker: a step's output within
// MaxStepOutputBytes, so that its record fits a transaction.
func (w *wfHost) CheckOutput(out json.RawMessage) error {
	if limit := w.a.h.cfg.MaxStepOutputBytes; len(out) > limit {
		return rivet.Errorf(rivet.ErrTooLarge, "the output of a step of %s is %d bytes, the limit is %d; the attempt's changes were discarded", w.a.describe(), len(out), limit)
	}
	return nil
}

var _ workflow.OutputChecker = (*wfHost)(nil)

// discardAttempt puts memory back to what is durable, as for an abandoned
// attempt, and drops the attempt's events and background tasks. The commit
// of the attempt's record then writes no state (checked, unchanged).
func (w *wfHost) discardAttempt() {
	w.a.restoreState()
	if te := w.checked.events; te != nil {
		w.a.evMu.Lock()
		te.evs, te.tasks = nil, nil
		w.a.evMu.Unlock()
	}
	w.checked.state, w.checked.changed, w.checked.ok = nil, false, true
}

var _ workflow.Host = (*wfHost)(nil)

// StepPanicked implements workflow.PanicReporter: the attempt failed,
// recorded with the panic's value only; its stack is logged here, once,
// as an action's panic is.
func (w *wfHost) StepPanicked(path string, rollback bool, value any, stack []byte) {
	msg := "workflow step panicked"
	if rollback {
		msg = "workflow step's rollback handler panicked"
	}
	w.a.h.log.Error(msg, actorField(w.a), zap.String("step", path), zap.Any("panic", value), zap.ByteString("stack", stack))
}

var _ workflow.PanicReporter = (*wfHost)(nil)

// StepOverran logs, once per attempt, a step body (or rollback handler)
// that returned well after its timeout: it did not stop when its context
// was cancelled, and held the workflow (a Step's, the actor's turn, so
// its actions too) until it returned. The attempt itself fails as timed
// out, as recorded; nothing else says the turn was held.
func (w *wfHost) StepOverran(path string, rollback bool, timeout, late time.Duration) {
	msg := "workflow step returned after its timeout: its body did not stop when its context ended, or the process did not run meanwhile"
	if rollback {
		msg = "workflow step's rollback handler returned after its timeout: it did not stop when its context ended, or the process did not run meanwhile"
	}
	// A process paused (SIGSTOP, a VM's pause, a debugger) or starved of
	// CPU runs late everything, a body that heeds its context included: a
	// trial read the first wording, "which its body ignored", after a
	// SIGSTOP, as a defect of its code.
	w.a.h.log.Warn(msg, actorField(w.a), zap.String("step", path), zap.Duration("timeout", timeout), zap.Duration("past_timeout", late),
		zap.String("hint", "a body should return when its context (StepCtx.Context) is done: pass it to the calls it makes; if it does, the process was paused or short of CPU"))
}

var _ workflow.OverrunReporter = (*wfHost)(nil)

// Actor is the activation's actor: its key is the activation's own copy,
// which nothing changes.
func (w *wfHost) Actor() (string, []string) { return w.a.ref.Name, w.a.ref.Key }

// turn runs fn as a turn of the actor, for a workflow step or receive.
func (w *wfHost) turn(ctx context.Context, kind TurnKind, chain string, fn func() ([]storage.Op, error)) error {
	return w.turnWith(ctx, kind, chain, nil, fn)
}

// turnWith is turn for a step's attempt: if events is not nil, it collects
// the events of the turn in *events, zero until the turn begins (for fn's
// StepEnv), published with its writes: a failed attempt's too, as its
// changes to the state are committed (roll-forward); not those of an
// attempt abandoned (no writes), or whose writes fail.
func (w *wfHost) turnWith(ctx context.Context, kind TurnKind, chain string, events *turnEvents, fn func() ([]storage.Op, error)) error {
	a := w.a
	// Context errors stay matchable (%w): a race branch cancelled while
	// it waits for the turn has lost its race, which ends that branch
	// alone, not the run.
	w0 := a.h.waitStart()
	err := a.gate.acquire(ctx, chain)
	a.h.observeWait(kind, w0)
	if err != nil {
		return fmt.Errorf("%w: %w", workflow.ErrEvicted, err)
	}
	if a.stopped.Load() {
		a.gate.release(chain)
		return fmt.Errorf("%w: actor deactivated", workflow.ErrEvicted)
	}
	// The claim the activation was loaded under must still be served, as
	// turnFor checks for calls: the wait for the gate may have outlasted
	// the lease's local deadline (a stall before the watchdog ran), and
	// the partition's next owner may be replaying this very step. Its
	// commit would be fenced, but its body must not run twice at once.
	// During a handoff the claim holds until the release: the step runs
	// (the handoff waits for it, then stops the workflow).
	if !a.claimHeld() {
		a.gate.release(chain)
		return a.notServedErr()
	}
	if a.destroyPending() {
		// Its destroy runs next: no more of its workflow.
		a.gate.release(chain)
		return fmt.Errorf("%w: the actor is being destroyed", workflow.ErrEvicted)
	}
	if err := ctx.Err(); err != nil {
		// The gate's fast path does not look at ctx: a run stopped while
		// it waited must not run its step.
		a.gate.release(chain)
		return fmt.Errorf("%w: %w", workflow.ErrEvicted, err)
	}
	t0 := time.Now()
	a.hot.add(t0, w0) // its wait known if an Observer hears of it (a node's)
	if events != nil {
		a.beginTurnEventsIn(events, chain, true)
	}
	a.turnFolds = false
	a.turnStaged = nil
	returned := false
	defer func() {
		if !returned {
			// runtime.Goexit in a step body (t.Fatal in a test's actor):
			// this goroutine ends (the engine fails the run), and the
			// turn it holds must not go with it. Nothing of the attempt
			// is committed, as for an abandoned one. Deferred: the
			// discard runs the state's decoder, which may call
			// runtime.Goexit too, and that ends this function where it
			// stands: the gate stayed held, and a call that had found
			// the activation before its eviction waited on it until its
			// deadline.
			defer a.gate.release(chain)
			if events != nil {
				defer a.finishTurnEvents(events, false, false)
			}
			a.restoreState()
		}
	}()
	ops, err := a.h.runWorkflowTurn(a, fn)
	returned = true
	if err == nil && len(ops) > 0 {
		err = checkLimits(a, ops)
	}
	var v uint64
	var flush bool
	if err == nil && len(ops) > 0 {
		var fold *foldReq
		if a.turnFolds {
			fold = &a.turnFold
		}
		v, flush, err = a.enqueueFlush(ops, fold)
	}
	if msgs := a.turnStaged; msgs != nil {
		// Still in the turn: the next send's ID follows theirs.
		a.turnStaged = nil
		if err == nil {
			a.stagedQueued(msgs)
		} else {
			a.stagedDropped(msgs)
		}
	}
	if flush {
		defer func() {
			if flush {
				// Something between here and the flush panicked (an
				// Observer, a Committer; the engine recovers it): the
				// flush this turn owns must run all the same, or the
				// actor's writes would never commit and Host.Stop would
				// wait for its flushes for ever.
				go a.flushLoop(0)
			}
		}()
	}
	if events != nil {
		a.finishTurnEvents(events, err == nil && len(ops) > 0, err == nil && len(ops) > 0)
	}
	now := time.Now()
	a.lastTurn.Store(now.UnixNano())
	a.gate.release(chain)
	a.h.cfg.Observer.Turn(kind, now.Sub(t0))
	if flush {
		a.flushLoop(v)
		flush = false
	}
	if err != nil {
		return err
	}
	if v == 0 {
		return nil
	}
	return w.wait(v)
}

// MayRunBody implements workflow.BodyGuard: a Do step's body, which takes
// no turn, must not run where a step's turn would be refused (turnWith),
// or it could run at once with the same step on the partition's next
// owner.
func (w *wfHost) MayRunBody() error {
	a := w.a
	if !w.r.bodyStarted() {
		return w.r.refusal()
	}
	ok := false
	defer func() {
		if !ok {
			w.r.bodyEnded() // refused below: BodyEnded will not come
		}
	}()
	if a.stopped.Load() {
		return fmt.Errorf("%w: actor deactivated", workflow.ErrEvicted)
	}
	if !a.claimHeld() {
		return a.notServedErr()
	}
	ok = true
	return nil
}

// BodyEnded counts a Do body MayRunBody let start as ended.
func (w *wfHost) BodyEnded() { w.r.bodyEnded() }

// Tracing implements workflow.StepTracer: whether the host traces.
func (w *wfHost) Tracing() bool { return w.a.h.tracer != nil }

// TraceStep implements workflow.StepTracer: a span for each step attempt,
// whose context the body's calls carry to the actors they call.
func (w *wfHost) TraceStep(ctx context.Context, path string, attempt int) (context.Context, func(error)) {
	tr := w.a.h.tracer
	if tr == nil {
		return ctx, func(error) {}
	}
	// Named by the actor only: a path in a loop names each iteration.
	ctx, span := tr.Start(ctx, "rivet.step "+w.a.ref.Name, trace.WithAttributes(
		tracing.ActorName.String(w.a.ref.Name), tracing.ActorKey.StringSlice(w.a.ref.Key),
		tracing.StepPath.String(path), tracing.Attempt.Int(attempt)))
	return ctx, func(err error) { tracing.End(span, err) }
}

var _ workflow.StepTracer = (*wfHost)(nil)

// StepStarted implements workflow.StepObserver: the step's body runs.
func (w *wfHost) StepStarted(path string, attempt, maxAttempts int, at time.Time, lastErr string) {
	w.r.setStep(PendingStep{Path: path, Attempt: attempt, MaxAttempts: maxAttempts, StartedAt: at, LastError: lastErr})
}

// StepBackingOff implements workflow.StepObserver: the step waits until
// next to run attempt.
func (w *wfHost) StepBackingOff(path string, attempt, maxAttempts int, next time.Time, lastErr string) {
	w.r.setStep(PendingStep{Path: path, Attempt: attempt, MaxAttempts: maxAttempts, LastError: lastErr, NextAttemptAt: next})
}

// StepIdle implements workflow.StepObserver.
func (w *wfHost) StepIdle(path string) { w.r.clearStep(path) }

var (
	_ workflow.BodyGuard    = (*wfHost)(nil)
	_ workflow.BodyTracker  = (*wfHost)(nil)
	_ workflow.StepObserver = (*wfHost)(nil)
)

// claimHeld reports whether the claim the activation was loaded under is
// served, or held by a handoff until its release: past the lease's local
// deadline it is neither, though the watchdog may not have dropped it yet.
func (a *activation) claimHeld() bool {
	if tok, ok := a.h.own.Token(a.part); ok && tok == a.fence.Token {
		return true
	}
	rt, releasing := a.h.own.Releasing(a.part)
	return releasing && rt == a.fence.Token
}

func (a *activation) notServedErr() error {
	return fmt.Errorf("%w: partition %d is not served by node %s now", workflow.ErrEvicted, a.part, a.h.cfg.NodeID)
}

// wait waits for a commit; a failed commit evicts the run (the next
// activation reads what is durable). No context cuts it short: the write
// is on its way, and the run must learn whether it landed.
func (w *wfHost) wait(v uint64) error {
	if err := w.a.waitCommitted(context.Background(), v); err != nil {
		return fmt.Errorf("%w: %v", workflow.ErrEvicted, err)
	}
	w.a.h.timers.forgetWorkflowFailures(w.a.id)
	return nil
}

// rerunLater runs a's workflow, which storage stopped (a's memory evicted,
// or never to be trusted again), from storage with no request, after the
// backoff of its runs in a row that storage stopped (wfRerunDelay): while
// etcd refuses writes (out of space), each run fails its first commit. It
// returns that count and the delay.
func (a *activation) rerunLater() (int, time.Duration) {
	fails, delay := a.h.timers.workflowStopped(a.ref, a.id)
	a.h.timers.schedule(a.ref, a.id, time.Now().Add(delay))
	return fails, delay
}

// runWorkflowTurn calls fn, turning a panic into an error that evicts.
func (h *Host) runWorkflowTurn(a *activation, fn func() ([]storage.Op, error)) (ops []storage.Op, err error) {
	defer func() {
		if r := recover(); r != nil {
			// A bug of the node's, not of the workflow's code: the stack
			// is where to look, as for the panics the engine reports.
			h.log.Error("workflow step panicked outside the engine's guard", actorField(a), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			err = fmt.Errorf("%w: panic: %v", workflow.ErrEvicted, r)
		}
	}()
	return fn()
}

// stepTurn is what a step's turn hands its body (RunStep).
type stepTurn struct {
	te     turnEvents
	ts     turnSchedule
	client hostClient
	chain  chainRootBuf // the bytes of client.chain (newChainIn)
}

func (w *wfHost) RunStep(ctx context.Context, ephemeral bool, fn func(env workflow.StepEnv) []workflow.HistoryWrite) error {
	if err := w.r.refusal(); err != nil {
		return err
	}
	w.active()
	a := w.a
	var steps stepCounts
	var stepWrites []workflow.HistoryWrite
	// What the body gets, its turn's events, Scheduler and Client, and
	// the turn's chain, in one allocation rather than four, on every step.
	st := &stepTurn{}
	// The step's calls to other actors carry the turn's chain, so that a
	// call back into this actor re-enters the step's turn.
	chain := a.h.newChainIn(&st.chain)
	st.client = hostClient{h: a.h, chain: chain, from: a}
	te := &st.te // begun by turnWith once it holds the turn
	// counted: the body started (bodyStarted), in the turn, so that a step
	// that waited for the gate (behind a call) while its actor began to
	// leave does not start it then; refused: it did not, for that reason.
	counted, refused := false, false
	defer func() {
		if counted {
			w.r.bodyEnded() // after the commit
		}
	}()
	err := w.turnWith(ctx, TurnStep, chain, te, func() ([]storage.Op, error) {
		if counted = w.r.bodyStarted(); !counted {
			refused = true
			return nil, nil
		}
		st.ts = a.turnScheduleOf(false, te)
		ts := &st.ts
		w.checked = checkedAttempt{events: te}
		// Messages sent while the body runs are queued at once, beside it
		// (turnGate): the rest of this turn waits for the one queueing.
		a.gate.openLane()
		writes := func() []workflow.HistoryWrite {
			defer a.gate.closeLane()
			return fn(workflow.StepEnv{State: a.state, Client: &st.client, Events: te, Vars: a.vars, Destroy: ts.destroy, Schedule: ts, Enqueue: ts, Tasks: te, Check: w.check})
		}()
		checked := w.checked
		w.checked = checkedAttempt{}
		steps = countSteps(writes)
		if steps.failed > 0 || steps.exhausted > 0 {
			stepWrites = writes // for the failure's log line
		}
		if len(writes) == 0 {
			// Abandoned attempt: its state changes are not committed, so
			// memory goes back to what is durable.
			a.restoreState()
			return nil, nil
		}
		b, changed := checked.state, checked.changed
		if !checked.ok {
			// Not checked (a rollback handler's attempt). Before the
			// history's ops are made, which note the loops' slots as
			// written: a refused write must leave them as they were.
			// A panic of its encoder is its error: evicted by the panic,
			// the actor would run the step again from storage, and panic
			// again.
			var err error
			b, changed, err = a.encodeStateGuarded()
			if err != nil {
				a.restoreState()
				return nil, fmt.Errorf("state of %s does not marshal to JSON: %w", a.describe(), err)
			}
			if changed && len(b) > a.h.cfg.MaxStateBytes {
				// Memory goes back to what is durable, so that actions do
				// not read a change that was never committed.
				a.restoreState()
				return nil, rivet.Errorf(rivet.ErrTooLarge, "state of %s would be %d bytes, the limit is %d", a.describe(), len(b), a.h.cfg.MaxStateBytes)
			}
		}
		ops, back, target, err := a.historyOps(writes)
		if err != nil {
			// Not committed: the attempt's messages and calls must not
			// go with the next turn's commit.
			a.restoreState()
			return nil, err
		}
		if changed {
			ops = append(ops, storage.Put(a.stateKey(), b))
			// The state may ride in the step's entry instead, if nothing
			// of the actor's is queued when this is (statehome.go), and
			// if it is small: each entry the history keeps keeps its copy.
			if target >= 0 && len(b) <= a.h.cfg.MaxFoldedStateBytes {
				a.turnFold = foldReq{stateIdx: len(ops) - 1, targetIdx: target, path: ops[target].Key[len(a.prefix)+len(storage.WorkflowSuffix):]}
				a.turnFolds = true
			}
		}
		// The calls the attempt changed (Schedule, Destroy) and the
		// messages it enqueued commit with it.
		ops = append(ops, a.schedOps()...)
		// The messages are counted (and stamped: beginStaged) before
		// their writes are made, and uncounted if refused, as a Send's.
		msgs := a.stagedMsgs()
		wake := a.beginStaged(msgs)
		ops = append(ops, a.stagedWrites(msgs)...)
		// Checked here, before memory takes the change: a write too large
		// for one transaction is never committed, and actions must not
		// read (or a later turn commit) the state it changed.
		if err := checkLimits(a, ops); err != nil {
			a.stagedDropped(msgs)
			a.restoreState()
			return nil, err
		}
		if changed {
			a.setStateBytes(b)
		}
		a.schedSavedNow()
		ops = append(ops, wake...)
		a.takeStaged()
		// In memory once enqueued (turnWith).
		a.turnStaged = msgs
		a.putBack(back) // none: the engine puts messages back in a Commit
		return ops, nil
	})
	if refused {
		// Out of the turn: the refusal may wait for other bodies.
		return w.r.refusal()
	}
	if err != nil {
		return err
	}
	a.stepsCommitted(steps, stepWrites)
	return nil
}

func (w *wfHost) Commit(ctx context.Context, writes []workflow.HistoryWrite) error {
	return w.commit(ctx, writes, nil)
}

// commit is Commit. With keep set, the caller holds keysMu (a Complete of
// a keyed message, commitCompletion): keep adds to the transaction's ops
// once they are within its limits, and keysMu is released once they are
// enqueued, or as soon as nothing will be.
func (w *wfHost) commit(ctx context.Context, writes []workflow.HistoryWrite, keep func([]storage.Op) []storage.Op) error {
	w.active()
	locked := keep != nil
	defer func() {
		if locked {
			w.a.keysMu.Unlock()
		}
	}()
	ops, back, _, err := w.a.historyOps(writes)
	if err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	if len(back) > 0 {
		// Not made by a Complete (a race's decision commits its requeue
		// at once): committed as a turn, nothing kept.
		if locked {
			w.a.keysMu.Unlock()
			locked = false
		}
		return w.commitPuttingBack(ctx, writes, ops, back)
	}
	if err := checkLimits(w.a, ops); err != nil {
		return err
	}
	if keep != nil {
		ops = keep(ops)
	}
	v, err := w.a.enqueue(ops...)
	if locked {
		w.a.keysMu.Unlock()
		locked = false
	}
	if err != nil {
		return fmt.Errorf("%w: %v", workflow.ErrEvicted, err)
	}
	if err := w.wait(v); err != nil {
		return err
	}
	w.a.stepsCommitted(countSteps(writes), writes)
	return nil
}

// commitPuttingBack is Commit for writes that put messages back in their
// queues (a race's decision, with its losers' messages): memory's queues are
// the turn holder's, so it commits as a turn, as a receive does; as there,
// memory takes the change before the commit is durable, and a failed commit
// evicts the activation with it. Refused as too large before memory
// changes: split, a crash between the commits would leave a message both
// queued and recorded, or neither.
func (w *wfHost) commitPuttingBack(ctx context.Context, writes []workflow.HistoryWrite, ops []storage.Op, back []msgRef) error {
	a := w.a
	err := w.turn(ctx, TurnReceive, a.h.newChain(), func() ([]storage.Op, error) {
		if err := checkLimits(a, ops); err != nil {
			return nil, err
		}
		a.putBack(back)
		return ops, nil
	})
	if err != nil {
		return err
	}
	a.stepsCommitted(countSteps(writes), writes)
	return nil
}

// stepCounts counts step attempts by outcome.
type stepCounts struct{ completed, failed, exhausted int }

// isStepAttempt reports whether e records a step's attempt (a rollback
// handler's attempt is not a step's).
func isStepAttempt(e *workflow.Entry) bool {
	return e != nil && e.Kind == workflow.KindStep && !e.RollbackDone && e.RollbackError == nil && e.RollbackAttempts == 0
}

// countSteps counts the step attempts recorded in ws.
func countSteps(ws []workflow.HistoryWrite) stepCounts {
	var c stepCounts
	for _, w := range ws {
		e := w.Put
		if !isStepAttempt(e) {
			continue
		}
		switch e.Status {
		case workflow.StatusCompleted:
			c.completed++
		case workflow.StatusFailed:
			c.failed++
		case workflow.StatusExhausted:
			c.exhausted++
		}
	}
	return c
}

// checkLimits refuses a workflow write that no store transaction can hold.
// The error does not wrap ErrEvicted: the workflow fails, visibly, instead
// of replaying into the same wall after every activation.
func checkLimits(a *activation, ops []storage.Op) error {
	// The ops alone: a state that placeState adds to them, if they would
	// be too large with it, is written in a commit of its own.
	if err := a.h.store.Limits().Check(storage.Txn{Fence: a.fence, Ops: ops}); err != nil {
		return rivet.Errorf(rivet.ErrTooLarge, "a workflow write of %s is too large for one transaction: %v", a.describe(), err)
	}
	return nil
}

// hasPendingFor reports whether a queued message would wake w.
func (a *activation) hasPendingFor(w workflow.Wake) bool {
	a.wf.notifyMu.Lock()
	defer a.wf.notifyMu.Unlock()
	for q, n := range a.wf.pending {
		if n <= 0 {
			continue
		}
		if w.AnyQueue {
			return true
		}
		for _, wq := range w.Queues {
			if wq == q {
				return true
			}
		}
	}
	return false
}

// countPending adds d to the pending count of queue.
func (w *wfState) countPending(queue string, d int) {
	w.notifyMu.Lock()
	w.countPendingLocked(queue, d)
	w.notifyMu.Unlock()
}

func (w *wfState) countPendingLocked(queue string, d int) {
	if w.pending == nil {
		w.pending = map[string]int{}
	}
	w.pending[queue] += d
	if w.queued != nil {
		w.queued.Add(int64(d))
	}
}

// arriveAll counts msgs, the messages a Send or a turn (enqueue.go) adds
// to the workflow's queues, pending, stamps them, and returns their time,
// the host's clock read under the same lock: the moment they become
// visible to the workflow's receives (Queued). A message is stamped here
// and nowhere earlier. A receive that looked and found none before this
// is ranked no later than this time (the engine reads the clock before it
// looks, see workflow.MessagePeeker): if it timed out, its deadline was at
// or before the messages' time, and a replay of it (its timeout's record
// not committed yet) ranks them after the deadline and times out as it
// did. A time taken before (a Send stamped before it read its idempotency
// keys from storage) let a receive time out at a deadline after it while
// the message was not counted yet, and the replay took the message the
// first run had not. A message put back in its queue (putBack) keeps this
// time: see "ranking" in docs/architecture.md for the gap that leaves.
func (w *wfState) arriveAll(msgs []msgRef) time.Time {
	w.notifyMu.Lock()
	at := time.Now().Round(0)
	for i := range msgs {
		msgs[i].at = at
		w.countPendingLocked(msgs[i].queue, 1)
	}
	w.notifyMu.Unlock()
	return at
}

// dropQueued takes the activation's pending messages out of the Host's
// count, once, when the activation leaves the Host's memory.
func (w *wfState) dropQueued() {
	w.notifyMu.Lock()
	defer w.notifyMu.Unlock()
	if w.queued == nil {
		return
	}
	n := 0
	for _, d := range w.pending {
		n += d
	}
	w.queued.Add(-int64(n))
	w.queued = nil
}

// Queued implements workflow.MessagePeeker: the pending counts include
// every message in memory's queues (they count a message before it is
// there), and a message is stamped as it is counted, under notifyMu
// (wfState.arriveAll): one this call does not see is stamped after it. The
// time is unknown for a message counted but not there yet, and for one
// queued before the activation loaded (only its key is read).
func (w *wfHost) Queued(names []string) (time.Time, bool) {
	a := w.a
	if !a.hasPendingFor(workflow.Wake{AnyQueue: len(names) == 0, Queues: names}) {
		return time.Time{}, false
	}
	a.wf.notifyMu.Lock()
	defer a.wf.notifyMu.Unlock()
	for _, m := range a.wf.msgs {
		if len(names) == 0 || slices.Contains(names, m.queue) {
			return m.at, true
		}
	}
	return time.Time{}, true
}

// CheckQueues implements workflow.QueueChecker: a send to a queue the
// actor lacks is refused (ErrUnknownQueue), so a receive from it would
// wait for ever.
func (w *wfHost) CheckQueues(names []string) error {
	return queuenames.Check(w.a.spec.Name, names, w.a.spec.Queues)
}

// Incarnation implements workflow.Incarnationer: the actor's creation
// time, which a re-created actor of the same key does not share.
func (w *wfHost) Incarnation() string { return strconv.FormatInt(w.a.meta.CreatedAt, 10) }

// QueueTypes implements workflow.QueueTyper.
func (w *wfHost) QueueTypes() map[string]reflect.Type {
	return w.a.spec.QueueTypes
}

func (w *wfHost) Receive(ctx context.Context, names []string, max int, record func(msgs []workflow.RawMessage) []workflow.HistoryWrite) ([]workflow.RawMessage, error) {
	w.active()
	a := w.a
	var got []workflow.RawMessage
	err := w.turn(ctx, TurnReceive, a.h.newChain(), func() ([]storage.Op, error) {
		want := map[string]bool{}
		for _, n := range names {
			want[n] = true
		}
		// One receive is one transaction: take no more messages than it
		// can hold (a delete and a recorded copy each); the rest wait for
		// the next receive.
		l := a.h.store.Limits()
		maxTake := min(max, (l.MaxTxnOps-16)/2)
		budget := l.MaxTxnBytes/2 - 4096
		// Bodies not in memory (messages queued before this activation
		// loaded) are read here, and counted like the others: a batch
		// over the limits would fail its commit, after every restart.
		var (
			picked []int
			ops    []storage.Op
		)
		for i, m := range a.wf.msgs {
			if len(picked) >= maxTake {
				break
			}
			if len(names) > 0 && !want[m.queue] {
				continue
			}
			body, at := m.body, m.at
			if body == nil {
				kv, err := a.h.store.Get(ctx, queueKey(a.prefix, m.seq, m.queue))
				if err != nil {
					return nil, fmt.Errorf("%w: read message %d: %v", workflow.ErrEvicted, m.seq, err)
				}
				var qm queueMessage
				if err := json.Unmarshal(kv.Value, &qm); err != nil {
					return nil, fmt.Errorf("message %d does not decode: %w", m.seq, err)
				}
				body, at = qm.Body, qm.createdAt()
			}
			if budget -= 2*len(body) + 128; budget < 0 && len(picked) > 0 {
				break
			}
			picked = append(picked, i)
			got = append(got, workflow.RawMessage{ID: m.seq, Queue: m.queue, Body: body, CreatedAt: at})
			ops = append(ops, storage.Delete(queueKey(a.prefix, m.seq, m.queue)))
		}
		if len(picked) == 0 {
			return nil, nil
		}
		writes := record(got)
		if len(writes) == 0 {
			got = nil // a race branch that lost meanwhile takes nothing
			return nil, nil
		}
		hops, back, _, err := a.historyOps(writes)
		if err != nil {
			return nil, err
		}
		if len(back) > 0 {
			return nil, fmt.Errorf("a receive's record puts %d messages back in their queues", len(back))
		}
		ops = append(ops, hops...)
		// Before memory forgets the messages: a receive too large to
		// commit leaves them queued.
		if err := checkLimits(a, ops); err != nil {
			return nil, err
		}
		// Memory follows the commit: if it fails, the activation is
		// evicted and these counters die with it.
		for k := len(picked) - 1; k >= 0; k-- {
			i := picked[k]
			a.depth[a.wf.msgs[i].queue]--
			a.wf.countPending(a.wf.msgs[i].queue, -1)
			a.wf.markTaken(a.wf.msgs[i].seq)
			a.wf.notifyMu.Lock()
			a.wf.msgs = append(a.wf.msgs[:i], a.wf.msgs[i+1:]...)
			a.wf.notifyMu.Unlock()
		}
		return ops, nil
	})
	if err != nil {
		return nil, err
	}
	a.h.received.Add(int64(len(got)))
	return got, nil
}

// awaitCompletion registers a sender's wait for message id's completion
// and returns the channel that gets it: nil if no run of this activation
// will complete anything any more (closed), or if the message is neither
// queued nor taken (the workflow took it, and its completion may have come
// already: a retry of a key whose record keeps no completion) and no other
// sender waits for it. taken (a retry of a keyed message the workflow
// took) marks it taken, for a wait that runs out. Decided under notifyMu,
// which Complete holds as it takes the waiters: a sender that joins one
// waiting gets the completion too.
func (w *wfState) awaitCompletion(id uint64, queued, taken bool) chan json.RawMessage {
	w.notifyMu.Lock()
	defer w.notifyMu.Unlock()
	if w.closed || !queued && !taken && len(w.completions[id]) == 0 {
		return nil
	}
	if w.completions == nil {
		w.completions = map[uint64][]chan json.RawMessage{}
	}
	ch := make(chan json.RawMessage, 1)
	w.completions[id] = append(w.completions[id], ch)
	if taken {
		if w.taken == nil {
			w.taken = map[uint64]bool{}
		}
		w.taken[id] = true
	}
	return ch
}

// forgetWait drops the wait ch of a sender of message id, if it is still
// registered.
func (w *wfState) forgetWait(id uint64, ch chan json.RawMessage) {
	w.notifyMu.Lock()
	defer w.notifyMu.Unlock()
	chs := slices.DeleteFunc(w.completions[id], func(c chan json.RawMessage) bool { return c == ch })
	if len(chs) > 0 {
		w.completions[id] = chs
		return
	}
	delete(w.completions, id)
	delete(w.taken, id)
}

// markTaken notes that the workflow took message id, if a sender waits
// for its completion: a wait that runs out then says so.
func (w *wfState) markTaken(id uint64) {
	w.notifyMu.Lock()
	defer w.notifyMu.Unlock()
	if _, waited := w.completions[id]; !waited {
		return
	}
	if w.taken == nil {
		w.taken = map[uint64]bool{}
	}
	w.taken[id] = true
}

func (w *wfHost) MessageNotify() <-chan struct{} { return w.a.wf.messageNotify() }

// Client is for Do steps, which hold no turn: each call starts a chain of
// its own. Outgoing calls still wait for the actor's pending writes.
func (w *wfHost) Client() caller.Client {
	w.active()
	return &hostClient{h: w.a.h, chain: w.a.h.newChain(), from: w.a}
}

func (w *wfHost) Complete(ctx context.Context, id uint64, response json.RawMessage, writes []workflow.HistoryWrite) error {
	if n, limit := len(response), w.a.h.cfg.MaxResultBytes; n > limit {
		// Its sender's reply carries it, under the same bound as an
		// action's result; a larger one would fail the reply after the
		// message was taken.
		return rivet.Errorf(rivet.ErrTooLarge, "the completion of message %d is %d bytes, the limit (of an action's result) is %d", id, n, limit)
	}
	if err := w.commitCompletion(ctx, id, response, writes); err != nil {
		return err
	}
	a := w.a
	a.wf.notifyMu.Lock()
	chs := a.wf.completions[id]
	delete(a.wf.completions, id)
	delete(a.wf.taken, id)
	a.wf.notifyMu.Unlock()
	for _, ch := range chs {
		ch <- response
	}
	return nil
}

// maxKeptCompletionBytes bounds a completion kept for a retry: an actor
// keeps up to sendKeysKept of them, for a day, and a bound of an action's
// result (4 MiB) would let one actor hold gigabytes of etcd's space. A
// larger completion is answered to its waiting senders and not kept (its
// retry is answered "enqueued" at once).
const maxKeptCompletionBytes = 64 << 10

// commitCompletion is Commit for a Complete: if message id was sent with
// an idempotency key the actor holds, its completion is kept in the same
// commit (sendResponseKey), for a waiting send retried with the key; an
// unkeyed message's commit is Commit's. Enqueued under keysMu, as a send's
// record and its drop are (keptSendKey): a key's drop enqueued before
// this is seen here, and one enqueued after deletes what this writes. A
// completion over maxKeptCompletionBytes, or too large for one
// transaction with the history write, is not kept, and an empty value
// says so (its retry is answered "enqueued" at
// once, rather than wait for a completion that came): the commit itself
// must not fail for a key.
func (w *wfHost) commitCompletion(ctx context.Context, id uint64, response json.RawMessage, writes []workflow.HistoryWrite) error {
	w.active()
	a := w.a
	a.keysMu.Lock()
	if a.sendKeys == nil {
		// Read outside keysMu (see loadSendKeys): once per activation.
		a.keysMu.Unlock()
		if err := a.loadSendKeys(ctx); err != nil {
			return fmt.Errorf("%w: %v", workflow.ErrEvicted, err)
		}
		a.keysMu.Lock()
	}
	if _, keyed := a.keySeqs[id]; !keyed {
		a.keysMu.Unlock()
		return w.Commit(ctx, writes)
	}
	return w.commit(ctx, writes, func(ops []storage.Op) []storage.Op {
		keep := []json.RawMessage{response, {}}
		if len(response) > maxKeptCompletionBytes {
			keep = keep[1:]
		}
		for _, r := range keep {
			if kept := append(ops[:len(ops):len(ops)], storage.Put(sendResponseKey(a.prefix, id), r)); checkLimits(a, kept) == nil {
				return kept
			}
		}
		return ops
	})
}

// active notes that the run works again: the engine says when it blocks
// (Waiting), not when it resumes, so every host call that does work clears it.
func (w *wfHost) active() {
	w.r.mu.Lock()
	w.r.waiting = false
	w.r.mu.Unlock()
}

func (w *wfHost) Waiting(wk workflow.Wake) {
	w.r.mu.Lock()
	w.r.waiting, w.r.wake = true, wk
	leaving := w.r.leaving
	w.r.mu.Unlock()
	if leaving {
		// No body runs: nothing to wait for (finishStep).
		w.r.cancel()
	}
}

// idleWorkflow reports whether the actor's workflow (if any) lets it be
// deactivated: not running, or blocked on a message or on a time further
// than idle away.
func (a *activation) idleWorkflow(idle time.Duration) bool {
	r := a.runner()
	if r == nil {
		return true
	}
	a.wf.notifyMu.Lock()
	waiters := len(a.wf.completions)
	a.wf.notifyMu.Unlock()
	if waiters > 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.waiting {
		return false
	}
	return r.wake.At.IsZero() || time.Until(r.wake.At) > idle
}

// runner returns the workflow's run in memory, nil if none.
func (a *activation) runner() *wfRunner {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wf.runner
}

// shownWorkflowStatus is the status of an actor's workflow as Inspect shows
// it: sleeping for one not running in memory and not ended (it waits for
// its wakeup).
func (a *activation) shownWorkflowStatus() string {
	st, _ := a.workflowStatusAndWake()
	if st.Status == "" {
		return WorkflowSleeping
	}
	return st.Status
}

// finishStep lets a step body in flight run to its end, for at most the
// host's StepGrace or until ctx ends, before the run is cancelled: its
// attempt is recorded and committed, so it does not run again on the next
// owner, as a cancelled one would (a rolling deploy re-ran every step
// with a call in flight). No body starts meanwhile (refusal), and a run
// that waits (a sleep, a receive, or past its body) is cancelled at once.
// It returns with the run cancelled, not necessarily ended.
func (a *activation) finishStep(ctx context.Context) {
	r := a.leave()
	if r == nil {
		return
	}
	t := time.NewTimer(a.h.stepGrace(ctx))
	select {
	case <-r.done:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	r.cancel()
}

// leave marks a's run as leaving (see finishStep) and returns it if it
// may have a step body in flight, for the caller to cancel once that has
// had its grace; a run that waits, or all runs without a StepGrace, are
// cancelled now.
func (a *activation) leave() *wfRunner {
	r := a.runner()
	if r == nil {
		return nil
	}
	r.mu.Lock()
	r.leaving = true
	waiting := r.waiting && r.bodies == 0
	r.mu.Unlock()
	if waiting || a.h.cfg.StepGrace < 0 {
		r.cancel()
		return nil
	}
	return r
}

// stopWorkflow stops the running workflow and waits for it to record its
// wakeup. Called by the turn holder, which must release the gate only
// after: a step waiting for the gate gives up when its ctx is cancelled.
func (a *activation) stopWorkflow() {
	_ = a.stopWorkflowWithin(context.Background())
}

// stopWorkflowWithin is stopWorkflow for a caller with a deadline: a run
// ends only once its last record (when to wake it) has committed, which a
// slow storage can hold up. If ctx ends first, the run is cancelled but
// may still be ending, and the error says so.
func (a *activation) stopWorkflowWithin(ctx context.Context) error {
	r := a.runner()
	if r == nil {
		return nil
	}
	r.cancel()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctxError(ctx)
	}
}

// cancelWorkflow stops the running workflow without waiting (for evictions,
// which may run on the workflow's own goroutine).
func (a *activation) cancelWorkflow() {
	r := a.runner()
	if r != nil {
		r.cancel()
	}
}

// workflowStatus returns the workflow's status ("" if it has none).
func (a *activation) workflowStatus() workflowStatus {
	st, _ := a.workflowStatusAndWake()
	return st
}

// workflowStatusAndWake is workflowStatus with what would wake the
// workflow if it sleeps: the wake it blocked on if it runs here, else the
// stored wakeup's time (a workflow stopped to wait, or not started yet:
// status "").
func (a *activation) workflowStatusAndWake() (workflowStatus, workflow.Wake) {
	st, wk, _ := a.workflowStatusWake()
	return st, wk
}

// workflowStatusWake is workflowStatusAndWake, and whether the wake is the
// one a runner blocked in memory reported (all of it: reason and queues);
// otherwise it has at most the time of the last yield, which the wakeup
// record holds with the rest.
func (a *activation) workflowStatusWake() (workflowStatus, workflow.Wake, bool) {
	if a.spec.Run == nil {
		return workflowStatus{}, workflow.Wake{}, false
	}
	a.mu.Lock()
	st, r, wakeAt := a.wf.status, a.wf.runner, a.wf.wakeAt
	a.mu.Unlock()
	var wk workflow.Wake
	fromRunner := false
	if st.Status == WorkflowRunning && r != nil {
		r.mu.Lock()
		if r.waiting {
			st.Status = WorkflowSleeping
			// The caller's to keep (Inspect, History hand it out).
			wk = r.wake
			wk.Queues = slices.Clone(wk.Queues)
			fromRunner = true
		}
		r.mu.Unlock()
	} else if (st.Status == WorkflowSleeping || st.Status == "") && wakeAt > 0 {
		wk.At = time.UnixMilli(wakeAt)
	}
	return st, wk, fromRunner
}

// pendingSteps returns the steps in flight of a's workflow running in
// memory (nil if none), without its turn, and how many more than
// maxPendingSteps there are.
func (a *activation) pendingSteps() ([]PendingStep, int) {
	if r := a.runner(); r != nil {
		return r.pendingSteps()
	}
	return nil, 0
}

// errUnknownEntry is returned by RetryWorkflow for a from that names no
// recorded entry.
var errUnknownEntry = errors.New("no such history entry")

// sortEntries orders entries by path, so that an entry comes before the
// entries under it.
func sortEntries(es []workflow.Entry) {
	sort.Slice(es, func(i, j int) bool { return es[i].Path < es[j].Path })
}
