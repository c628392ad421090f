package runtime

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"reflect"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/internal/answerby"
	"github.com/rivet-go/rivet/internal/defaults"
	"github.com/rivet-go/rivet/internal/optjson"
	"github.com/rivet-go/rivet/internal/queuenames"
	"github.com/rivet-go/rivet/internal/ration"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/internal/sizes"
	"github.com/rivet-go/rivet/internal/tracing"
	"github.com/rivet-go/rivet/internal/typesets"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Committer commits one transaction durably (storage.Committer packs many
// into one store transaction). An activation's turns commit with the Host's
// own context, which has no deadline: Commit must answer within a bounded
// time all the same (storage.Committer's SendTimeout), or an actor whose
// store stopped answering would wait for ever.
type Committer interface {
	Commit(ctx context.Context, txn storage.Txn) error
}

// channelCommitter is implemented by committers that can answer on a
// channel the caller keeps for its next commit (storage.Committer): an
// activation's flushes use it.
type channelCommitter interface {
	CommitWith(ctx context.Context, txn storage.Txn, done *chan error) error
}

// CommitStats is implemented by committers that count their work.
type CommitStats interface {
	Stats() storage.CommitterStats
}

// Host hosts the actors of the partitions its node owns.
type Host struct {
	cfg    Config
	reg    *rivet.Registry
	store  storage.Store
	commit Committer
	// commitWith is commit, if it answers on a channel the caller keeps
	// (an activation's flushes use it); nil if not.
	commitWith channelCommitter
	own        *Ownership
	log        *zap.Logger
	// tracer makes the spans of Config.TracerProvider; nil: tracing off.
	tracer trace.Tracer

	// baseCtx outlives requests: flushes run under it, so that a caller
	// giving up does not abandon a commit other callers wait for.
	baseCtx    context.Context
	cancelBase context.CancelFunc
	// wfCtx is the parent of every workflow run; Stop cancels it first.
	wfCtx    context.Context
	cancelWf context.CancelFunc

	// pages holds the histories being read in pages (historypages.go).
	pages historyPages

	mu     sync.Mutex
	actors map[string]*activation
	// retiring holds evicted activations whose writes are still in
	// flight: the actor is not loaded again until they settle.
	retiring map[string]*activation
	// creators holds, by actor id, the callers that may create the actor
	// and wait for another caller's load of it (activateFor): until they
	// have loaded it themselves, a caller that would not create it loads
	// nothing, and waits to join their load.
	creators map[string]*pendingCreate
	stopping bool
	// refencing holds the partitions being claimed again after a write
	// in doubt (InDoubt), each with the doubted claims not yet replaced.
	refencing map[uint32][]storage.Fence
	// wants says whether the ring gives a partition to this node (nil:
	// every partition); see SetWants.
	wants    func(p uint32) bool
	inflight int           // requests in progress
	drained  chan struct{} // closed when stopping and inflight reaches 0
	// drainOver: Stop waits for the requests in progress no more (they
	// ended, or its deadline came). From then on it sweeps the actors in
	// memory for the last time, so the calls of a turn still running are
	// refused as a new request is, and nothing is loaded (beginOn,
	// activateFor).
	drainOver bool

	flushes   sync.WaitGroup // flush goroutines
	workflows sync.WaitGroup // workflow runners
	loops     sync.WaitGroup // reap, wakeLoop, warnUnregistered, checkSubscriptions
	hookRuns  sync.WaitGroup // closeVarsLater
	hooksDone bool           // Stop waited for hookRuns: no more (under mu)
	// nTasks counts the actors' KeepAwake tasks running; tasksIdle is
	// closed when it falls to 0; tasksClosed: Stop waits for them, no
	// more start (under mu; tasks.go).
	nTasks      int
	tasksIdle   chan struct{}
	tasksClosed bool
	// reapPasses counts the reaper's passes (tests wait for a few to
	// see that an actor was left in memory).
	reapPasses atomic.Int64
	// writeFormat is the newest storage format this host may write
	// (statehome.go, SetWriteFormat): 2 stores the state in history
	// entries, 3 a join's large branch values apart from its record
	// (workflow.JoinOutputsHost), 4 a join's branch failures in entries
	// of their own (workflow.HeldBranchesHost).
	writeFormat atomic.Int64
	// reapSleeps counts the reaper's OnSleep deactivations in progress
	// (at most maxSleeps), reapDone closes when the reaper has returned,
	// after them; sleepChains holds the chains (roots) of OnSleep hooks
	// running.
	reapSleeps  chan struct{}
	reapDone    chan struct{}
	sleepChains sync.Map
	stopCh      chan struct{}
	// overLimit wakes the reaper when a load takes the node past
	// MaxActiveActors.
	overLimit chan struct{}

	timers *timers
	// events holds the node's event subscriptions.
	events *eventHub
	// remote reaches actors of other nodes (nil: a node alone).
	remote Remote
	// ownerLookup names the owner of a partition served elsewhere.
	ownerLookup func(p uint32) string
	// typeHolders names the other nodes that register a type this one
	// does not (SetTypeHolders); nil in a host without a cluster.
	typeHolders func(name string) (holders, unknown []string)

	// sendWaitHook, set by tests only (before any request), runs in a
	// waiting Send's turn just before it registers for the completion:
	// where an eviction, which needs no turn, can come between.
	sendWaitHook func(a *activation)
	// sendHoldHook, set by tests only (before any request), runs in a
	// Send's turn once it has loaded the actor's idempotency keys (a
	// storage read, the first time), before its message is counted and
	// stamped: where a slow read holds the send.
	sendHoldHook func(a *activation)

	chainSeq    atomic.Uint64
	chainPrefix string
	// waits records the turns waiting for the gates of this host's
	// actors, to refuse a wait that closes a cycle (turnGate.acquireAs).
	waits     waitGraph
	waitObs   WaitObserver   // cfg.Observer's, if it is one
	actionObs ActionObserver // cfg.Observer's, if it is one
	calls     atomic.Uint64
	// The counters and gauges of Stats, beside calls. queued is kept by
	// the activations (wfState.countPending); the workflows' by type, in
	// wfTypes (wfstats.go), each activation adding to its type's.
	queued, sent, received atomic.Int64
	refences, resolved     atomic.Uint64
	shedCount              atomic.Uint64
	// callsShed counts the calls refused by MaxWaitingCalls; shedLog
	// rations their warnings, so that a flood logs a line every
	// shedLogEvery, not one a call.
	callsShed               atomic.Uint64
	shedLog                 ration.Every
	schedFired, schedFailed atomic.Uint64
	wfTypes                 map[string]*wfTypeStats // read-only once made
	wfUnknown               wfTypeStats
	// stepFails rations the warnings of failed step attempts.
	stepFails stepFailLog
	// sendKeysEvicted and callKeysEvicted count idempotency keys dropped
	// to keep an actor's bound while still within their window.
	sendKeysEvicted, callKeysEvicted       atomic.Uint64
	wakeFailed, sleepFailed, destroyFailed atomic.Uint64

	// refusedLog and refusedQuiet ration the warnings of commits the
	// store refused (refusedWarn).
	refusedLog   ration.Every
	refusedQuiet atomic.Uint64

	// unknownFields rate-limits the warnings of stored states with
	// fields their type lacks (warnUnknownStateFields).
	unknownFields unknownFieldsLog
}

// New returns a Host. It starts nothing: call Start.
func New(cfg Config, reg *rivet.Registry, store storage.Store, commit Committer, own *Ownership) (*Host, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	wfCtx, cancelWf := context.WithCancel(ctx)
	h := &Host{
		cfg: cfg, reg: reg, store: store, commit: commit, own: own, log: cfg.Logger, chainPrefix: chainPrefix(cfg.NodeID),
		baseCtx: ctx, cancelBase: cancel, wfCtx: wfCtx, cancelWf: cancelWf,
		actors: map[string]*activation{}, retiring: map[string]*activation{}, creators: map[string]*pendingCreate{},
		stopCh: make(chan struct{}), overLimit: make(chan struct{}, 1),
		timers: newTimers(), events: newEventHub(),
		reapSleeps: make(chan struct{}, maxSleeps),
		wfTypes:    newWfTypes(reg.Names()),
	}
	h.commitWith, _ = commit.(channelCommitter)
	if cfg.TracerProvider != nil {
		h.tracer = cfg.TracerProvider.Tracer(tracing.ScopeName)
	}
	h.waitObs, _ = cfg.Observer.(WaitObserver)
	h.actionObs, _ = cfg.Observer.(ActionObserver)
	// A host alone reads what it writes; a node in a cluster writes format
	// 1 until every node reads a newer one (node.watchCluster). But not
	// 4: no host holds a join's failures apart unless told
	// (SetWriteFormat; a node, once every node reads storage format 4),
	// lest a history it writes reach an older build.
	h.writeFormat.Store(3)
	own.OnLost(h.evictAll)
	own.OnClaimed(func(ctx context.Context, parts []uint32) {
		if err := h.loadWakeups(ctx, parts); err != nil {
			h.log.Warn("loading wakeups after claiming partitions failed; retrying", zap.Error(err))
			h.retryLoadWakeups(parts)
		}
	})
	return h, nil
}

// Start loads the wakeups of the partitions the node owns, and starts the
// idle reaper and the wakeup timer.
func (h *Host) Start(ctx context.Context) error {
	if err := h.loadWakeups(ctx, h.own.Partitions()); err != nil {
		return fmt.Errorf("runtime: load wakeups: %w", err)
	}
	h.loops.Add(4)
	h.reapDone = make(chan struct{})
	go h.checkSubscriptions()
	go h.reap()
	go h.wakeLoop()
	go h.warnUnregistered()
	return nil
}

// StopGrace bounds how long a stop that ran out of time still waits for
// what it cancelled to end: code that heeds its context ends well within
// it.
const StopGrace = time.Second

// Stop refuses new requests (rivet.ErrUnavailable), waits for the requests
// in progress, runs the OnSleep of the actors in memory, waits for every
// pending commit, then stops the reaper. If ctx ends first, Stop gives up
// waiting and returns ctx's error; commits still running are cancelled.
// The calls, sends and creates that a request in progress waits for are
// let in while Stop waits for it (beginOn), and refused from then on.
//
// If the requests in progress have not ended halfway to ctx's deadline,
// the actors go to sleep without waiting for them, each once no turn holds
// or waits for its gate: a turn whose code ignores its context costs only
// its own actor its OnSleep (it never runs beside the turn), and a request
// in progress that then reaches an actor asleep is refused.
//
// Past ctx, Stop waits at most StopGrace in all for what it cancelled:
// code that ignores its context (a step, a turn, an OnSleep hook, a task,
// a vars' Close, blocked on I/O without a timeout) is left running, and
// fails to commit when it ends; a warning says what was left.
func (h *Host) Stop(ctx context.Context) error {
	drained := h.StopRequests()

	// Past ctx, the waits below take StopGrace in all, from the first:
	// what the stop cancelled ends within it if its code heeds its
	// context. Code that ignores it (a step, a turn, an OnSleep hook, a
	// task, a vars' Close, blocked on I/O without a timeout) is left to
	// end on its own, as a turn past the deadline is: its commit finds the
	// host's context ended, so nothing it wrote is recorded (a step's
	// attempt runs again at the next start, as after a crash). Waiting
	// for it would hold the stop past its deadline for as long as that
	// code runs, for ever if it never returns.
	var err error
	var lateUntil time.Time
	await := func(done <-chan struct{}, what string) bool {
		select {
		case <-done:
			return true
		case <-ctx.Done():
		}
		err = ctx.Err()
		h.cancelBase() // the commits not made yet give up
		if lateUntil.IsZero() {
			lateUntil = time.Now().Add(StopGrace)
		}
		t := time.NewTimer(time.Until(lateUntil))
		defer t.Stop()
		select {
		case <-done:
			return true
		case <-t.C:
			h.log.Warn("the stop ran out of time with " + what + " still running that ignore their context: leaving them")
			return false
		}
	}

	// Stop the workflows first: each records when it must run again (on
	// this node's next start, or on the partition's next owner), and
	// senders waiting for their completions are told to come back. No run
	// starts once stopping is set (startWorkflow checks it). Step bodies
	// in flight get StepGrace (at most half the time left) to end and
	// commit, all at once (finishStep).
	h.finishSteps(ctx)
	h.cancelWf()
	wfDone := make(chan struct{})
	go func() { h.workflows.Wait(); close(wfDone) }()
	await(wfDone, "workflow steps")
	h.mu.Lock()
	acts := make([]*activation, 0, len(h.actors))
	for _, a := range h.actors {
		acts = append(acts, a)
	}
	h.mu.Unlock()
	for _, a := range acts {
		a.failWaiters()
	}
	sleepAll := func() bool {
		done := make(chan struct{})
		go func() { defer close(done); h.sleepAll(ctx) }()
		return await(done, "OnSleep hooks")
	}
	// The requests in progress end before the actors go to sleep. One
	// whose code ignores its context must not cost every other actor its
	// OnSleep: past half the time left before ctx's deadline, the actors
	// go to sleep without waiting for the drain, each once the turns that
	// hold its gate or wait for it have ended (its gate keeps OnSleep
	// from running under a turn). An actor still held at the deadline
	// leaves without OnSleep; a call reaching an actor already asleep is
	// refused (rivet.ErrUnavailable).
	var sleepAt <-chan time.Time
	if dl, ok := ctx.Deadline(); ok {
		t := time.NewTimer(time.Until(dl) / 2)
		defer t.Stop()
		sleepAt = t.C
	}
	slept := true
	select {
	case <-drained:
	case <-sleepAt:
		if slept = sleepAll(); slept {
			select {
			case <-drained:
			case <-ctx.Done():
			}
		}
	case <-ctx.Done():
	}
	h.mu.Lock()
	h.drainOver = true
	h.mu.Unlock()
	select {
	case <-drained:
		if slept {
			// Nothing runs the actors now: their OnSleep hooks can
			// (those loaded by the requests since the pass above, if it
			// ran).
			sleepAll()
		}
	default:
		err = ctx.Err()
	}
	// The reaper's OnSleep hooks write: they end before the flushes are
	// waited for.
	if h.reapDone != nil { // Start ran
		await(h.reapDone, "the reaper's OnSleep hooks")
	}
	// The tasks of actors sleepAll did not reach, or that outlived it.
	tasksIdle, tasks := h.endAllTasks()
	await(tasksIdle, fmt.Sprintf("actor tasks (%d at the stop)", tasks))
	flushed := make(chan struct{})
	go func() { h.flushes.Wait(); close(flushed) }()
	await(flushed, "commits")
	// Vars that sleepAll did not close (ctx ran out) are closed where no
	// turn holds their actor: those of actors the requests loaded during
	// the stop too.
	h.mu.Lock()
	acts = acts[:0]
	for _, a := range h.actors {
		acts = append(acts, a)
	}
	h.mu.Unlock()
	for _, a := range acts {
		h.closeVarsLater(a)
	}
	h.cancelBase()
	loopsDone := make(chan struct{})
	go func() { h.loops.Wait(); close(loopsDone) }()
	await(loopsDone, "scheduled calls and wakeups")
	h.mu.Lock()
	h.hooksDone = true
	h.mu.Unlock()
	hooksDone := make(chan struct{})
	go func() { h.hookRuns.Wait(); close(hooksDone) }()
	await(hooksDone, "vars' Close methods")
	h.pages.close()
	return err
}

// StopRequests refuses new requests from now on, as Stop does first (but
// for those a request in progress waits for: beginOn), and returns a
// channel closed once no request is in progress, from when no request
// begins any more. A node keeps serving its peers until then: a call that
// comes back to a turn in flight here through another node reaches it
// only if its node can still forward to this one. Stop calls it too.
func (h *Host) StopRequests() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.stopping {
		h.stopping = true
		h.drained = make(chan struct{})
		if h.inflight == 0 {
			close(h.drained)
		}
		close(h.stopCh)
	}
	return h.drained
}

func (h *Host) begin() error {
	return h.beginOn("")
}

// beginOn is begin for a request on chain (an actor's call): while the
// host stops, one that a request in progress waits for is let in, as the
// handoff of a partition lets in the calls its turns wait for (letIn). A
// turn in flight at a graceful stop that called an actor of this node,
// back into its own (A -> B -> A) or one not in memory yet, failed with
// "node is stopping": the stop waits for the turns in flight, and refused
// their calls instead of letting them finish. Not once no request is in
// progress (drained is closed then: the chain is an OnSleep hook's, or a
// workflow step's, which the stop refuses as before), nor once the stop
// has stopped waiting for them (drainOver: past its deadline, an actor
// loaded for such a call would be loaded after the stop's last sweep, its
// vars never closed).
func (h *Host) beginOn(chain string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping && (h.inflight == 0 || h.drainOver || !h.madeByTurnLocked(chain, func(*activation) bool { return true })) {
		return rivet.Errorf(rivet.ErrUnavailable, "node %s is stopping", h.cfg.NodeID)
	}
	h.inflight++
	return nil
}

// isStopping reports whether the stop has begun (StopRequests), without
// h.mu: stopCh is closed with h.stopping set, under it, so a turn may ask
// while another goroutine holds it.
func (h *Host) isStopping() bool {
	select {
	case <-h.stopCh:
		return true
	default:
		return false
	}
}

func (h *Host) end() {
	h.mu.Lock()
	h.inflight--
	if h.stopping && h.inflight == 0 {
		close(h.drained)
	}
	h.mu.Unlock()
}

// spec returns the registered spec of ref's type. Of a type this node does
// not register, the error (rivet.ErrUnknownActor, NOT_FOUND
// actor.unknown_actor) names the other nodes that do register it, if any:
// the nodes of the cluster register different types (a rolling deploy
// that adds one, half done), which is the operator's to fix, not a typo
// of the caller's. It stays NOT_FOUND, not a retryable UNAVAILABLE:
// routing goes by key, so a retry reaches the same owner, which lacks the
// type until it is redeployed, minutes later in a rolling deploy, never if
// it was forgotten (docs/deploy.md, "Adding or removing an actor type").
func (h *Host) spec(ref Ref) (*rivet.Spec, error) {
	sp, ok := h.reg.Lookup(ref.Name)
	if !ok {
		return nil, h.unknownActor(ref)
	}
	return sp, nil
}

// SetTypeHolders sets fn, which names the other nodes of the cluster that
// register the actor type name (holders), and those whose registration
// does not say which types they register (unknown: older builds). Call it
// before Start.
func (h *Host) SetTypeHolders(fn func(name string) (holders, unknown []string)) { h.typeHolders = fn }

// unknownActor is the error of a request for ref, whose type this node does
// not register (spec). A keyed request for a partition this node does not
// own (a stale routing table) is answered as a node that registers the
// type answers it, with the retryable notOwned: the owner, which the retry
// reaches, is the one to say whether it registers the type.
func (h *Host) unknownActor(ref Ref) error {
	where := fmt.Sprintf("node %s", h.cfg.NodeID)
	if len(ref.Key) > 0 {
		if p, err := h.PartitionOf(ref); err == nil {
			if !h.Owns(p) {
				return h.notOwned(p, " of actor "+ref.Name)
			}
			key, _ := json.Marshal(ref.Key)
			where = fmt.Sprintf("node %s, which owns partition %d of %s %s,", h.cfg.NodeID, p, ref.Name, key)
		}
	}
	plain := rivet.Errorf(rivet.ErrUnknownActor, "no actor named %q is registered (known: %v)", ref.Name, h.reg.Names())
	if h.typeHolders == nil || rivet.ValidateName("actor", ref.Name) != nil {
		return plain
	}
	holders, unknown := h.typeHolders(ref.Name)
	if len(holders) == 0 {
		return plain
	}
	verb := "do"
	if len(holders) == 1 {
		verb = "does"
	}
	msg := fmt.Sprintf("%s does not register actor type %s; %s %s %s: every node must register the same actor types (a rolling deploy that adds one must reach every node before the type is called; see docs/deploy.md, \"Adding or removing an actor type\")",
		where, ref.Name, plural(len(holders), "node", "nodes"), typesets.List(holders), verb)
	if len(unknown) > 0 {
		msg += fmt.Sprintf(" (%s %s of a build that does not say which types it registers)", plural(len(unknown), "node", "nodes"), typesets.List(unknown))
	}
	return rivet.Errorf(rivet.ErrUnknownActor, "%s", msg)
}

// plural returns one if n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// inMemory reports whether the actor is loaded (so it exists).
func (h *Host) inMemory(ref Ref) bool { return h.loaded(ref) != nil }

// loaded returns ref's activation in memory on this node, or nil.
func (h *Host) loaded(ref Ref) *activation {
	enc := storage.EncodeKey(ref.Key) // a bad name or key is no actor's: no match
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.actors[ref.Name+"/"+enc]
}

// newChain starts a call chain: the root of the chains of the turns it
// passes through (turnChain).
func (h *Host) newChain() string {
	// Made in one allocation, not two (the number's string, then the
	// sum).
	var b chainRootBuf
	return string(h.appendChain(b[:0]))
}

// chainRootBuf holds a root chain (newChainIn): a prefix is at most 25
// bytes (chainPrefix), then two numbers of at most 13 and a dot.
type chainRootBuf [56]byte

// newChainIn is newChain made in *buf, which must not change afterwards:
// the string is its bytes. A workflow step makes its chain in its
// stepTurn, with no allocation of its own.
func (h *Host) newChainIn(buf *chainRootBuf) string {
	b := h.appendChain(buf[:0]) // never more than buf holds, or a copy
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// appendChain appends a new root: the node's prefix and a sequence number,
// which keep it unique, and 64 random bits, which make it unguessable. A
// chain is a capability: a call that carries a turn's chain re-enters that
// turn, running inside it while its caller waits. A PeerService stream is
// open to every holder of the client token (server.PeerServer), and its
// requests carry chains; with roots that were the node's ID and a counter,
// such a caller could name the chain of a turn running now (of another
// client's call) and run actions inside it, on state it holds half
// changed. math/rand/v2's generator is the runtime's ChaCha8, seeded from
// the OS's entropy for each thread: unpredictable from its outputs, at a
// few nanoseconds a call, where crypto/rand would cost a getrandom call
// per chain. The bits are written in base 32, which strconv writes by
// shifts (base 36 divides once per digit: twice the time), in as many
// digits (13).
func (h *Host) appendChain(b []byte) []byte {
	b = strconv.AppendUint(append(b, h.chainPrefix...), h.chainSeq.Add(1), 36)
	return strconv.AppendUint(append(b, '.'), rand.Uint64(), 32)
}

// chainPrefix is the start of the roots of the chains a node makes: its
// ID, which makes them unique in the cluster, with no chainSep in it, and
// short (a chain travels with every call between actors): a long ID
// gives way to its start and a hash of all of it.
func chainPrefix(nodeID string) string {
	id := strings.ReplaceAll(nodeID, chainSep, "_")
	if len(id) > 24 {
		f := fnv.New32a()
		f.Write([]byte(nodeID))
		id = id[:16] + "~" + strconv.FormatUint(uint64(f.Sum32()), 36)
	}
	return id + "-"
}

// turnChain is the chain of a turn that a call with chain (from another
// turn; "" from outside) starts: a new root, or chain and a segment of its
// own, so that the calls this turn makes re-enter only this turn
// (turnGate).
func (h *Host) turnChain(chain string) (string, error) {
	if chain == "" {
		return h.newChain(), nil
	}
	// Each call adds a segment to the chain, which travels with every
	// call (Config.MaxCallDepth).
	if n := strings.Count(chain, chainSep); n >= h.cfg.MaxCallDepth {
		return "", rivet.Errorf(rivet.ErrInvalidArgument, "a chain of calls between actors would be %d calls deep, the limit is %d (an actor calling itself without end? --max-call-depth)", n+1, h.cfg.MaxCallDepth)
	}
	return chain + chainSep + strconv.FormatUint(rand.Uint64()%(1<<40), 36), nil
}

// locate returns where an actor lives: its encoded key, partition and
// storage prefix.
func (h *Host) locate(ref Ref) (enc string, part uint32, prefix string, err error) {
	if enc, part, err = h.place(ref); err != nil {
		return "", 0, "", err
	}
	return enc, part, storage.ActorPrefix(part, ref.Name, enc), nil
}

// place validates ref and returns its encoded key and partition.
func (h *Host) place(ref Ref) (enc string, part uint32, err error) {
	if err := rivet.ValidateName("actor name", ref.Name); err != nil {
		return "", 0, err
	}
	if err := rivet.ValidateKey(ref.Key); err != nil {
		return "", 0, err
	}
	enc = storage.EncodeKey(ref.Key)
	return enc, placement.Partition(ref.Name, enc, h.cfg.Partitions), nil
}

// activate returns the actor's activation, loading it (and creating the
// actor, if create) on first use, and starting its workflow. created is
// true only for the one caller whose load created the actor. It answers
// once the activation's hooks have run and their writes are durable: an
// activation whose hooks failed is not returned (a wakeup that took
// another caller's failing load for done would leave the workflow
// asleep), the actor is loaded again.
func (h *Host) activate(ctx context.Context, ref Ref, sp *rivet.Spec, create bool, input json.RawMessage) (*activation, bool, error) {
	return h.activateKeyed(ctx, ref, sp, create, input, "", "")
}

// activateKeyed is activate; createKey, if not "", is the idempotency key
// of the Create that asks: a load that creates the actor stores it with
// the actor's meta, in the create's commit (CreateWith). chain is the
// asking actor's call chain ("" for a client's): one that a handoff of the
// actor's partition waits for loads it on the claim (letIn).
func (h *Host) activateKeyed(ctx context.Context, ref Ref, sp *rivet.Spec, create bool, input json.RawMessage, createKey, chain string) (*activation, bool, error) {
	created := false
	for attempt := range 5 {
		a, c, _, err := h.activateFor(ctx, ref, sp, create, input, createKey, "", chain)
		if err != nil {
			return nil, false, err
		}
		created = created || c
		select {
		case <-a.woken:
		case <-ctx.Done():
			return nil, false, ctxError(ctx)
		}
		if a.stopped.Load() {
			if err := evictedPause(ctx, attempt); err != nil {
				return nil, false, err
			}
			continue
		}
		if err := a.waitDurable(ctx, a.currentVersion()); err != nil {
			return nil, false, wakeWriteError(ctx, a, err)
		}
		return a, created, nil
	}
	return nil, false, rivet.Errorf(rivet.ErrUnavailable, "actor %s/%v kept being deactivated as it woke", ref.Name, ref.Key)
}

// evictedPause waits before attempt+1 of a request that found its
// activation stopped: an evicted activation leaves the node's map a moment
// after it is stopped (evict cancels its workflow and answers waiting
// senders first), and five attempts in a row could all find it still
// there. 1, 2, 4, 8 ms; none after the last attempt.
func evictedPause(ctx context.Context, attempt int) error {
	if attempt >= 4 {
		return nil
	}
	t := time.NewTimer(time.Millisecond << attempt)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctxError(ctx)
	}
}

// activateFor is activate. hold, if not "", is the chain of a caller that
// must run before any of the actor's workflow code (Destroy): an
// activation this call loads does not start its workflow, and is returned
// with its gate held by hold (held true), taken before any other request
// can see the activation ready, so that no turn and no workflow runs
// before the caller's. The caller then owns that activation until it
// releases the gate: it must leave it destroyed, evicted (stopped), or with
// its workflow ended (cancelled), not serving without a workflow that
// should run. An activation found in memory is returned
// as to anyone (its workflow runs already; held false).
func (h *Host) activateFor(ctx context.Context, ref Ref, sp *rivet.Spec, create bool, input json.RawMessage, createKey, hold, chain string) (a *activation, created, held bool, err error) {
	enc, part, prefix, err := h.locate(ref)
	if err != nil {
		return nil, false, false, err
	}
	id := ref.Name + "/" + enc
	// createdHere: an earlier attempt's create, whose outcome was unknown,
	// turned out to have applied: this caller created the actor.
	createdHere := false
	// pending: this caller counts in h.creators[id] (a create waiting for
	// another caller's load).
	pending := false
	defer func() {
		if pending {
			h.mu.Lock()
			h.leaveCreateLocked(id)
			h.mu.Unlock()
		}
	}()
	for attempt := 0; attempt < 5; attempt++ {
		h.mu.Lock()
		a = h.actors[id]
		if old := h.retiring[id]; a == nil && old != nil {
			// An evicted activation's writes are still in flight: load
			// after they settle, or storage would be read without them.
			h.mu.Unlock()
			select {
			case <-old.quiet:
				h.retired(old)
			case <-ctx.Done():
				return nil, false, false, ctxError(ctx)
			}
			continue
		}
		if p := h.creators[id]; a == nil && !create && p != nil {
			// A create waited for another caller's load, which found the
			// actor missing (most likely a load such as this caller's
			// would be): the create loads it next. A caller that may not
			// create it loads nothing before, or callers looking the
			// missing actor up in a loop would each make the create wait
			// for a load that finds nothing and try again, until it gave
			// up. This caller then joins the create's load. Not an
			// attempt: nothing failed.
			h.mu.Unlock()
			select {
			case <-p.done:
			case <-ctx.Done():
				return nil, false, false, ctxError(ctx)
			}
			attempt--
			continue
		}
		if a == nil {
			token, owned := h.own.Token(part)
			if !owned {
				// A chain that the handoff of part waits for loads the
				// actor on the claim, which holds until the release
				// (letIn). Decided under mu, with the insert below: the
				// handoff looks for activations of part under mu before
				// it releases, and none can be let in once it finds none.
				if rt, releasing := h.own.Releasing(part); releasing && h.letInLocked(part, chain, nil) {
					token, owned = rt, true
				}
			}
			if !owned && createdHere {
				// This caller's create applied; the partition is being
				// claimed again (the re-fence its doubt set off): wait for
				// it, so that the answer can say "created".
				h.mu.Unlock()
				if h.waitOwned(ctx, part) {
					continue
				}
				h.mu.Lock()
			}
			if !owned {
				h.mu.Unlock()
				return nil, false, false, h.notOwned(part, " of actor "+ref.Name)
			}
			if h.drainOver {
				// A request admitted before the stop gave up on the
				// drain: its actor would come after the last sweep.
				h.mu.Unlock()
				return nil, false, false, rivet.Errorf(rivet.ErrUnavailable, "node %s is stopping", h.cfg.NodeID)
			}
			a = &activation{
				h: h, ref: Ref{Name: ref.Name, Key: append([]string(nil), ref.Key...)}, id: id, enc: enc, part: part, spec: sp, prefix: prefix, wfs: h.wfStatsOf(ref.Name),
				stateKeyAt: prefix + storage.StateSuffix, historyAt: prefix + storage.WorkflowSuffix,
				fence: storage.Fence{Partition: part, Token: token},
				ready: make(chan struct{}), woken: make(chan struct{}),
				wf: wfState{queued: &h.queued},
			}
			a.gate.graph, a.gate.name = &h.waits, a.describe()
			a.gate.shedAt = max(h.cfg.MaxWaitingCalls, 0)
			a.lastTurn.Store(time.Now().UnixNano())
			h.actors[id] = a
			if pending {
				// This create loads it now: callers held back join.
				h.leaveCreateLocked(id)
				pending = false
			}
			if limit := h.cfg.MaxActiveActors; limit > 0 && len(h.actors) > limit {
				select {
				case h.overLimit <- struct{}{}:
				default:
				}
			}
			h.mu.Unlock()
			// Aside: a CreateState or a state decoder that calls
			// runtime.Goexit must not end this goroutine with the
			// activation loading for ever (every later request waiting
			// out its deadline for it). Nothing is written before them.
			if aside(func() {
				a.loadErr = h.guardUser(ref, "load", func() error { return a.load(ctx, create, input, createKey) })
			}) {
				h.log.Error("actor code called runtime.Goexit", refField(ref), zap.String("in", "load"))
				a.loadErr = rivet.Errorf(rivet.ErrInternal, "load of actor %s %s called runtime.Goexit", ref.Name, keyString(ref.Key))
			}
			if a.loadErr == nil && createdHere {
				// This caller's create, whose commit's answer was lost,
				// applied: its hooks run now, and if they fail the create
				// is taken back, as one that answered would be.
				a.created = true
			}
			wakes := a.loadErr == nil && hasWake(sp)
			wakeChain := hold
			switch {
			case a.loadErr != nil:
				h.remove(a)
			case wakes:
				// The hooks' turn comes first: the gate is taken before
				// anyone else sees the activation ready, and its workflow
				// starts after them (below). Ready closes before they run
				// so that a call from a hook back into the actor
				// re-enters rather than waits for the load.
				if wakeChain == "" {
					wakeChain = h.newChain()
				}
				a.gate.tryAcquire(wakeChain)
			case hold != "":
				// Before ready closes, no one else has the activation:
				// the gate is free.
				held = a.gate.tryAcquire(hold)
			default:
				// Started before ready closes: a turn of another caller
				// (a cancel, a retry) that waited for the load then
				// sees the run, and the run never starts from a history
				// or a status such a turn has changed since.
				history := a.history
				a.history = nil
				a.startWorkflow(history)
			}
			close(a.ready)
			if !wakes {
				close(a.woken)
			} else if err := h.wakeLoaded(ctx, a, wakeChain, hold); err != nil {
				return nil, false, false, err
			} else {
				held = hold != ""
			}
			var doubt *createInDoubt
			if errors.As(a.loadErr, &doubt) {
				applied, rerr := h.resolveInDoubt(ctx, doubt.fence, doubt.ops)
				if rerr == nil {
					// Applied: the next attempt loads what this one
					// created. Not: it creates again (nothing was
					// written).
					h.resolved.Add(1)
					createdHere = createdHere || applied
					continue
				}
				h.log.Warn("the outcome of a create stays unknown", refField(ref), zap.Error(rerr))
			}
			if a.loadErr != nil {
				return nil, false, false, a.loadErr
			}
			if !a.wakeFailed {
				a.armSchedules()
			}
			a.history = nil // a held activation starts no workflow
			return a, a.created || createdHere, held, nil
		}
		if create && !pending {
			select {
			case <-a.ready:
			default:
				// Another caller's load, which may find the actor
				// missing: this create loads it next, before any caller
				// that would not create it (above).
				h.joinCreateLocked(id)
				pending = true
			}
		}
		h.mu.Unlock()
		select {
		case <-a.ready:
		case <-ctx.Done():
			return nil, false, false, ctxError(ctx)
		}
		if a.loadErr == nil {
			return a, createdHere, false, nil
		}
		// Another caller's load failed: a missing actor we may create, or
		// that caller's own deadline. Try again with ours.
		if errors.Is(a.loadErr, rivet.ErrNotFound) && !create {
			return nil, false, false, a.loadErr
		}
	}
	return nil, false, false, rivet.Errorf(rivet.ErrUnavailable, "actor %s/%v: activation kept failing", ref.Name, ref.Key)
}

// pendingCreate counts the creates of one actor waiting for another
// caller's load of it (Host.creators).
type pendingCreate struct {
	n    int
	done chan struct{} // closed when n falls to 0
}

// joinCreateLocked counts a create of actor id waiting for another
// caller's load (under h.mu).
func (h *Host) joinCreateLocked(id string) {
	p := h.creators[id]
	if p == nil {
		p = &pendingCreate{done: make(chan struct{})}
		h.creators[id] = p
	}
	p.n++
}

// leaveCreateLocked undoes joinCreateLocked, once that create loads the
// actor itself or has its answer (under h.mu).
func (h *Host) leaveCreateLocked(id string) {
	p := h.creators[id]
	if p.n--; p.n == 0 {
		delete(h.creators, id)
		close(p.done)
	}
}

// waitOwned waits, within ctx and a few seconds, until this node serves
// partition p; it reports whether it does.
func (h *Host) waitOwned(ctx context.Context, p uint32) bool {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, owned := h.own.Token(p); owned {
			return true
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// remove forgets an activation (if it is still the current one for its id).
func (h *Host) remove(a *activation) {
	h.mu.Lock()
	gone := h.actors[a.id] == a
	if gone {
		delete(h.actors, a.id)
	}
	h.mu.Unlock()
	if gone {
		a.wf.dropQueued()
	}
}

// evict stops an activation whose commits failed (or that must not be
// served any more): its memory may be ahead of storage, so the next request
// loads the actor again, once the writes the activation queued before have
// settled (retire).
func (h *Host) evict(a *activation) {
	a.stopped.Store(true)
	a.endTasks()
	h.closeVarsLater(a)
	quiet := a.retire()
	a.cancelWorkflow()
	// Senders waiting for completions learn that their messages wait for
	// the next activation (Send answers "enqueued").
	a.failWaiters()
	h.mu.Lock()
	gone := h.actors[a.id] == a
	if gone {
		delete(h.actors, a.id)
		select {
		case <-quiet:
		default:
			h.retiring[a.id] = a // until its flush ends (retired)
		}
	}
	h.mu.Unlock()
	if gone {
		a.wf.dropQueued()
	}
}

// evictAndRerun evicts a and runs its workflow again from storage a second
// later, with no request: for an activation whose memory may be behind
// storage, or that is left with its workflow stopped or never started.
// (If the partition has moved on, the wakeup finds it not ours and drops.)
func (h *Host) evictAndRerun(a *activation) {
	h.evict(a)
	h.timers.schedule(a.ref, a.id, time.Now().Add(time.Second))
}

// retired forgets a retired activation whose writes have settled.
func (h *Host) retired(a *activation) {
	h.mu.Lock()
	if h.retiring[a.id] == a {
		delete(h.retiring, a.id)
	}
	h.mu.Unlock()
}

// errDestroyed fails the writes of an activation whose actor was destroyed.
var errDestroyed = errors.New("actor destroyed")

// evictAll drops every activation, when the node's claims are lost.
//
// Each is evicted, not failed: a write already on its way may still apply
// (the watchdog judges by the node's clock, and the lease may live on in
// etcd), so its callers wait for its real outcome rather than hear "not
// written" and retry it; a write that did not apply fails its fence.
func (h *Host) evictAll() {
	h.endSubscriptions(func(*Subscription) bool { return true }, "node %s lost its partition claims")
	h.mu.Lock()
	all := make([]*activation, 0, len(h.actors))
	for _, a := range h.actors {
		all = append(all, a)
	}
	h.mu.Unlock()
	for _, a := range all {
		h.evict(a)
	}
	if len(all) > 0 {
		h.log.Warn("partition claims lost: every actor deactivated", zap.Int("actors", len(all)))
	}
}

// turn runs fn as one turn of the actor, then waits for the writes it (and
// every turn before it) made to be durable before returning: the output
// gate. The gate is released before the wait, so the next turn can run
// while this one's commit is in flight, and their writes share a commit.
func (h *Host) turn(ctx context.Context, kind TurnKind, ref Ref, sp *rivet.Spec, create bool, input json.RawMessage, chain string, fn func(a *activation) error) (*activation, bool, error) {
	return h.turnFor(ctx, kind, ref, sp, create, input, chain, false, fn)
}

// turnFor is turn. first says that fn must run before any code of the
// actor's workflow if the actor is not in memory (Destroy): its load then
// starts no workflow and fn's turn comes before any other (activateFor),
// and fn must leave such an activation destroyed, evicted, or with its
// workflow ended.
func (h *Host) turnFor(ctx context.Context, kind TurnKind, ref Ref, sp *rivet.Spec, create bool, input json.RawMessage, chain string, first bool, fn func(a *activation) error) (*activation, bool, error) {
	return h.turnAs(ctx, kind, ref, sp, create, input, chain, first, nil, false, fn)
}

// queryTurn is what a query's turn learns as it begins: whether it runs
// beside a step's body (turnGate.acquireAs), and then the state it
// reads, as last saved, which it must decode for itself (the body
// changes the activation's).
type queryTurn struct {
	beside bool
	state  []byte
	sched  []pendingCall // its scheduled calls, as last saved
	// destroying: a destroy is among them (a turn that re-entered the
	// step's asked for one).
	destroying bool
}

// turnAs is turnFor; q, if not nil, makes the turn a query's, which may run
// beside a step's body (q says so as fn runs). shed makes it refused
// rather than wait behind Config.MaxWaitingCalls turns (turnGate.acquireAs):
// a call from outside any actor's turn (shedCall), not the actor's own
// turns (its workflow's, its scheduled calls) nor an operator's.
func (h *Host) turnAs(ctx context.Context, kind TurnKind, ref Ref, sp *rivet.Spec, create bool, input json.RawMessage, chain string, first bool, q *queryTurn, shed bool, fn func(a *activation) error) (*activation, bool, error) {
	hold := ""
	if first {
		hold = chain
	}
	for attempt := range 5 {
		if q != nil {
			*q = queryTurn{}
		}
		var w0 time.Time // the wait for the gate began
		a, created, held, err := h.activateFor(ctx, ref, sp, create, input, "", hold, chain)
		if err != nil {
			return nil, false, err
		}
		if !held {
			if a.sleeping.Load() && !a.gate.heldBy(chain) {
				if _, fromSleep := h.sleepChains.Load(chainRoot(chain)); fromSleep {
					// An OnSleep calling an actor whose own OnSleep runs
					// (and may be calling back): each would wait for the
					// other's gate until its SleepTimeout.
					return nil, false, rivet.Errorf(rivet.ErrUnavailable, "actor %s is going to sleep", a.describe())
				}
			}
			if _, ok := h.own.Token(a.part); !ok && !a.gate.heldBy(chain) && !h.letIn(a.part, chain, a) {
				// Not served (being handed off, or lost): say so now
				// rather than wait for a gate held by the handoff (an
				// OnSleep calling an actor of the same partition).
				return nil, false, rivet.Errorf(rivet.ErrUnavailable, "partition %d of %s is not served by node %s now", a.part, a.describe(), h.cfg.NodeID)
			}
			// Its wait is counted for HotActors too, so taken whether or
			// not an Observer hears of it.
			w0 = time.Now()
			mode, onBeside := turnPlain, (func())(nil)
			switch {
			case kind == TurnSend:
				// Beside a step's body, if one runs (turnGate): the send
				// runs no code of the actor's.
				mode = turnSend
			case q != nil:
				// Beside a step's body, if one runs, on the state as last
				// saved: taken as it goes in, before a turn re-entering
				// the step's may save it again.
				mode, onBeside = turnQuery, func() { q.state, q.sched, q.destroying = a.stateBytes, a.schedSaved, a.destroySaved }
			}
			// The wait ends shortly before the caller's deadline
			// (answerby.By), not at it: ended by the deadline, the
			// node's "did not run" raced the caller's own timer, and
			// mostly lost, so the caller heard DEADLINE_EXCEEDED, its
			// outcome unknown (a user trial). The margin is the one a
			// forward not sent on keeps, for the answer to travel back
			// through a forwarding node too, which gives this node the
			// caller's own deadline. Not before halfway to the deadline
			// (answerby.Wait): a call with 50 ms left was refused at once.
			wctx, wcancel := ctx, context.CancelFunc(func() {})
			if by, ok := answerby.Wait(ctx); ok {
				wctx, wcancel = context.WithDeadline(ctx, by)
			}
			beside, err := a.gate.acquireAs(wctx, chain, a.gate.graph != nil, mode, onBeside, shed)
			wcancel()
			if q != nil {
				q.beside = beside
			}
			if IsOverloaded(err) {
				// Refused rather than wait: no wait to observe (a flood's
				// refusals would pull the actor's wait times to zero just
				// as they grow).
				h.noteShed(a)
				return nil, false, err
			}
			h.observeWait(kind, w0)
			if err != nil {
				if rerr := (*rivet.Error)(nil); errors.As(err, &rerr) {
					return nil, false, err // a deadlock, found as the wait began
				}
				// The deadline's (or the margin's before it): the call did
				// not run, and says so with a reason (actor.busy) that
				// rivet.OutcomeUnknown reads as known. Not a cancellation.
				timedOut := errors.Is(wctx.Err(), context.DeadlineExceeded) && (ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded))
				if timedOut && a.gate.heldBy(chain) {
					// Not a slow actor: a turn of this very chain holds it,
					// one this call does not descend from (turnGate).
					return nil, false, rivet.Reasonf(rivet.ErrTimeout, "actor", "busy", "deadline exceeded waiting for %s, which another call of this call chain holds: calls one turn makes at once take turns in an actor, and wait for each other's actors until their deadline; this call did not run (but for the actor's create, if it asked for one)", a.describe())
				}
				if timedOut {
					// Say where the time went: "deadline exceeded" alone
					// reads as a slow action of this call's own.
					return nil, false, rivet.Reasonf(rivet.ErrTimeout, "actor", "busy", "waited until the deadline for the turn of %s, which other calls held all along (a slow action, a queue of callers, or calls that wait for each other through actors of several nodes): this call did not run (but for the actor's create, if it asked for one); it ended shortly before the deadline to say so in time", a.describe())
				}
				return nil, false, ctxError(ctx)
			}
		} else {
			// Its load took the gate for it (an admin turn of an actor
			// not in memory): it waited for no other turn, and a load is
			// no wait for the gate, as for a turn that finds the actor
			// loading. Observed all the same, a wait of about zero: every
			// turn Observer.Turn hears of has its wait observed.
			h.observeWait(kind, h.waitStart())
		}
		release := func() { a.gate.release(chain) }
		if q != nil && q.beside {
			release = func() { a.gate.releaseQuery(chain) }
		}
		if a.stopped.Load() {
			release()
			if err := evictedPause(ctx, attempt); err != nil {
				return nil, false, err
			}
			continue
		}
		// The claim this activation was loaded under must still be
		// served: after a stall (a GC pause, a stopped process) the lease may
		// have run out before the watchdog dropped it, and another node
		// may serve the actor now. Not even a read is answered then.
		if tok, ok := h.own.Token(a.part); (!ok || tok != a.fence.Token) && q != nil && q.beside {
			// Beside a step's body: the step's turn, which holds the
			// gate, deals with the activation.
			release()
			return nil, false, rivet.Errorf(rivet.ErrUnavailable, "partition %d of %s is not served by node %s now", a.part, a.describe(), h.cfg.NodeID)
		} else if !ok || tok != a.fence.Token {
			if rt, releasing := h.own.Releasing(a.part); releasing && rt == a.fence.Token {
				// A handoff takes the partition out of service: it puts
				// this activation to sleep (OnSleep) itself. A turn
				// re-entering one that runs (an OnSleep calling back into
				// its actor) still writes on the claim, which holds until
				// the release, and so does one of a chain the handoff
				// waits for (letIn: it hands this activation off after
				// the turn); any other is refused, and evicts nothing.
				if !a.gate.reentered() && !h.letIn(a.part, chain, a) {
					a.gate.release(chain)
					return nil, false, rivet.Errorf(rivet.ErrUnavailable, "partition %d of %s is moving from node %s", a.part, a.describe(), h.cfg.NodeID)
				}
			} else {
				a.gate.release(chain)
				if held {
					// Its workflow never started, and a wakeup that found it
					// loaded has been used up: if the partition is still
					// ours, the workflow must run again from storage.
					h.evictAndRerun(a)
				} else {
					h.evict(a)
				}
				return nil, false, rivet.Errorf(rivet.ErrUnavailable, "partition %d of %s is not served by node %s now", a.part, a.describe(), h.cfg.NodeID)
			}
		}
		t0 := time.Now()
		a.hot.add(t0, w0)
		h.turnEvent(ctx, kind, w0, t0)
		// A send's or a query's turn beside a step's body must not undo
		// the state under the body.
		err = h.runTurn(a, held, kind != TurnSend && (q == nil || !q.beside), release, fn)
		if held && err != nil && !a.stopped.Load() {
			// fn must leave a held activation destroyed or evicted; one
			// that failed otherwise (a panic) must not stay in memory
			// serving without its workflow.
			h.evictAndRerun(a)
		} else if held && a.wakeFailed && !a.stopped.Load() {
			// Its hooks failed: it must not serve. The next request
			// loads the actor and wakes it again.
			h.evict(a)
		}
		v := a.currentVersion()
		now := time.Now()
		a.lastTurn.Store(now.UnixNano())
		release()
		h.cfg.Observer.Turn(kind, now.Sub(t0))
		if err != nil {
			return a, created, err
		}
		return a, created, a.waitDurable(ctx, v)
	}
	return nil, false, rivet.Errorf(rivet.ErrUnavailable, "actor %s/%v kept being deactivated", ref.Name, ref.Key)
}

// guardUser runs fn, which runs the actor type's own code outside any turn
// (its CreateState, its state's decoder in a load, the decoder of an
// action's arguments or of a queue's messages), turning a panic into
// rivet.ErrInternal. Nothing above recovers it: gRPC does not, so the
// panic would take the node down, and a load's would leave its activation
// loading for ever, every later request waiting out its deadline for it.
func (h *Host) guardUser(ref Ref, what string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("actor code panicked", refField(ref), zap.String("in", what), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			err = rpcerr.Logged(rivet.Errorf(rivet.ErrInternal, "%s of actor %s %s panicked", what, ref.Name, keyString(ref.Key)))
		}
	}()
	return fn()
}

// runTurn calls fn, a turn (held: on an activation its caller loaded and
// holds, whose workflow has not started), turning a panic into
// rivet.ErrInternal. release gives the turn's gate back.
//
// runtime.Goexit in fn (the actor's code calling t.Fatal in a test) cannot
// be stopped: it ends the goroutine, the request's own, and its caller gets
// no answer (over gRPC, it waits out its deadline). What it must not take
// with it is the actor: the gate is given back here, on the way out, else
// every later turn would wait for a holder that no longer exists. fn
// discards its own changes on the way out, as it knows how far back to go
// (a re-entrant turn keeps the changes of the one it re-entered; a read
// discards nothing). A deferred check rather than a goroutine per turn:
// this is every action's path. So is the discard of a panicking fn's
// changes, which runs the state's decoder: one that calls runtime.Goexit
// leaves the gate to the same check.
//
// restore says whether fn may change the state, which a panic then undoes:
// not a send's, which may run beside a step's body (turnGate), whose
// changes must not be undone under it.
func (h *Host) runTurn(a *activation, held, restore bool, release func(), fn func(a *activation) error) (err error) {
	returned := false // fn returned, or its panic was turned into err
	defer func() {
		if !returned {
			h.log.Error("actor code called runtime.Goexit: its request gets no answer", actorField(a), zap.ByteString("stack", debug.Stack()))
			if held && !a.stopped.Load() {
				// As for a held turn that failed (turnFor).
				h.evictAndRerun(a)
			}
			a.lastTurn.Store(time.Now().UnixNano())
			release()
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("actor panicked", actorField(a), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			if restore {
				a.restoreState()
			}
			// Logged here, with the stack: the call's own log line is
			// then no second error line (rpcerr.Logged).
			err = rpcerr.Logged(rivet.Errorf(rivet.ErrInternal, "actor %s panicked", a.describe()))
			returned = true
		}
	}()
	err = fn(a)
	returned = true
	return err
}

// Call runs one action.
func (h *Host) Call(ctx context.Context, req CallRequest) (_ json.RawMessage, err error) {
	if err := h.beginOn(req.Chain.ID); err != nil {
		return nil, err
	}
	defer h.end()
	h.calls.Add(1)
	t0 := time.Now()
	actor, action := "", ""
	returned := false
	defer func() {
		if !returned {
			// runtime.Goexit in the actor's code ended this goroutine:
			// its caller gets no reply, which is no success (err is
			// still nil).
			err = rivet.Errorf(rivet.ErrInternal, "the actor's code called runtime.Goexit: the call got no reply")
		}
		if h.actionObs != nil {
			h.actionObs.CallAction(actor, action, time.Since(t0), err)
		} else {
			h.cfg.Observer.Call(actor, time.Since(t0), err)
		}
	}()
	res, err := h.call(ctx, req, &actor, &action)
	returned = true
	return res, err
}

// call is Call's body. It sets *actor and *action to the actor's and the
// action's registered names once it knows them, for the Observer.
func (h *Host) call(ctx context.Context, req CallRequest, actor, action *string) (_ json.RawMessage, err error) {
	sp, err := h.spec(req.Ref)
	if err != nil {
		return nil, err
	}
	*actor = req.Ref.Name
	act, ok := sp.Actions[req.Action]
	if !ok {
		return nil, rivet.Errorf(rivet.ErrUnknownAction, "actor %s has no action %q (it has %s)", sp.Name, req.Action, knownNames(sp.Actions))
	}
	*action = req.Action
	// The action's context carries the span: the calls its code makes
	// with it are its children, on whatever node they run.
	ctx, span := h.startSpan(ctx, "rivet.action", trace.SpanKindInternal, sp.Name, req.Ref.Key, tracing.Action.String(req.Action))
	if span == nil {
		return h.runAction(ctx, req, sp, act)
	}
	returned := false
	defer func() { endSpan(span, returned, err) }()
	res, err := h.runAction(ctx, req, sp, act)
	returned = true
	return res, err
}

// runAction is call's once it knows the actor and the action.
func (h *Host) runAction(ctx context.Context, req CallRequest, sp *rivet.Spec, act rivet.ActionSpec) (_ json.RawMessage, err error) {
	if req.ReadOnly && !act.ReadOnly {
		return nil, rivet.Reasonf(rivet.ErrFailedPrecondition, "actor", "not_read_only", "action %s of %s is not read-only (not declared with rivet.Query or rivet.QueryArg): call it as a plain call, whose outcome is unknown if its connection breaks", req.Action, sp.Name)
	}
	var args []json.RawMessage
	if len(req.Args) > 0 {
		if err := json.Unmarshal(req.Args, &args); err != nil {
			return nil, rivet.Errorf(rivet.ErrInvalidArgument, "arguments of %s must be a JSON array: %v", req.Action, err)
		}
	}
	if len(args) != act.Arity {
		return nil, rivet.Errorf(rivet.ErrInvalidArgument, "action %s takes %d argument(s), got %d", req.Action, act.Arity, len(args))
	}
	if err := checkIdempotencyKey(req.IdempotencyKey); err != nil {
		return nil, err
	}
	// A read-only action changes nothing: it needs no key to run once.
	key := req.IdempotencyKey
	if act.ReadOnly {
		key = ""
	}
	// Arguments that do not decode fail the call: they must not create
	// the actor on the way. An actor in memory exists, so the action
	// decodes them once, in its turn, which then creates nothing; should
	// the actor be gone by then (destroyed meanwhile), they are checked
	// before it is created again, below.
	create, checkIfGone := req.CreateIfMissing, false
	if create && act.Check != nil {
		if h.inMemory(req.Ref) {
			create, checkIfGone = false, true
		} else if err := h.guardUser(req.Ref, "the arguments' decoder", func() error { return act.Check(args) }); err != nil {
			return nil, err
		}
	}
	// timedOutAt is when the action timeout ends ctx (the caller's own
	// deadline may end it first), for the warning of an action that
	// returns well after it (actionOverran).
	callerCtx, timedOutAt := ctx, time.Now().Add(h.cfg.ActionTimeout)
	ctx, cancel := context.WithTimeout(ctx, h.cfg.ActionTimeout)
	defer cancel()
	chain, err := h.turnChain(req.Chain.ID)
	if err != nil {
		return nil, err
	}
	var (
		result json.RawMessage
		read   bool // a read-only action ran to the end
		q      *queryTurn
	)
	if act.ReadOnly {
		// It may run beside a step's body (turnGate), on a copy.
		q = new(queryTurn)
	}
	ran := false // the action's turn began
	run := func(a *activation) (err error) {
		ran = true
		state := a.state
		if q != nil && q.beside {
			// The body changes a.state (and may ask for a destroy, not
			// saved yet: this query reads what was).
			if q.destroying {
				return errBeingDestroyed(a)
			}
			if state, err = a.spec.DecodeState(orNull(q.state)); err != nil {
				return rivet.Errorf(rivet.ErrInternal, "%s: %v", a.describe(), err)
			}
		} else if a.destroyPending() && !a.gate.reentered() {
			return errBeingDestroyed(a)
		}
		if !act.ReadOnly && a.gate.reentered() {
			defer a.markRestorePoint()()
		}
		te := a.beginTurnEvents(chain, false)
		ts := a.newTurnSchedule(act.ReadOnly, te)
		if q != nil && q.beside {
			ts.snapped, ts.snap = true, q.sched
		}
		kept, wrote := false, false
		defer func() { a.finishTurnEvents(te, kept, wrote) }()
		// A panic is recovered here, not only by runTurn: a re-entrant
		// turn's discard must go back to its restore point, which ends
		// with this function, and a read-only turn discards nothing (it
		// may have read the uncommitted changes of the turn it re-entered,
		// which runTurn's discard, to the last commit, would wipe out).
		// So is runtime.Goexit's way out (returned unset), which runTurn
		// gives the gate back on: in the action, or in the encoding of its
		// result or of the state after it (a MarshalJSON's), which runs
		// before anything is committed.
		returned := false
		// qc, under Config.CheckQueries, is what a query found (queryCheck).
		var qc *queryCheck
		defer func() {
			if r := recover(); r != nil {
				h.log.Error("actor panicked", actorField(a), zap.String("action", req.Action), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
				if !act.ReadOnly {
					a.restoreState()
				} else if qc != nil {
					_ = a.checkQuery(req.Action, state, qc) // its change goes too
				}
				kept = false
				// One error line for the panic, this one, with its stack
				// (the call's line goes to debug: rpcerr.Logged).
				err = rpcerr.Logged(rivet.Errorf(rivet.ErrInternal, "actor %s panicked", a.describe()))
			} else if !returned && !act.ReadOnly {
				a.restoreState()
			} else if !returned && qc != nil {
				// runtime.Goexit in a checked query (a test's FailNow):
				// its change goes all the same.
				_ = a.checkQuery(req.Action, state, qc)
			}
		}()
		var sum string
		if key != "" {
			if err := a.loadCallKeys(ctx); err != nil {
				returned = true
				return err
			}
			sum = callSum(req.Action, req.Args)
			res, dup, err := a.calledBefore(ctx, key, sum, time.Now())
			if dup {
				// Ran before: its result, and nothing runs.
				returned = true
				result = res
				return err
			}
			if a.callKeysRunning[key] {
				// Re-entered by the call that runs with this key (its
				// action called its own actor with it): run, both would
				// record the key, and the outer one write over the inner.
				returned = true
				return rivet.Errorf(rivet.ErrFailedPrecondition, "a call with idempotency key %q of %s is running, and this one re-enters it: give the inner call a key of its own", key, a.describe())
			}
			a.callKeysRunning[key] = true
			defer delete(a.callKeysRunning, key)
		}
		env := rivet.Env{Ctx: ctx, Name: a.ref.Name, Key: a.ref.Key, Client: &hostClient{h: h, chain: chain, from: a}, Schedule: ts, Destroy: ts.destroy, Enqueue: ts, Events: te, Vars: a.vars, Tasks: te}
		running, _ := ctx.Value(actionRunningKey{}).(*atomic.Bool)
		if running != nil {
			// Set before ctx is checked, as CallLocal reads it after ctx
			// ended: either it waits for this check, which then sees ctx
			// ended, or it does not wait for the action. A call whose
			// caller gave up runs no action, as a gRPC call is not sent
			// with an ended context: a call back from an action that
			// outlived its call would re-enter the caller's actor beside
			// the caller's turn, which went on.
			running.Store(true)
			if ctx.Err() != nil {
				running.Store(false)
				returned = true
				return ctxError(ctx)
			}
		}
		// Named in a stop it holds up (RunningActions).
		defer a.endAction(a.setAction(req.Action, timedOutAt.Add(-h.cfg.ActionTimeout)))
		if act.ReadOnly && h.cfg.CheckQueries && (q == nil || !q.beside) {
			// Beside a step's body a query runs on a copy of its own.
			qc = a.beginQueryCheck(state)
		}
		res, err := act.Invoke(env, state, args)
		if qc != nil {
			if cerr := a.checkQuery(req.Action, state, qc); cerr != nil {
				if err != nil {
					h.log.Error("a failed query also changed its actor's state (undone: --check-queries)", actorField(a), zap.String("action", req.Action), errField(err))
				} else {
					err = cerr
				}
			}
		}
		if running != nil {
			running.Store(false)
		}
		if ctx.Err() != nil {
			h.actionOverran(a, req.Action, timedOutAt, callerCtx)
		}
		err = func() error {
			if err != nil {
				if !act.ReadOnly {
					a.restoreState()
				}
				return h.actionError(ctx, a, req.Action, err)
			}
			if result, err = json.Marshal(res); err != nil {
				if !act.ReadOnly {
					a.restoreState()
				}
				return rivet.Errorf(rivet.ErrInternal, "result of %s does not marshal to JSON: %v", req.Action, err)
			}
			if len(result) > h.cfg.MaxResultBytes {
				if !act.ReadOnly {
					a.restoreState()
				}
				return rivet.Errorf(rivet.ErrTooLarge, "result of %s is %d bytes, the limit is %d", req.Action, len(result), h.cfg.MaxResultBytes)
			}
			if act.ReadOnly {
				read, kept = true, true
				return nil
			}
			if key == "" {
				w, err := a.saveState()
				if err != nil {
					return err
				}
				kept, wrote = true, w
				return nil
			}
			// The key and the result commit with the action's change.
			rec, keyOps, dropped := a.recordCallKey(key, sum, result, time.Now())
			b, changed, err := a.encodeState()
			if _, err := a.saveEncodedWith(b, changed, err, keyOps); err != nil {
				return err
			}
			a.keptCallKey(key, rec, dropped, a.currentVersion())
			kept, wrote = true, true
			return nil
		}()
		returned = true
		return err
	}
	_, _, err = h.turnAs(ctx, TurnAction, req.Ref, sp, create, req.Input, chain, false, q, shedCall(req.Chain), run)
	if err != nil && !ran && checkIfGone && errors.Is(err, rivet.ErrNotFound) {
		if err := h.guardUser(req.Ref, "the arguments' decoder", func() error { return act.Check(args) }); err != nil {
			return nil, err
		}
		_, _, err = h.turnAs(ctx, TurnAction, req.Ref, sp, true, req.Input, chain, false, q, shedCall(req.Chain), run)
	}
	if err != nil && read && !errors.Is(err, context.Canceled) {
		// The read ran, but the state it saw was not yet durable and the
		// write making it so failed (the actor is reloaded from storage).
		// The read changed nothing, so whatever that write's outcome, a
		// retry is safe: say UNAVAILABLE, which clients retry, rather than
		// the write's "outcome unknown", which they must not.
		var re *rivet.Error
		if errors.As(err, &re) && (re.Kind == rivet.ErrTimeout || re.Kind == rivet.ErrUnavailable) && ctx.Err() == nil {
			return nil, rivet.Errorf(rivet.ErrUnavailable, "%s %s: the state it read was not durable yet and the write failed; retry (%v)", req.Ref.Name, req.Action, err)
		}
	}
	if err != nil {
		return nil, err
	}
	return result, nil
}

// actionOverrunGrace is how long after the action timeout an action may
// return before the node warns of it: one that heeds its context returns
// about when it ends (as for a step, workflow's overrunGrace).
const actionOverrunGrace = 250 * time.Millisecond

// actionOverran warns, if the action that just returned did so well past
// the node's action timeout (timedOutAt): it did not stop when its context
// ended, and held its actor's turn, every other call to the actor waiting
// behind it, until it returned. Its outcome stands as it returned it: its
// changes commit, its result goes to its caller if the caller still waits
// (callerCtx not ended; else the caller got a deadline error already, and
// the changes commit all the same).
func (h *Host) actionOverran(a *activation, action string, timedOutAt time.Time, callerCtx context.Context) {
	late := time.Since(timedOutAt)
	if late < actionOverrunGrace {
		return
	}
	h.log.Warn("action returned after the node's action timeout: it did not stop when its context ended (or the process did not run meanwhile), and held the actor until it returned; its outcome stands",
		actorField(a), zap.String("action", action), zap.Duration("timeout", h.cfg.ActionTimeout), zap.Duration("past_timeout", late),
		zap.Bool("caller_gave_up", callerCtx.Err() != nil),
		zap.String("hint", "an action should return when its context (ActionCtx.Context) is done: pass it to the calls it makes; if it does, the process was paused or short of CPU"))
}

// actionError passes rivet errors (user errors included) through, and masks
// anything else as rivet.ErrInternal unless ExposeErrors.
func (h *Host) actionError(ctx context.Context, a *activation, action string, err error) error {
	var re *rivet.Error
	if errors.As(err, &re) {
		if errors.Is(err, rivet.ErrUnavailable) {
			// An UNAVAILABLE the action passes on (from a call it made to
			// an actor that was moving) is not the node's "this request
			// did not run", which clients retry: the action did run, and
			// what it did to other actors before it failed stands. No
			// group: an UNAVAILABLE that may come after the request ran
			// (rivet.OutcomeUnknown), which the node sends without the
			// detail clients retry on.
			return &rivet.Error{Kind: rivet.ErrUnavailable, Message: fmt.Sprintf("action %s of %s ran and failed as unavailable (its own error, or one of an actor it called); its own changes were discarded, its calls to other actors stand: %s", action, a.describe(), re.Message)}
		}
		if re.Kind == rivet.ErrTimeout && re.Group == "actor" && re.Code == "busy" {
			// The same for a call of the action's that waited in vain
			// for its actor's turn: that call did not run, this action
			// did (rivet.OutcomeUnknown must not read it as not run).
			return rivet.Errorf(rivet.ErrTimeout, "action %s of %s ran and failed as timed out (its own error, or one of an actor it called); its own changes were discarded, its calls to other actors stand: %s", action, a.describe(), re.Message)
		}
		if re == err {
			return err
		}
		// The rivet error alone, as a caller on another node gets it
		// (the wire carries nothing else): an actor of this node got
		// the wrapper too, its text and the types the action wrapped
		// (errors.As found them), so that code that passed a one-node
		// test read otherwise in a cluster. The mark that it was
		// logged stays, so that its call is not logged again.
		h.wrappedActionError(ctx, a, action, err)
		if rpcerr.IsLogged(err) {
			return rpcerr.Logged(re)
		}
		return re
	}
	return h.codeError(a, "action "+action, zap.String("action", action), err)
}

// wrappedActionError keeps, on the callee's side, the text of an error
// the action returned that wraps the rivet error its caller gets alone
// (its cause, e.g. a database's error): on the action's span, whose
// status has the rivet error's text only, and in a debug line (the
// call's own line has the rivet error's).
func (h *Host) wrappedActionError(ctx context.Context, a *activation, action string, err error) {
	h.log.Debug("action returned a rivet error wrapped in another error: its caller gets the rivet error alone", actorField(a), zap.String("action", action), errField(err))
	if h.tracer == nil {
		return // ctx's span, if any, is not the action's
	}
	trace.SpanFromContext(ctx).AddEvent("exception", trace.WithAttributes(
		attribute.String("exception.type", fmt.Sprintf("%T", err)),
		attribute.String("exception.message", tracing.ErrorText(err.Error()))))
}

// codeError is the error a caller gets for an error of the actor's code
// (what, e.g. "action getCount") that is not a rivet error: a timeout, the
// caller's own cancellation, or INTERNAL, masked unless ExposeErrors. The
// node logs the cause here, at error level, and marks the error logged
// (rpcerr.Logged), so that the call's own log line, which has no cause,
// is not a second error line for the same failure.
func (h *Host) codeError(a *activation, what string, field zap.Field, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return rivet.Errorf(rivet.ErrTimeout, "%s of %s timed out", what, a.describe())
	}
	if errors.Is(err, context.Canceled) {
		// The caller gave up (a race's loser, a timeout with fallback):
		// not the actor's failure, and not worth an error log.
		return err
	}
	h.log.Error(what+" failed", actorField(a), field, errField(err))
	if h.cfg.ExposeErrors {
		return rpcerr.Logged(rivet.Errorf(rivet.ErrInternal, "%s of %s: %v", what, a.describe(), err))
	}
	return rpcerr.Logged(rivet.Errorf(rivet.ErrInternal, "%s of %s failed: internal error (the node's log has the cause)", what, a.describe()))
}

// saveState commits the state and the scheduled calls if the turn changed
// them, and says whether it did (queued their write). Called by the turn
// holder after a state-changing action.
func (a *activation) saveState() (wrote bool, _ error) {
	b, changed, err := a.encodeState()
	return a.saveEncoded(b, changed, err)
}

// saveEncoded is saveState, given what encodeState returned.
func (a *activation) saveEncoded(b []byte, changed bool, err error) (wrote bool, _ error) {
	return a.saveEncodedWith(b, changed, err, nil)
}

// saveEncodedWith is saveEncoded, with extra ops to commit with the change.
func (a *activation) saveEncodedWith(b []byte, changed bool, err error, extra []storage.Op) (wrote bool, _ error) {
	if err != nil {
		a.restoreState()
		return false, rivet.Errorf(rivet.ErrInternal, "state of %s does not marshal to JSON: %v", a.describe(), err)
	}
	if changed && len(b) > a.h.cfg.MaxStateBytes {
		// A change only: a state stored under a higher limit (lowered
		// since) does not stop the actions that leave it as it is.
		a.restoreState()
		return false, rivet.Errorf(rivet.ErrTooLarge, "state of %s would be %d bytes, the limit is %d; the change was discarded", a.describe(), len(b), a.h.cfg.MaxStateBytes)
	}
	ops := a.schedOps()
	if changed {
		ops = append(ops, storage.Put(a.stateKey(), b))
	}
	ops = append(ops, extra...)
	msgs := a.stagedMsgs()
	if len(ops) == 0 && len(msgs) == 0 {
		return false, nil
	}
	// Counted (and stamped) first, their writes made then.
	wake := a.beginStaged(msgs)
	ops = append(append(ops, a.stagedWrites(msgs)...), wake...)
	a.takeStaged()
	if _, err := a.enqueue(ops...); err != nil {
		a.stagedDropped(msgs)
		return false, err
	}
	a.stagedQueued(msgs)
	a.setStateBytes(b)
	a.schedSavedNow()
	// What is written is what the re-entrant turns still open go back
	// to if they fail: they cannot undo a commit (the outermost turn
	// goes back to stateBytes).
	for rp := a.restorePoint; rp != nil; rp = rp.prev {
		rp.state, rp.sched = b, a.schedSaved
	}
	return true, nil
}

// stateEncoders are the buffers the state is encoded into to learn whether
// a turn changed it: most steps and many actions do not, and a state of a
// few kilobytes encoded by json.Marshal was a new copy for each of them.
var stateEncoders = sync.Pool{New: func() any {
	e := &stateEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	return e
}}

type stateEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

// encodeState returns the state's JSON as json.Marshal writes it, and
// whether it differs from stateBytes; unchanged, b is stateBytes itself (no
// copy made). Called by the turn holder.
func (a *activation) encodeState() (b []byte, changed bool, _ error) {
	e := stateEncoders.Get().(*stateEncoder)
	defer func() {
		if e.buf.Cap() <= 64<<10 {
			// A pool of a few large buffers would keep the largest
			// state ever seen in memory once per core.
			stateEncoders.Put(e)
		}
	}()
	e.buf.Reset()
	if err := e.enc.Encode(a.state); err != nil {
		return nil, false, err
	}
	b = e.buf.Bytes()
	b = b[:len(b)-1] // Encode ends the value with a newline
	if string(b) == string(a.stateBytes) {
		return a.stateBytes, false, nil
	}
	return bytes.Clone(b), true, nil
}

// encodeStateGuarded is encodeState, a panic of the state's encoder (its
// MarshalJSON) turned into its error: a state that does not encode. For a
// turn with no recovery of its own that discards the change as the
// action's failure (a scheduled call's, a workflow step's: the panic would
// fail the turn, and the call or the step would be run again, and panic
// again, for ever).
func (a *activation) encodeStateGuarded() (b []byte, changed bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			a.h.log.Error("the state's encoder panicked", actorField(a), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			b, changed, err = nil, false, fmt.Errorf("encoding it panicked: %v", r)
		}
	}()
	return a.encodeState()
}

// turnStart is the actor's memory as a re-entrant turn found it.
type turnStart struct {
	// state is shared with the restore point it nests in, or with
	// stateBytes, when the state had not changed since: a call chain of
	// an actor calling itself held a copy of a large state per level
	// (256 levels of a 900 KB state took 434 MiB). No one writes into it.
	state []byte
	sched []pendingCall
	// staged is how many messages were staged (a.staged) when it began.
	staged int
	prev   *turnStart // the restore point of the turn it re-entered
	// spare is a buffer that a turn nested in this one encodes the state
	// into (markRestorePoint), kept by the turn that found the state
	// unchanged: a chain encodes into one buffer, not one per level.
	spare []byte
}

// markRestorePoint makes the memory as it is now what a discard of this
// turn goes back to, rather than the last commit: the turn is re-entrant,
// and the outer turn's changes so far are not its to discard. It returns
// the function that ends the mark. Called by the turn holder.
func (a *activation) markRestorePoint() func() {
	prev := a.restorePoint
	base := a.stateBytes
	var spare []byte
	if prev != nil {
		base, spare, prev.spare = prev.state, prev.spare, nil
	}
	buf := bytes.NewBuffer(spare[:0])
	if err := json.NewEncoder(buf).Encode(a.state); err != nil {
		if prev != nil {
			prev.spare = spare
		}
		return func() {} // discarded as before: to the last commit
	}
	b := buf.Bytes()
	b = b[:len(b)-1] // Encode ends the value with a newline
	rp := &turnStart{sched: a.sched, staged: len(a.staged), prev: prev}
	if base != nil && string(b) == string(base) {
		rp.state, rp.spare = base, b
	} else {
		rp.state = b[:len(b):len(b)]
	}
	a.restorePoint = rp
	return func() {
		a.restorePoint = prev
		if prev != nil && prev.spare == nil {
			prev.spare = rp.spare
		}
	}
}

// restoreState discards the turn's changes to the state and to the
// scheduled calls, and the messages it enqueued.
func (a *activation) restoreState() {
	data, sched, staged := orNull(a.stateBytes), a.schedSaved, 0
	rp := a.restorePoint
	if rp != nil {
		// A re-entrant turn: back to where it began, which keeps the
		// outer turn's changes made before its call.
		data, sched, staged = rp.state, rp.sched, rp.staged
	}
	a.sched = sched
	a.staged = a.staged[:min(staged, len(a.staged))]
	if rp != nil && stateWholeInJSON(reflect.TypeOf(a.state)) && a.stateEncodesTo(data, rp) {
		// Most often the failure of a turn it called, which went back
		// to the same state: decoding it again at each level of a
		// runaway chain took three quarters of its time. A state with
		// parts its JSON does not hold is decoded all the same, which
		// resets them as a failed outermost turn's discard does.
		return
	}
	// The bytes were committed, but do not decode (memory is corrupt, or
	// the decoder fails on what its encoder wrote): drop the activation.
	a.resetStateTo(data, "state no longer decodes: deactivating")
}

// stateEncodesTo reports whether the state's JSON is data, as a
// re-entrant turn's discard finds it when nothing changed the state since
// its restore point rp (for a state all in its JSON: stateWholeInJSON).
// It encodes into rp.spare. An
// encoder that fails or panics says no: the state is decoded again. One
// that calls runtime.Goexit leaves a change in memory: the activation is
// dropped, as for a decoder that does (resetStateTo).
func (a *activation) stateEncodesTo(data []byte, rp *turnStart) (same bool) {
	encoded := false
	defer func() {
		if r := recover(); r != nil {
			a.h.log.Error("the state's encoder panicked", actorField(a), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			same = false
		} else if !encoded {
			a.h.log.Error("the state's encoder called runtime.Goexit: deactivating", actorField(a))
			a.h.evict(a)
		}
	}()
	buf := bytes.NewBuffer(rp.spare[:0])
	err := json.NewEncoder(buf).Encode(a.state)
	encoded = true
	b := buf.Bytes()
	rp.spare = b[:0]
	return err == nil && string(b[:len(b)-1]) == string(data)
}

// resetStateTo puts data back as the actor's state, in place: an outer
// turn of the chain holds the pointer. If the decoder fails, it logs
// failed and drops the activation.
func (a *activation) resetStateTo(data []byte, failed string) {
	// A decoder that calls runtime.Goexit ends the goroutine here, which
	// goes on with its deferred calls only (those give the gate back):
	// memory holds neither the turn's change nor the commit, and the
	// activation is dropped as for a decoder that fails.
	decoded := false
	defer func() {
		if !decoded {
			a.h.log.Error("the state's decoder called runtime.Goexit: deactivating", actorField(a))
			a.h.evict(a)
		}
	}()
	// The decoder is the actor's own: this often runs in the recovery
	// of an action's panic, where a panic of its own would escape.
	err := a.h.guardUser(a.ref, "the state's decoder", func() error {
		if a.spec.ResetState != nil && a.state != nil {
			if err := a.spec.ResetState(a.state, data); err == nil {
				return nil
			}
		}
		st, err := a.spec.DecodeState(data)
		if err == nil {
			a.state = st
		}
		return err
	})
	decoded = true
	if err != nil {
		a.h.log.Error(failed, actorField(a), errField(err))
		a.h.evict(a)
	}
}

// Send appends a message to one of an actor's queues, durably.
func (h *Host) Send(ctx context.Context, req SendRequest) (_ SendResult, err error) {
	if err := h.beginOn(req.Chain.ID); err != nil {
		return SendResult{}, err
	}
	defer h.end()
	sp, err := h.spec(req.Ref)
	if err != nil {
		return SendResult{}, err
	}
	q, ok := sp.Queues[req.Queue]
	if !ok {
		return SendResult{}, rivet.Errorf(rivet.ErrUnknownQueue, "%s", queuenames.Unknown(sp.Name, req.Queue, sp.Queues))
	}
	// A consumer span of the message's arrival on its actor's node, to
	// its commit (and, for a waiting send, its completion).
	ctx, span := h.startSpan(ctx, "rivet.enqueue", trace.SpanKindConsumer, sp.Name, req.Ref.Key, tracing.Queue.String(req.Queue))
	if span != nil {
		defer func() { tracing.End(span, err) }()
	}
	if len(req.Body) > h.cfg.MaxMessageBytes {
		return SendResult{}, rivet.Errorf(rivet.ErrTooLarge, "message for queue %s is %d bytes, the limit is %d", req.Queue, len(req.Body), h.cfg.MaxMessageBytes)
	}
	body := req.Body
	if len(body) == 0 {
		body = json.RawMessage("null")
	}
	if err := h.guardUser(req.Ref, "the message's decoder", func() error { return q.Validate(body) }); err != nil {
		return SendResult{}, err
	}
	if err := checkIdempotencyKey(req.IdempotencyKey); err != nil {
		return SendResult{}, err
	}
	if (req.Wait || req.RequireRunning) && sp.Run == nil {
		// Known from the type alone: refused before the turn, which
		// would create the actor first (CreateIfMissing).
		if req.Wait {
			return SendResult{}, rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "none", "actor %s has no workflow to complete the message (workflow none)", sp.Name)
		}
		return SendResult{}, rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "none", "actor %s has no workflow to receive the message (workflow none): nothing was queued", sp.Name)
	}
	if req.Wait && req.Chain.ID != "" {
		if a := h.loaded(req.Ref); a != nil && a.gate.heldAbove(req.Chain.ID) {
			// A send from a turn whose call chain comes from a turn that
			// holds the target (the sender itself, or a caller up the
			// chain, on this node or another): the target's workflow takes
			// the message in a turn of its own, which waits for that one,
			// which waits for the sender: the wait could only run out.
			// Checked here, where the target is, for a sender on any node.
			// Checked before the send's turn, not in it: a turn above the
			// sender cannot take the target's gate after this check (it
			// waits for the sender), nor leave it unless its own call gave
			// up, in which case the chain is failing anyway.
			return SendResult{}, rivet.Errorf(rivet.ErrInvalidArgument, "actor %s %s is in a turn of this call chain (the sender, or a caller up the chain), so its workflow cannot take the message until the chain's turn ends: send it without waiting", req.Ref.Name, keyString(req.Ref.Key))
		}
	}
	chain, err := h.turnChain(req.Chain.ID)
	if err != nil {
		return SendResult{}, err
	}
	var seq uint64
	var completion chan json.RawMessage
	var (
		ended  string
		queued bool // the turn queued the message: seq is its alone
		dup    bool // its idempotency key was sent before: seq is that send's
		// lookup: a waiting duplicate of a message the workflow took, whose
		// kept completion is read once its wait is registered.
		lookup bool
	)
	act, _, err := h.turnAs(ctx, TurnSend, req.Ref, sp, req.CreateIfMissing, req.Input, chain, false, nil, shedCall(req.Chain), func(a *activation) error {
		if a.destroyPending() && !a.gate.reentered() {
			return errBeingDestroyed(a)
		}
		// A send the stop lets in (beginOn: a turn in flight waits for
		// it) is not waited for: no run here completes a message any more,
		// and the stop answered the waits of the actors in memory as they
		// were (failWaiters), not those of one loaded since. Its message
		// is queued and it answers so (SendEnqueued), as when the actor
		// moves. It got workflow.failed, nothing queued, or waited out its
		// timeout (30 s by default), holding the stop to its deadline.
		wait := req.Wait && !h.isStopping()
		var keyOps []storage.Op
		var keyRec sendKeyRecord
		var sums sendKeyRecord // the message's digests
		var dropped []string
		// With a key or not: the keys may name IDs above nextSeq.
		if err := a.loadSendKeys(ctx); err != nil {
			return err
		}
		if h.sendHoldHook != nil {
			h.sendHoldHook(a)
		}
		if key := req.IdempotencyKey; key != "" {
			// The key's record goes by the millisecond, from when the
			// send checks it; the message's own time is taken as it
			// becomes visible to the workflow (below).
			now := time.UnixMilli(time.Now().UnixMilli())
			sums.Sum, sums.Same = sendSums(req.Queue, body)
			if rec, ok := a.sentBefore(key, now); ok {
				if err := a.sameMessage(key, rec, sums); err != nil {
					return err
				}
				seq, dup = rec.Seq, true
				if sp.Run == nil {
					return nil
				}
				queued := a.stillQueued(seq)
				switch st := a.workflowStatus().Status; {
				case queued && workflowEnded(st):
					// As the first send said: nothing takes the message
					// until the workflow is retried, so none waits for it.
					ended = st
				case !wait:
				case queued:
					// Waits for the first send's message while it is
					// queued: its completion comes, to every sender that
					// waits (the first, still connected, or a step that
					// runs again on the actor's new node while its first
					// run's wait is not over yet).
					completion = a.wf.awaitCompletion(seq, true, false)
				default:
					// Taken. If the workflow completed it, its completion
					// was kept with the key: read after this turn, once
					// the wait is registered, so that a completion in
					// between is not missed (it commits before it answers
					// the waits: either it answers this one, or it is
					// durable before the read). If not, the retry waits
					// for it while the workflow runs, as its first sender
					// did (its wait broke: the caller left, the actor's
					// node died). A record of an older build, which kept
					// no completions, waits only beside another sender.
					completion = a.wf.awaitCompletion(seq, false, rec.Keeps && !workflowEnded(st))
					lookup = true
				}
				return nil
			}
			keyRec = sendKeyRecord{Seq: a.nextSeq.Load(), At: now.UnixMilli(), Sum: sums.Sum, Same: sums.Same, Keeps: true}
			keyOps, dropped = a.recordSendKey(key, keyRec)
		}
		wfst := a.workflowStatus()
		if (req.Wait || req.RequireRunning) && workflowEnded(wfst.Status) {
			// The reason says which: workflow.failed only for one that
			// failed, as a script that reads it takes it to mean.
			// Refused before the enqueue: nothing is queued, and the key
			// (keyOps) is not recorded, so the same send may go again
			// once the workflow is retried. (A duplicate answered above:
			// its message is queued, which a refusal would deny.) An
			// actor without a workflow was refused before the turn.
			code := "ended"
			if wfst.Status == WorkflowFailed {
				code = "failed"
			}
			if !req.Wait {
				return rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", code, "%s has no running workflow to receive the message (workflow %s): nothing was queued", a.describe(), orNone(wfst.Status))
			}
			return rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", code, "%s has no running workflow to complete the message (workflow %s)", a.describe(), orNone(wfst.Status))
		}
		// After the workflow's check: a send refused because the workflow
		// ended says so, whatever its queue holds (both refuse before
		// anything is queued).
		if a.depth[req.Queue] >= uint64(h.cfg.MaxQueueDepth) {
			return rivet.Errorf(rivet.ErrQueueFull, "queue %s of %s holds %d messages, the limit", req.Queue, a.describe(), h.cfg.MaxQueueDepth)
		}
		seq = a.nextSeq.Load()
		// The message's time, stored to the nanosecond (queueMessage): a
		// workflow that takes it from memory sees the CreatedAt it would
		// see after a restart, when it reads the message back. Taken as
		// the message becomes visible to the workflow's receives (counted
		// pending, wfState.arriveAll), not before: every message stamped
		// before a receive's deadline was there for it to see, so a
		// receive that timed out saw none, and its replay times out too.
		// (A time taken as the turn began, before the storage read of the
		// keys above, was not: a receive timed out meanwhile, and its
		// replay, its timeout not committed yet, took the message.)
		arrived := []msgRef{{seq: seq, queue: req.Queue, body: body}}
		var wake storage.Op
		var wakeUndo stagedWake
		if sp.Run != nil {
			// Counted pending with its arrival (and stamped), and a
			// wakeup record due now if the workflow waits for messages
			// only: a yield that sees the one sees the other, and a new
			// owner runs the workflow if this node dies before it takes
			// the message.
			a.mu.Lock()
			wake, wakeUndo = a.countArrivedLocked(arrived, workflowEnded(wfst.Status))
			a.mu.Unlock()
		} else {
			// No workflow receives it: any time in the turn will do.
			arrived[0].at = time.Now().Round(0)
		}
		// Every return below that does not queue the message undoes what
		// was counted: memory must not count a message, nor believe in a
		// wakeup record, that storage does not hold.
		uncount := func() {
			if sp.Run != nil {
				a.mu.Lock()
				a.uncountArrivedLocked(arrived, wakeUndo)
				a.mu.Unlock()
			}
		}
		sentAt := arrived[0].at
		msg, _ := json.Marshal(newQueueMessage(body, sentAt))
		ops := append([]storage.Op{storage.Put(queueKey(a.prefix, seq, req.Queue), msg)}, keyOps...)
		if wake.Key != "" {
			ops = append(ops, wake)
		}
		if wait {
			if h.sendWaitHook != nil {
				h.sendWaitHook(a)
			}
			completion = a.wf.awaitCompletion(seq, true, false)
			// Closed by a stop that began since (its workflow ended with
			// it, the actor still here): queued without a wait, as above.
			closedByStop := completion == nil && h.isStopping() && !a.stopped.Load()
			if completion == nil && !closedByStop {
				uncount()
				if a.stopped.Load() {
					// Evicted meanwhile (it answers its waiters as it
					// goes): nothing was written, and the next activation
					// runs the workflow.
					return rivet.Errorf(rivet.ErrUnavailable, "%s was deactivated; retry", a.describe())
				}
				return rivet.Errorf(rivet.ErrWorkflowFailed, "%s has no running workflow to complete the message", a.describe())
			}
		}
		if keyOps != nil {
			// The key's record enters memory with its enqueue, under
			// keysMu: see keptSendKey.
			a.keysMu.Lock()
		}
		_, err := a.enqueue(ops...)
		if keyOps != nil {
			if err == nil {
				a.keptSendKey(req.IdempotencyKey, keyRec, dropped)
			}
			a.keysMu.Unlock()
		}
		if err != nil {
			if completion != nil {
				a.wf.forgetWait(seq, completion)
			}
			uncount()
			return err
		}
		if sp.Run != nil && workflowEnded(wfst.Status) {
			ended = wfst.Status
		}
		if sp.Run == nil {
			a.wf.countPending(req.Queue, 1)
		}
		a.nextSeq.Add(1)
		queued = true
		a.depth[req.Queue]++
		if sp.Run != nil {
			// Only a workflow takes messages: an actor without one keeps
			// no copy of their bodies in memory.
			a.wf.notifyMu.Lock()
			a.wf.msgs = append(a.wf.msgs, arrived[0])
			a.wf.notifyMu.Unlock()
			a.wf.messageArrived()
		}
		return nil
	})
	if err != nil {
		if completion != nil && (queued || dup) {
			// The turn queued the message and registered the wait, then
			// the wait for its commit failed (outcome unknown, or the
			// caller left): no one waits now. (A turn that failed before
			// queued it and forgot its wait itself: seq may already be
			// another sender's.)
			act.wf.forgetWait(seq, completion)
		}
		return SendResult{}, err
	}
	if !dup {
		h.sent.Add(1)
	}
	res := SendResult{MessageID: seq, Status: SendEnqueued, WorkflowStatus: ended, Duplicate: dup}
	if lookup {
		kv, err := h.store.Get(ctx, sendResponseKey(act.prefix, seq))
		if (err == nil || !isNotFound(err)) && completion != nil {
			act.wf.forgetWait(seq, completion) // answered here, not by the wait
		}
		switch {
		case err == nil && string(kv.Value) == droppedMark:
			return res, rivet.Errorf(rivet.ErrFailedPrecondition, "%s: message %d was dropped by a retry of its workflow (drop messages), after the workflow took it: it will not be completed", act.describe(), seq)
		case err == nil:
			if len(kv.Value) > 0 { // empty: completed, too large to keep
				res.Status, res.Response = SendCompleted, json.RawMessage(kv.Value)
			}
			return res, nil
		case !isNotFound(err):
			if ctx.Err() != nil {
				// The caller's deadline or its leaving, said as in the
				// wait below: not storage's failure, to be retried.
				return res, ctxError(ctx)
			}
			return SendResult{}, rivet.Errorf(rivet.ErrUnavailable, "%s: read the kept completion of message %d: %v", act.describe(), seq, err)
		}
	}
	if completion == nil {
		return res, nil
	}
	t := time.NewTimer(defaults.SendWaitWithin(ctx, req.Timeout))
	defer t.Stop()
	defer act.wf.forgetWait(seq, completion)
	select {
	case resp, ok := <-completion:
		if !ok {
			act.mu.Lock()
			destroyed := errors.Is(act.failed, errDestroyed)
			act.mu.Unlock()
			if destroyed {
				return res, rivet.Errorf(rivet.ErrNotFound, "%s was destroyed before its workflow completed message %d, which went with it", act.describe(), seq)
			}
			if h.isStopping() || act.stopped.Load() {
				// The actor moved (or this node stops) before its workflow
				// completed the message, which is durable and stays queued
				// for the workflow wherever it runs next. Not an error: a
				// caller that retried would queue the message twice.
				return res, nil
			}
			// The reason says how the workflow ended, as a wait refused
			// up front does: workflow.failed only for one that failed;
			// one that completed (or was cancelled) without completing
			// the message is no failure. The workflow's error follows
			// only if it has one.
			st := act.workflowStatus()
			msg := fmt.Sprintf("the workflow of %s ended (%s) without completing message %d", act.describe(), orNone(st.Status), seq)
			if st.Status == WorkflowFailed {
				msg = fmt.Sprintf("the workflow of %s failed without completing message %d", act.describe(), seq)
			}
			if st.Error != "" {
				msg += ": " + st.Error
			}
			if st.Status == WorkflowFailed {
				return res, rivet.Errorf(rivet.ErrWorkflowFailed, "%s", msg)
			}
			return res, rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "ended_without_completing", "%s", msg)
		}
		res.Status, res.Response = SendCompleted, resp
		return res, nil
	case <-waitCut(ctx):
		// The node the send came through stops (WithWaitCut): it would
		// hold its stop for the wait, and then break its caller's call,
		// for a message that is queued. Said as when the actor moves.
		return res, nil
	case <-t.C:
		res.Status = SendTimedOut
		act.wf.notifyMu.Lock()
		res.MessageState = MessageQueued
		if act.wf.taken[seq] {
			res.MessageState = MessageTaken
		}
		act.wf.notifyMu.Unlock()
		return res, nil
	case <-ctx.Done():
		return res, ctxError(ctx)
	}
}

// knownNames lists a map's names, sorted, for an error that says which
// names exist: "none" for an empty map.
func knownNames[V any](m map[string]V) string {
	if len(m) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Create creates an actor; rivet.ErrAlreadyExists if it exists.
func (h *Host) Create(ctx context.Context, ref Ref, input json.RawMessage) (ActorInfo, error) {
	info, _, err := h.CreateWith(ctx, ref, input, CreateOptions{})
	return info, err
}

// CreateWith creates an actor, as Create does. With opts.IdempotencyKey,
// the key is stored with the actor's meta in the create's commit, and a
// Create of the actor with the same key and input finds it: it succeeds
// again, duplicate true, and does not run CreateState again (a load of
// an actor not in memory wakes it as any request does).
// The same key with another input is rivet.ErrInvalidArgument; any other
// existing actor (created without a key, or with another) is
// rivet.ErrAlreadyExists.
func (h *Host) CreateWith(ctx context.Context, ref Ref, input json.RawMessage, opts CreateOptions) (info ActorInfo, duplicate bool, err error) {
	key := opts.IdempotencyKey
	if err := checkIdempotencyKey(key); err != nil {
		return ActorInfo{}, false, err
	}
	if err := h.beginOn(opts.Chain.ID); err != nil {
		return ActorInfo{}, false, err
	}
	defer h.end()
	sp, err := h.spec(ref)
	if err != nil {
		return ActorInfo{}, false, err
	}
	a, created, err := h.activateKeyed(ctx, ref, sp, true, input, key, opts.Chain.ID)
	if err != nil {
		return ActorInfo{}, false, err
	}
	if created {
		return a.info(), false, nil
	}
	// The meta is the stored one, read by the load (or this node's
	// create) before the activation was ready, and never changes after.
	if key != "" && a.meta.CreateKey == key {
		if !optjson.Same(a.meta.Input, input) {
			return ActorInfo{}, false, rivet.Errorf(rivet.ErrInvalidArgument, "actor %s %s was created with idempotency key %q and another input: a key names one create (send the same input, or use another key)", ref.Name, keyString(ref.Key), key)
		}
		return a.info(), true, nil
	}
	return ActorInfo{}, false, rivet.Errorf(rivet.ErrAlreadyExists, "actor %s %s already exists", ref.Name, keyString(ref.Key))
}

// GetOrCreate returns the actor, creating it if needed.
func (h *Host) GetOrCreate(ctx context.Context, ref Ref, input json.RawMessage) (ActorInfo, bool, error) {
	if err := h.begin(); err != nil {
		return ActorInfo{}, false, err
	}
	defer h.end()
	sp, err := h.spec(ref)
	if err != nil {
		return ActorInfo{}, false, err
	}
	a, created, err := h.activate(ctx, ref, sp, true, input)
	if err != nil {
		return ActorInfo{}, false, err
	}
	return a.info(), created, nil
}

// Get returns the actor's info; rivet.ErrNotFound if it does not exist.
func (h *Host) Get(ctx context.Context, ref Ref) (ActorInfo, error) {
	if err := h.begin(); err != nil {
		return ActorInfo{}, err
	}
	defer h.end()
	if _, err := h.spec(ref); err != nil {
		return ActorInfo{}, err
	}
	snap, part, _, err := h.peek(ctx, ref, false)
	if err != nil {
		return ActorInfo{}, err
	}
	return ActorInfo{Ref: ref, CreatedAt: time.UnixMilli(snap.meta.CreatedAt), Partition: part, Owner: h.cfg.NodeID}, nil
}

// peek reads an actor without activating it: from its activation if it is
// in memory and its turn comes within Config.ReadGateWait, else from
// storage, as for an actor not in memory: Inspect, State, Get and
// Subscribe waited for the turn, so a trial's order answered Inspect only
// when its 3 s payment step ended.
// Missing actors are rivet.ErrNotFound.
//
// withState: the state is read too, from the history entries of a
// workflow as well as the state key (statehome.go).
func (h *Host) peek(ctx context.Context, ref Ref, withState bool) (snapshot, uint32, bool, error) {
	enc, part, prefix, err := h.locate(ref)
	if err != nil {
		return snapshot{}, 0, false, err
	}
	if _, owned := h.own.Token(part); !owned {
		return snapshot{}, 0, false, h.notOwned(part, "")
	}
	h.mu.Lock()
	a := h.actors[ref.Name+"/"+enc]
	h.mu.Unlock()
	busy := false // a's turn did not come within ReadGateWait
	if a != nil {
		select {
		case <-a.ready:
		case <-ctx.Done():
			return snapshot{}, 0, false, ctxError(ctx)
		}
		chain := h.newChain()
		gateErr := a.loadErr
		if gateErr == nil {
			wctx, cancel := context.WithTimeout(ctx, h.cfg.ReadGateWait)
			gateErr = a.gate.acquire(wctx, chain)
			cancel()
			busy = gateErr != nil && ctx.Err() == nil
		}
		if gateErr == nil {
			// The claim the activation was loaded under must still be
			// served now that the gate is ours, as turnFor checks: the
			// wait may have outlasted the lease's local deadline (a
			// stall before the watchdog ran), and another node may have
			// changed the actor since. Not even a read is answered then.
			if tok, ok := h.own.Token(part); !ok || tok != a.fence.Token {
				a.gate.release(chain)
				return snapshot{}, 0, false, rivet.Errorf(rivet.ErrUnavailable, "partition %d of %s is not served by node %s now", part, a.describe(), h.cfg.NodeID)
			}
			if !a.stopped.Load() {
				snap := snapshot{meta: a.meta, nextSeq: a.nextSeq.Load(), depth: map[string]uint64{}, metaExists: true}
				if withState {
					// A copy: Inspect's caller may edit what it gets,
					// and the activation's bytes are what a failed turn
					// goes back to.
					snap.state = bytes.Clone(a.stateBytes)
				}
				snap.wfStatus, snap.wake = a.workflowStatusAndWake()
				snap.pending, snap.pendingOmitted = a.pendingSteps()
				for q, d := range a.depth {
					snap.depth[q] = d
				}
				v := a.currentVersion()
				a.gate.release(chain)
				err := a.waitCommitted(ctx, v)
				if err == nil {
					return snap, part, true, nil
				}
				if ctx.Err() != nil {
					return snapshot{}, 0, false, err
				}
				// The activation's writes failed: its memory may be ahead of
				// storage, so storage answers the read (below), not it.
			} else {
				a.gate.release(chain)
			}
		}
	}
	// Whatever the type is in this build: a type this build does not run,
	// or runs without a workflow, may have had one.
	snap, err := h.readActor(ctx, prefix, withState)
	if err != nil {
		return snapshot{}, 0, false, rivet.Errorf(rivet.ErrUnavailable, "read actor: %v", err)
	}
	if !snap.metaExists {
		return snapshot{}, 0, false, rivet.Errorf(rivet.ErrNotFound, "actor %s %s does not exist", ref.Name, keyString(ref.Key))
	}
	if tok, ok := h.own.Token(part); busy && ok && tok == a.fence.Token && !a.stopped.Load() {
		// In memory, its turn held: storage has what it committed, and
		// the activation (under its own lock) whether its workflow runs,
		// which storage does not record.
		snap.wfStatus, snap.wake = a.workflowStatusAndWake()
		snap.pending, snap.pendingOmitted = a.pendingSteps()
		return snap, part, true, nil
	}
	return snap, part, false, nil
}

// Inspect returns an actor's committed state and runtime facts.
func (h *Host) Inspect(ctx context.Context, ref Ref) (Inspection, error) {
	if err := h.begin(); err != nil {
		return Inspection{}, err
	}
	defer h.end()
	_, specErr := h.spec(ref)
	snap, part, active, err := h.peek(ctx, ref, true)
	if specErr != nil && (err == nil || errors.Is(err, rivet.ErrNotFound)) {
		if err != nil {
			return Inspection{}, specErr
		}
		// Stored by a build that ran this type, which this one does not:
		// shown as storage holds it, so that an operator can see what it
		// is before destroying it.
	} else if err != nil {
		return Inspection{}, err
	}
	ins := Inspection{
		Info:                ActorInfo{Ref: ref, CreatedAt: time.UnixMilli(snap.meta.CreatedAt), Partition: part, Owner: h.cfg.NodeID},
		State:               orNull(snap.state),
		Active:              active,
		WorkflowStatus:      snap.wfStatus.Status,
		WorkflowError:       snap.wfStatus.Error,
		Unregistered:        specErr != nil,
		PendingSteps:        snap.pending,
		PendingStepsOmitted: snap.pendingOmitted,
	}
	if sp, _ := h.reg.Lookup(ref.Name); sp != nil && sp.Run != nil && ins.WorkflowStatus == "" {
		// Not finished and not running: it waits for its wakeup (History
		// says the same).
		ins.WorkflowStatus = WorkflowSleeping
	}
	switch {
	case active:
		ins.WorkflowWake = snap.wake
	case ins.WorkflowStatus == WorkflowSleeping:
		enc, _, _, _ := h.locate(ref)
		if ins.WorkflowWake, err = h.storedWake(ctx, part, ref.Name, enc); err != nil {
			return Inspection{}, err
		}
	}
	for q, d := range snap.depth {
		if d > 0 {
			ins.Queues = append(ins.Queues, QueueDepth{Queue: q, Depth: d})
		}
	}
	if ins.Schedules, err = h.schedulesOf(ctx, part, ref); err != nil {
		return Inspection{}, rivet.Errorf(rivet.ErrUnavailable, "inspect: scheduled calls: %v", err)
	}
	if sp, ok := h.reg.Lookup(ref.Name); ok && len(sp.Events) > 0 {
		ins.Events = slices.Sorted(maps.Keys(sp.Events))
		enc, _, _ := h.place(ref)
		ins.Subscribers = h.events.count(ref.Name + "/" + enc)
	}
	sort.Slice(ins.Queues, func(i, j int) bool { return ins.Queues[i].Queue < ins.Queues[j].Queue })
	return ins, nil
}

// storedWake is what wakes the sleeping workflow of an actor not in
// memory, as far as storage says: its wakeup record's time. (Which queues
// it waits on only its replay would tell: a message activates it.)
func (h *Host) storedWake(ctx context.Context, part uint32, name, enc string) (workflow.Wake, error) {
	at, err := h.readWakeAt(ctx, part, name, enc)
	if err != nil {
		return workflow.Wake{}, rivet.Errorf(rivet.ErrUnavailable, "read actor: wakeup: %v", err)
	}
	if at <= 0 {
		return workflow.Wake{}, nil
	}
	return workflow.Wake{At: time.UnixMilli(at)}, nil
}

// readWakeAt reads the At (unix ms) of an actor's wakeup record: 0 if it
// has none, or one that does not decode.
func (h *Host) readWakeAt(ctx context.Context, part uint32, name, enc string) (int64, error) {
	kv, err := h.store.Get(ctx, storage.WakeupKey(part, name, enc))
	if err != nil {
		if isNotFound(err) {
			return 0, nil
		}
		return 0, err
	}
	var rec wakeupRecord
	if json.Unmarshal(kv.Value, &rec) != nil {
		return 0, nil
	}
	return rec.At, nil
}

// Destroy removes the actor and everything stored for it.
func (h *Host) Destroy(ctx context.Context, ref Ref) error {
	if err := h.begin(); err != nil {
		return err
	}
	defer h.end()
	sp, err := h.spec(ref)
	if err != nil {
		return h.destroyUnloaded(ctx, ref, err, "destroyed an actor of an unregistered type")
	}
	// An actor not in memory is loaded without its workflow, and this turn
	// comes first (turnFor): a workflow started by Destroy's own load
	// could run a step (a due message, a sleep that ended) before the
	// delete, an effect of an actor being destroyed.
	chain := h.newChain()
	// A step in flight holds the turn this waits for: its run is
	// cancelled now, as a cancel's is (stopRunEarly).
	early, earlyRun, _ := h.stopRunEarly(ref)
	ran := false
	_, _, err = h.turnFor(ctx, TurnAdmin, ref, sp, false, nil, chain, true, func(a *activation) error {
		ran = true
		// The workflow stops first (its last writes are in the pipeline
		// then), and every earlier write must land before the delete,
		// never after it.
		r := a.runner()
		err := a.stopWorkflowWithin(ctx)
		if err != nil {
			// Still stopping (a stateless step that does not heed its
			// context): not destroyed, and once the run has ended this
			// memory is done and the workflow runs again from storage
			// (evicted now, the step could run twice at once).
			h.rerunAfter(a, r)
			return err
		}
		// Its tasks' contexts end; they are not waited for: one may be
		// in a call into the actor, which waits for this turn.
		a.endTasks()
		h.destroyHook(ctx, a, chain)
		if err = a.waitCommitted(ctx, a.currentVersion()); err != nil {
			// Not destroyed, and its workflow is stopped: this memory is
			// done (evicted once its writes settle), and the workflow
			// runs again from storage soon, as after a failed delete
			// below. Left in memory, nothing would restart it.
			h.evictAndRerun(a)
			return err
		}
		// From here on this activation writes nothing: a late write would
		// land after the delete and resurrect part of the actor.
		a.mu.Lock()
		if a.failed == nil {
			a.failed = errDestroyed
		}
		a.mu.Unlock()
		// The commit outlives the caller (see commitContext).
		cctx, cancel := h.commitContext()
		err = h.commit.Commit(cctx, storage.Txn{Fence: a.fence, Ops: actorDeleteOps(a.part, a.ref.Name, a.enc, a.prefix)})
		cancel()
		if err != nil {
			// Not destroyed, as far as is known: the actor, its messages
			// and its workflow stay. This memory is done all the same
			// (evicted: waiting senders hear that their messages stay
			// queued), and the workflow runs again from storage soon.
			a.mu.Lock()
			if errors.Is(a.failed, errDestroyed) {
				a.failed = errRetired
			}
			a.mu.Unlock()
			h.evictAndRerun(a)
			return commitError("destroy "+a.describe(), err)
		}
		h.timers.cancel(a.id)
		h.timers.cancel(schedTimer(a.id))
		h.evict(a) // answers waiting senders: destroyed
		h.events.endIf(func(s *Subscription) bool { return s.id == a.id }, func(*Subscription) error {
			return rivet.Errorf(rivet.ErrNotFound, "actor %s was destroyed", a.describe())
		})
		return nil
	})
	if err != nil && !ran && earlyRun != nil {
		// The turn never came (the caller's deadline, an action that
		// holds it): not destroyed, and the run stopped above must run
		// on, from storage once it has ended.
		h.rerunAfter(early, earlyRun)
	}
	if bad := (*stateUndecodable)(nil); errors.As(err, &bad) {
		// Its state does not decode, so no hook can run and nothing of it
		// is in memory: an operator must still be able to remove it
		// without a build that decodes it again.
		return h.destroyUnloaded(ctx, ref, rivet.Errorf(rivet.ErrNotFound, "actor %s %s does not exist", ref.Name, keyString(ref.Key)),
			"destroyed an actor whose state does not decode, without its OnDestroy")
	}
	return err
}

// actorDeleteOps delete everything stored for an actor (of partition part,
// type name, encoded key enc, records under prefix): its records and
// messages, index entry, failed-workflow entry, wakeup record and
// scheduled calls.
func actorDeleteOps(part uint32, name, enc, prefix string) []storage.Op {
	return []storage.Op{
		storage.DeletePrefix(prefix),
		storage.Delete(storage.IndexKey(name, enc)),
		storage.Delete(storage.FailedKey(name, enc)),
		storage.Delete(storage.WakeupKey(part, name, enc)),
		storage.DeletePrefix(storage.ScheduleActorPrefix(part, name, enc)),
	}
}

// destroyUnloaded destroys an actor that cannot be loaded, so that nothing
// runs it, by deleting it from storage as it is: one stored under a name no
// actor type of this node has (a type removed from the code, or renamed),
// or one whose state does not decode. unknown is the error for an actor
// not stored; logMsg says what was destroyed.
func (h *Host) destroyUnloaded(ctx context.Context, ref Ref, unknown error, logMsg string) error {
	enc, part, prefix, err := h.locate(ref)
	if err != nil {
		return err
	}
	token, owned := h.own.Token(part)
	if !owned {
		return h.notOwned(part, "")
	}
	meta, err := h.store.Get(ctx, prefix+storage.MetaSuffix)
	if isNotFound(err) {
		return unknown
	} else if err != nil {
		return rivet.Errorf(rivet.ErrUnavailable, "read actor: %v", err)
	}
	cctx, cancel := h.commitContext() // the commit outlives the caller
	defer cancel()
	// Only the actor read: nothing in memory holds this key between the
	// read and the delete (no activation, no gate), so another Destroy and
	// a Create may come between, and the delete would take the new actor,
	// maybe serving from memory, with it. Its meta key is written once,
	// by its create: its revision names this actor.
	err = h.commit.Commit(cctx, storage.Txn{
		Fence: storage.Fence{Partition: part, Token: token},
		Conds: []storage.Cond{storage.Unchanged(prefix+storage.MetaSuffix, meta.ModRevision)},
		Ops:   actorDeleteOps(part, ref.Name, enc, prefix),
	})
	if isConditionFailed(err) {
		return rivet.Errorf(rivet.ErrNotFound, "actor %s %s was destroyed by another call while this one ran: this one deleted nothing (an actor of the key created since stays)", ref.Name, keyString(ref.Key))
	}
	if err != nil {
		return commitError("destroy "+ref.Name+" "+keyString(ref.Key), err)
	}
	id := ref.Name + "/" + enc
	h.timers.cancel(id)
	h.timers.cancel(schedTimer(id))
	h.events.endIf(func(s *Subscription) bool { return s.id == id }, func(*Subscription) error {
		return rivet.Errorf(rivet.ErrNotFound, "actor %s %s was destroyed", ref.Name, keyString(ref.Key))
	})
	h.log.Info(logMsg, refField(ref))
	return nil
}

// warnUnregistered logs, once at start, each actor type that has stored
// actors and that this node does not register (removed from the code, or
// renamed): nothing runs those actors, their sleeping workflows and
// scheduled calls included, and an operator should hear of it before a
// user does. One read of the index per type stored, not per actor.
func (h *Host) warnUnregistered() {
	defer h.loops.Done()
	ctx, cancel := context.WithTimeout(h.baseCtx, 30*time.Second)
	defer cancel()
	after := ""
	for range 10_000 {
		kvs, err := h.store.List(ctx, storage.IndexPrefix, storage.ListOptions{StartAfter: after, Limit: 1, KeysOnly: true})
		if err != nil || len(kvs) == 0 {
			return
		}
		name, _, ok := cut(strings.TrimPrefix(kvs[0].Key, storage.IndexPrefix), '/')
		if !ok {
			return
		}
		// Past every key of the name: encoded keys are UTF-8, which has
		// no 0xff byte.
		after = storage.IndexPrefix + name + "/\xff"
		if _, ok := h.reg.Lookup(name); ok {
			continue
		}
		const most = 1000
		n := "1000 or more"
		if kvs, err := h.store.List(ctx, storage.IndexPrefix+name+"/", storage.ListOptions{Limit: most, KeysOnly: true}); err == nil && len(kvs) < most {
			n = strconv.Itoa(len(kvs))
		}
		h.log.Warn("actors of a type this node does not register are stored: nothing runs them (their workflows and scheduled calls included); rivetctl inspect shows them, rivetctl destroy removes them",
			zap.String("actor_type", name), zap.String("actors", n))
	}
}

// List pages through actors, from the index.
func (h *Host) List(ctx context.Context, opts ListOptions) (ListResult, error) {
	if err := h.begin(); err != nil {
		return ListResult{}, err
	}
	defer h.end()
	limit := opts.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 1000)
	base := storage.IndexPrefix
	if opts.FailedWorkflows {
		base = storage.FailedPrefix
	}
	prefix := base
	if opts.Name != "" {
		if err := rivet.ValidateName("actor name", opts.Name); err != nil {
			return ListResult{}, err
		}
		prefix += opts.Name + "/"
	}
	var after string
	if opts.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(opts.PageToken)
		if err != nil {
			return ListResult{}, rivet.Errorf(rivet.ErrInvalidArgument, "bad page token")
		}
		after = string(b)
		// A token names the last key of a page of this very listing: one
		// of another (a name, the failed index) would restart it or end it
		// early without a word.
		if !strings.HasPrefix(after, prefix) {
			// Or it is no token at all: most text is base64 too.
			return ListResult{}, rivet.Errorf(rivet.ErrInvalidArgument, "bad page token: not one of this listing's (a token continues only the listing that gave it, of the same name and filter)")
		}
	}
	kvs, err := h.store.List(ctx, prefix, storage.ListOptions{StartAfter: after, Limit: limit + 1})
	if err != nil {
		return ListResult{}, rivet.Errorf(rivet.ErrUnavailable, "list actors: %v", err)
	}
	if len(kvs) == 0 && opts.Name != "" && after == "" {
		// Nothing under a name no actor is registered under: a typo (or
		// the wrong case), which an empty list would hide; a call says
		// the same. (Actors of a name this node does not know, in a
		// rolling upgrade or left by a removed type, are still listed.)
		if _, err := h.spec(Ref{Name: opts.Name}); err != nil {
			return ListResult{}, err
		}
	}
	var res ListResult
	for i, kv := range kvs {
		if i == limit {
			res.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(kvs[i-1].Key))
			break
		}
		rest := kv.Key[len(base):]
		name, enc, ok := cut(rest, '/')
		if !ok {
			continue
		}
		key, err := storage.DecodeKey(enc)
		if err != nil {
			continue
		}
		var fe failedEntry // an index entry, and more in the failed index
		_ = json.Unmarshal(kv.Value, &fe)
		info := ActorInfo{
			Ref: Ref{Name: name, Key: key}, CreatedAt: time.UnixMilli(fe.CreatedAt), Partition: fe.Partition, Owner: h.ownerOf(fe.Partition),
		}
		if opts.FailedWorkflows {
			info.WorkflowError, info.WorkflowFailedAt = fe.Error, time.UnixMilli(fe.FailedAt)
		}
		res.Actors = append(res.Actors, info)
	}
	return res, nil
}

func (h *Host) ownerOf(p uint32) string {
	if _, ok := h.own.Token(p); ok {
		return h.cfg.NodeID
	}
	if h.ownerLookup != nil {
		return h.ownerLookup(p)
	}
	return ""
}

// SetOwnerLookup tells the host where to read the owners of partitions it
// does not serve (the node's mirror of the partition table), for List.
// Call it before Start.
func (h *Host) SetOwnerLookup(fn func(p uint32) string) { h.ownerLookup = fn }

// Members lists the registered nodes.
func (h *Host) Members(ctx context.Context) ([]Member, error) {
	kvs, err := h.store.List(ctx, storage.NodesPrefix, storage.ListOptions{})
	if err != nil {
		return nil, rivet.Errorf(rivet.ErrUnavailable, "list nodes: %v", err)
	}
	claims, err := h.store.Claims(ctx)
	if err != nil {
		return nil, rivet.Errorf(rivet.ErrUnavailable, "list claims: %v", err)
	}
	owned := map[string]uint32{}
	for _, c := range claims {
		owned[c.Node]++
	}
	var out []Member
	for _, kv := range kvs {
		var rec NodeRecord
		if json.Unmarshal(kv.Value, &rec) != nil {
			continue
		}
		out = append(out, Member{NodeID: rec.NodeID, GRPCAddr: rec.GRPCAddr, State: "alive", PartitionsOwned: owned[rec.NodeID], StartedAt: rec.StartedAt, Build: rec.Build, ActorTypes: rec.ActorTypes, ActorTypesKnown: rec.KnownTypes(), StorageFormat: rec.Format()})
	}
	return out, nil
}

// Partitions returns the partition table.
func (h *Host) Partitions(ctx context.Context) (uint32, []PartitionOwner, error) {
	claims, err := h.store.Claims(ctx)
	if err != nil {
		return 0, nil, rivet.Errorf(rivet.ErrUnavailable, "list claims: %v", err)
	}
	out := make([]PartitionOwner, 0, len(claims))
	for _, c := range claims {
		out = append(out, PartitionOwner{Partition: c.Partition, Owner: c.Node, Token: c.Token})
	}
	return h.cfg.Partitions, out, nil
}

// Stats returns this node's counters.
func (h *Host) Stats() Stats {
	h.mu.Lock()
	n, tasks := len(h.actors), h.nTasks
	h.mu.Unlock()
	wf := h.wfTotals()
	s := Stats{
		NodeID: h.cfg.NodeID, ActiveActors: uint64(n), TasksRunning: uint64(tasks), ActorsShed: h.shedCount.Load(), CallsShed: h.callsShed.Load(), SchedulesFired: h.schedFired.Load(), SchedulesFailed: h.schedFailed.Load(),
		WakeHooksFailed: h.wakeFailed.Load(), SleepHooksFailed: h.sleepFailed.Load(), DestroyHooksFailed: h.destroyFailed.Load(),
		Calls: h.calls.Load(), PartitionsOwned: uint32(h.own.Owned()),
		QueuedMessages: uint64(max(h.queued.Load(), 0)), MessagesSent: uint64(h.sent.Load()), MessagesReceived: uint64(h.received.Load()),
		WorkflowsRunning: wf.Running, WorkflowsCompleted: wf.Completed, WorkflowsFailed: wf.Failed, WorkflowsCancelled: wf.Cancelled,
		StepsCompleted: wf.StepsCompleted, StepsFailed: wf.StepsFailed, StepsExhausted: wf.StepsExhausted,
		Refences:        h.refences.Load(),
		Resolved:        h.resolved.Load(),
		SendKeysEvicted: h.sendKeysEvicted.Load(), CallKeysEvicted: h.callKeysEvicted.Load(),
	}
	subs, delivered, dropped := h.events.counts()
	s.EventSubscribers, s.EventsDelivered, s.EventSubscribersDropped = uint64(subs), delivered, dropped
	if cs, ok := h.commit.(CommitStats); ok {
		st := cs.Stats()
		s.Commits, s.CommitBatches = uint64(st.Committed), uint64(st.Batches)
	}
	return s
}

// reap deactivates actors idle past their timeout, and sheds the ones idle
// longest while the node holds more than MaxActiveActors.
func (h *Host) reap() {
	defer h.loops.Done()
	defer close(h.reapDone)
	var sleeps sync.WaitGroup
	defer sleeps.Wait()
	// A quarter of the shortest idle timeout, an actor type's own
	// included: an actor idle past its timeout sleeps within a quarter of
	// it. An actor type's counts down to 100 ms, no lower: each pass
	// looks at every actor in memory.
	every := h.cfg.IdleTimeout / 4
	for _, name := range h.reg.Names() {
		if sp, ok := h.reg.Lookup(name); ok && sp.IdleTimeout > 0 {
			every = min(every, max(sp.IdleTimeout/4, 100*time.Millisecond))
		}
	}
	tick := time.NewTicker(max(every, 10*time.Millisecond))
	defer tick.Stop()
	// A load past the bound sheds shedEvery later (the actors loaded by a
	// burst are not idle yet, and a pass looks at every activation), and
	// again every shedEvery while the node stays past it.
	var shedLater <-chan time.Time
	shed := func() {
		if h.shed(&sleeps) && shedLater == nil {
			shedLater = time.After(shedEvery)
		}
	}
	for {
		select {
		case <-h.stopCh:
			return
		case <-tick.C:
		case <-h.overLimit:
			if shedLater == nil {
				shedLater = time.After(shedEvery)
			}
			continue
		case <-shedLater:
			shedLater = nil
			shed()
			continue
		}
		now := time.Now()
		h.mu.Lock()
		cands := make([]*activation, 0)
		for _, a := range h.actors {
			idle := h.cfg.IdleTimeout
			if a.spec.IdleTimeout > 0 {
				idle = a.spec.IdleTimeout
			}
			if now.Sub(time.Unix(0, a.lastTurn.Load())) > idle && !a.tasksRunning() {
				cands = append(cands, a)
			}
		}
		h.mu.Unlock()
		h.deactivateIdleEach(cands, &sleeps)
		shed()
		h.reapPasses.Add(1)
	}
}

// shedIdle is how long an actor must have had no turn before the bound on
// actors in memory deactivates it: one in use now is not shed, or it would
// be loaded again at once. shedEvery spaces the passes.
const (
	shedIdle  = time.Second
	shedEvery = shedIdle / 2
)

// shed deactivates the actors idle longest while the node holds more than
// MaxActiveActors, down to 90% of it (so that it does not run again for
// every actor loaded past the bound). It reports whether the node is still
// past the bound.
func (h *Host) shed(sleeps *sync.WaitGroup) (over bool) {
	limit := h.cfg.MaxActiveActors
	if limit <= 0 {
		return false
	}
	h.mu.Lock()
	n := h.unshedLocked()
	if n <= limit {
		h.mu.Unlock()
		return false
	}
	// Only actors idle long enough are candidates, each with the time it
	// was seen at (lastTurn moves under a sort that reads it live).
	type cand struct {
		a    *activation
		last int64
	}
	cutoff := time.Now().Add(-shedIdle).UnixNano()
	cands := make([]cand, 0, n)
	for _, a := range h.actors {
		if last := a.lastTurn.Load(); last < cutoff && !a.shedding.Load() {
			cands = append(cands, cand{a, last})
		}
	}
	h.mu.Unlock()
	slices.SortFunc(cands, func(x, y cand) int { return cmp.Compare(x.last, y.last) })
	excess := n - (limit - limit/10)
	for _, c := range cands {
		if excess <= 0 {
			break
		}
		a := c.a
		if a.spec.Sleep == nil {
			if h.deactivateIdle(a, shedIdle) {
				h.shedCount.Add(1)
				excess--
			}
			continue
		}
		// An OnSleep runs on a goroutine of its own, as the idle
		// reaper's do (deactivateIdleEach): run here, one slow hook held
		// up the reaper, and the shed of many took one SleepTimeout
		// each, one after another.
		select {
		case h.reapSleeps <- struct{}{}:
		default:
			continue
		}
		chain, ok := h.holdIdle(a, shedIdle)
		if !ok {
			<-h.reapSleeps
			continue
		}
		a.shedding.Store(true)
		excess--
		sleeps.Add(1)
		go func() {
			defer func() { a.shedding.Store(false); <-h.reapSleeps; sleeps.Done() }()
			h.putToSleep(a, chain)
			h.shedCount.Add(1)
		}()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unshedLocked() > limit
}

// unshedLocked counts the actors in memory that the bound on them counts:
// those an earlier pass of shed is putting to sleep are gone as far as it
// is concerned (and no candidates again). Called with h.mu held.
func (h *Host) unshedLocked() int {
	n := len(h.actors)
	for _, a := range h.actors {
		if a.shedding.Load() {
			n--
		}
	}
	return n
}

// tryDeactivate drops an activation idle past its timeout if no turn holds
// or waits for it and nothing is waiting to commit.
func (h *Host) tryDeactivate(a *activation) {
	idle := h.cfg.IdleTimeout
	if a.spec.IdleTimeout > 0 {
		idle = a.spec.IdleTimeout
	}
	h.deactivateIdle(a, idle)
}

// deactivateIdle drops an activation with no turn for idle, if no turn
// holds or waits for it, no sender waits on it, its workflow (if running)
// only waits, for a message or for longer than idle, and its writes land;
// it reports whether it did.
func (h *Host) deactivateIdle(a *activation, idle time.Duration) bool {
	chain, ok := h.holdIdle(a, idle)
	if ok {
		h.putToSleep(a, chain)
	}
	return ok
}

// holdIdle is deactivateIdle's look: if a may be deactivated, it takes its
// gate with a chain of its own and returns it, for putToSleep.
func (h *Host) holdIdle(a *activation, idle time.Duration) (chain string, ok bool) {
	// Not before its wake is done, commit included: the gate is free while
	// the wake's writes land, before the request that loaded the actor
	// takes its turn, and putting the actor to sleep then would run
	// OnSleep and a second OnWake before that request.
	select {
	case <-a.woken:
	default:
		return "", false
	}
	if !a.idleWorkflow(idle) || a.tasksRunning() {
		return "", false
	}
	// A chain of its own, not a name shared by every reaper's turn: a
	// call OnSleep makes carries it, and must re-enter only this actor.
	chain = h.newChain()
	if !a.gate.tryAcquire(chain) {
		return "", false
	}
	// A turn may have run between the reaper's look and the gate, or the
	// activation been evicted.
	if a.stopped.Load() || time.Since(time.Unix(0, a.lastTurn.Load())) <= idle || !a.idleWorkflow(idle) || a.tasksRunning() {
		a.gate.release(chain)
		return "", false
	}
	// Only an actor whose claim is served (or held by a handoff) sleeps in
	// an orderly way: past the lease's local deadline (a stall before the
	// watchdog ran), the partition's next owner may have loaded the actor
	// and run its OnWake, and this OnSleep would run at once with its
	// turns. It is left as it is: a renewal that was only late lets a
	// later pass put it to sleep, and a lost lease has the watchdog evict
	// it (without hooks).
	if !a.claimHeld() {
		a.gate.release(chain)
		return "", false
	}
	return chain, true
}

// putToSleep runs the OnSleep of a, whose gate chain holds (holdIdle), and
// takes it out of memory; it releases the gate.
func (h *Host) putToSleep(a *activation, chain string) {
	defer a.gate.release(chain)
	// Only a turn starts a task, and this one holds the gate: none can
	// start between the look above and this.
	a.endTasks()
	// The workflow waits for a message or a far time: stop it; it records
	// its wakeup before it returns. Then let every write land, so that a
	// new activation reads them.
	a.stopWorkflow()
	h.sleep(h.baseCtx, a, chain)
	ctx, cancel := context.WithTimeout(h.baseCtx, 30*time.Second)
	defer cancel()
	if err := a.waitCommitted(ctx, a.currentVersion()); err != nil {
		h.evict(a)
		return
	}
	a.stopped.Store(true)
	a.closeVars()
	h.remove(a)
}

// hostClient is the rivet.Client an action gets: calls keep the chain, so
// that a call back into the caller re-enters it.
type hostClient struct {
	h     *Host
	chain string
	from  *activation
}

func (c *hostClient) GetOrCreate(name string, key ...string) rivet.Handle {
	return &hostHandle{c: c, ref: Ref{Name: name, Key: key}, create: true}
}

func (c *hostClient) Get(name string, key ...string) rivet.Handle {
	return &hostHandle{c: c, ref: Ref{Name: name, Key: key}}
}

var _ caller.Creator = (*hostClient)(nil)

// CreateWith implements caller.Creator: an actor's create of another
// actor (rivet.Create), run here if this node serves the new actor's
// partition, else by its owner, reached as a call is (remoteFor: a handoff
// of the partition that this client's turn holds up serves it here). It
// goes out after the creator's writes are durable, as a call does, so that
// the child never exists beside a parent's change that could still be
// lost; its chain is the call's (callChain), which no node refuses as
// overloaded.
func (c *hostClient) CreateWith(ctx context.Context, name string, key []string, input any, opts caller.CreateOptions) (caller.CreateResult, error) {
	// Checked here, as a client's create is by the server of the node it
	// reaches: the actor's node is the only other to check them, and only
	// when it is another node (a create that passed a test of one node
	// would fail in a cluster).
	if err := rivet.ValidateName("actor name", name); err != nil {
		return caller.CreateResult{}, err
	}
	if err := rivet.ValidateKey(key); err != nil {
		return caller.CreateResult{}, err
	}
	in, err := optjson.Marshal("create input", input)
	if err != nil {
		return caller.CreateResult{}, err
	}
	if err := sizes.Check("create input", len(in), c.h.cfg.MaxInputBytes); err != nil {
		return caller.CreateResult{}, err
	}
	ref := Ref{Name: name, Key: slices.Clone(key)}
	if err := (&hostHandle{c: c, ref: ref}).flushCaller(ctx); err != nil {
		return caller.CreateResult{}, err
	}
	copts := CreateOptions{IdempotencyKey: opts.IdempotencyKey, Chain: Chain{ID: c.callChain()}}
	var (
		info ActorInfo
		dup  bool
	)
	if r := c.h.remoteFor(ref, c.from, c.chain); r != nil {
		info, dup, err = r.Create(ctx, ref, in, copts)
	} else if ctx.Done() == nil {
		info, dup, err = c.h.CreateWith(ctx, ref, in, copts)
	} else {
		// Returns when ctx ends, as Remote.Create does, even if the new
		// actor's CreateState or hooks do not heed it: the create goes on
		// (it may yet apply, as on another node). No flag says when the
		// new actor's code runs, so the node's own waits are not awaited
		// either: they end with ctx too.
		type created struct {
			info ActorInfo
			dup  bool
		}
		var res created
		res, err = untilDone(ctx, nil, func() (created, error) {
			info, dup, err := c.h.CreateWith(ctx, ref, in, copts)
			return created{info, dup}, err
		})
		info, dup = res.info, res.dup
	}
	if err != nil {
		return caller.CreateResult{}, err
	}
	return caller.CreateResult{ActorInfo: info.callerInfo(), Duplicate: dup}, nil
}

type hostHandle struct {
	c      *hostClient
	ref    Ref
	create bool
}

// flushCaller holds an outgoing call until the caller's writes are durable,
// so that no other actor sees an effect of state that could still be lost.
func (hh *hostHandle) flushCaller(ctx context.Context) error {
	if hh.c.from == nil {
		return nil
	}
	return hh.c.from.waitCommitted(ctx, hh.c.from.currentVersion())
}

func (hh *hostHandle) Call(ctx context.Context, action string, args ...any) (json.RawMessage, error) {
	return hh.call(ctx, action, false, "", args)
}

// CallWith is Call with options (caller.OptionsCaller).
func (hh *hostHandle) CallWith(ctx context.Context, action string, opts caller.CallOptions, args ...any) (json.RawMessage, error) {
	return hh.call(ctx, action, false, opts.IdempotencyKey, args)
}

// Query is Call of a read-only action (caller.Querier): the called actor's
// node refuses any other, and the hop to another node's actor is sent
// again if it breaks.
func (hh *hostHandle) Query(ctx context.Context, action string, args ...any) (json.RawMessage, error) {
	return hh.call(ctx, action, true, "", args)
}

func (hh *hostHandle) call(ctx context.Context, action string, readOnly bool, key string, args []any) (_ json.RawMessage, err error) {
	raw, err := rivet.MarshalArgs(args...)
	if err != nil {
		return nil, err
	}
	// Checked here, wherever the called actor is, as a node's server
	// checks a client's: it was checked only by the server of the actor's
	// node, so that a call a test of one node ran failed in a cluster, when
	// its actor was on another node.
	if err := sizes.Check("action arguments", len(raw), hh.c.h.cfg.MaxArgsBytes); err != nil {
		return nil, err
	}
	if err := hh.flushCaller(ctx); err != nil {
		return nil, err
	}
	req := CallRequest{Ref: hh.ref, Action: action, Args: raw, CreateIfMissing: hh.create, Chain: Chain{ID: hh.c.callChain()}, ReadOnly: readOnly, IdempotencyKey: key}
	ctx, span := hh.c.h.startSpan(ctx, "rivet.call", trace.SpanKindClient, hh.ref.Name, hh.ref.Key, tracing.Action.String(action))
	if span == nil {
		return hh.callOwner(ctx, req)
	}
	// CallLocal raises the called code's panic again here.
	returned := false
	defer func() { endSpan(span, returned, err) }()
	res, err := hh.callOwner(ctx, req)
	returned = true
	return res, err
}

// callOwner sends req to its actor, wherever it is.
func (hh *hostHandle) callOwner(ctx context.Context, req CallRequest) (json.RawMessage, error) {
	if r := hh.c.h.remoteFor(hh.ref, hh.c.from, hh.c.chain); r != nil {
		return r.Call(ctx, req)
	}
	return hh.c.h.CallLocal(ctx, req)
}

// CallLocal is Call for an actor's code calling an actor of this node: it
// returns when ctx ends, as a call to another node's actor does (its gRPC
// call ends with it), even if the called actor's code does not heed ctx
// (untilDone). The call goes on to its end meanwhile, as it would on the
// other node; Stop waits for it as for any call. A Remote serves with it a
// call that it finds this node serves after all (the actor's partition
// moved here while the call was on its way).
func (h *Host) CallLocal(ctx context.Context, req CallRequest) (json.RawMessage, error) {
	if ctx.Done() == nil {
		return h.Call(ctx, req)
	}
	running := new(atomic.Bool)
	cctx := context.WithValue(ctx, actionRunningKey{}, running)
	return untilDone(ctx, running, func() (json.RawMessage, error) { return h.Call(cctx, req) })
}

// untilDone runs fn, a request of an actor's code to this node that runs
// another actor's code (a call, a create), on a goroutine of its own, and
// returns when ctx ends if fn has not returned by then, as the request to
// another node's actor does (its gRPC call ends with ctx). Run on the
// caller's goroutine, such a request held the caller's step or turn, and
// so a workflow cancel or a destroy that waits for it, until the other
// actor's code chose to return. fn goes on to its end meanwhile, owned by
// the Host (begin, end: Stop waits for it). running, if not nil, says
// whether the other actor's code runs now: while it does not, fn is the
// node's own code, whose waits end with ctx and say what ran out (a turn
// another call of the chain holds), and its answer is awaited.
func untilDone[T any](ctx context.Context, running *atomic.Bool, fn func() (T, error)) (T, error) {
	type result struct {
		res      T
		err      error
		panicked any
	}
	done := make(chan result, 1)
	go func() {
		// Sent from a defer, as aside does: a panic that fn did not turn
		// into an error is raised again on the caller's goroutine, and
		// runtime.Goexit in the other actor's code is a failed request.
		var r result
		returned := false
		defer func() {
			if !returned {
				if p := recover(); p != nil {
					r.panicked = p
				} else {
					r.err = rivet.Errorf(rivet.ErrInternal, "the actor's code called runtime.Goexit: the request got no reply")
				}
			}
			done <- r
		}()
		r.res, r.err = fn()
		returned = true
	}()
	answer := func(r result) (T, error) {
		if r.panicked != nil {
			panic(r.panicked)
		}
		return r.res, r.err
	}
	select {
	case r := <-done:
		return answer(r)
	case <-ctx.Done():
		if running != nil && !running.Load() {
			return answer(<-done)
		}
		select {
		case r := <-done: // both ready: the request's own answer
			return answer(r)
		default:
			var zero T
			return zero, ctxError(ctx)
		}
	}
}

// actionRunningKey is the context key of CallLocal's flag, set while the
// called action's code runs.
type actionRunningKey struct{}

func (hh *hostHandle) Send(ctx context.Context, queue string, body any) error {
	_, err := hh.send(ctx, queue, body, false, 0, "", false)
	return err
}

// Enqueue implements caller.Sender.
func (hh *hostHandle) Enqueue(ctx context.Context, queue string, body any) (rivet.SendResult, error) {
	return hh.send(ctx, queue, body, false, 0, "", false)
}

// SendWait implements caller.Sender. The caller's turn (or step) keeps
// the actor's turn while it waits.
func (hh *hostHandle) SendWait(ctx context.Context, queue string, body any, timeout time.Duration) (rivet.SendResult, error) {
	return hh.SendWith(ctx, queue, body, rivet.SendOptions{Wait: true, Timeout: timeout})
}

// SendWith implements caller.OnceSender.
func (hh *hostHandle) SendWith(ctx context.Context, queue string, body any, opts rivet.SendOptions) (rivet.SendResult, error) {
	if !opts.Wait {
		return hh.send(ctx, queue, body, false, 0, opts.IdempotencyKey, opts.RequireRunning)
	}
	timeout := opts.Timeout
	if timeout < 0 {
		return rivet.SendResult{}, rivet.Errorf(rivet.ErrInvalidArgument, "timeout must not be negative, not %s", timeout)
	}
	return hh.send(ctx, queue, body, true, defaults.SendWaitWithin(ctx, timeout), opts.IdempotencyKey, opts.RequireRunning)
}

// waitCutKey is the context key of WithWaitCut's channel.
type waitCutKey struct{}

// WithWaitCut returns ctx carrying cut: a send made with it that waits for
// its message's completion stops waiting once cut closes, and answers that
// the message is queued (SendEnqueued, with its ID), as it does when the
// actor moves. The owner's side of a peer stream sets it, closed when the
// node at the other end stops: that node's stop would otherwise wait for
// the forwarded wait, and then break its caller's call.
func WithWaitCut(ctx context.Context, cut <-chan struct{}) context.Context {
	return context.WithValue(ctx, waitCutKey{}, cut)
}

// waitCut is ctx's WithWaitCut channel; nil (never ready) if it has none.
func waitCut(ctx context.Context) <-chan struct{} {
	cut, _ := ctx.Value(waitCutKey{}).(<-chan struct{})
	return cut
}

func (hh *hostHandle) send(ctx context.Context, queue string, body any, wait bool, timeout time.Duration, key string, requireRunning bool) (_ rivet.SendResult, err error) {
	b, err := json.Marshal(body)
	if err != nil {
		return rivet.SendResult{}, rivet.Errorf(rivet.ErrInvalidArgument, "message body does not marshal to JSON: %v", err)
	}
	// In the words of the server of the actor's node, which checks it if
	// the actor is on another node (Host.Send's own words differ).
	if err := sizes.Check("message body", len(b), hh.c.h.cfg.MaxMessageBytes); err != nil {
		return rivet.SendResult{}, err
	}
	if err := hh.flushCaller(ctx); err != nil {
		return rivet.SendResult{}, err
	}
	req := SendRequest{Ref: hh.ref, Queue: queue, Body: b, CreateIfMissing: hh.create, Wait: wait, Timeout: timeout, Chain: Chain{ID: hh.c.callChain()}, IdempotencyKey: key, RequireRunning: requireRunning}
	ctx, span := hh.c.h.startSpan(ctx, "rivet.send", trace.SpanKindProducer, hh.ref.Name, hh.ref.Key, tracing.Queue.String(queue))
	if span != nil {
		defer func() { tracing.End(span, err) }()
	}
	if r := hh.c.h.remoteFor(hh.ref, hh.c.from, hh.c.chain); r != nil {
		return r.Send(ctx, req)
	}
	return hh.c.h.Send(ctx, req)
}

func keyString(key []string) string {
	b, _ := json.Marshal(key)
	return string(b)
}

func cut(s string, sep byte) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func ctxError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return rivet.Errorf(rivet.ErrTimeout, "deadline exceeded")
	}
	return ctx.Err()
}

// commitError turns a storage error into the rivet error a caller sees.
func commitError(what string, err error) error {
	switch {
	case errors.Is(err, storage.ErrFenced):
		return rivet.Errorf(rivet.ErrUnavailable, "%s: the partition moved; retry", what)
	case errors.Is(err, storage.ErrTooLarge):
		return rivet.Errorf(rivet.ErrTooLarge, "%s: %v", what, err)
	case errors.Is(err, storage.ErrNotSent):
		return rivet.Errorf(rivet.ErrUnavailable, "%s: the commit waited too long to be sent, and was not: nothing was written", what)
	case errors.Is(err, storage.ErrNoSpace) && errors.Is(err, storage.ErrRefused):
		// Nothing was written; a reason of its own, so that a client
		// tells an operator's problem from a moment's failover without
		// reading the text (a storage trial).
		return rivet.Reasonf(rivet.ErrUnavailable, "storage", "no_space", "%s: commit failed: %v", what, err)
	case errors.Is(err, context.DeadlineExceeded):
		return rivet.Errorf(rivet.ErrTimeout, "%s: commit timed out; its outcome is unknown", what)
	case errors.Is(err, storage.ErrClosed), errors.Is(err, storage.ErrLeaseNotFound),
		errors.Is(err, storage.ErrInvalidTxn), errors.Is(err, storage.ErrRefused), errors.Is(err, errDestroyed),
		errors.Is(err, errRetired):
		// Refused before or by storage: nothing was written.
		return rivet.Errorf(rivet.ErrUnavailable, "%s: commit failed: %v", what, err)
	}
	// Anything else (a lost connection, "leader changed", an etcd-side
	// timeout) may have come after etcd applied the write: UNAVAILABLE
	// would have clients retry a change that may be there already.
	return rivet.Errorf(rivet.ErrTimeout, "%s: commit failed; its outcome is unknown: %v", what, err)
}

func isNotFound(err error) bool        { return errors.Is(err, storage.ErrNotFound) }
func isConditionFailed(err error) bool { return errors.Is(err, storage.ErrConditionFailed) }

// actorField names an actor in a log line: fields "actor" (its name) and
// "key" (its key, as JSON).
func actorField(a *activation) zap.Field { return refField(a.ref) }

func refField(ref Ref) zap.Field { return zap.Inline(logRef(ref)) }

// logRef marshals an actor's name and key as two log fields.
type logRef Ref

func (r logRef) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("actor", r.Name)
	return enc.AddArray("key", zapcore.ArrayMarshalerFunc(func(ae zapcore.ArrayEncoder) error {
		for _, k := range r.Key {
			ae.AppendString(k)
		}
		return nil
	}))
}
func errField(err error) zap.Field { return zap.Error(err) }

// refusedLogEvery is the least time between two warnings of commits the
// store refused.
const refusedLogEvery = 10 * time.Second

// refusedWarn says whether to log a commit that failed with err, and the
// number of refused commits not logged since the last warning. Commits the
// store refused (storage.ErrRefused) are warned of once per
// refusedLogEvery: etcd out of space refuses every write, at the rate
// requests come, and a warning each flooded the log. Other failures are
// always logged.
func (h *Host) refusedWarn(err error) (bool, uint64) {
	if !errors.Is(err, storage.ErrRefused) {
		return true, 0
	}
	if !h.refusedLog.Allow(refusedLogEvery) {
		h.refusedQuiet.Add(1)
		return false, 0
	}
	return true, h.refusedQuiet.Swap(0)
}

// Remote reaches actors whose partition another node owns. The node
// provides it; without one, such calls fail with rivet.ErrUnavailable.
type Remote interface {
	Call(ctx context.Context, req CallRequest) (json.RawMessage, error)
	Send(ctx context.Context, req SendRequest) (SendResult, error)
	// Create is Host.CreateWith on the owner's node (an actor's
	// rivet.Create), whose chain it carries.
	Create(ctx context.Context, ref Ref, input json.RawMessage, opts CreateOptions) (ActorInfo, bool, error)
}

// SetRemote sets how actors reach actors on other nodes. Call it before
// Start.
func (h *Host) SetRemote(r Remote) { h.remote = r }

// PartitionOf returns the partition of an actor.
func (h *Host) PartitionOf(ref Ref) (uint32, error) {
	// Not locate: a forwarding node routes every call it forwards by this,
	// and has no use for the actor's key prefix.
	_, part, err := h.place(ref)
	return part, err
}

// Owns reports whether this node serves partition p now.
func (h *Host) Owns(p uint32) bool {
	_, ok := h.own.Token(p)
	return ok
}

// remoteFor returns the Remote to use for ref, called from an actor of
// this node (from; nil: none) on chain, or nil if ref is served here (or
// cannot be located: the local path reports that error).
func (h *Host) remoteFor(ref Ref, from *activation, chain string) Remote {
	if h.remote == nil {
		return nil
	}
	part, err := h.PartitionOf(ref)
	if err != nil || h.Owns(part) {
		return nil
	}
	if _, releasing := h.own.Releasing(part); releasing && (from != nil && from.part == part || h.heldBy(ref, chain) || h.letIn(part, chain, nil)) {
		// A call from an actor of the partition this node is handing
		// off (OnSleep, a KeepAwake function) into that partition, or
		// one back into an actor whose gate its chain holds (OnSleep
		// calls an actor elsewhere, which calls back), or one made by a
		// turn in that partition that the handoff waits for (letIn: X
		// calls Y, which calls Z of X's partition): this node answers
		// it (turnFor lets re-entrant turns in, so OnSleep may call its
		// own actor, and refuses the rest at once). The Remote would
		// wait for the partition table to name the next owner, which it
		// does only once the handoff that this call holds up has ended.
		// Calls from elsewhere do wait for it, and then reach the next
		// owner.
		return nil
	}
	return h.remote
}

// letIn reports whether a call on chain (a turn's or a caller's) must be
// served on the claim of partition p while a handoff releases it: a turn
// in an actor of p in memory here (other than except, the callee) made the
// call, directly or through other actors' turns, even on other nodes (X
// calls Y elsewhere, which calls Z of X's partition). The handoff waits for
// X's turn, which waits for the call: refused (UNAVAILABLE, retried by the
// forwarding node and the client), it would hold the partition and the
// client's call up until their retries gave up. Served, it writes on the
// claim, which holds until the release (fenced as any turn of the
// partition), and the handoff hands off what it loaded after it (handoff).
//
// Not for the OnSleep hooks the handoff (or the reaper) runs, whose chains
// hold their actors' gates too: an OnSleep calling an actor of its
// partition whose own OnSleep calls back would wait until SleepTimeout, so
// they are refused at once, as before. Nor for a chain that holds no turn
// in p (a call from another partition waits for p's next owner).
func (h *Host) letIn(p uint32, chain string, except *activation) bool {
	if _, releasing := h.own.Releasing(p); !releasing {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.letInLocked(p, chain, except)
}

// letInLocked is letIn, called with mu held.
func (h *Host) letInLocked(p uint32, chain string, except *activation) bool {
	return h.madeByTurnLocked(chain, func(a *activation) bool { return a != except && a.part == p })
}

// madeByTurnLocked reports whether a turn in an actor in memory here (of
// those in says) made the call on chain, directly or through other actors'
// turns, even on other nodes: a turn that cannot end before that call has.
// Never an OnSleep hook's chain. Called with mu held.
func (h *Host) madeByTurnLocked(chain string, in func(*activation) bool) bool {
	if chain == "" {
		return false
	}
	if _, fromSleep := h.sleepChains.Load(chainRoot(chain)); fromSleep {
		return false
	}
	for _, a := range h.actors {
		if in(a) && a.gate.heldAbove(chain) {
			return true
		}
	}
	return false
}

// notOwned is the error of a request for partition part (of what) that
// this node does not serve: UNAVAILABLE, retried. Without a lease it says
// why, which the client sees (during a quorum loss, every request said
// only that its partition was not this node's: a trial).
func (h *Host) notOwned(part uint32, of string) error {
	if !h.own.Leased() {
		return rivet.Errorf(rivet.ErrUnavailable, "partition %d%s is not owned by node %s: it holds no lease now (etcd does not answer it, or has no leader: the node's log says which); the partition moves, or comes back, once etcd answers", part, of, h.cfg.NodeID)
	}
	return rivet.Errorf(rivet.ErrUnavailable, "partition %d%s is not owned by node %s", part, of, h.cfg.NodeID)
}

// heldBy reports whether ref is in memory here with its gate held by chain.
func (h *Host) heldBy(ref Ref, chain string) bool {
	if chain == "" {
		return false
	}
	a := h.loaded(ref)
	return a != nil && a.gate.heldBy(chain)
}

// Handoff stops serving partition p so that another node can take it
// over: no new turn starts (requests get rivet.ErrUnavailable, which
// clients retry; except calls the turns in progress wait for, letIn, whose
// actors are handed off after them), the turns in progress finish, every
// workflow records where it stopped, and every write lands. Then the claim
// is released. If ctx ends first, the actors still in memory are evicted
// (their unwritten changes fail, fenced, once the claim is gone) and the
// claim is released all the same: a handoff that never ends would hold the
// partition hostage.
func (h *Host) Handoff(ctx context.Context, p uint32) error {
	_, err := h.handoff(ctx, p, true)
	return err
}

// handoff is Handoff; began says whether it took p out of service (false:
// p was not served, e.g. another handoff of it runs). hooks says whether
// the actors' OnSleep runs (not when their writes cannot commit).
func (h *Host) handoff(ctx context.Context, p uint32, hooks bool) (began bool, _ error) {
	if !h.own.BeginRelease(p) {
		return false, nil
	}
	h.endSubscriptions(func(s *Subscription) bool { return s.part == p }, "the actor's partition is moving from node %s")
	acts := h.actorsOf(p)
	// The next owner loads the partition's wakeups from storage.
	h.cancelTimersOf(p)
	later := false // actors of p were loaded after the handoff began
	for len(acts) > 0 {
		var wg sync.WaitGroup
		for _, a := range acts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.handoffActor(ctx, a, hooks)
			}()
		}
		wg.Wait()
		// A call of a chain that a turn of p held the handoff up with
		// may have loaded actors of p on its claim meanwhile (letIn):
		// they go too, until none is left. Looked for under mu, as letIn
		// decides: once none is left, none can be loaded, as only a turn
		// in an activation of p in memory lets a chain in.
		acts = h.actorsOf(p)
		later = later || len(acts) > 0
	}
	if later {
		h.cancelTimersOf(p) // their loads armed their timers again
	}
	// The claim goes even if ctx ended, and until it goes the partition
	// is served by no one: retry until it is released, or the lease (and
	// with it the claim) is gone, or the host stops.
	backoff := 100 * time.Millisecond
	for {
		rctx, cancel := context.WithTimeout(h.baseCtx, 10*time.Second)
		err := h.own.FinishRelease(rctx, p)
		cancel()
		if err == nil {
			return true, nil
		}
		h.log.Warn("releasing a handed-off partition failed; retrying", zap.Uint32("partition", p), zap.Error(err))
		select {
		case <-h.baseCtx.Done():
			return true, fmt.Errorf("release partition %d: %w", p, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// actorsOf returns the activations of partition p in memory.
func (h *Host) actorsOf(p uint32) []*activation {
	h.mu.Lock()
	defer h.mu.Unlock()
	var acts []*activation
	for _, a := range h.actors {
		if a.part == p {
			acts = append(acts, a)
		}
	}
	return acts
}

// cancelTimersOf drops the wakeups of partition p's actors.
func (h *Host) cancelTimersOf(p uint32) {
	h.timers.cancelIf(func(ref Ref) bool {
		part, err := h.PartitionOf(ref)
		return err == nil && part == p
	})
}

// stepGrace is how long step bodies in flight may run on when their actors
// leave within ctx: StepGrace, and half the time left at most, as the
// actors' leaving (OnSleep, their last writes) needs the rest.
func (h *Host) stepGrace(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return min(h.cfg.StepGrace, time.Until(dl)/2)
	}
	return h.cfg.StepGrace
}

// finishSteps is finishStep for every actor in memory, for a stop: their
// bodies share one grace.
func (h *Host) finishSteps(ctx context.Context) {
	h.mu.Lock()
	acts := make([]*activation, 0, len(h.actors))
	for _, a := range h.actors {
		acts = append(acts, a)
	}
	h.mu.Unlock()
	var busy []*wfRunner
	for _, a := range acts {
		select {
		case <-a.ready:
			if a.loadErr == nil {
				if r := a.leave(); r != nil {
					busy = append(busy, r)
				}
			}
		default: // still loading: its run has not started
		}
	}
	if len(busy) == 0 {
		return
	}
	t := time.NewTimer(h.stepGrace(ctx))
	defer t.Stop()
	for _, r := range busy {
		select {
		case <-r.done:
		case <-t.C:
			return // cancelWf cancels the rest
		case <-ctx.Done():
			return
		}
	}
}

// handoffActor deactivates one actor of a partition being handed off.
func (h *Host) handoffActor(ctx context.Context, a *activation, hooks bool) {
	select {
	case <-a.ready:
	case <-ctx.Done():
		h.evict(a)
		return
	}
	// Its tasks end first, without the gate: they may be in a call into
	// the actor (which the partition's release now refuses); then those
	// of the turns that ended meanwhile.
	deadline := a.tasksDeadline()
	endTasks := func() {
		if hooks {
			a.endTasksWithin(ctx, deadline)
		} else {
			a.endTasks()
		}
	}
	endTasks()
	// The workflow stops before the turn is taken: a step of it may hold
	// the turn, for as long as its timeout, and the whole partition is out
	// of service until every actor in it has left. A step body in flight
	// gets StepGrace to end and commit (finishStep); cancelled past it,
	// its attempt runs again on the next owner, as after a crash (a step
	// that ignores its context still runs to its end).
	if hooks {
		a.finishStep(ctx)
	} else {
		a.cancelWorkflow() // its writes cannot commit
	}
	chain := h.newChain()
	if err := a.gate.acquire(ctx, chain); err != nil {
		h.evict(a)
		return
	}
	defer a.gate.release(chain)
	endTasks()
	a.stopWorkflow()
	// The gate, or the tasks, may have kept it past the lease's local
	// deadline (a stall before the watchdog ran): the partition's next
	// owner may have woken the actor, and OnSleep would run at once with
	// its turns. It leaves memory without it, as on a lost claim.
	if hooks && !a.stopped.Load() && a.claimHeld() {
		h.sleep(ctx, a, chain)
	}
	// Stopped before the waiters hear of it: a sender waiting for its
	// message's completion then knows the actor moved (UNAVAILABLE, and
	// its message waits on the next owner) rather than failed.
	a.stopped.Store(true)
	a.failWaiters()
	if err := a.waitCommitted(ctx, a.currentVersion()); err != nil {
		h.evict(a)
		return
	}
	a.closeVars()
	h.remove(a)
}

// callChain is the chain a call of this client's goes out on: its turn's,
// or for a client of no turn (a KeepAwake task's) a new root, as a
// client's call gets one (turnChain): the call re-enters nothing and
// waits for the gate as a client's does, but it is an actor's call, not
// refused as overloaded (shedCall): the task holds its goroutine either
// way, and its client does not retry.
func (c *hostClient) callChain() string {
	if c.chain != "" {
		return c.chain
	}
	return c.h.newChain()
}

// queryCheck is what a query found, for checkQuery (Config.CheckQueries):
// the state as JSON, and how many times it had been saved.
type queryCheck struct {
	found []byte
	saves uint64
}

// beginQueryCheck takes what a query finds; nil if the state does not
// encode (its MarshalJSON fails or panics): not checked.
func (a *activation) beginQueryCheck(state any) *queryCheck {
	b, err := marshalGuarded(state)
	if err != nil {
		return nil
	}
	return &queryCheck{found: b, saves: a.stateSaves}
}

// marshalGuarded is json.Marshal, a panic of a MarshalJSON's its error.
func marshalGuarded(v any) (b []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("encoding it panicked: %v", r)
		}
	}()
	return json.Marshal(v)
}

// checkQuery undoes a read-only action's change to its actor's state,
// which found it as qc says, and says what it did (Config.CheckQueries);
// nil if it changed nothing. A change is one its JSON shows, and that
// decoding both sides confirms (an encoding whose order varies, as a set
// kept in a map may give, is no change). A save meanwhile (the query
// called a state-changing action of its own actor, which re-entered its
// turn and saved the state, the query's change with its own) leaves
// nothing unsaved: nothing is checked then. A commit of other writes (a
// message the query enqueued) does not save the state, and is no reason
// to look away. The undo is in place (resetStateTo): an outer turn of the
// chain (the query re-entered it) holds the pointer, and its own changes,
// made before its call, stay.
func (a *activation) checkQuery(action string, state any, qc *queryCheck) error {
	if a.stateSaves != qc.saves {
		return nil
	}
	after, err := marshalGuarded(state)
	if err == nil && bytes.Equal(after, qc.found) {
		return nil
	}
	if err == nil && a.sameDecoded(after, qc.found) {
		return nil
	}
	// state is a.state: a query beside a step's body, on a copy, is not
	// checked.
	a.resetStateTo(qc.found, "undoing a query's change to the state failed: deactivating")
	return rivet.Reasonf(rivet.ErrInternal, "actor", "query_changed_state",
		"read-only action %s changed the state of %s (undone): a query (rivet.Query) must not, as its change is not saved; make it an action (rivet.Action) if it must change the state", action, a.describe())
}

// sameDecoded reports whether two encodings of the actor's state decode
// to equal values.
func (a *activation) sameDecoded(x, y []byte) bool {
	same := false
	_ = a.h.guardUser(a.ref, "the state's decoder", func() error {
		dx, err := a.spec.DecodeState(x)
		if err != nil {
			return err
		}
		dy, err := a.spec.DecodeState(y)
		if err != nil {
			return err
		}
		same = reflect.DeepEqual(dx, dy)
		return nil
	})
	return same
}
