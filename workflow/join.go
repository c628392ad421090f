package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Branches are the branches of a Join, by name.
type Branches[S, T any] map[string]func(*Ctx[S]) (T, error)

// Join runs every branch concurrently, each in its own scope (entries of
// branch b live under "name/b"), waits for all of them, and returns their
// values by branch name, as decoded back from their JSON (live as on
// replay; a value that does not decode back fails its branch when it
// returns, as it fails a step). A failing branch does not cancel the
// others; if any failed, Join returns a *JoinError with each failure by
// branch name.
// A settled join is replayed from its record without running the branches,
// except while a rollback checkpoint is active: then its branches replay
// against their records (nothing runs again) so that the rollback handlers
// of their steps are known after a restart. A branch that fails while
// others go on has its failure recorded at once (in an entry of its own,
// on a HeldBranchesHost that says so; in the join's record otherwise),
// and a join replayed before it settled holds it: the branch replays
// against its record as a settled one does, and fails as recorded even if
// its code changed since.
// A join with no branches (a fan-out sized at run time that has nothing to
// fan out) returns an empty map at once, as Promise.allSettled([]) does;
// its record holds no branches. A race needs a branch (one with none could
// never be decided): with none it fails the run (ErrInvalid).
//
// A join's record holds every branch's name and status, written in one
// store transaction as the join opens and when it settles; its branches'
// values go with it while they are small together (MaxRidingBytes), and
// are committed apart otherwise (by a host that has them so,
// JoinOutputsHost), in entries of their own of about that size each
// ("name/~outputs/N"), before the record: a fan-out of tens of
// thousands of branches, of values of any size, settles (a trial's 20,000
// branches failed there, after they had all run, with "too large for one
// transaction"). The names alone are bounded (MaxBranchBytes, about
// 29,000 branches of 10-byte names): a join over it fails as it opens,
// before any branch runs, with a *BranchLimitError. Fan out in batches (a
// Loop of joins of a few thousand) past that.
func Join[S, T any](c *Ctx[S], name string, branches Branches[S, T]) (map[string]T, error) {
	names := make([]string, 0, len(branches))
	for n := range branches {
		names = append(names, n)
	}
	sort.Strings(names)
	runs := make([]func(*cx) (json.RawMessage, error), len(names))
	back := make([]T, len(names))
	for i, n := range names {
		runs[i] = typedBranch(branches[n], &back[i])
	}
	path, e, fresh, err := c.x.join(name, names, runs)
	if err != nil {
		return nil, err
	}
	if e.Status == StatusFailed {
		return nil, joinErrorOf(e)
	}
	out := make(map[string]T, len(names))
	for i, n := range names {
		if fresh {
			// Each branch's value as decoded back from the output it
			// made, which the entry records.
			out[n] = back[i]
			continue
		}
		var v T
		if err := decodeInto(joinPath(path, n), e.Branches[n].Output, &v); err != nil {
			return nil, err
		}
		out[n] = v
	}
	return out, nil
}

// RaceBranch is one branch of a Race.
type RaceBranch[S, T any] struct {
	Name string
	Run  func(*Ctx[S]) (T, error)
}

// Race runs the branches concurrently; the first to return without error
// wins, and Race returns its name and value. The others are cancelled
// through their context (their primitives return ErrCancelled) and, once
// they have stopped, their history is deleted. If every branch fails, Race
// returns a *RaceError. The winner is recorded, so a replay returns it at
// once. Its value is returned as decoded back from its JSON, live as on
// replay: a branch whose value does not decode back fails when it returns,
// as a step with such a value does, and cannot win.
//
// A branch that holds queue messages it took and has not completed wins if
// it finishes, even after another branch finished, and no other branch
// takes messages meanwhile, so that the branch that took a message is the
// one that handles it. If it fails instead (or, rarely, is cancelled
// holding them), the messages it took and did not complete go back to
// their queues, ahead of the messages sent since, in the commit that
// records the winner and deletes the losers' history: they are delivered
// again, never lost. A completed message (Message.Complete; a plain
// Next's message can be completed too) is handled, and never goes back: once every
// message a branch took is completed, it holds the race no more: a branch
// that finished before it (by workflow time) wins, and it, waiting at its
// next receive, is cancelled. Complete a message once it is handled: from
// then on its branch may lose before it does anything more.
//
// So a timer raced against a loop that takes a message, handles it and
// completes it (an update handler while a timer runs) wins when the
// timer runs out, between two messages. A loop of plain Next whose
// messages are never completed holds the race open for good from its
// first message on: the timer's finish never wins, and the workflow waits
// on the loop's queue. Complete each message, or gather until a deadline
// without a race: a loop of Next (each with a name of its own) whose
// Timeout is what is left of the deadline, deadline.Sub(c.Now()) (Ctx.Now
// is workflow time: a replay gets the same), ending when Next returns
// ErrTimeout.
//
// Branches that finish
// while others still replay recorded entries are ranked by workflow time,
// then declaration order, so that a replay after a crash picks the same
// winner. A branch that fails while others go on has its failure recorded
// at once, and a race replayed before it was decided holds it: the branch
// replays against its record, and fails as recorded even if its code
// changed since, so that it cannot win a race it had lost.
func Race[S, T any](c *Ctx[S], name string, branches []RaceBranch[S, T]) (winner string, value T, err error) {
	names := make([]string, len(branches))
	runs := make([]func(*cx) (json.RawMessage, error), len(branches))
	back := make([]T, len(branches))
	for i, b := range branches {
		names[i] = b.Name
		runs[i] = typedBranch(b.Run, &back[i])
	}
	path, e, w, err := c.x.race(name, names, runs)
	if err != nil {
		return "", value, err
	}
	if e.Status == StatusFailed {
		return "", value, raceErrorOf(e, names)
	}
	if w >= 0 {
		// The winner's value as decoded back from the output it made,
		// which the entry records.
		return e.Winner, back[w], nil
	}
	if err := decodeInto(joinPath(path, e.Winner), e.Output, &value); err != nil {
		return "", value, err
	}
	return e.Winner, value, nil
}

// typedBranch returns the run of branch f, which records f's value as
// JSON and decodes it back into *back, as a replay will read it: a value
// that does not decode back fails the branch when it returns, naming its
// type, as a step with such a value fails (roundTrip), rather than leave a
// settled join or race with a value that no replay reads. *back is then
// the value the join or race returns for the branch, live as on replay.
func typedBranch[S, T any](f func(*Ctx[S]) (T, error), back *T) func(*cx) (json.RawMessage, error) {
	return func(bx *cx) (json.RawMessage, error) {
		var v T
		err := callThread(bx.t, func() error {
			var err error
			v, err = f(&Ctx[S]{x: bx})
			return err
		})
		if breaks(err) {
			return nil, fmt.Errorf("%w: Break reached the end of branch %q (it ends only the Loop or LoopWith whose body returns it)", ErrInvalid, bx.sc.pathOf())
		}
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("workflow: branch value does not marshal to JSON: %w", err)
		}
		var zero T
		*back = zero
		if err := json.Unmarshal(b, back); err != nil {
			return nil, fmt.Errorf("workflow: branch value of type %T does not decode back from its JSON, so no replay could read it: %w", v, err)
		}
		return b, nil
	}
}

// FailedAt returns the path of the entry whose failure err reports (a
// step, join or race), or NoEntry if it names none.
func FailedAt(err error) string {
	var (
		se *StepError
		je *JoinError
		re *RaceError
	)
	switch {
	case errors.As(err, &se):
		return se.Path
	case errors.As(err, &je):
		return je.Path
	case errors.As(err, &re):
		return re.Path
	}
	return NoEntry
}

func joinErrorOf(e *Entry) *JoinError {
	je := &JoinError{Path: e.Path, Errors: map[string]error{}}
	for n, b := range e.Branches {
		if b.Status == StatusFailed {
			je.Errors[n] = b.Error
		}
	}
	return je
}

func raceErrorOf(e *Entry, names []string) *RaceError {
	re := &RaceError{Path: e.Path}
	for _, n := range names {
		if b := e.Branches[n]; b.Error != nil {
			re.Errors = append(re.Errors, BranchError{Name: n, Err: b.Error})
		}
	}
	return re
}

// branchResult is how one branch thread ended.
type branchResult struct {
	out     json.RawMessage
	err     error
	pending []HistoryWrite
	now     time.Time
}

// checkBranches validates the branch names of a join or race.
func checkBranches(kind Kind, name string, names []string) error {
	if len(names) == 0 && kind != KindJoin {
		return fmt.Errorf("%w: %s %q has no branches", ErrInvalid, kind, name)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if err := validName(n); err != nil {
			return err
		}
		if seen[n] {
			return fmt.Errorf("%w: %s %q has two branches named %q", ErrInvalid, kind, name, n)
		}
		seen[n] = true
	}
	return nil
}

// sameBranches reports a branch added to or removed from the code since the
// entry was recorded.
func sameBranches(e *Entry, names []string) error {
	inCode := map[string]bool{}
	for _, n := range names {
		inCode[n] = true
		if _, ok := e.Branches[n]; !ok {
			return &DivergenceError{Path: joinPath(e.Path, n), Expected: fmt.Sprintf("no branch %q in %s %q", n, e.Kind, e.Path), Found: "a new branch"}
		}
	}
	recorded := make([]string, 0, len(e.Branches))
	for n := range e.Branches {
		recorded = append(recorded, n)
	}
	sort.Strings(recorded)
	for _, n := range recorded {
		if !inCode[n] {
			return &DivergenceError{Path: joinPath(e.Path, n), Expected: fmt.Sprintf("branch %q of %s %q", n, e.Kind, e.Path), Found: "no such branch"}
		}
	}
	return nil
}

// open starts a join or race at name: returns its entry, recorded or new,
// after committing what the thread has pending, so that no branch commit can
// reach storage before what the code did before the fork.
func (x *cx) open(kind Kind, name string, names []string) (string, *Entry, bool, error) {
	t, r := x.t, x.t.r
	if err := checkBranches(kind, name, names); err != nil {
		return "", nil, false, err
	}
	path, seq, err := x.sc.claim(string(kind), name)
	if err != nil {
		return "", nil, false, err
	}
	e, err := r.visit(x.sc, path, kind)
	if err != nil {
		return path, nil, false, err
	}
	if e != nil {
		if err := sameBranches(e, names); err != nil {
			return path, nil, false, err
		}
		if e.Status != StatusPending {
			r.visitTree(path)
			t.advance(e.Time)
			return path, e, true, nil
		}
		t.advance(e.Time)
		return path, e, false, t.commit()
	}
	if err := checkBranchBytes(kind, path, names); err != nil {
		// Before anything is recorded: refused, the fan-out runs nothing.
		return path, nil, false, err
	}
	e = &Entry{Path: path, Seq: seq, TryPlaces: x.sc.tryPlaces, Kind: kind, Status: StatusPending, Branches: map[string]Branch{}}
	for _, n := range names {
		e.Branches[n] = Branch{Status: StatusPending}
	}
	stamped := t.now.IsZero()
	if stamped {
		// No entry the code passed recorded a time (the join or race
		// opens before any step, sleep or receive): this one records
		// the host's, which its branches and the code after it read
		// (Ctx.Now, and the engine's own times: a race's floors) the
		// same on every replay, not the time of the run that replays
		// (the settled entry's time would be zero otherwise). Recorded with the entry, which
		// commits at once, not when it settles: a join's settled record
		// may wait for the next commit and be lost, and the join settle
		// again later.
		e.Time = t.stamp()
	}
	if len(names) == 0 {
		// A join with nothing to run settles as it opens. Its record
		// waits for the next commit, as a settled join's does (a replay
		// that finds none settles it again the same way), unless it
		// holds the host's time, which a replay would read later.
		e.Status = StatusCompleted
		if stamped {
			if err := t.commit(HistoryWrite{Put: e}); err != nil {
				return path, e, false, err
			}
		} else {
			e.Time = t.now
			t.record(HistoryWrite{Put: e})
		}
		t.advance(e.Time)
		return path, e, true, nil
	}
	if err := t.commit(HistoryWrite{Put: e}); err != nil {
		return path, e, false, err
	}
	t.advance(e.Time)
	return path, e, false, nil
}

// replaySettled re-runs the branches idx of a settled join or race against
// their records, once a rollback checkpoint is active, only so that the
// rollback handlers of their steps are registered: a replay does not
// otherwise re-enter a settled scope, and a rollback after a restart would
// not know those handlers. Every entry is recorded, so nothing runs for
// real; the scope is sealed, so changed code cannot add work to it. A
// branch whose code no longer matches its record stops there, without
// failing the workflow (which never re-entered settled scopes before): the
// handlers it did not reach stay unknown, and a rollback that needs them
// fails naming the step (ErrRollbackNotReplayed). The scope's entries are
// already marked visited, so only new entries and kind changes show.
func (x *cx) replaySettled(path string, names []string, runs []func(*cx) (json.RawMessage, error), idx []int) error {
	t, r := x.t, x.t.r
	if !t.checkpoint || len(idx) == 0 {
		return nil
	}
	r.mu.Lock()
	r.seal(path)
	r.mu.Unlock()
	results := make([]branchResult, len(idx))
	t.forked.Store(true)
	t.fork(len(idx), func(int) *thread { return t.child(t.ctx, nil) }, func(i int, c *thread) {
		results[i] = runBranch(c, joinPath(path, names[idx[i]]), runs[idx[i]])
	})
	t.forked.Store(false)
	for i := range results {
		if errors.Is(results[i].err, ErrDiverged) {
			results[i].err = nil
		}
	}
	return t.settled(results, false)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// child returns a thread for a branch of t.
func (t *thread) child(ctx context.Context, slot *raceSlot) *thread {
	// Primed in the races t runs under (t began the join or race), not
	// in a race of its own, whose branches start unprimed.
	c := &thread{r: t.r, ctx: ctx, now: t.now, checkpoint: t.checkpoint, primed: len(t.races)}
	c.races = append(c.races, t.races...)
	if slot != nil {
		c.races = append(c.races, *slot)
	}
	return c
}

// runBranch runs one branch's function in its scope and checks that the
// scope is done.
func runBranch(c *thread, path string, run func(*cx) (json.RawMessage, error)) branchResult {
	bx := newScopedCx(c, path)
	out, err := run(bx)
	if cerr := bx.close(); cerr != nil {
		err = cerr
	}
	if err == nil {
		err = c.r.checkEnd(path)
	}
	return branchResult{out: out, err: err, pending: c.pending, now: c.now}
}

// fatal reports an error that must stop the whole workflow, not just fail
// a branch.
func fatal(err error) bool {
	return err != nil && isControl(err) && !errors.Is(err, ErrCancelled) && !errors.Is(err, ErrEvicted)
}

// settled returns the error that stops the parent after its branches
// exited: eviction, a branch's fatal error, or the parent's own
// cancellation. decided says that a race has its winner.
func (t *thread) settled(results []branchResult, decided bool) error {
	if t.r.ctx.Err() != nil {
		// A branch the stop cut short said what wakes the run (its wait,
		// or at once if it was at work). But if the race has a winner
		// (decided), or no branch was cut short, the join's or race's
		// record is work left to do at once: without asking for it, the
		// run would yield waiting for its losers' waits, or for nothing,
		// and sleep until a message came.
		cut := slices.ContainsFunc(results, func(res branchResult) bool { return errors.Is(res.err, ErrEvicted) })
		return t.stopped(decided || !cut)
	}
	for _, res := range results {
		if fatal(res.err) {
			return res.err
		}
	}
	return t.stopped(false)
}

// runHeld runs a branch of a join or race. One whose failure the pending
// entry recorded before a restart (recorded failed) runs sealed against its
// record, so that changed code adds no work to it while its entries replay
// (its steps' rollback handlers register, its messages are taken as they
// were), and ends with its recorded failure whatever the code now returns:
// held reports that. cancelledToo: a race's branch cancelled meanwhile is
// held too.
func runHeld(c *thread, path string, recorded Branch, run func(*cx) (json.RawMessage, error), cancelledToo bool) (res branchResult, held bool) {
	r := c.r
	failed := recorded.Status == StatusFailed
	if failed {
		r.mu.Lock()
		r.seal(path)
		r.mu.Unlock()
	}
	res = runBranch(c, path, run)
	err := res.err
	if !failed || err != nil && isControl(err) && !errors.Is(err, ErrDiverged) && !(cancelledToo && errors.Is(err, ErrCancelled)) {
		return res, false
	}
	r.visitTree(path)
	res.err = recorded.Error
	if recorded.Error == nil {
		res.err = &RecordedError{Message: "unknown error"}
	}
	return res, true
}

// pendingHold records, in a pending join's or race's entry, the failures of
// branches that end while others go on, so that a restart holds them
// failed (runHeld) instead of running their code again, which may have
// changed since.
type pendingHold struct {
	mu      sync.Mutex // orders the commits of current
	current *Entry     // the entry as last committed
	// path is current's, kept apart: the held-apart path reads it without
	// mu while the in-record path replaces current under it.
	path string
	// apart, asked at each failure (a join's, on a HeldBranchesHost,
	// whose gate may close while the join runs: a replay reads both
	// ways): that failure goes to an entry of its own, not to current,
	// rewritten whole for each. wrote: one was written (or may have
	// been: its commit failed), which the settle deletes.
	apart func() bool
	wrote atomic.Bool
}

// record commits the failure of branch name with the entries it rests on
// (res.pending becomes what is left). Not committed (the run stopped
// meanwhile): the entry's own record, or a replay, takes what is left.
func (h *pendingHold) record(c *thread, name string, err error, res *branchResult) {
	b := Branch{Status: StatusFailed, Error: record(err), FailedAt: FailedAt(err)}
	if h.apart != nil && h.apart() {
		// Its own path: no order to keep with the other branches'.
		// Completed: the record is, whatever the branch's status (a
		// failed entry would be one a retry deletes, unholding the
		// branch where the record's status would have stayed).
		h.wrote.Store(true)
		c.commit(HistoryWrite{Put: &Entry{Path: heldPath(h.path, name), Kind: KindHeldBranch, Status: StatusCompleted, Branches: map[string]Branch{name: b}}})
		res.pending = c.pending
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	next := h.current.clone()
	next.Branches[name] = b
	if c.commit(HistoryWrite{Put: next}) == nil {
		h.current = next
	}
	res.pending = c.pending
}

// HeldScope is the scope, under a pending join's path, of the entries
// that record the failures of its branches that failed while others went
// on (KindHeldBranch, pendingHold.apart): '~' starts no name, so no
// branch takes it, and a host deleting the join's tree deletes them. A
// scope with no entry of its own, as a join's outputs' (outputsScope).
// Exported for hosts, which plan retries around it.
const HeldScope = "~held"

// heldPath is the path of the held failure of branch of join.
func heldPath(join, branch string) string {
	return join + "/" + HeldScope + "/" + branch
}

// heldBranches returns e, a pending join's record, with the failures that
// its held entries record (a branch the record holds pending), and marks
// those entries visited; found says that there are some, for the settle to
// delete.
func (r *run) heldBranches(e *Entry) (held *Entry, found bool, err error) {
	scope := joinPath(e.Path, HeldScope)
	r.mu.Lock()
	defer r.mu.Unlock()
	paths := r.hist.inTree(scope)
	if len(paths) == 0 {
		return e, false, nil
	}
	held = e.clone()
	for _, p := range paths {
		he := r.hist.Get(p)
		if he == nil {
			continue
		}
		if he.Kind != KindHeldBranch {
			return nil, true, &DivergenceError{Path: p, Expected: fmt.Sprintf("a held branch failure of join %q", e.Path), Found: describe(he)}
		}
		for n, b := range he.Branches {
			if cur, ok := held.Branches[n]; ok && cur.Status == StatusPending && b.Status == StatusFailed {
				held.Branches[n] = b
			}
		}
	}
	r.hist.VisitTree(scope)
	return held, true, nil
}

// cancelled commits, in the pending race's entry, that branch name was
// cancelled before the decision as one that could no longer win. It
// commits through t, the race's own thread, which waits for the branches
// (the branch's own is cancelled); not committed (the run stopped
// meanwhile), a replay may run the branch's catching up again, as before.
func (h *pendingHold) cancelled(t *thread, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	next := h.current.clone()
	next.Branches[name] = Branch{Status: StatusCancelled}
	if t.commit(HistoryWrite{Put: next}) == nil {
		h.current = next
	}
}

// join runs a join's branches, or replays its record: fresh says that its
// settled entry holds the outputs the branches made in this call, which a
// Join returns as they decoded back (typedBranch).
func (x *cx) join(name string, names []string, runs []func(*cx) (json.RawMessage, error)) (path string, e *Entry, fresh bool, err error) {
	if err := x.begin("join", name); err != nil {
		return "", nil, false, err
	}
	defer x.end()
	t := x.t
	path, e, done, err := x.open(KindJoin, name, names)
	if err != nil {
		return path, e, false, err
	}
	if done {
		if e, err = x.t.r.joinOutputs(e); err != nil {
			return path, nil, false, err
		}
		all := make([]int, len(names))
		for i := range all {
			all[i] = i
		}
		return path, e, false, x.replaySettled(path, names, runs, all)
	}
	// Failures recorded apart before a restart (pendingHold.apart).
	e, heldApart, err := t.r.heldBranches(e)
	if err != nil {
		return path, nil, false, err
	}
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	results := make([]branchResult, len(names))
	// held marks the branches whose failure a replay holds: recorded in
	// the pending join's entry, or in one of their own, when they failed
	// while others went on.
	held := make([]bool, len(names))
	hold := pendingHold{current: e, path: e.Path}
	if h, ok := t.r.host.(HeldBranchesHost); ok {
		hold.apart = h.HeldBranchesApart
	}
	var running atomic.Int32
	running.Store(int32(len(names)))
	t.forked.Store(true)
	t.fork(len(names), func(int) *thread { return t.child(ctx, nil) }, func(i int, c *thread) {
		// A branch failed before the restart runs again only to replay
		// its entries (the rollback handlers of its steps, the messages
		// it took), and its recorded failure stands whatever the code
		// now returns, as it would once the join settled.
		results[i], held[i] = runHeld(c, joinPath(path, names[i]), e.Branches[names[i]], runs[i], false)
		if fatal(results[i].err) {
			// The workflow fails anyway: stop the siblings rather than
			// wait for them (they may wait forever).
			cancel()
		}
		if err := results[i].err; running.Add(-1) > 0 && !held[i] && err != nil && !isControl(err) && c.stopped(false) == nil {
			// Recorded at once while other branches go on (they may wait
			// for days).
			hold.record(c, names[i], err, &results[i])
		}
		c.endedAtWork(results[i].err)
	})
	t.forked.Store(false)
	if err := t.settled(results, false); err != nil {
		return path, nil, false, err
	}
	final := e.clone()
	final.Status = StatusCompleted
	at := t.now
	for i, n := range names {
		res := results[i]
		at = later(at, res.now)
		t.pending = AppendWrites(t.pending, res.pending...)
		if held[i] {
			final.Branches[n] = e.Branches[n]
			final.Status = StatusFailed
			continue
		}
		if res.err != nil {
			if isControl(res.err) {
				// Cancelled without the run being evicted or another
				// branch failing fatally: cannot happen, but must not
				// be recorded as the branch's result.
				return path, nil, false, fmt.Errorf("workflow: join %q: branch %q stopped: %w", path, n, res.err)
			}
			final.Branches[n] = Branch{Status: StatusFailed, Error: record(res.err), FailedAt: FailedAt(res.err)}
			final.Status = StatusFailed
			continue
		}
		final.Branches[n] = Branch{Status: StatusCompleted, Output: res.out}
	}
	final.Time = at
	stale, err := t.spillOutputs(final)
	if err != nil {
		return path, nil, false, err
	}
	if heldApart || hold.wrote.Load() {
		// The record holds them now.
		stale = append(stale, HistoryWrite{DeleteTree: joinPath(path, HeldScope)})
	}
	// Recording the settled join may wait for the next commit: if it is
	// lost, the branches replay to the same results (and settle again,
	// writing the same outputs over those spilled now).
	t.record(append(stale, HistoryWrite{Put: final})...)
	t.advance(final.Time)
	return path, final, true, nil
}

// race runs a race's branches, or replays its record: won is the index of
// the winner when the race was decided in this call, whose output the
// entry holds, which a Race returns as it decoded back (typedBranch); -1
// otherwise.
func (x *cx) race(name string, names []string, runs []func(*cx) (json.RawMessage, error)) (path string, e *Entry, won int, err error) {
	if err := x.begin("race", name); err != nil {
		return "", nil, -1, err
	}
	defer x.end()
	t, r := x.t, x.t.r
	path, e, done, err := x.open(KindRace, name, names)
	if err != nil {
		return path, e, -1, err
	}
	if done {
		// The losers' history is gone with them: only the winner's
		// branch, or every branch of a race that all of them lost.
		var idx []int
		for i, n := range names {
			if e.Winner == "" || n == e.Winner {
				idx = append(idx, i)
			}
		}
		return path, e, -1, x.replaySettled(path, names, runs, idx)
	}
	rc := newRace(len(names))
	rc.parent = t
	rc.path, rc.names = path, names
	// A branch with recorded entries replays them first; until every such
	// branch has, no winner is picked (see pickWinner).
	r.mu.Lock()
	for i, n := range names {
		if _, ok := r.hist.FirstUnvisited(joinPath(path, n)); ok {
			rc.live[i] = false
			rc.replaying++
			if rc.holds[i] = holdsMessages(r.hist, joinPath(path, n)); rc.holds[i] && rc.claim < 0 {
				// The messages it took in the first run are its: it wins
				// if it finishes, as it would have then. Reserved before
				// any branch runs: a branch with nothing to replay would
				// otherwise take the claim with a message that came since
				// and win, and this one's messages, though put back in
				// their queue, would be handled twice. Several branches
				// may hold messages (those before the last one took them
				// and failed): the first reserves the claim, which goes to
				// another as it ends (raceEnd).
				rc.claim, rc.claimTaken = i, true
			}
		}
	}
	r.mu.Unlock()
	ctxs := make([]context.Context, len(names))
	for i, n := range names {
		ctxs[i], rc.cancel[i] = context.WithCancel(t.ctx)
		if e.Branches[n].Status == StatusCancelled {
			// Cancelled before a restart as a branch that could no
			// longer win (see race.doomLocked): a loser already, it
			// replays its entries and does nothing new (catching up on
			// timers due, it would run work it never ran).
			rc.doomed[i] = true
			rc.cancel[i]()
		}
	}
	defer rc.cancelAll()
	results := make([]branchResult, len(names))
	// held marks the branches whose failure a replay holds: recorded in
	// the pending race's entry when they failed while others went on.
	held := make([]bool, len(names))
	hold := pendingHold{current: e, path: e.Path}
	t.forked.Store(true)
	t.fork(len(names), func(i int) *thread { return t.child(ctxs[i], &raceSlot{r: rc, b: i}) }, func(i int, c *thread) {
		// A branch failed before the restart is a loser already: it runs
		// again only to replay its entries (the messages it took hold the
		// claim as they did then), and it must not win a race it had
		// lost. Cancelled meanwhile (the race decided for another
		// branch), it is the loser it was, with its failure.
		results[i], held[i] = runHeld(c, joinPath(path, names[i]), e.Branches[names[i]], runs[i], true)
		if err := results[i].err; !held[i] && err != nil && !isControl(err) && c.stopped(false) == nil {
			r.mu.Lock()
			// The last branch to fail decides the race, whose record
			// commits at once; a decided race deletes its losers.
			others := !rc.decided && rc.failed < rc.n-1
			r.mu.Unlock()
			if others {
				// Recorded at once while other branches go on, and before
				// the claim it may hold goes to another branch: a restart
				// must not run again code that may have changed and win.
				hold.record(c, names[i], err, &results[i])
			}
		}
		if errors.Is(results[i].err, ErrCancelled) {
			r.mu.Lock()
			doomed := rc.doomed[i] && !rc.decided && e.Branches[names[i]].Status != StatusCancelled
			r.mu.Unlock()
			if doomed {
				// Recorded at once, as a failure is: a restart before the
				// decision holds it cancelled.
				hold.cancelled(t, names[i])
			}
		}
		c.endedAtWork(results[i].err)
		switch err := results[i].err; {
		case err == nil:
			r.raceFinish(c, rc, i)
		case fatal(err):
			r.raceEnd(rc, i, false)
			rc.cancelAll()
		default:
			r.raceEnd(rc, i, !isControl(err))
		}
	})
	t.forked.Store(false)
	r.mu.Lock()
	decided, w := rc.decided, rc.winner
	r.mu.Unlock()
	if err := t.settled(results, decided && w >= 0); err != nil {
		return path, nil, -1, err
	}
	if !decided {
		return path, nil, -1, fmt.Errorf("workflow: race %q: every branch stopped without a result", path)
	}
	final := e.clone()
	var batch []HistoryWrite
	var back []RawMessage
	// gone says that the losers' trees deleted hold messages taken and
	// not completed, given back.
	gone := false
	if w >= 0 {
		final.Status = StatusCompleted
		final.Winner = names[w]
		final.Output = results[w].out
		final.Time = results[w].now
		batch = AppendWrites(batch, results[w].pending...)
		for i, n := range names {
			switch {
			case i == w:
				final.Branches[n] = Branch{Status: StatusCompleted, Output: results[i].out}
			case held[i]:
				// As recorded had the race gone on (a loser's failure
				// names no entry: its tree goes).
				final.Branches[n] = Branch{Status: StatusFailed, Error: e.Branches[n].Error}
			case results[i].err != nil && !isControl(results[i].err):
				final.Branches[n] = Branch{Status: StatusFailed, Error: record(results[i].err)}
			default:
				final.Branches[n] = Branch{Status: StatusCancelled}
			}
		}
		batch = AppendWrites(batch, HistoryWrite{Put: final})
		// The messages a loser took (one that failed after taking them,
		// or, see race.claim, was cancelled holding them) go back to their
		// queues with the deletion of its tree, their only record.
		r.mu.Lock()
		for i, n := range names {
			if i != w {
				back = append(back, r.hist.takenUnder(joinPath(path, n))...)
				gone = gone || holdsMessagesNow(r.hist, joinPath(path, n))
				batch = AppendWrites(batch, HistoryWrite{DeleteTree: joinPath(path, n)})
			}
		}
		r.mu.Unlock()
		if len(back) > 0 {
			sort.Slice(back, func(i, j int) bool { return back[i].ID < back[j].ID })
			batch = AppendWrites(batch, HistoryWrite{Requeue: back})
		}
	} else {
		final.Status = StatusFailed
		at := t.now
		for i, n := range names {
			at = later(at, results[i].now)
			batch = AppendWrites(batch, results[i].pending...)
			if held[i] {
				final.Branches[n] = e.Branches[n]
				continue
			}
			final.Branches[n] = Branch{Status: StatusFailed, Error: record(results[i].err), FailedAt: FailedAt(results[i].err)}
		}
		final.Time = at
		batch = AppendWrites(batch, HistoryWrite{Put: final})
	}
	// The decision is committed at once: from now on no replay may pick
	// another winner.
	if err := t.commit(batch...); err != nil {
		return path, nil, -1, err
	}
	if gone {
		// The messages went back to their queues: in the races this one
		// runs under, the branch that holds their claim for them holds
		// it no more if it now holds no message.
		r.mu.Lock()
		t.dropClaimsLocked()
		r.mu.Unlock()
	}
	t.advance(final.Time)
	return path, final, w, nil
}

// holdsMessagesNow is holdsMessages of the history as it is now, the
// entries this run recorded with those it started with.
func holdsMessagesNow(h *History, branch string) bool {
	for p := range h.held {
		if Under(p, branch) {
			return true
		}
	}
	return false
}

// holdsMessages reports whether the recorded tree at branch holds a
// receive that took messages not all completed (see tookMessages).
func holdsMessages(h *History, branch string) bool {
	for _, p := range h.inTree(branch) {
		if tookMessages(h.Get(p)) {
			return true
		}
	}
	return false
}

// tookMessages reports whether e is a completed receive that took
// messages and has yet to complete one of them, or a loop whose pruning
// deleted such receives: what a race branch holds its race's claim for.
// A completed message is handled, and never goes back to its queue (see
// History.takenUnder), so the claim protects nothing for it: a branch
// that loops over a receive, completing each message, lets a sibling that
// finished win between two messages.
func tookMessages(e *Entry) bool {
	if e == nil {
		return false
	}
	if e.Kind == KindLoop {
		return e.TookMessages
	}
	return e.Kind == KindMessage && e.Status == StatusCompleted && slices.ContainsFunc(e.Messages, func(m RecordedMessage) bool { return !m.Completed })
}

// MaxBranchBytes bounds the record of a new join's or race's branches
// (each name with its status, about len(name)+26 bytes): the record is
// written whole at every change (a join's as it opens and settles, and
// for each branch that fails while others go on unless those go apart,
// HeldBranchesHost), in one store transaction, so a fan-out
// whose names alone pass this is refused as it opens, before any branch
// runs, with a *BranchLimitError (about 29,000 branches of 10-byte
// names). Below etcd's bound of a transaction (about 1.4 MiB), with room
// for a settled record's longer statuses and some failures' errors. A
// join's outputs do not count: spilled (spillOutputs), they are written
// apart.
const MaxBranchBytes = 1 << 20

// branchRecordBytes is what a branch named name adds to its join's or
// race's record, its status at its longest ("completed"), with no output
// or error: `"name":{"status":"completed"},`.
func branchRecordBytes(name string) int { return len(name) + 26 }

// checkBranchBytes refuses a new join or race whose branches' record is
// over MaxBranchBytes.
func checkBranchBytes(kind Kind, path string, names []string) error {
	n := 0
	for _, name := range names {
		n += branchRecordBytes(name)
	}
	if n <= MaxBranchBytes {
		return nil
	}
	return &BranchLimitError{Path: path, Kind: kind, Branches: len(names), Bytes: n, Limit: MaxBranchBytes}
}

// outputsScope is the scope, under a join's path, of the entries that hold
// its branches' outputs when they are spilled: '~' starts no name, so no
// branch takes it, and a host deleting the join's tree deletes them.
// IsIteration takes the scope for a loop iteration, which is what it
// needs: a scope with no entry of its own, so neither History.addTries
// nor a host's history (runtime historyPlaces) takes it for a try block
// (its entries record no TryPlaces, and its parent is a join anyway), and
// a host deletes its entries (outputsPart, not IsIteration) entry and
// tree alike.
const outputsScope = "~outputs"

// outputsPart is the path of a join's i-th outputs entry.
func outputsPart(join string, i int) string {
	return join + "/" + outputsScope + "/" + strconv.Itoa(i)
}

// spillOutputs moves the outputs of final's completed branches (final is a
// settled join's record, not yet recorded) to KindJoinOutputs entries when
// together they are more than MaxRidingBytes, and commits those entries,
// each on its own, each of about MaxRidingBytes at most (one larger output
// alone): a record holding them all was one write of every output, which
// a fan-out of thousands passed the store's bound of a transaction with,
// after all its branches ran. Committed before final is recorded, they are
// durable before it; a settle cut short before final commits leaves the
// join pending, and its replay settles it again, writing the same entries
// (its branches replay to the same outputs). It returns the deletions of
// the outputs entries a settle cut short left beyond those written now
// (code changed since gives other outputs), to record with final.
func (t *thread) spillOutputs(final *Entry) ([]HistoryWrite, error) {
	final.OutputParts = 0 // a retried join's count is its last settle's
	total := 0
	for _, b := range final.Branches {
		total += len(b.Output)
	}
	var parts []*Entry
	if h, ok := t.r.host.(JoinOutputsHost); ok && total > MaxRidingBytes && h.JoinOutputsApart() {
		names := make([]string, 0, len(final.Branches))
		for n, b := range final.Branches {
			// Every completed branch, a value-less one too: replay then
			// tells a branch an outputs entry lost from one without a
			// value (joinOutputs).
			if b.Status == StatusCompleted {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		var cur *Entry
		size := 0
		for _, n := range names {
			b := final.Branches[n]
			add := branchRecordBytes(n) + len(b.Output)
			if cur == nil || size > 0 && size+add > MaxRidingBytes {
				cur = &Entry{Path: outputsPart(final.Path, len(parts)), Kind: KindJoinOutputs, Status: StatusCompleted, Time: final.Time, Branches: map[string]Branch{}}
				parts = append(parts, cur)
				size = 0
			}
			cur.Branches[n] = b
			size += add
			final.Branches[n] = Branch{Status: StatusCompleted}
		}
		final.OutputParts = len(parts)
	}
	for _, p := range parts {
		if err := t.commit(HistoryWrite{Put: p}); err != nil {
			return nil, err
		}
	}
	var stale []HistoryWrite
	t.r.mu.Lock()
	for i := len(parts); t.r.hist.Get(outputsPart(final.Path, i)) != nil; i++ {
		stale = append(stale, HistoryWrite{DeleteTree: outputsPart(final.Path, i)})
	}
	t.r.mu.Unlock()
	return stale, nil
}

// joinOutputs returns e, a settled join's record, with the outputs of its
// completed branches that its outputs entries hold (Entry.OutputParts).
func (r *run) joinOutputs(e *Entry) (*Entry, error) {
	if e.OutputParts == 0 {
		return e, nil
	}
	c := e.clone()
	r.mu.Lock()
	defer r.mu.Unlock()
	filled := make(map[string]bool, len(c.Branches))
	for i := range e.OutputParts {
		p := r.hist.Get(outputsPart(e.Path, i))
		if p == nil || p.Kind != KindJoinOutputs {
			return nil, &DivergenceError{Path: outputsPart(e.Path, i), Expected: fmt.Sprintf("outputs %d of %d of join %q", i+1, e.OutputParts, e.Path), Found: describe(p)}
		}
		for n, b := range p.Branches {
			if cb, ok := c.Branches[n]; ok && cb.Status == StatusCompleted {
				cb.Output = b.Output
				c.Branches[n] = cb
				filled[n] = true
			}
		}
	}
	// spillOutputs wrote every completed branch to one of them: one
	// missing would replay as a zero value, silently.
	for _, n := range slices.Sorted(maps.Keys(c.Branches)) {
		if c.Branches[n].Status == StatusCompleted && !filled[n] {
			return nil, &DivergenceError{Path: joinPath(e.Path, n), Expected: fmt.Sprintf("the value of completed branch %q in one of the %d outputs entries of join %q", n, e.OutputParts, e.Path), Found: "none"}
		}
	}
	return c, nil
}
