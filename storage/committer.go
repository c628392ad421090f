package storage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// CommitterConfig configures a Committer.
type CommitterConfig struct {
	// MaxInFlight bounds the packed transactions sent to the store and not
	// yet answered. More than one overlaps the store's round trips
	// (pipelining) at the cost of smaller batches. Zero means 2, the best
	// measured with embedded etcd on 2 cores: 64 callers committed about
	// 14k txns/s with 1, 20k with 2, 17k with 4; 256 callers about 43k with
	// either 2 or 4.
	MaxInFlight int
	// Limits bounds one packed transaction. The zero value means the
	// store's own Limits(); a smaller value is for tests.
	Limits Limits
	// Observer is told of every store transaction the Committer sends
	// (for metrics). Nil means none.
	Observer CommitObserver
	// StallAfter is how long a packed transaction may be in flight before
	// it stops counting against MaxInFlight, so that one stuck transaction
	// does not stop every other writer of the node. etcd holds a proposal
	// that was in flight when its leader died until its request timeout
	// (about 6 s): with every slot taken by such batches, workflows of
	// actors that had nothing to do with them stalled for seconds. Writes
	// that conflict with a stalled batch still wait for it. Zero means
	// 500 ms; at most MaxStalled batches are let through this way.
	StallAfter time.Duration
	// MaxStalled bounds the stalled batches in flight beyond MaxInFlight.
	// Zero means 8.
	MaxStalled int
	// SendTimeout bounds one packed transaction's time at the store, the
	// halves of a split included: past it the batch fails with
	// context.DeadlineExceeded, its outcome unknown (OnInDoubt). A caller
	// whose context has no deadline of its own is answered within about
	// SendTimeout of its txn going out, so that a store that stopped
	// answering does not hold its writers for ever. One timer per batch
	// rather than one per caller: a context with a timeout per txn was
	// about 4% of the CPU a workflow step costs the node outside etcd (its
	// timer, and its registration with the parent context under a lock
	// every committing actor took). Zero means 30 s.
	SendTimeout time.Duration
	// OnInDoubt is called with the fences of a packed transaction whose
	// outcome is unknown (the store failed it with an error that does not
	// say nothing was written: a lost connection, a timeout, an etcd
	// leader change). From then on the Committer fails every txn fenced on
	// one of them with ErrFenced, unsent: the doubtful write may still
	// apply later, and a later write of the same keys on the same claim
	// could land before it and be overwritten. The claims must be replaced
	// (released and claimed again, which changes the token) before their
	// partitions are written again; a doubtful write that applies after
	// that fails its fence. It runs on the commit path and must not block.
	// Nil means no txn is refused for this (and a late write may land on a
	// newer one).
	OnInDoubt func(fences []Fence)
}

// CommitObserver is told of the store transactions a Committer sends. Its
// method runs on the commit path, once per store transaction (never per
// caller's txn): it must be cheap and must not block.
type CommitObserver interface {
	// StoreCommit reports one store transaction: how many callers' txns
	// and ops it held, how long the store took, and its error. A batch
	// split after a failure reports each of its parts as well.
	StoreCommit(txns, ops int, took time.Duration, err error)
}

// DefaultCommitterConfig returns the configuration a node uses.
func DefaultCommitterConfig() CommitterConfig {
	return CommitterConfig{MaxInFlight: 2, StallAfter: 500 * time.Millisecond, MaxStalled: 8, SendTimeout: 30 * time.Second}
}

// CommitterStats are a Committer's counters since it was made.
type CommitterStats struct {
	// Committed counts txns that committed; Failed, txns that returned an
	// error (fenced, condition failed, too large, closed...).
	Committed, Failed int64
	// Batches counts packed transactions sent (split retries excluded), and
	// BatchedTxns the txns they held: BatchedTxns/Batches is the mean batch
	// size. MaxBatch is the largest batch.
	Batches, BatchedTxns, MaxBatch int64
	// Retries counts the store commits made to split failed batches.
	Retries int64
	// Stalls counts batches that stayed in flight past StallAfter.
	Stalls int64
	// Waiting is the number of txns queued and not yet in a batch.
	Waiting int
}

// Committer is a node's group committer: it packs the Txns of many
// concurrent callers into few store transactions, so that a node pays one
// store round trip (and one fsync) for many writes instead of one each.
//
// Packing takes the oldest waiting txn, then every other waiting txn that
// fits within the limits, with no delay: batches grow from the txns that
// pile up while earlier batches are in flight. With nothing in flight a
// batch goes at once; with batches in flight, another goes only once it
// would be as large as the largest of them, so that free slots do not fill
// with batches of one. Two txns that touch the same
// key (a write and a write, or a write and a Cond, or a key under a prefix
// delete) never share a batch, and a txn never overtakes an earlier one on
// the same key, even one in flight: the later waits. The same holds for
// fence owner keys only if Commit txns do not write them (Claim and Release
// do that).
//
// A packed transaction that fails because of one txn (fenced, condition
// failed, too large, invalid) is split in halves and each half retried, down
// to single txns, so that every caller gets the result its txn has alone.
//
// A batch in flight longer than StallAfter (an etcd proposal lost with its
// leader waits out etcd's request timeout) stops holding a slot: the txns
// that do not touch its keys go on in new batches.
//
// Goroutines: NewCommitter starts none. Run runs the packer in the calling
// goroutine and one goroutine per batch in flight (at most MaxInFlight +
// MaxStalled), and
// waits for all of them before it returns. Commit may be called from any
// goroutine, before or while Run runs.
type Committer struct {
	store       Store
	limits      Limits
	maxInFlight int
	stallAfter  time.Duration
	maxStalled  int
	sendTimeout time.Duration
	observer    CommitObserver // nil: none

	// kick wakes the packer: a txn was queued or a batch finished.
	kick chan struct{}

	// mu guards the fields below.
	mu      sync.Mutex
	queue   []*request // waiting, oldest first
	started bool
	stopped bool
	// flights are the batches in flight, oldest first.
	flights []*flight
	// nWaiting counts the queued requests in state reqWaiting.
	nWaiting int
	// busy holds the keys of the batches in flight.
	busy keySet
	// in and deferred are packLocked's scratch sets (the batch's keys, and
	// those of the txns it leaves behind), kept to reuse their maps.
	in, deferred keySet
	// doubted holds the fences of writes whose outcome is unknown
	// (OnInDoubt); txns fenced on them fail unsent. Tokens are never
	// reused, so an entry is never wrong, only kept: there is one per
	// doubtful write, a rare event.
	doubted   map[Fence]struct{}
	onInDoubt func([]Fence)

	committed, failed, batches, batched, maxBatch, retries, stalls atomic.Int64
}

// flight is a batch in flight.
type flight struct {
	size    int
	started time.Time
	stalled bool // counted in stalls
}

// request states, guarded by Committer.mu.
const (
	reqWaiting   = iota // in the queue
	reqTaken            // in a batch
	reqAbandoned        // its caller left while it waited; dropped by the packer
)

type request struct {
	txn   Txn
	done  chan error // buffered: the one result
	state int
	// refs counts r's holders, of two (recycled by the last: release):
	// the caller in CommitWith, until it has its result or has left, and
	// the committer, until no queue, batch or key set of its refers to r.
	refs atomic.Int32
	// The request's cost, its fence excepted (counted once per batch).
	compares, ops, bytes int
	fenceBytes           int
	// The keys it writes, reads (conds) and deletes by prefix, and the
	// directories that hold them (see keySet).
	writes, reads, prefixes []string
	scopes                  []string
	// scopeBuf holds scopes when they are few, as for an actor's txn
	// (its own directory, or that and an index's): one allocation less
	// per request.
	scopeBuf [2]string
	// keyBuf holds writes, reads and prefixes when they are few, as for a
	// workflow step's txn (its entry, maybe the state): one allocation
	// less per request.
	keyBuf [4]string
}

// NewCommitter returns a Committer over store. It starts no goroutine: call
// Run.
func NewCommitter(store Store, cfg CommitterConfig) *Committer {
	d := DefaultCommitterConfig()
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = d.MaxInFlight
	}
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = d.StallAfter
	}
	if cfg.MaxStalled <= 0 {
		cfg.MaxStalled = d.MaxStalled
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = d.SendTimeout
	}
	if cfg.Limits == (Limits{}) {
		cfg.Limits = store.Limits()
	}
	return &Committer{
		store:       store,
		limits:      cfg.Limits,
		maxInFlight: cfg.MaxInFlight,
		stallAfter:  cfg.StallAfter,
		maxStalled:  cfg.MaxStalled,
		sendTimeout: cfg.SendTimeout,
		observer:    cfg.Observer,
		onInDoubt:   cfg.OnInDoubt,
		doubted:     map[Fence]struct{}{},
		kick:        make(chan struct{}, 1),
		busy:        newKeySet(),
		in:          newKeySet(),
		deferred:    newKeySet(),
	}
}

// Stats returns the Committer's counters.
func (c *Committer) Stats() CommitterStats {
	c.mu.Lock()
	n := c.nWaiting
	c.mu.Unlock()
	return CommitterStats{
		Waiting:     n,
		Committed:   c.committed.Load(),
		Failed:      c.failed.Load(),
		Batches:     c.batches.Load(),
		BatchedTxns: c.batched.Load(),
		MaxBatch:    c.maxBatch.Load(),
		Retries:     c.retries.Load(),
		Stalls:      c.stalls.Load(),
	}
}

// Commit commits txn, packed with others, and returns once it is durable or
// has failed. Errors are those of Store.Commit for txn alone: ErrFenced,
// ErrConditionFailed, ErrTooLarge (txn alone exceeds the limits; it is not
// sent), ErrInvalidTxn; ErrClosed once Run has returned; or the store's own.
//
// If ctx ends while txn waits, Commit returns ctx.Err() and txn is not
// written. If ctx ends while txn is in flight, Commit returns ctx.Err() and
// txn may still commit; the store may read txn's slices until it has, so
// they must not be modified.
func (c *Committer) Commit(ctx context.Context, txn Txn) error {
	var done chan error
	return c.CommitWith(ctx, txn, &done)
}

// CommitWith is Commit with the channel its result comes on, made if *done
// is nil and kept for the caller's next commit (a channel per commit was a
// tenth of a workflow step's allocations); set to nil when a result may
// still come on it after CommitWith returned. The caller commits through
// one *done at a time.
func (c *Committer) CommitWith(ctx context.Context, txn Txn, done *chan error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if *done == nil {
		*done = make(chan error, 1)
	}
	r, err := c.newRequest(txn, *done)
	if err != nil {
		c.failed.Add(1)
		return err
	}
	defer r.release() // the caller's hold: r is not read after this returns
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		r.release() // never queued: the committer's hold too
		return ErrClosed
	}
	if c.doubtedLocked(txn.Fence) {
		c.mu.Unlock()
		r.release() // never queued: the committer's hold too
		c.failed.Add(1)
		return errDoubted
	}
	c.queue = append(c.queue, r)
	c.nWaiting++
	c.mu.Unlock()
	c.wake()
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		c.mu.Lock()
		taken := r.state == reqTaken
		if r.state == reqWaiting {
			r.state = reqAbandoned
			c.nWaiting--
		}
		c.mu.Unlock()
		if taken {
			select {
			case err := <-r.done: // it ended meanwhile
				return err
			default:
			}
			*done = nil // its result comes later
			// In flight: it may commit after its caller went on as if it
			// had not (an actor evicted and loaded again would read
			// storage without it, then write on top of it).
			c.doubt([]*request{r})
			return ctx.Err()
		}
		// Still queued: not even sent. Said so, or the caller would take
		// its context's error for an outcome unknown and wait to learn
		// one that cannot come.
		return fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
	}
}

func (c *Committer) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// requestPool recycles requests (release): one made for each txn was the
// largest allocation of a workflow step's commit, and a tenth of the CPU
// the committer cost it.
var requestPool = sync.Pool{New: func() any { return new(request) }}

// newRequest returns a request for txn held by its caller and by the
// committer: each calls release once done with it.
func (c *Committer) newRequest(txn Txn, done chan error) (*request, error) {
	if err := c.limits.Check(txn); err != nil {
		return nil, err
	}
	if err := checkTxns([]Txn{txn}); err != nil {
		return nil, err
	}
	r := requestPool.Get().(*request) // zero: release clears it
	r.txn, r.done = txn, done
	r.compares, r.ops, r.bytes = len(txn.Conds), len(txn.Ops), txn.Size()
	if txn.Fence.Token != 0 {
		r.fenceBytes = fenceBytes(txn.Fence.Partition)
	}
	r.indexKeys()
	r.refs.Store(2)
	return r, nil
}

// release drops one of r's two holders (request.refs). The last one
// recycles r: neither side reads r after its release, and a request
// reaches the pool only once both have released it, so a request taken
// from the pool is referred to by nothing else. Its caller releases it in
// CommitWith, on every return; the committer where r leaves its last
// queue, batch or key set: dropped from the queue (abandoned, doubted, or
// failed by Run's end), or at the end of send, once its keys are out of
// busy. Cleared for the pool, which must not keep the caller's ops.
func (r *request) release() {
	if r.refs.Add(-1) == 0 {
		r.txn, r.done = Txn{}, nil
		r.state, r.compares, r.ops, r.bytes, r.fenceBytes = 0, 0, 0, 0, 0
		r.writes, r.reads, r.prefixes, r.scopes = nil, nil, nil, nil
		r.scopeBuf, r.keyBuf = [2]string{}, [4]string{}
		requestPool.Put(r)
	}
}

// indexKeys sorts the keys of r's txn into those it reads, writes and
// deletes by prefix, and the directories that hold them.
func (r *request) indexKeys() {
	// One array for the three lists (a step's txn has two or three keys):
	// reads first, then writes from the front of the rest and prefixes
	// from its back.
	nc, no := len(r.txn.Conds), len(r.txn.Ops)
	var keys []string
	if nc+no <= len(r.keyBuf) {
		keys = r.keyBuf[:nc+no]
	} else {
		keys = make([]string, nc+no)
	}
	for i, cd := range r.txn.Conds {
		keys[i] = cd.Key
	}
	w, p := nc, nc+no
	for _, o := range r.txn.Ops {
		if o.Kind == OpDeletePrefix {
			p--
			keys[p] = o.Key
		} else {
			keys[w] = o.Key
			w++
		}
	}
	r.reads = keys[:nc:nc]
	r.writes = keys[nc:w:w]
	r.prefixes = keys[p:]
	r.scopes = scopesOf(r)
}

// Run packs and sends batches until ctx is done. Then it fails the waiting
// txns with ErrClosed, cancels the batches in flight (their callers get the
// store's error; their txns may or may not have committed), waits for its
// goroutines and returns nil. Stop the writers before the Committer: a
// node drains its actors first, so that nothing is in flight. Run may be
// called once.
func (c *Committer) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("storage: Committer.Run called twice")
	}
	c.started = true
	c.mu.Unlock()

	var wg sync.WaitGroup
	defer wg.Wait()
	stallTimer := time.NewTimer(time.Hour)
	defer stallTimer.Stop()
	for ctx.Err() == nil {
		c.mu.Lock()
		now := time.Now()
		for c.roomLocked(now) && c.worthSendingLocked(now) {
			b := c.packLocked()
			if len(b) == 0 {
				break
			}
			f := &flight{size: len(b), started: now}
			c.flights = append(c.flights, f)
			for _, r := range b {
				c.busy.add(r)
			}
			wg.Go(func() { c.send(ctx, b, f) })
		}
		// Txns left waiting behind batches in flight are looked at again
		// when the oldest of those would count as stalled (at the cap of
		// stalled batches, only a batch's end can make room: it kicks).
		wait := time.Hour
		if c.nWaiting > 0 && len(c.flights) < c.maxInFlight+c.maxStalled {
			for _, f := range c.flights {
				if !c.stalledLocked(f, now) {
					wait = f.started.Add(c.stallAfter).Sub(now)
					break
				}
			}
		}
		c.mu.Unlock()
		stallTimer.Reset(wait)

		select {
		case <-c.kick:
		case <-stallTimer.C:
		case <-ctx.Done():
		}
	}

	c.mu.Lock()
	c.stopped = true
	for _, r := range c.queue {
		if r.state == reqWaiting {
			// Answered under mu, with the state (r.done is buffered): a
			// caller leaving meanwhile that saw reqTaken and no answer
			// would take its never-sent txn for one in flight, and put
			// its claim in doubt.
			r.state = reqTaken
			c.finish(r, ErrClosed)
		}
		r.release() // out of the queue, in no batch
	}
	c.queue = nil
	c.nWaiting = 0
	c.mu.Unlock()
	return nil
}

// worthSendingLocked reports whether to pack a batch now. With nothing in
// flight, any waiting txn is worth sending at once. With batches in flight,
// a new one is sent only if it would be no smaller than the largest of
// them; otherwise the waiting txns wait for a batch to finish and go in one
// larger batch. Sending every txn as soon as a slot is free would fill the
// slots with batches of one or two (the first callers back from the last
// batch), each paying a whole store round trip.
func (c *Committer) worthSendingLocked(now time.Time) bool {
	if c.nWaiting == 0 {
		return false
	}
	largest := 0
	for _, f := range c.flights {
		if !c.stalledLocked(f, now) {
			largest = max(largest, f.size)
		}
	}
	return c.nWaiting >= largest
}

// stalledLocked reports whether f has been in flight past StallAfter, and
// counts it the first time it does.
func (c *Committer) stalledLocked(f *flight, now time.Time) bool {
	if !f.stalled && now.Sub(f.started) >= c.stallAfter {
		f.stalled = true
		c.stalls.Add(1)
	}
	return f.stalled
}

// roomLocked reports whether another batch may go: fewer than MaxInFlight
// batches in flight that have not stalled, and at most MaxStalled more.
func (c *Committer) roomLocked(now time.Time) bool {
	if len(c.flights) >= c.maxInFlight+c.maxStalled {
		return false
	}
	active := 0
	for _, f := range c.flights {
		if !c.stalledLocked(f, now) {
			active++
		}
	}
	return active < c.maxInFlight
}

// packLocked takes the next batch out of the queue.
func (c *Committer) packLocked() []*request {
	var (
		batch                []*request
		in, deferred         = &c.in, &c.deferred
		fences               []Fence
		compares, ops, bytes int
		full                 bool
	)
	in.reset()
	deferred.reset()
	keep := c.queue[:0]
	for _, r := range c.queue {
		if r.state == reqAbandoned {
			r.release() // out of the queue, in no batch
			continue
		}
		if c.doubtedLocked(r.txn.Fence) {
			// Queued before its claim's write went in doubt.
			r.state = reqTaken
			c.nWaiting--
			c.finish(r, errDoubted) // r.done is buffered: never blocks
			r.release()             // out of the queue, in no batch
			continue
		}
		if full {
			keep = append(keep, r)
			continue
		}
		if c.busy.conflicts(r) || in.conflicts(r) || deferred.conflicts(r) {
			// Keep it, and keep every later txn on its keys behind it.
			deferred.add(r)
			keep = append(keep, r)
			continue
		}
		newFence := r.txn.Fence.Token != 0 && !containsFence(fences, r.txn.Fence)
		rc, rb := r.compares, r.bytes
		if newFence {
			rc++
			rb += r.fenceBytes
		}
		if compares+rc > c.limits.MaxTxnOps || ops+r.ops > c.limits.MaxTxnOps || bytes+rb > c.limits.MaxTxnBytes {
			// The batch is full. Later txns wait rather than overtake
			// this one, so that the oldest txn is never starved.
			full = true
			keep = append(keep, r)
			continue
		}
		if newFence {
			fences = append(fences, r.txn.Fence)
		}
		compares, ops, bytes = compares+rc, ops+r.ops, bytes+rb
		in.add(r)
		r.state = reqTaken
		c.nWaiting--
		batch = append(batch, r)
	}
	clear(c.queue[len(keep):])
	c.queue = keep
	return batch
}

// send commits one batch, splitting it on failure, then frees its slot
// and keys.
func (c *Committer) send(ctx context.Context, b []*request, f *flight) {
	n := int64(len(b))
	c.batches.Add(1)
	c.batched.Add(n)
	for {
		m := c.maxBatch.Load()
		if n <= m || c.maxBatch.CompareAndSwap(m, n) {
			break
		}
	}
	sctx, cancel := context.WithTimeout(ctx, c.sendTimeout)
	c.commit(sctx, b, false)
	cancel()

	c.mu.Lock()
	if i := slices.Index(c.flights, f); i >= 0 {
		c.flights = slices.Delete(c.flights, i, i+1)
	}
	for _, r := range b {
		c.busy.remove(r)
	}
	c.mu.Unlock()
	for _, r := range b {
		r.release() // answered (commit), out of busy, and b ends here
	}
	c.wake()
}

// commit commits b as one store transaction; if it fails because of some of
// its txns, it commits each half apart, recursively, so that only the txns
// at fault fail.
func (c *Committer) commit(ctx context.Context, b []*request, retry bool) {
	if retry {
		// A half sent after the other half's outcome went in doubt must
		// not carry txns on its claims.
		if b = c.dropDoubted(b); len(b) == 0 {
			return
		}
		c.retries.Add(1)
	}
	txns := make([]Txn, len(b))
	ops := 0
	for i, r := range b {
		txns[i] = r.txn
		ops += r.ops
	}
	t0 := time.Now()
	err := c.store.Commit(ctx, txns...)
	if c.observer != nil {
		c.observer.StoreCommit(len(b), ops, time.Since(t0), err)
	}
	if err != nil && len(b) > 1 && splittable(err) {
		h := len(b) / 2
		c.commit(ctx, b[:h], true)
		c.commit(ctx, b[h:], true)
		return
	}
	if inDoubt(err) {
		// Before the callers hear of it and before send frees the keys:
		// no later txn on these claims may go out.
		c.doubt(b)
	}
	for _, r := range b {
		c.finish(r, err)
	}
}

// errDoubted fails the txns fenced on a claim that has a write in doubt.
var errDoubted = fmt.Errorf("%w: a write on this partition claim has an unknown outcome; the claim must be replaced first", ErrFenced)

// OutcomeUnknown reports whether a commit that failed with err may still
// have applied, or may apply later: every error but those that say nothing
// was written. (With CommitterConfig.OnInDoubt set, the committer reports
// the claims of such commits, so that they are replaced: then a commit
// fenced on a replaced claim applied before the replacement or never.)
func OutcomeUnknown(err error) bool { return inDoubt(err) }

// inDoubt reports whether err leaves a store transaction's outcome
// unknown: every error but those that say nothing was written.
func inDoubt(err error) bool {
	return err != nil && !splittable(err) && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrLeaseNotFound) &&
		!errors.Is(err, ErrRefused) && !errors.Is(err, ErrNotSent)
}

// doubt records the fences of b, whose outcome is unknown, and reports
// them to OnInDoubt; without OnInDoubt it does nothing.
func (c *Committer) doubt(b []*request) {
	if c.onInDoubt == nil {
		return
	}
	var fences []Fence
	c.mu.Lock()
	for _, r := range b {
		f := r.txn.Fence
		if f.Token == 0 || c.doubtedLocked(f) {
			continue
		}
		c.doubted[f] = struct{}{}
		fences = append(fences, f)
	}
	c.mu.Unlock()
	if len(fences) > 0 {
		c.onInDoubt(fences)
	}
}

// dropDoubted fails the requests of b fenced on a doubted claim and
// returns the others.
func (c *Committer) dropDoubted(b []*request) []*request {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.doubted) == 0 {
		return b
	}
	keep := make([]*request, 0, len(b))
	for _, r := range b {
		if c.doubtedLocked(r.txn.Fence) {
			c.finish(r, errDoubted)
			continue
		}
		keep = append(keep, r)
	}
	return keep
}

func (c *Committer) doubtedLocked(f Fence) bool {
	if f.Token == 0 || len(c.doubted) == 0 {
		return false
	}
	_, ok := c.doubted[f]
	return ok
}

// splittable reports whether err may be due to some txns of a batch only.
func splittable(err error) bool {
	return errors.Is(err, ErrFenced) || errors.Is(err, ErrConditionFailed) ||
		errors.Is(err, ErrTooLarge) || errors.Is(err, ErrInvalidTxn)
}

func (c *Committer) finish(r *request, err error) {
	if err == nil {
		c.committed.Add(1)
	} else {
		c.failed.Add(1)
	}
	r.done <- err
}

// keySet is the keys touched by a set of requests, counted so that
// requests can be removed again.
//
// The costly question is whether a prefix delete covers any key of the set:
// a node with many workflows pruning sends many prefix deletes, and a scan
// of every key in flight for each of them took most of the packer's time.
// Requests touch one or a few subtrees each (one actor's keys), so the set
// also indexes each request's scopes, the directories ('/'-terminated
// prefixes) that hold its keys: a prefix delete can only cover keys of
// requests with a scope above or below its own directory, and the set scans
// its keys only when such a request is there.
type keySet struct {
	// n counts the requests in the set.
	n                       int
	writes, reads, prefixes map[string]int
	// plens counts the prefixes by length, so that underPrefix looks up
	// a key's own prefixes of those lengths instead of scanning every
	// prefix (a node with many workflows pruning holds thousands).
	plens map[int]int
	// scopes counts the requests by scope; dirs counts, for every
	// non-empty directory d, the requests whose scope lies in d (d itself
	// included). Both are keyed by the directory's hash (dirHash): they
	// only answer mayHaveUnder, for which a collision is a false "may",
	// and hashing each level of a scope as it is scanned costs a few times
	// less than a string key per level (a step's txn has five or six).
	scopes, dirs map[uint64]int
}

func newKeySet() keySet {
	return keySet{
		writes: map[string]int{}, reads: map[string]int{}, prefixes: map[string]int{}, plens: map[int]int{},
		scopes: map[uint64]int{}, dirs: map[uint64]int{},
	}
}

// reset empties s and keeps its maps' room, for the packer's per-batch sets.
func (s *keySet) reset() {
	if s.writes == nil {
		*s = newKeySet()
		return
	}
	s.n = 0
	clear(s.writes)
	clear(s.reads)
	clear(s.prefixes)
	clear(s.plens)
	clear(s.scopes)
	clear(s.dirs)
}

// scopesOf returns r's scopes: for each first path segment among the keys
// r writes, reads or deletes by prefix, the longest directory
// ('/'-terminated prefix, or "") that holds all of them. Most txns touch
// one actor (one scope); an actor's creation also writes its index and
// wakeup entries (three scopes, not the root).
func scopesOf(r *request) []string {
	scopes := r.scopeBuf[:0]
	for _, ks := range [][]string{r.writes, r.reads, r.prefixes} {
		for _, k := range ks {
			merged := false
			for i, sc := range scopes {
				if n := commonDir(sc, k); n > 0 {
					scopes[i], merged = sc[:n], true
					break
				}
			}
			if !merged {
				scopes = append(scopes, k[:strings.LastIndexByte(k, '/')+1])
			}
		}
	}
	return scopes
}

// commonDir returns the length of the longest directory that holds both
// the directory dir and the key k ("" counts as none: 0).
func commonDir(dir, k string) int {
	n := 0
	for i := 0; i < len(dir) && i < len(k) && dir[i] == k[i]; i++ {
		if dir[i] == '/' {
			n = i + 1
		}
	}
	return n
}

// dirHash is FNV-1a, 64 bits, so that the hashes of every directory of a
// path come from one pass over it (forDirs).
const (
	dirHashBasis = 14695981039346656037 // the hash of ""
	dirHashPrime = 1099511628211
)

func dirHash(s string) uint64 {
	h := uint64(dirHashBasis)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * dirHashPrime
	}
	return h
}

// forDirs calls fn with the hash of every non-empty directory of scope,
// scope included (scope is "" or ends with '/').
func forDirs(scope string, fn func(dir uint64)) {
	h := uint64(dirHashBasis)
	for i := 0; i < len(scope); i++ {
		h = (h ^ uint64(scope[i])) * dirHashPrime
		if scope[i] == '/' {
			fn(h)
		}
	}
}

func (s *keySet) add(r *request) {
	s.n++
	for _, k := range r.writes {
		s.writes[k]++
	}
	for _, k := range r.reads {
		s.reads[k]++
	}
	for _, k := range r.prefixes {
		s.prefixes[k]++
		s.plens[len(k)]++
	}
	for _, sc := range r.scopes {
		s.scopes[dirHash(sc)]++
		forDirs(sc, func(d uint64) { s.dirs[d]++ })
	}
}

func (s *keySet) remove(r *request) {
	s.n--
	for _, k := range r.writes {
		dec(s.writes, k)
	}
	for _, k := range r.reads {
		dec(s.reads, k)
	}
	for _, k := range r.prefixes {
		dec(s.prefixes, k)
		if s.plens[len(k)]--; s.plens[len(k)] <= 0 {
			delete(s.plens, len(k))
		}
	}
	for _, sc := range r.scopes {
		dec(s.scopes, dirHash(sc))
		forDirs(sc, func(d uint64) { dec(s.dirs, d) })
	}
}

// dec takes one from k's count in m, and k out of m at zero.
func dec[K comparable](m map[K]int, k K) {
	if m[k]--; m[k] <= 0 {
		delete(m, k)
	}
}

// underPrefix reports whether k falls under one of s's prefix deletes.
func (s *keySet) underPrefix(k string) bool {
	for n := range s.plens {
		if n <= len(k) && s.prefixes[k[:n]] > 0 {
			return true
		}
	}
	return false
}

// mayHaveUnder reports whether some key or prefix of s may start with p;
// false is certain. A key under p lies in p's directory d, so its
// request's scope either lies in d too, or is a directory above d.
func (s *keySet) mayHaveUnder(p string) bool {
	d := p[:strings.LastIndexByte(p, '/')+1]
	if d == "" || s.scopes[dirHashBasis] > 0 {
		return true
	}
	// d's strict ancestors' hashes on the way to d's own.
	h := uint64(dirHashBasis)
	for i := 0; i < len(d); i++ {
		h = (h ^ uint64(d[i])) * dirHashPrime
		if d[i] == '/' && i < len(d)-1 && s.scopes[h] > 0 {
			return true
		}
	}
	return s.dirs[h] > 0
}

// conflicts reports whether r touches a key of s in a way whose order
// matters: any overlap that involves a write.
func (s *keySet) conflicts(r *request) bool {
	if s.n == 0 {
		return false
	}
	for _, k := range r.writes {
		if s.writes[k] > 0 || s.reads[k] > 0 || s.underPrefix(k) {
			return true
		}
	}
	for _, k := range r.reads {
		if s.writes[k] > 0 || s.underPrefix(k) {
			return true
		}
	}
	for _, p := range r.prefixes {
		// A prefix of s above p (or p itself).
		if s.underPrefix(p) {
			return true
		}
		if !s.mayHaveUnder(p) {
			continue
		}
		// Below p: a prefix, a write or a read of s.
		for q := range s.prefixes {
			if strings.HasPrefix(q, p) {
				return true
			}
		}
		for k := range s.writes {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
		for k := range s.reads {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
	}
	return false
}
