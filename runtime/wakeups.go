package runtime

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"go.uber.org/zap"
)

// wakeupRecord is stored at wakeups/<p>/<name>/<key>: the actor must run at
// At (unix ms) even if no request arrives. It exists while an actor's
// workflow is unfinished; At is the earliest time it can make progress
// without a message (a sleep's deadline, a retry's backoff), or a time to
// run it at once (its creation's, a message's for a workflow waiting for
// one, a restart from history's), so that a new owner runs it after a
// crash. Nothing is written when the workflow starts running.
//
// Why, Queues and Any say what the workflow waits for, as it last stopped
// (yieldWorkflow), for a listing of sleeping and waiting workflows
// (WaitingWorkflows) that need not load each actor: Why is what At is
// the deadline of (workflow.Wake.AtReason: a sleep, a receive's timeout,
// a step's retry), empty when At is a time to run again at once (created,
// a message came, restarted from history) or the record is an older
// build's;
// Queues, or Any, the queues a message on which wakes it.
type wakeupRecord struct {
	At     int64    `json:"at"`
	Why    string   `json:"why,omitempty"`
	Queues []string `json:"queues,omitempty"`
	Any    bool     `json:"any,omitempty"`
}

// wakeItem is one scheduled activation.
type wakeItem struct {
	ref   Ref
	id    string
	at    time.Time
	index int
	// fails counts the activations for this wakeup that failed in a row;
	// its retries back off by it (wakeRetryDelay).
	fails int
	// storageFailed says that the last of them failed for want of
	// storage (UNAVAILABLE or a timeout: etcd out of space refuses every
	// commit): a load of the actor, which says nothing of storage, does
	// not cut its backoff short (armUnlessFiring).
	storageFailed bool
}

// wakeHeap is a min-heap of wakeItems by time.
type wakeHeap []*wakeItem

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *wakeHeap) Push(x any)        { it := x.(*wakeItem); it.index = len(*h); *h = append(*h, it) }
func (h *wakeHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	*h = old[:len(old)-1]
	it.index = -1
	return it
}

// wallTime drops t's monotonic clock reading. The heap holds times read
// back from storage (wall clock only) beside times computed from
// time.Now (both clocks), and Before compares two times by the monotonic
// clock only when both have it, by the wall clock otherwise: after the
// wall clock steps (NTP), such a mix is no order at all, and the heap, so
// ordered, could hold a due wakeup behind a later one.
func wallTime(t time.Time) time.Time { return t.Round(0) }

// timers schedules actor activations. This node is the only writer of the
// wakeup records of its partitions, so after loading them once when it
// claims partitions it keeps them in memory and never scans etcd again.
type timers struct {
	mu    sync.Mutex
	heap  wakeHeap
	byID  map[string]*wakeItem
	kick  chan struct{}
	clock func() time.Time
	// firing counts the runs of each timer of scheduled calls in
	// progress (fireSchedules), which arm it again themselves.
	firing map[string]int
	// wfFails counts, by actor, the runs of its workflow in a row that
	// storage stopped (a commit refused or failed: etcd out of space
	// refuses every write); their reruns back off by it (wfRerunDelay).
	// An entry goes when a commit of the workflow succeeds, when its
	// wakeup finds the actor gone or not ours (forgetWorkflowFailures),
	// or with the actor's timer (cancel, cancelIf).
	// wfFailing is its length, read without mu by every workflow commit.
	wfFails   map[string]wfFail
	wfFailing atomic.Int64
}

// wfFail is an entry of timers.wfFails.
type wfFail struct {
	ref   Ref
	fails int
}

func newTimers() *timers {
	return &timers{byID: map[string]*wakeItem{}, kick: make(chan struct{}, 1), clock: time.Now, firing: map[string]int{}, wfFails: map[string]wfFail{}}
}

// The reruns of a workflow that storage stopped: the first about a second
// later, each next twice as late, up to 30 s, and 0 to a quarter earlier at
// random, so that the workflows storage stopped at once do not all retry at
// once. Etcd out of space refuses every commit until an operator frees
// space: at a second each, its workflows kept it (and the log) busy for
// nothing. A workflow runs at most wfRerunMax after storage is back.
var (
	wfRerunMin = time.Second // variables for tests
	wfRerunMax = 30 * time.Second
)

// wfRerunDelay returns how long after its fails-th run in a row that
// storage stopped a workflow runs again.
func wfRerunDelay(fails int) time.Duration {
	d := min(wfRerunMin<<min(max(fails-1, 0), 16), wfRerunMax)
	return d - rand.N(d/4+1)
}

// workflowStopped counts a run of id's workflow that storage stopped and
// returns how many did in a row, and when to run it again.
func (t *timers) workflowStopped(ref Ref, id string) (int, time.Duration) {
	t.mu.Lock()
	f := t.wfFails[id]
	f.ref = ref
	f.fails++
	t.wfFails[id] = f
	t.wfFailing.Store(int64(len(t.wfFails)))
	t.mu.Unlock()
	return f.fails, wfRerunDelay(f.fails)
}

// backingOff says that id's workflow waits out the backoff of its runs
// that storage stopped: its rerun is scheduled, and not due yet.
func (t *timers) backingOff(id string) bool {
	if t.wfFailing.Load() == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	it, ok := t.byID[id]
	return ok && t.wfFails[id].fails > 0 && it.at.After(t.clock())
}

// forgetWorkflowFailures forgets the failures of id's workflow: storage
// took one of its commits, or the actor is not this node's (any more).
func (t *timers) forgetWorkflowFailures(id string) {
	if t.wfFailing.Load() == 0 {
		return
	}
	t.mu.Lock()
	delete(t.wfFails, id)
	t.wfFailing.Store(int64(len(t.wfFails)))
	t.mu.Unlock()
}

// runEnded ends the mark of a run of timer id in progress, which due sets
// for the timers of scheduled calls it hands out.
func (t *timers) runEnded(id string) {
	t.mu.Lock()
	if t.firing[id]--; t.firing[id] <= 0 {
		delete(t.firing, id)
	}
	t.mu.Unlock()
}

// armUnlessFiring is scheduleEarlier, unless a run of id is in progress
// (that run arms it when it ends, with its backoff if it failed) or id
// waits out the backoff of a run that storage failed: moved to at (the due
// call's time, past) its failures would count from none again, so each
// load of the actor (a client's call, which loads it again after each
// commit storage refused) ran the failing call at once, warning each time.
// (After a run whose load failed, a load that succeeds arms it at once.)
func (t *timers) armUnlessFiring(ref Ref, id string, at time.Time) {
	t.mu.Lock()
	skip := t.firing[id] > 0
	if it, ok := t.byID[id]; ok && it.fails > 0 && it.storageFailed {
		skip = true
	}
	t.mu.Unlock()
	if !skip {
		t.scheduleEarlier(ref, id, at)
	}
}

// schedule sets (or moves) the actor's activation time: a new wakeup,
// whose failures, if it replaces a retry, start again from none.
func (t *timers) schedule(ref Ref, id string, at time.Time) { t.set(ref, id, at, false) }

// scheduleEarlier sets the activation time of id to at unless it is set
// to an earlier one already.
func (t *timers) scheduleEarlier(ref Ref, id string, at time.Time) { t.set(ref, id, at, true) }

func (t *timers) set(ref Ref, id string, at time.Time, onlyEarlier bool) {
	at = wallTime(at)
	t.mu.Lock()
	if it, ok := t.byID[id]; ok {
		if onlyEarlier && !at.Before(it.at) {
			t.mu.Unlock()
			return
		}
		it.at, it.fails = at, 0
		heap.Fix(&t.heap, it.index)
	} else {
		it := &wakeItem{ref: ref, id: id, at: at}
		heap.Push(&t.heap, it)
		t.byID[id] = it
	}
	t.mu.Unlock()
	t.wake()
}

// wake tells the wake loop that the earliest time may have changed.
func (t *timers) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// retryEarlier is retry for an item whose time may have been set since to
// a later one (by the turn that failed): the earlier stands, with its
// count of failures.
func (t *timers) retryEarlier(it *wakeItem, at time.Time) {
	at = wallTime(at)
	t.mu.Lock()
	if cur, ok := t.byID[it.id]; ok {
		if at.Before(cur.at) {
			cur.at, cur.fails, cur.storageFailed = at, it.fails, it.storageFailed
			heap.Fix(&t.heap, cur.index)
		}
	} else {
		it.at = at
		heap.Push(&t.heap, it)
		t.byID[it.id] = it
	}
	t.mu.Unlock()
	t.wake()
}

// retry schedules again, at at, a wakeup that due returned and whose
// activation failed, keeping its count of failures. If the actor was
// scheduled since (by an activation of it that ran meanwhile), that time
// stands.
func (t *timers) retry(it *wakeItem, at time.Time) {
	at = wallTime(at)
	t.mu.Lock()
	if _, ok := t.byID[it.id]; !ok {
		it.at = at
		heap.Push(&t.heap, it)
		t.byID[it.id] = it
	}
	t.mu.Unlock()
	t.wake()
}

// now returns the time by the timers' clock.
func (t *timers) now() time.Time {
	t.mu.Lock()
	clock := t.clock
	t.mu.Unlock()
	return clock()
}

// cancel forgets the actor's activation time.
func (t *timers) cancel(id string) {
	t.mu.Lock()
	if it, ok := t.byID[id]; ok {
		heap.Remove(&t.heap, it.index)
		delete(t.byID, id)
	}
	delete(t.wfFails, id)
	t.wfFailing.Store(int64(len(t.wfFails)))
	t.mu.Unlock()
}

// cancelIf forgets the activation times of the actors drop selects.
func (t *timers) cancelIf(drop func(ref Ref) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, it := range t.byID {
		if drop(it.ref) {
			heap.Remove(&t.heap, it.index)
			delete(t.byID, id)
		}
	}
	for id, f := range t.wfFails {
		if drop(f.ref) {
			delete(t.wfFails, id)
		}
	}
	t.wfFailing.Store(int64(len(t.wfFails)))
}

// due pops the items due now and returns them, and the time of the next.
func (t *timers) due() ([]*wakeItem, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock()
	var out []*wakeItem
	for len(t.heap) > 0 && !t.heap[0].at.After(now) {
		it := heap.Pop(&t.heap).(*wakeItem)
		delete(t.byID, it.id)
		if isSchedTimer(it.id) {
			// Its run is in progress from here, not from when its
			// goroutine starts: it may wait for a slot (wakeParallel)
			// meanwhile, and a load of the actor then armed the timer
			// again, for a second run beside it with no failures
			// counted. The wake loop ends the mark (runEnded).
			t.firing[it.id]++
		}
		out = append(out, it)
	}
	var next time.Time
	if len(t.heap) > 0 {
		next = t.heap[0].at
	}
	return out, next
}

// loadWakeups schedules the wakeup records of the given partitions (those
// of them this node owns). Called when partitions are claimed.
func (h *Host) loadWakeups(ctx context.Context, parts []uint32) error {
	if len(parts) == 0 {
		return nil
	}
	want := make(map[uint32]bool, len(parts))
	for _, p := range parts {
		want[p] = true
	}
	n := 0
	err := h.eachInParts(ctx, parts, storage.WakeupsPrefix, storage.WakeupPartitionPrefix, false, func(kv storage.KV) {
		// wakeups/<p:5>/<name>/<enc>
		rest := strings.TrimPrefix(kv.Key, storage.WakeupsPrefix)
		if len(rest) < 7 || rest[5] != '/' {
			return
		}
		name, enc, ok := cut(rest[6:], '/')
		if !ok {
			return
		}
		ref, ok := h.ownedRef(name, enc, want)
		if !ok {
			return
		}
		var rec wakeupRecord
		if json.Unmarshal(kv.Value, &rec) != nil || rec.At == 0 {
			// 0: the workflow waits for messages only, and a message
			// sent to it writes a record that is due.
			return
		}
		// Not later than a wakeup armed already: a rerun this node
		// armed after its lease was lost (the stopped run's last record
		// was refused, counted as a run storage stopped) waits out that
		// backoff, and moved to the stored time (a receive's deadline,
		// an hour away) the "backoff" lasted until then: every load of
		// the actor, a Send's included, deferred its workflow to it.
		// Waking early is harmless: the workflow waits again.
		h.timers.scheduleEarlier(ref, name+"/"+enc, time.UnixMilli(rec.At))
		n++
	})
	if err != nil {
		return err
	}
	if n > 0 {
		h.log.Info("wakeups loaded", zap.Int("actors", n), zap.Int("partitions", len(parts)))
	}
	return h.loadScheduleTimers(ctx, parts, want)
}

// listPage bounds the keys one read of listParts returns. A start or a
// failover with many partitions reads a whole prefix of the cluster (every
// sleeping workflow's wakeup, every scheduled call): in one range, etcd
// and this node held all of it at once, a spike of hundreds of megabytes
// with a million sleeping workflows, and etcd advises against such reads.
// A variable for tests.
var listPage = 1000

// eachInParts calls fn with the keys under prefix of the given partitions
// (under partPrefix(p) each), in key order, a page at a time. Few
// partitions (a handoff): it reads just theirs. Many (a start, a
// failover): one pass over the prefix costs less than a read each, and fn
// skips what is not theirs. Each pass reads its pages at the revision of
// its first, so that it sees the keys as they were at one moment, as one
// range would.
func (h *Host) eachInParts(ctx context.Context, parts []uint32, prefix string, partPrefix func(uint32) string, keysOnly bool, fn func(storage.KV)) error {
	if len(parts) > 16 {
		return h.eachUnder(ctx, prefix, keysOnly, fn)
	}
	for _, p := range parts {
		if err := h.eachUnder(ctx, partPrefix(p), keysOnly, fn); err != nil {
			return err
		}
	}
	return nil
}

// pageTimeoutKey holds, in a context, how long each read of eachUnder may
// take (withPageTimeout).
type pageTimeoutKey struct{}

// withPageTimeout bounds each page eachUnder reads under ctx by d, rather
// than the pass by one deadline: a pass's time grows with what it reads.
func withPageTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, pageTimeoutKey{}, d)
}

// eachUnder calls fn with every key under prefix, listPage keys per read.
func (h *Host) eachUnder(ctx context.Context, prefix string, keysOnly bool, fn func(storage.KV)) error {
	opts := storage.ListOptions{Limit: listPage, KeysOnly: keysOnly}
	pageTimeout, _ := ctx.Value(pageTimeoutKey{}).(time.Duration)
	for {
		rctx, cancel := ctx, context.CancelFunc(func() {})
		if pageTimeout > 0 {
			rctx, cancel = context.WithTimeout(ctx, pageTimeout)
		}
		kvs, rev, err := h.store.ListRev(rctx, prefix, opts)
		cancel()
		if errors.Is(err, storage.ErrCompacted) && opts.Revision != 0 {
			// A pass longer than etcd keeps revisions (5 minutes by
			// default): it goes on from where it is, now. Only this
			// node writes these partitions' keys since it claimed them,
			// and it keeps what it writes in its timers already.
			opts.Revision = 0
			continue
		}
		if err != nil {
			return err
		}
		for _, kv := range kvs {
			fn(kv)
		}
		if len(kvs) < listPage {
			return nil
		}
		opts.StartAfter = kvs[len(kvs)-1].Key
		if opts.Revision == 0 {
			// The revision a read answers with is the store's when it
			// served it, not the one it read at (etcd's header): taken
			// from every page, it moved on with each write beside the
			// pass.
			opts.Revision = rev
		}
	}
}

// ownedRef returns the actor of a per-partition record (wakeups,
// scheduled calls) if its partition is among want and this node holds it.
func (h *Host) ownedRef(name, enc string, want map[uint32]bool) (Ref, bool) {
	key, err := storage.DecodeKey(enc)
	if err != nil {
		return Ref{}, false
	}
	ref := Ref{Name: name, Key: key}
	_, part, _, err := h.locate(ref)
	if err != nil || !want[part] {
		return Ref{}, false
	}
	// Held, served or not (Token's token, as refence takes it): past the
	// lease's local deadline with a renewal on its way, the claim is
	// served again when it comes, and these timers exist nowhere else
	// (skipped, the partition's workflows slept until something else
	// touched them). A timer of a claim lost meanwhile finds it not ours
	// when it fires, and drops.
	tok, _ := h.own.Token(part)
	return ref, tok != 0
}

// loadWakeupsPageTimeout bounds each read of a retried wakeup load
// (retryLoadWakeups). A variable for tests.
var loadWakeupsPageTimeout = 10 * time.Second

// retryLoadWakeups loads the wakeups of parts in the background until it
// succeeds, this node holds none of them any more, or the host stops: the
// timers of a claimed partition exist nowhere else (its previous owner
// dropped them with the partition).
func (h *Host) retryLoadWakeups(parts []uint32) {
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return
	}
	h.loops.Add(1) // under mu, with stopping false: before Stop waits
	h.mu.Unlock()
	go func() {
		defer h.loops.Done()
		backoff := 200 * time.Millisecond
		for {
			select {
			case <-h.stopCh:
				return
			case <-time.After(backoff):
			}
			var held []uint32
			for _, p := range parts {
				if h.own.Holds(p) {
					held = append(held, p)
				}
			}
			if len(held) == 0 {
				return
			}
			// Each page bounded, not the load: 50,000 sleeping
			// workflows took 3.5 s to load on a busy machine (a user
			// trial), and a wake index past what one deadline allows
			// was read again from its start, for ever, its workflows
			// never woken. h.baseCtx ends with Stop.
			err := h.loadWakeups(withPageTimeout(h.baseCtx, loadWakeupsPageTimeout), held)
			if err == nil {
				return
			}
			h.log.Warn("loading wakeups after claiming partitions failed; retrying", zap.Error(err))
			backoff = min(2*backoff, 5*time.Second)
		}
	}()
}

// wakeParallel bounds the activations the wake loop runs at once. After a
// failover the new owner wakes every unfinished workflow of the partitions
// it took (each activation reads state and history from etcd); one at a
// time, the last of a few hundred fired seconds after the first. A slot is
// held for a load of the actor (seven etcd reads in a row, and OnWake),
// not for its workflow's run, so the rate of wakes was this bound over a
// load's latency, with CPU to spare: at 16 (about 15 ms a load on a busy
// 2-core machine), 3,000 reminders due at one instant woke at about
// 1,000/s with the process using under half the machine's CPU. At 64 they
// wake up to twice as fast, bound by CPU instead, with less CPU each (the
// woken workflows' commits batch better); more gained nothing measurable
// (docs/benchmarks.md, Session 63). Each slot is one actor's reads in
// flight, as a client's call that loads an actor is. Runs of due scheduled
// calls share the slots and hold one for the whole run (up to fireMax
// turns, each up to ActionTimeout): up to 64 such actions at once, as 64
// clients' calls would be; they are not shed, and a schedule's action
// that calls a rate-limited service sees up to that many at once.
const wakeParallel = 64

// wakeLoopMaxWait bounds how long the wake loop sleeps without looking at
// the clock. Wakeups are wall-clock times and a sleep runs on the
// monotonic clock: a wall clock stepped forward (NTP after a suspend, an
// operator's fix) left every wakeup and scheduled call due meanwhile
// waiting for the rest of a sleep computed before the step, up to an hour.
// A variable for tests.
var wakeLoopMaxWait = 30 * time.Second

// wakeLoop activates actors whose wakeup time came. It runs until Stop;
// the activations it started end before Stop returns (they are counted in
// loops, which Stop waits for).
func (h *Host) wakeLoop() {
	defer h.loops.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sem := make(chan struct{}, wakeParallel)
	for {
		items, next := h.timers.due()
		for i, it := range items {
			select {
			case sem <- struct{}{}:
			case <-h.stopCh:
				for _, it := range items[i:] {
					if isSchedTimer(it.id) {
						h.timers.runEnded(it.id) // never run
					}
				}
				return
			}
			h.loops.Add(1) // this loop's own count keeps loops above zero
			go func() {
				defer h.loops.Done()
				defer func() { <-sem }()
				if isSchedTimer(it.id) {
					// due marked the run in progress. Deferred: the
					// actor's code may end this goroutine with
					// runtime.Goexit (its state's decoder, discarding a
					// failed run's change), and the timer must not stay
					// marked running, no later call of the actor run.
					returned := false
					defer func() {
						if !returned {
							// Ended so before it armed the timer for the
							// actor's next call; and a load of the actor
							// meanwhile left the timer to this run
							// (armUnlessFiring): run the actor's calls
							// again, as after a failure.
							it.fails++
							h.timers.retryEarlier(it, h.timers.now().Add(wakeRetryDelay(it.fails, false)))
						}
						h.timers.runEnded(it.id)
					}()
					h.fireSchedules(it)
					returned = true
				} else {
					h.wakeOne(it)
				}
			}()
		}
		wait := wakeLoopMaxWait
		if !next.IsZero() {
			wait = min(max(next.Sub(h.timers.now()), time.Millisecond), wakeLoopMaxWait)
		}
		timer.Reset(wait)
		select {
		case <-h.stopCh:
			return
		case <-h.timers.kick:
		case <-timer.C:
		}
	}
}

// stillOwns says whether this node still holds the partition of ref to
// serve (its lease's local deadline passed or not: storage failing). A
// partition being handed off is not: its handoff dropped its wakeups, and
// the next owner (or this node, claiming it again after a lost lease) loads
// them from storage. Counted as held, a wakeup that came due as the
// handoff began was tried again a second later with a warning, one for
// each workflow due in the handoff's window: a drain logged them by the
// dozen.
func (h *Host) stillOwns(ref Ref) bool {
	p, err := h.PartitionOf(ref)
	return err == nil && h.own.Claimed(p)
}

// The retries of a wakeup whose actor failed to activate: the first a
// second later, each next one twice as late, up to a minute, so that an
// actor that cannot load (its state does not decode, say) costs a warning
// a minute rather than one a second, for ever. A failure that storage
// coming back ends (UNAVAILABLE or a timeout, the partition still ours)
// backs off up to 5 s only, as loading a partition's wakeups does: the
// actor runs soon after storage is back.
const (
	wakeRetryMin          = time.Second
	wakeRetryMax          = time.Minute
	wakeRetryMaxTransient = 5 * time.Second
)

// wakeRetryDelay returns how long after its fails-th failure in a row a
// wakeup is tried again.
func wakeRetryDelay(fails int, transient bool) time.Duration {
	limit := wakeRetryMax
	if transient {
		limit = wakeRetryMaxTransient
	}
	return min(wakeRetryMin<<min(max(fails-1, 0), 16), limit)
}

// wakeOne activates one actor; activating it starts its workflow, which
// then decides what to wait for next.
func (h *Host) wakeOne(it *wakeItem) {
	if err := h.begin(); err != nil {
		return
	}
	defer h.end()
	sp, err := h.spec(it.ref)
	if err != nil {
		if errors.Is(err, rivet.ErrUnknownActor) {
			h.log.Warn("wakeup for an unknown actor type: dropped", refField(it.ref), zap.Error(err))
		} else {
			// Not this node's now (a handoff under way): the next owner
			// has the wakeup record.
			h.log.Debug("wakeup left for the partition's next owner", refField(it.ref), zap.Error(err))
		}
		return
	}
	ctx, cancel := context.WithTimeout(h.baseCtx, 30*time.Second)
	defer cancel()
	a, _, err := h.activate(ctx, it.ref, sp, false, nil)
	switch {
	case err == nil:
		a.lastTurn.Store(time.Now().UnixNano())
		// Loaded before (a client's call, during a backoff), its
		// workflow waited for this wakeup.
		a.startDeferred()
	case errors.Is(err, rivet.ErrNotFound):
		h.timers.forgetWorkflowFailures(it.id)
	case errors.Is(err, rivet.ErrUnavailable) && !h.stillOwns(it.ref):
		// Not ours any more: the partition's next owner loads its
		// wakeups from storage. (Ours still, storage failing: no one
		// else would pick it up, so it is tried again below.)
		h.timers.forgetWorkflowFailures(it.id)
	default:
		it.fails++
		delay := wakeRetryDelay(it.fails, errors.Is(err, rivet.ErrUnavailable) || errors.Is(err, rivet.ErrTimeout))
		h.log.Warn("wakeup failed; trying again later", refField(it.ref), zap.Error(err), zap.Int("failures", it.fails), zap.Duration("retry_in", delay))
		h.timers.retry(it, h.timers.now().Add(delay))
	}
}
