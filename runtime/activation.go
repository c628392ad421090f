package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
	"go.uber.org/zap"
)

// actorMeta is stored at <actor>/meta.
type actorMeta struct {
	CreatedAt int64           `json:"created_at"` // unix ms
	Input     json.RawMessage `json:"input,omitempty"`
	// CreateKey is the idempotency key of the Create that created the
	// actor (CreateOptions), empty if it had none: one per actor, written
	// with the rest of the meta in the create's commit, so it exists
	// exactly when that create applied. Builds before it ignore it.
	CreateKey string `json:"create_key,omitempty"`
}

// queueMessage is stored at <actor>/q/<seq>/<queue>.
type queueMessage struct {
	Body      json.RawMessage `json:"body"`
	CreatedAt int64           `json:"created_at"` // unix ms, for builds that read only this
	// CreatedNs is CreatedAt to the nanosecond (zero in records of older
	// builds). The workflow engine ranks a message by its time against a
	// receive's deadline, which is to the nanosecond: a message sent just
	// after the deadline, within its millisecond, had a stored time at or
	// before it, and a replay of the timed-out receive took it.
	CreatedNs int64 `json:"created_ns,omitempty"`
}

// newQueueMessage is the stored record of a message enqueued at at.
func newQueueMessage(body json.RawMessage, at time.Time) queueMessage {
	return queueMessage{Body: body, CreatedAt: at.UnixMilli(), CreatedNs: at.UnixNano()}
}

// createdAt is when the message was enqueued, as precisely as its record
// says.
func (m queueMessage) createdAt() time.Time {
	if m.CreatedNs != 0 {
		return time.Unix(0, m.CreatedNs)
	}
	return time.UnixMilli(m.CreatedAt)
}

// writeGroup is the writes of one turn: they commit together or not at all.
type writeGroup struct {
	version uint64
	ops     []storage.Op
}

// activation is one actor in memory on its owner node.
//
// Fields under "owned by the turn holder" are read and written only by the
// goroutine holding gate. The commit pipeline fields are guarded by mu, and
// are driven by at most one flush goroutine at a time (flushing), which the
// Host's flushes WaitGroup owns.
type activation struct {
	h      *Host
	ref    Ref
	id     string // name + "/" + encoded key
	enc    string
	part   uint32
	spec   *rivet.Spec
	prefix string
	// wfs is the counters of the actor's type (Host.wfTypes).
	wfs *wfTypeStats
	// actionMu guards actions: the actions running in the actor's turns
	// now (a re-entrant one over the one it re-entered; queries beside a
	// step's body), for RunningActions. Each is taken out by its token,
	// in whatever order they end: an outer call's may end first (its
	// caller's deadline), and queries beside a step end in any order.
	actionMu    sync.Mutex
	actions     []runningEntry
	actionToken uint64
	// stateKeyAt is prefix + the state suffix, made once (stateKey): a
	// workflow step that changes the state names the key each time.
	stateKeyAt string
	// historyAt is prefix + the workflow suffix (historyPrefix), made
	// once for the same reason.
	historyAt string
	// fence is the partition claim this activation was loaded under. It is
	// never refreshed: if the claim changes, another node may have written
	// since, so this activation's memory is stale and its commits must fail.
	fence storage.Fence

	// ready is closed when loading finished; loadErr says how. woken is
	// closed once the hooks of a loaded activation have run (at once if
	// it has none, or the load failed); an activation whose hooks failed
	// is stopped by then.
	ready   chan struct{}
	woken   chan struct{}
	loadErr error
	created bool // this load created the actor

	gate    turnGate
	stopped atomic.Bool // deactivated: requests that find it retry
	// lastTurn is the unix nano time the last turn ended, for the reaper.
	lastTurn atomic.Int64
	// hot counts its turns, for HotActors.
	hot turnLoad

	// Owned by the turn holder.
	state      any
	stateBytes []byte // JSON of state as of the last turn (maybe not yet committed)
	// stateSaves counts the times stateBytes was set (setStateBytes: a
	// load, a turn's save): a checked query (Config.CheckQueries) that saw
	// it move did not leave memory apart from what is saved. Turn holder
	// only.
	stateSaves uint64
	meta       actorMeta
	depth      map[string]uint64
	// nextSeq is the ID the next message sent gets. Written by the turn
	// holder, and by loadSendKeys (under keysMu), which a workflow's
	// Complete may call first, before any send of the activation reads it;
	// atomic because a workflow commit made outside a turn reads it
	// (historyOps).
	nextSeq atomic.Uint64
	// nextMark is the stored NextMessageSuffix as loaded (0: none).
	nextMark uint64
	// sendKeys is the actor's recent idempotency keys (idempotency.go),
	// nil until a send reads them; keySeqs names the key of each message
	// they name. Changed by the turn holder (a send) under keysMu, and read
	// under keysMu by a workflow's Complete, which holds no turn (and may
	// read them first).
	keysMu   sync.Mutex
	sendKeys map[string]sendKeyRecord
	keySeqs  map[uint64]string
	// callKeys is the actor's recent call idempotency keys (callkeys.go),
	// nil until a keyed call reads them; callKeysNext the Seq of the next;
	// callKeysRunning the keys of the calls running now (a keyed action
	// that calls its own actor with its own key would run twice). Only
	// the turn holder uses them.
	callKeys        map[string]callKeyRecord
	callKeysNext    uint64
	callKeysRunning map[string]bool
	// vars is the activation's vars (rivet.Actor.CreateVars), made by
	// its first turn (wake); closable says they are an io.Closer not yet
	// closed (closeVars).
	vars     any
	closable atomic.Bool
	// wakeFailed: the hooks of a held load failed (activateFor); the
	// activation goes once the holder's turn ends.
	wakeFailed bool
	// loadedSchedAt is the time of the earliest call the load read (0:
	// none), for armSchedules. Set and read by the loader.
	loadedSchedAt int64
	// destroySaved: a destroy is among schedSaved (setSchedSaved).
	destroySaved bool
	// sleeping: its OnSleep runs (Host.sleep).
	sleeping atomic.Bool
	// shedding: the bound on actors in memory is putting it to sleep, on
	// a goroutine of its own (Host.shed).
	shedding atomic.Bool
	// tasks is its KeepAwake goroutines (tasks.go), guarded by taskMu.
	taskMu sync.Mutex
	tasks  actorTasks
	// history is the workflow history read by load, handed to the first
	// run and then dropped.
	history []workflow.Entry
	// sched is the actor's scheduled calls (rivet.Scheduler), the earliest
	// first, as the turns left them; schedSaved, as of the writes last
	// queued (what restoreState goes back to, as stateBytes is for the
	// state). Both are copied on write: they may share an array.
	sched, schedSaved []pendingCall
	// staged is the messages the turn enqueued on the actor's own queues
	// (enqueue.go), in order, not yet written: they go with the next
	// write of the turn's changes, as the calls of sched do, and a
	// discard drops them (restoreState).
	staged []stagedMessage
	// turnStaged is the messages a step's turn writes (RunStep), for
	// turnWith to put in memory once they are enqueued.
	turnStaged []msgRef
	// stagedWake is what stagedDropped puts back of beginStaged's
	// wakeAt; guarded by mu.
	stagedWake stagedWake
	// slots are the loops that keep their iterations in slots, by path,
	// and how many (loopslots.go); guarded by slotMu.
	slotMu sync.Mutex
	slots  map[string]int
	// slotKeys are the stored keys of the entries in those loops'
	// iterations (their paths after "wf/"), with the entries' paths; also
	// guarded by slotMu.
	slotKeys map[string]string
	// turnFold, if turnFolds, is the fold a step's turn asks of its
	// commit (statehome.go).
	turnFold  foldReq
	turnFolds bool
	// restorePoint, set while a re-entrant turn runs, is what discarding
	// it goes back to (markRestorePoint).
	restorePoint *turnStart
	// evMu guards chainTop and the event lists of turnEvents: chainTop
	// holds, by the root of a call chain, the innermost turn of the chain
	// open in the actor (beginTurnEvents).
	evMu     sync.Mutex
	chainTop chainTops

	// wf is the workflow part (see wfState for which lock guards what).
	wf wfState
	// marksMu guards marks, the workflow's attempt markers in storage
	// (attempts.go); marksN is their count, read without the lock by each
	// commit (none: nothing to do).
	marksMu sync.Mutex
	marks   map[string]markEntry
	marksN  atomic.Int32

	// Commit pipeline, guarded by mu.
	mu        sync.Mutex
	version   uint64 // version of the last enqueued write group
	committed uint64 // every group up to this version is durable
	groups    []writeGroup
	flushing  bool
	// commitDone is the channel the flush's commits are answered on,
	// kept for the next (channelCommitter); the flushing goroutine's.
	commitDone chan error
	failed     error
	// failedOps and failedVer are the writes of the commit that failed and
	// the version they covered: a reply waiting on a commit whose outcome
	// is unknown learns it from storage (waitDurable).
	failedOps []storage.Op
	failedVer uint64
	// home is the key, after "wf/", of the history entry that holds the
	// newest state queued ("": the state key does), homeState that state
	// (statehome.go). A key, not an entry's path: an entry of a loop in
	// slots is stored at its slot's (loopslots.go).
	home      string
	homeState []byte
	// advanced is closed when committed or failed changes, if a waiter
	// made it (nil otherwise): a workflow step's goroutine usually commits
	// its writes itself and has nothing to wait for, so a channel made per
	// commit would mostly be garbage at once (the profile charged 7% of a
	// step's CPU to it, the garbage collector's assists that allocation
	// happened to pay).
	advanced chan struct{}
	// pendingEvents are the events of turns whose writes are not durable
	// yet, oldest first (publishEvents).
	pendingEvents []pendingEvents
	// quiet is made when the activation is retired (evicted): it refuses
	// every later write, and quiet closes once the writes queued before
	// have settled, committed or failed.
	quiet chan struct{}
}

// errRetired refuses the writes of an evicted activation: nothing written.
var errRetired = errors.New("actor deactivated")

// retire makes the activation refuse every later write and returns a
// channel closed once the writes it queued before have settled. Until
// then no other activation of the actor may load: it would read storage
// without a write that could still land, under the same claim, and then
// write over it.
func (a *activation) retire() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.quiet == nil {
		a.quiet = make(chan struct{})
		if !a.flushing {
			close(a.quiet)
		}
	}
	return a.quiet
}

func (a *activation) key(suffix string) string { return a.prefix + suffix }

// historyPrefix is the prefix of the keys of the actor's workflow history.
// (Made here if the activation was built without it, as unit tests do.)
func (a *activation) historyPrefix() string {
	if a.historyAt != "" {
		return a.historyAt
	}
	return a.prefix + storage.WorkflowSuffix
}

// stateKey is the key of the actor's state. (Made here if the activation
// was built without it, as unit tests do.)
func (a *activation) stateKey() string {
	if a.stateKeyAt != "" {
		return a.stateKeyAt
	}
	return a.key(storage.StateSuffix)
}

// nextMessageMark is the value of an actor's NextMessageSuffix key.
type nextMessageMark struct {
	Next uint64 `json:"next"`
}

func queueKey(prefix string, seq uint64, queue string) string {
	return fmt.Sprintf("%s%s%020d/%s", prefix, storage.QueueSuffix, seq, queue)
}

// parseQueueKey splits the part of a queue key after <actor>/q/.
func parseQueueKey(rest string) (seq uint64, queue string, ok bool) {
	if len(rest) < 22 || rest[20] != '/' {
		return 0, "", false
	}
	if _, err := fmt.Sscanf(rest[:20], "%d", &seq); err != nil {
		return 0, "", false
	}
	return seq, rest[21:], true
}

// snapshot is an actor as read from storage.
type snapshot struct {
	meta  actorMeta
	state []byte
	// stateRev is the revision state was written at: a state that a
	// history entry carries is newer if written later (statehome.go).
	stateRev   int64
	nextSeq    uint64
	nextMark   uint64 // the stored NextMessageSuffix (0: none)
	depth      map[string]uint64
	msgs       []msgRef // pending messages by seq, without bodies
	metaExists bool
	wfStatus   workflowStatus
	// wake is what wakes the workflow of an actor in memory (zero if it
	// is not waiting).
	wake workflow.Wake
	// pending are the steps in flight of the workflow of an actor in
	// memory (nil if none).
	pending []PendingStep
	// pendingOmitted counts those past maxPendingSteps.
	pendingOmitted int
}

// readActor reads an actor's durable record. A missing actor is returned
// with metaExists false, not as an error. The record is that of one
// moment: its reads are separate, and an activation loading meanwhile may
// write between them (a workflow that completed, read with the state from
// before its last step), so a read that finds a key written after the
// first read's revision reads the record again (up to readActorAttempts
// times; then it answers with the last).
//
// withHistory reads the state that the history entries of a workflow
// carry too (statehome.go); the load of a type with a workflow reads them
// with the history instead.
func (h *Host) readActor(ctx context.Context, prefix string, withHistory bool) (snapshot, error) {
	for attempt := 1; ; attempt++ {
		s, rev, newest, err := h.readActorOnce(ctx, prefix, withHistory)
		if err != nil || newest <= rev || attempt == readActorAttempts {
			return s, err
		}
	}
}

const readActorAttempts = 5

// readActorOnce is one attempt of readActor: rev is the store revision of
// its first read, newest the latest revision a key it read was written at.
func (h *Host) readActorOnce(ctx context.Context, prefix string, withHistory bool) (s snapshot, rev, newest int64, err error) {
	s = snapshot{depth: map[string]uint64{}}
	qs, rev, err := h.store.ListRev(ctx, prefix+storage.QueueSuffix, storage.ListOptions{KeysOnly: true})
	if err != nil {
		return s, 0, 0, err
	}
	meta, err := h.store.Get(ctx, prefix+storage.MetaSuffix)
	if err != nil {
		if isNotFound(err) {
			return s, rev, 0, nil
		}
		return s, 0, 0, err
	}
	newest = meta.ModRevision
	s.metaExists = true
	if err := json.Unmarshal(meta.Value, &s.meta); err != nil {
		return s, 0, 0, fmt.Errorf("actor meta does not decode: %w", err)
	}
	// The history before the state key: a commit in between that deletes
	// the entry holding the state writes the state key (placeState), which
	// this read then sees, where a read of the state key first would miss
	// it, and nothing newer than its first read would say so (a delete
	// leaves no revision to see).
	var folded foldedState
	if withHistory {
		kvs, err := h.store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{})
		if err != nil {
			return s, 0, 0, err
		}
		for _, kv := range kvs {
			newest = max(newest, kv.ModRevision)
		}
		if folded, err = newestFolded(prefix, kvs); err != nil {
			return s, 0, 0, err
		}
	}
	st, err := h.store.Get(ctx, prefix+storage.StateSuffix)
	if err != nil && !isNotFound(err) {
		return s, 0, 0, err
	}
	s.state, s.stateRev, newest = st.Value, st.ModRevision, max(newest, st.ModRevision)
	if folded.rev > s.stateRev {
		s.state, s.stateRev = folded.state, folded.rev
	}
	hasMark := false
	for _, kv := range qs {
		if kv.Key == prefix+storage.NextMessageSuffix {
			hasMark = true
			continue
		}
		seq, q, ok := parseQueueKey(kv.Key[len(prefix)+len(storage.QueueSuffix):])
		if !ok {
			continue
		}
		s.depth[q]++
		s.msgs = append(s.msgs, msgRef{seq: seq, queue: q})
		s.nextSeq = max(s.nextSeq, seq+1)
	}
	if hasMark {
		// Read only by actors whose workflow has pruned a history.
		kv, err := h.store.Get(ctx, prefix+storage.NextMessageSuffix)
		switch {
		case err == nil:
			var m nextMessageMark
			if err := json.Unmarshal(kv.Value, &m); err != nil {
				return s, 0, 0, fmt.Errorf("next message ID does not decode: %w", err)
			}
			s.nextMark = m.Next
			s.nextSeq = max(s.nextSeq, m.Next)
			newest = max(newest, kv.ModRevision)
		case !isNotFound(err):
			return s, 0, 0, err
		}
	}
	if s.nextSeq == 0 {
		s.nextSeq = 1
	}
	if st, err := h.store.Get(ctx, prefix+storage.WorkflowStatusSuffix); err == nil {
		_ = json.Unmarshal(st.Value, &s.wfStatus)
		newest = max(newest, st.ModRevision)
	} else if !isNotFound(err) {
		return s, 0, 0, err
	}
	return s, rev, newest, nil
}

// armSchedules arms the timer of the calls the load read (loadedSchedAt):
// armed already unless a write of an earlier activation failed after its
// turn moved the timer past a call. Called by the loader once the
// activation's hooks have run: a load whose wake fails must not arm it, or
// a due call whose run is what loads the actor would be tried again at
// once, not with the timers' backoff (fireSchedules), each time loading
// the actor again. Nor may the load made by that run: a call whose turn
// fails to commit (etcd out of space) was tried again at once by a second
// run, and the failures counted from none each time, so the backoff never
// grew past a second.
func (a *activation) armSchedules() {
	if a.loadedSchedAt > 0 {
		a.h.timers.armUnlessFiring(a.ref, schedTimer(a.id), time.UnixMilli(a.loadedSchedAt))
	}
}

// load reads the actor from storage, creating it if asked and missing.
func (a *activation) load(ctx context.Context, create bool, input json.RawMessage, createKey string) error {
	h := a.h
	for range 3 {
		// A type without a workflow reads the states of history entries
		// here: a build before it may have run one (loadWorkflow reads
		// them otherwise).
		snap, err := h.readActor(ctx, a.prefix, a.spec.Run == nil)
		if err != nil {
			return loadReadError(ctx, "load %s: %v", a.describe(), err)
		}
		if snap.metaExists {
			st, err := a.spec.DecodeState(orNull(snap.state))
			if err != nil {
				return &stateUndecodable{rivet.Errorf(rivet.ErrInternal, "load %s: %v", a.describe(), err)}
			}
			a.warnUnknownStateFields(snap.state)
			a.state, a.meta = st, snap.meta
			a.setStateBytes(snap.state)
			a.nextSeq.Store(snap.nextSeq)
			a.nextMark, a.depth = snap.nextMark, snap.depth
			a.wf.notifyMu.Lock()
			a.wf.msgs = snap.msgs
			a.wf.notifyMu.Unlock()
			for _, m := range snap.msgs {
				a.wf.countPending(m.queue, 1)
			}
			if a.sched, err = h.readSchedules(ctx, a.part, a.ref.Name, a.enc); err != nil {
				return loadReadError(ctx, "load %s: scheduled calls: %v", a.describe(), err)
			}
			a.setSchedSaved(a.sched)
			if len(a.sched) > 0 {
				// Its timer is armed once its hooks have run (armSchedules).
				a.loadedSchedAt = max(a.sched[0].at, 1)
			}
			if a.spec.Run != nil {
				return a.loadWorkflow(ctx, snap.stateRev)
			}
			return nil
		}
		if !create {
			return rivet.Errorf(rivet.ErrNotFound, "actor %s does not exist", a.describe())
		}
		st, err := a.spec.NewState(input)
		if err != nil {
			return err
		}
		sb, err := json.Marshal(st)
		if err != nil {
			return rivet.Errorf(rivet.ErrInternal, "create %s: state does not marshal: %v", a.describe(), err)
		}
		if len(sb) > h.cfg.MaxStateBytes {
			return rivet.Errorf(rivet.ErrTooLarge, "create %s: initial state is %d bytes, the limit is %d", a.describe(), len(sb), h.cfg.MaxStateBytes)
		}
		meta := actorMeta{CreatedAt: time.Now().UnixMilli(), Input: input, CreateKey: createKey}
		mb, _ := json.Marshal(meta)
		ib, _ := json.Marshal(indexEntry{Partition: a.part, CreatedAt: meta.CreatedAt})
		ops := []storage.Op{
			storage.Put(a.key(storage.MetaSuffix), mb),
			storage.Put(a.stateKey(), sb),
			storage.Put(storage.IndexKey(a.ref.Name, a.enc), ib),
		}
		if a.spec.Run != nil {
			// From its creation until its workflow ends, the actor has a
			// wakeup record: if this node dies, the partition's next owner
			// starts the workflow again without waiting for a request.
			wb, _ := json.Marshal(wakeupRecord{At: meta.CreatedAt})
			ops = append(ops, storage.Put(storage.WakeupKey(a.part, a.ref.Name, a.enc), wb),
				// An entry a node without the failed index's upkeep (an
				// older build, in a rolling upgrade) left behind when it
				// destroyed an actor of this key is not this actor's.
				storage.Delete(storage.FailedKey(a.ref.Name, a.enc)))
			a.wf.wakeAt = meta.CreatedAt
		}
		cctx, cancel := h.commitContext() // the commit outlives the caller
		err = h.commit.Commit(cctx, storage.Txn{
			Fence: a.fence,
			Conds: []storage.Cond{storage.Absent(a.key(storage.MetaSuffix))},
			Ops:   ops,
		})
		cancel()
		if isConditionFailed(err) {
			continue // created meanwhile; read it
		}
		if err != nil && storage.OutcomeUnknown(err) {
			// Resolved by the caller once this activation is gone (the
			// claim's replacement waits for it).
			return &createInDoubt{err: commitError("create "+a.describe(), err), fence: a.fence, ops: ops}
		}
		if err != nil {
			return commitError("create "+a.describe(), err)
		}
		a.state, a.meta = st, meta
		a.setStateBytes(sb)
		a.nextSeq.Store(1)
		a.depth = map[string]uint64{}
		a.created = true
		return nil
	}
	return rivet.Errorf(rivet.ErrUnavailable, "load %s: lost a race to create it three times", a.describe())
}

// stateUndecodable is a load that found the actor's stored state, which no
// longer decodes into its type's state (a field's type changed in the
// code): INTERNAL to its caller, and to Destroy the sign to delete the
// actor without loading it, as an actor of a type no longer registered.
type stateUndecodable struct{ err error }

func (e *stateUndecodable) Error() string { return e.err.Error() }
func (e *stateUndecodable) Unwrap() error { return e.err }

// createInDoubt is a load whose create commit's outcome is unknown: its
// caller learns it from storage once the claim has been replaced
// (Host.resolveInDoubt), as a reply whose write went in doubt does.
type createInDoubt struct {
	err   error
	fence storage.Fence
	ops   []storage.Op
}

func (e *createInDoubt) Error() string { return e.err.Error() }
func (e *createInDoubt) Unwrap() error { return e.err }

// loadReadError is the error of a load whose read of storage failed. A
// read cut short by the loading caller's deadline is that caller's
// timeout (DEADLINE_EXCEEDED: the time it gave was too short), not the
// storage's unavailability, which a client retries and an action that
// called another actor with a short deadline of its own would not expect.
func loadReadError(ctx context.Context, format string, what string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return rivet.Errorf(rivet.ErrTimeout, format, what, err)
	}
	return rivet.Errorf(rivet.ErrUnavailable, format, what, err)
}

// loadWorkflow reads the workflow's status, history and wakeup record.
//
// stateRev is the revision of the state key the load read: a state that a
// history entry carries replaces it if written later.
func (a *activation) loadWorkflow(ctx context.Context, stateRev int64) error {
	// The attempt markers (attempts.go) are read beside the history, not
	// after it: a load waits for one read, not two in a row. No write of
	// this actor can come between them: the node holds its partition, and
	// the previous owner's writes have settled.
	type marksRead struct {
		marks map[string]markEntry
		err   error
	}
	mc := make(chan marksRead, 1)
	go func() {
		m, err := a.h.readAttemptMarks(ctx, a.prefix)
		mc <- marksRead{m, err}
	}()
	sw, err := a.h.readWorkflow(ctx, a.prefix)
	if err != nil {
		return loadReadError(ctx, "load %s: workflow: %v", a.describe(), err)
	}
	hist := sw.history
	if f := sw.folded; f.rev > stateRev {
		s, err := a.spec.DecodeState(orNull(f.state))
		if err != nil {
			return &stateUndecodable{rivet.Errorf(rivet.ErrInternal, "load %s: state in history entry %s: %v", a.describe(), f.path, err)}
		}
		a.warnUnknownStateFields(f.state)
		a.state = s
		a.setStateBytes(f.state)
		a.mu.Lock()
		a.home, a.homeState = f.path, f.state
		a.mu.Unlock()
	}
	mr := <-mc
	if mr.err != nil {
		return loadReadError(ctx, "load %s: attempt markers: %v", a.describe(), mr.err)
	}
	a.setLoadedMarks(mr.marks)
	a.wf.status, a.history = sw.status, hist
	a.slotMu.Lock()
	a.slots, a.slotKeys = loopSlots(hist), sw.slotKeys
	a.slotMu.Unlock()
	// The queues alone may no longer hold the highest ID given: a receive
	// in the history keeps the messages it took, and a retry puts them back
	// under their IDs, where a message sent since under a reused ID would
	// be overwritten.
	for _, e := range hist {
		for _, m := range e.Messages {
			if m.ID >= a.nextSeq.Load() {
				a.nextSeq.Store(m.ID + 1)
			}
		}
	}
	if a.wf.wakeAt, err = a.h.readWakeAt(ctx, a.part, a.ref.Name, a.enc); err != nil {
		return loadReadError(ctx, "load %s: wakeup: %v", a.describe(), err)
	}
	return nil
}

func (a *activation) describe() string {
	k, _ := json.Marshal(a.ref.Key)
	return a.ref.Name + " " + string(k)
}

func (a *activation) info() ActorInfo {
	// A copy of the key: the caller may keep the info and edit it; the
	// activation goes on addressing its timers and records with its own.
	ref := Ref{Name: a.ref.Name, Key: append([]string(nil), a.ref.Key...)}
	return ActorInfo{Ref: ref, CreatedAt: time.UnixMilli(a.meta.CreatedAt), Partition: a.part, Owner: a.h.cfg.NodeID}
}

// enqueue adds a turn's writes to the commit pipeline and returns the
// version a reply must wait for. Called by the turn holder.
func (a *activation) enqueue(ops ...storage.Op) (uint64, error) {
	v, flush, err := a.enqueueFlush(ops, nil)
	if flush {
		go a.flushLoop(0)
	}
	return v, err
}

// enqueueFlush is enqueue for a caller that waits for the commit itself:
// if no flush runs, flush is true and the caller must run flushLoop(v)
// (after it released the gate). A workflow step waits for its commit
// anyway, so its goroutine commits rather than start a flush goroutine and
// sleep until that one wakes it: measured, about 7% of the CPU a step costs
// the node outside etcd (docs/benchmarks.md, session 17).
//
// fold, if not nil, asks for the step's state to ride in its entry
// (statehome.go): decided here, under mu, so that it follows the order of
// the commits.
func (a *activation) enqueueFlush(ops []storage.Op, fold *foldReq) (v uint64, flush bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failed != nil {
		return 0, false, a.failedErr()
	}
	if a.quiet != nil {
		return 0, false, commitError(a.describe(), errRetired)
	}
	pre, ops := a.placeState(ops, fold)
	if pre != nil {
		// Before ops, in queue order: a state-key write of its own.
		a.version++
		a.groups = append(a.groups, writeGroup{version: a.version, ops: pre})
	}
	a.version++
	a.groups = append(a.groups, writeGroup{version: a.version, ops: ops})
	if !a.flushing {
		a.flushing = true
		a.h.flushes.Add(1)
		flush = true
	}
	return a.version, flush, nil
}

// currentVersion is the version a reply that saw the current memory must
// wait for.
func (a *activation) currentVersion() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.version
}

// waitCommitted blocks until every write up to version v is durable: the
// output gate. Nothing a turn produced leaves the node before the state it
// saw is durable.
func (a *activation) waitCommitted(ctx context.Context, v uint64) error {
	for {
		a.mu.Lock()
		// Committed first: a write that is durable is reported so even if
		// a later one failed, or the caller would retry and apply it twice.
		if a.committed >= v {
			a.mu.Unlock()
			return nil
		}
		if a.failed != nil {
			err := a.failedErr()
			a.mu.Unlock()
			return err
		}
		if a.advanced == nil {
			a.advanced = make(chan struct{})
		}
		ch := a.advanced
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctxError(ctx)
		}
	}
}

// waitDurable is waitCommitted for a reply, which must not say "outcome
// unknown" when storage can tell. If the commit that covered version v
// failed with its outcome unknown (etcd's leader changed, the connection
// broke), its partition's claim is being replaced (storage.OutcomeUnknown);
// once it has been, the commit applied before the claim ended or never
// will, and what storage held then says which: nil if it applied, an
// UNAVAILABLE error (nothing written; clients retry) if not. A write queued
// after that commit was never sent: UNAVAILABLE too. If storage cannot
// tell within resolveWait (or ctx), the error stays "outcome unknown".
func (a *activation) waitDurable(ctx context.Context, v uint64) error {
	err := a.waitCommitted(ctx, v)
	if err == nil || ctx.Err() != nil {
		return err
	}
	a.mu.Lock()
	failed, ops, fv := a.failed, a.failedOps, a.failedVer
	a.mu.Unlock()
	if failed == nil || !storage.OutcomeUnknown(failed) || ops == nil {
		return err
	}
	if v > fv {
		return rivet.Errorf(rivet.ErrUnavailable, "%s: not written (a write before it had an unknown outcome; the actor reloads): retry", a.describe())
	}
	applied, rerr := a.h.resolveInDoubt(ctx, a.fence, ops)
	if rerr != nil {
		a.h.log.Warn("the outcome of a write stays unknown", actorField(a), zap.Error(rerr))
		return err
	}
	a.h.resolved.Add(1)
	if applied {
		return nil
	}
	return rivet.Errorf(rivet.ErrUnavailable, "%s: not written (its outcome was unknown until the partition's claim was replaced; it had not applied): retry", a.describe())
}

// resolveWait bounds how long a reply waits to learn the outcome of a
// write in doubt: the claim's replacement takes milliseconds, at most its
// drain (refenceDrain) and a release.
var resolveWait = 15 * time.Second // a variable for tests

// resolveInDoubt says whether ops, committed fenced on f with an unknown
// outcome, applied: once the claim f has ended (replaced by the re-fence
// the doubt set off), ops applied before that revision or never, and
// nothing else writes the actor's keys on that claim after the doubt (the
// committer refuses it), so storage just before the claim's end holds
// ops' values exactly if they applied. (If the commit did not apply but
// storage held those very values already, the actor's state is the same
// as if it had: the reply is true all the same.)
func (h *Host) resolveInDoubt(ctx context.Context, f storage.Fence, ops []storage.Op) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveWait)
	defer cancel()
	rev, err := h.own.ClaimEnd(ctx, f)
	if err != nil {
		return false, fmt.Errorf("the end of the claim it was fenced on: %w", err)
	}
	at := storage.ListOptions{Revision: rev - 1, Limit: 1}
	for _, op := range ops {
		opts := at
		opts.KeysOnly = op.Kind != storage.OpPut
		kvs, err := h.store.List(ctx, op.Key, opts)
		if err != nil {
			return false, fmt.Errorf("read %s at revision %d: %w", op.Key, opts.Revision, err)
		}
		exact := len(kvs) > 0 && kvs[0].Key == op.Key
		switch op.Kind {
		case storage.OpPut:
			if !exact || !bytes.Equal(kvs[0].Value, op.Value) {
				return false, nil
			}
		case storage.OpDelete:
			if exact {
				return false, nil
			}
		case storage.OpDeletePrefix:
			if len(kvs) > 0 {
				return false, nil
			}
		}
	}
	return true, nil
}

func (a *activation) failedErr() error {
	return commitError(a.describe(), a.failed)
}

// commitContext is the context of a commit: the host's, not a caller's,
// bounded. A commit whose caller left while it was in flight would have
// an unknown outcome, and put its whole partition in doubt (re-fenced);
// a client's short deadline must not cost that.
func (h *Host) commitContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(h.baseCtx, 30*time.Second)
}

// flushLoop commits pending write groups, several turns per store
// transaction when turns pile up while a commit is in flight. It exits when
// nothing is pending or a commit failed (or hands over, below). Owned by
// Host.flushes.
//
// until is 0 in a flush goroutine. A turn's goroutine that runs the flush
// itself (enqueueFlush) passes its own version: once that is committed, it
// hands what is left to a flush goroutine and returns, so that the turns
// of other callers queued meanwhile do not hold it up.
func (a *activation) flushLoop(until uint64) {
	limits := a.h.store.Limits()
	// mu is held at the top of each round: a commit's result and the look
	// at what is left take one lock, not two, for every commit.
	a.mu.Lock()
	for {
		if until != 0 && a.committed >= until && len(a.groups) > 0 && a.failed == nil {
			a.mu.Unlock()
			go a.flushLoop(0) // still flushing: it takes over this one's count
			return
		}
		if len(a.groups) == 0 || a.failed != nil {
			a.flushing = false
			quiet := a.quiet
			if quiet != nil {
				close(quiet) // retired: nothing can be queued after this
			}
			a.mu.Unlock()
			if quiet != nil {
				a.h.retired(a)
			}
			a.h.flushes.Done()
			return
		}
		ops, v, n := packGroups(a.groups, limits)
		if n == len(a.groups) {
			// The usual case: the next group (a workflow's next step)
			// reuses the array rather than allocating one.
			clear(a.groups)
			a.groups = a.groups[:0]
		} else {
			a.groups = a.groups[n:]
		}
		a.mu.Unlock()

		// The Host's context, not commitContext: the committer bounds
		// each store transaction itself (Committer), where a timeout per
		// commit cost a timer and a registration with baseCtx, under a
		// lock every committing actor took.
		var err error
		if cc := a.h.commitWith; cc != nil {
			err = cc.CommitWith(a.h.baseCtx, storage.Txn{Fence: a.fence, Ops: ops}, &a.commitDone)
		} else {
			err = a.h.commit.Commit(a.h.baseCtx, storage.Txn{Fence: a.fence, Ops: ops})
		}

		a.mu.Lock()
		if err != nil {
			a.failed, a.failedOps, a.failedVer = err, ops, v
		} else {
			a.committed = v
		}
		a.releaseEventsLocked()
		if a.advanced != nil {
			close(a.advanced)
			a.advanced = nil
		}
		if err != nil {
			a.mu.Unlock()
			if warn, quiet := a.h.refusedWarn(err); warn {
				a.h.log.Warn("actor commit failed: deactivating it", actorField(a), errField(err), zap.Uint64("refused_not_logged", quiet))
			}
			a.h.evict(a)
			a.mu.Lock()
		}
	}
}

// packGroups merges write groups, oldest first, into one set of ops within
// the store's limits (a later write to a key replaces an earlier one), and
// returns the ops, the version they cover and how many groups they hold. It
// always takes the first group: each group alone is within limits.
func packGroups(groups []writeGroup, l storage.Limits) ([]storage.Op, uint64, int) {
	if len(groups) == 1 && !hasDupKeys(groups[0].ops) {
		// The common case of a workflow, which waits for each of its
		// commits: one group, sent as it is (no index map, no copy).
		return groups[0].ops, groups[0].version, 1
	}
	maxOps := l.MaxTxnOps - 8       // room for the fence compare and conds
	maxBytes := l.MaxTxnBytes - 256 // room for the fence compare and its read
	index := map[string]int{}
	var ops []storage.Op
	size := 0
	n := 0
	var v uint64
	for _, g := range groups {
		add, addSize := 0, 0
		for _, op := range g.ops {
			if _, ok := index[op.Key]; !ok {
				add++
			}
			addSize += len(op.Key) + len(op.Value) + 16
		}
		if n > 0 && (len(ops)+add > maxOps || size+addSize > maxBytes || prefixConflict(ops, g.ops)) {
			break
		}
		for _, op := range g.ops {
			if i, ok := index[op.Key]; ok {
				size -= len(ops[i].Value)
				ops[i] = op
				size += len(op.Value)
				continue
			}
			index[op.Key] = len(ops)
			ops = append(ops, op)
			size += len(op.Key) + len(op.Value) + 16
		}
		v = g.version
		n++
	}
	return ops, v, n
}

// hasDupKeys reports whether two of ops (a few) share a key; many ops count
// as having some, for packGroups' merging path to sort out.
func hasDupKeys(ops []storage.Op) bool {
	if len(ops) > 16 {
		return true
	}
	for i := range ops {
		for j := i + 1; j < len(ops); j++ {
			if ops[i].Key == ops[j].Key {
				return true
			}
		}
	}
	return false
}

// prefixConflict reports whether merging next into ops would put a key
// under a prefix delete of the other side, which etcd refuses in one txn.
// (Each write group alone never does: the workflow engine keeps its batches
// so.)
func prefixConflict(ops, next []storage.Op) bool {
	for _, x := range ops {
		for _, y := range next {
			if x.Kind == storage.OpDeletePrefix && strings.HasPrefix(y.Key, x.Key) ||
				y.Kind == storage.OpDeletePrefix && strings.HasPrefix(x.Key, y.Key) {
				return true
			}
		}
	}
	return false
}

func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// indexEntry is stored at ix/<name>/<key>.
type indexEntry struct {
	Partition uint32 `json:"p"`
	CreatedAt int64  `json:"created_at"`
}

// failedEntry is an actor's entry in the index of failed workflows
// (storage.FailedKey).
type failedEntry struct {
	indexEntry
	FailedAt int64 `json:"failed_at"` // unix ms
	// Error is the workflow's error, cut to maxFailedError bytes (the
	// whole of it is in the actor's status).
	Error string `json:"error"`
}

// maxFailedError bounds the error a failed-index entry repeats.
const maxFailedError = 1024

// setStateBytes records b as the state's JSON as of the last turn (saved,
// or being committed), counting it (stateSaves). Called by the turn holder.
func (a *activation) setStateBytes(b []byte) {
	a.stateBytes = b
	a.stateSaves++
}
