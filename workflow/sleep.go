package workflow

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Sleep waits d, durably: the deadline is recorded on the first call, so a
// replay (after a crash, or after the actor was deactivated meanwhile)
// waits only for what is left.
func (c *Ctx[S]) Sleep(name string, d time.Duration) error {
	return c.x.sleep(name, func(now time.Time) time.Time { return now.Add(d) })
}

// SleepUntil waits until t, durably.
func (c *Ctx[S]) SleepUntil(name string, t time.Time) error {
	if y := t.Year(); y < 0 || y > 9999 {
		// History records times as RFC 3339, which has four digits for
		// the year: say so here rather than fail on recording it.
		return fmt.Errorf("%w: SleepUntil %q: %s is out of range (years 0 to 9999)", ErrInvalid, name, t.UTC().Format(time.RFC3339))
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		// Nor can RFC 3339 write a zone offset of a day or more.
		return fmt.Errorf("%w: SleepUntil %q: %s is in a zone %v from UTC, which history cannot record (less than a day)", ErrInvalid, name, t.UTC().Format(time.RFC3339), time.Duration(off)*time.Second)
	}
	t = t.Round(0)
	return c.x.sleep(name, func(time.Time) time.Time { return t })
}

func (x *cx) sleep(name string, deadline func(now time.Time) time.Time) error {
	if err := x.begin("sleep", name); err != nil {
		return err
	}
	defer x.end()
	t, r := x.t, x.t.r
	path, seq, err := x.sc.claim("sleep", name)
	if err != nil {
		return err
	}
	e, err := r.visit(x.sc, path, KindSleep)
	if err != nil {
		return err
	}
	if e != nil && e.Status == StatusCompleted {
		t.advance(e.Time)
		return nil
	}
	t.goLive()
	if e == nil {
		now := r.now()
		e = &Entry{Path: path, Seq: seq, TryPlaces: x.sc.tryPlaces, Kind: KindSleep, Status: StatusPending, Deadline: deadline(now)}
		// A sleep already due needs no durable deadline: its end,
		// recorded below, goes out with the next commit.
		if e.Deadline.After(now) {
			if err := t.commit(HistoryWrite{Put: e}); err != nil {
				return err
			}
		}
	}
	// A zero deadline (SleepUntil(time.Time{})) is long past, but to
	// wait it would mean no deadline at all: the run would block for good.
	if !e.Deadline.IsZero() {
		if err := t.wait(waitFor{at: e.Deadline, reason: WakeSleep}); err != nil {
			return err
		}
	}
	done := e.clone()
	done.Status = StatusCompleted
	done.Time = t.endedAt(e.Deadline)
	t.record(HistoryWrite{Put: done})
	t.advance(done.Time)
	return nil
}

// RollbackCheckpoint records a checkpoint. Steps with rollback handlers
// (StepWithRollback) may only run after one, so that a workflow cannot
// declare compensations by accident. A checkpoint holds for the rest of
// its scope and the scopes it opens after it: taken in a loop iteration,
// or in a join or race branch, it holds until that iteration or branch
// ends (take it before the loop to cover every iteration). A Try block is
// not such a scope: a checkpoint taken in it holds after the block too,
// as if taken where the block is.
func (c *Ctx[S]) RollbackCheckpoint(name string) error {
	x := c.x
	if err := x.begin("rollback checkpoint", name); err != nil {
		return err
	}
	defer x.end()
	t, r := x.t, x.t.r
	path, seq, err := x.sc.claim("rollback checkpoint", name)
	if err != nil {
		return err
	}
	e, err := r.visit(x.sc, path, KindRollbackCheckpoint)
	if err != nil {
		return err
	}
	if e == nil {
		t.record(HistoryWrite{Put: &Entry{Path: path, Seq: seq, TryPlaces: x.sc.tryPlaces, Kind: KindRollbackCheckpoint, Status: StatusCompleted}})
	}
	t.checkpoint = true
	return nil
}

// GetVersion gates a code change for workflows already in flight. It
// returns the version recorded at name, else records and returns 1 if the
// scope (in a try block, the scope holding the block too) still holds
// recorded entries this run has not reached (an instance started under
// the old code, mid-flight), else latest. Inside a loop each
// iteration decides on its own. Retire a gate with Removed(name,
// KindVersionCheck) once no old instance is left. Version 1 must be what
// the code from before the gate does: that code replays a history with
// the gate at 1 (a deploy rolled back, a node not yet upgraded), and
// fails one with the gate at a later version.
//
//	v, err := ctx.GetVersion("charge-v2", 2)
//	if v == 1 { /* old steps */ } else { /* new steps */ }
func (c *Ctx[S]) GetVersion(name string, latest int) (int, error) {
	x := c.x
	if err := x.begin("version gate", name); err != nil {
		return 0, err
	}
	defer x.end()
	t, r := x.t, x.t.r
	if latest < 1 {
		return 0, fmt.Errorf("%w: GetVersion %q: latest must be at least 1", ErrInvalid, name)
	}
	path, seq, err := x.sc.claim("version gate", name)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	e, err := r.hist.Visit(path, KindVersionCheck)
	// In a try block, the entries of the scopes it stands in count too
	// (see visit): a gate in a block new to an old instance takes the old
	// path.
	unvisited := false
	for s := x.sc; s != nil && !unvisited; s = s.outer {
		_, unvisited = r.hist.FirstUnvisited(s.pathOf())
	}
	_, sealed := r.sealedLocked(x.sc.pathOf())
	if place, ok := r.hist.PlaceBefore(x.sc.pathOf()); ok && place < seq {
		seq = place // see PlaceBefore
	}
	r.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if e != nil {
		x.sc.reach(e.Seq)
		return e.Version, nil
	}
	if sealed {
		// An iteration that completed under code without this gate:
		// the old path, and nothing recorded, as if it were not re-run.
		return 1, nil
	}
	v := resolveVersion(unvisited, latest)
	t.record(HistoryWrite{Put: &Entry{Path: path, Seq: seq, TryPlaces: x.sc.tryPlaces, Kind: KindVersionCheck, Status: StatusCompleted, Version: v, Latest: latest}})
	return v, nil
}

// Removed stands in for an entry of kind that the code no longer makes: it
// accepts the old entry (and everything under it) in the histories of
// workflows in flight, and records a placeholder in new ones, so that
// neither diverges. A try block, which has no entry of its own, is
// retired with KindTry: the entries recorded in it are accepted.
func (c *Ctx[S]) Removed(name string, kind Kind) error {
	x := c.x
	if err := x.begin("removed", name); err != nil {
		return err
	}
	defer x.end()
	t, r := x.t, x.t.r
	switch kind {
	case KindStep, KindLoop, KindSleep, KindMessage, KindRollbackCheckpoint, KindJoin, KindRace, KindVersionCheck, KindTry:
	default:
		return fmt.Errorf("%w: Removed %q: %q is not a removable kind", ErrInvalid, name, kind)
	}
	path, seq, err := x.sc.claim("Removed placeholder", name)
	if err != nil {
		return err
	}
	r.mu.Lock()
	e, verr := r.hist.Visit(path, "")
	if verr != nil {
		r.mu.Unlock()
		return verr
	}
	if e != nil && e.Kind != kind && !(e.Kind == KindRemoved && e.RemovedKind == kind) {
		r.mu.Unlock()
		return &DivergenceError{Path: path, Expected: describe(e), Found: fmt.Sprintf("removed %s", kind)}
	}
	if e != nil {
		x.sc.reach(e.Seq)
	}
	if e != nil || kind == KindTry {
		// A try block left no entry at path, only the entries in it.
		r.hist.VisitTree(path)
		r.retired = append(r.retired, path)
	}
	_, sealed := r.sealedLocked(x.sc.pathOf())
	if place, ok := r.hist.PlaceBefore(x.sc.pathOf()); ok && place < seq {
		seq = place // see PlaceBefore
	}
	r.mu.Unlock()
	if e == nil && !sealed {
		t.record(HistoryWrite{Put: &Entry{Path: path, Seq: seq, TryPlaces: x.sc.tryPlaces, Kind: KindRemoved, Status: StatusCompleted, RemovedKind: kind}})
	}
	return nil
}

// Try runs fn in a named scope and catches the terminal failures of the
// steps (except kind rollback), joins and races in it: it returns them as a
// *Failure, and the workflow goes on. Other errors (fn's own, eviction,
// divergence) are returned as they are. TryOpts chooses what it catches.
func (c *Ctx[S]) Try(name string, fn func(*Ctx[S]) error) (*Failure, error) {
	return c.TryOpts(TryOptions{Name: name}, fn)
}

// TryOptions configures TryOpts.
type TryOptions struct {
	Name string
	// Catch lists what the block catches; none: CatchStep, CatchJoin and
	// CatchRace. CatchRollback catches a step's Rollback failure and a
	// Rollback error the block's own code returns (Failure.Source
	// SourceBlock); the workflow then goes on instead of rolling back.
	Catch []TryCatch
}

// TryCatch is a kind of failure a Try block may catch.
type TryCatch string

// What a Try block may catch.
const (
	// CatchStep: a step's terminal failure of kind critical, timeout or
	// exhausted.
	CatchStep TryCatch = "step"
	// CatchJoin: a join with a failed branch.
	CatchJoin TryCatch = "join"
	// CatchRace: a race whose branches all failed.
	CatchRace TryCatch = "race"
	// CatchRollback: a step's failure of kind rollback, or a Rollback
	// error returned by the block's code.
	CatchRollback TryCatch = "rollback"
)

// TryOpts is Try with options: what it catches (TryOptions.Catch, as the
// original's try catch list).
func (c *Ctx[S]) TryOpts(opts TryOptions, fn func(*Ctx[S]) error) (*Failure, error) {
	for _, k := range opts.Catch {
		switch k {
		case CatchStep, CatchJoin, CatchRace, CatchRollback:
		default:
			return nil, fmt.Errorf("%w: Try %q: %q is not a kind it can catch (step, join, race, rollback)", ErrInvalid, opts.Name, k)
		}
	}
	name := opts.Name
	x := c.x
	if err := x.begin("try", name); err != nil {
		return nil, err
	}
	defer x.end()
	r := x.t.r
	path, seq, err := x.sc.claim("try block", name)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if e := r.hist.Get(path); e != nil {
		// A try block has no entry of its own: something else was here.
		r.mu.Unlock()
		return nil, &DivergenceError{Path: path, Expected: describe(e), Found: "a try block"}
	}
	// It takes a place in its scope as an entry does, which its entries
	// record (Entry.TryPlaces): a block reached in another order than
	// recorded diverges. A block whose entries a build before that
	// recorded has no known place, and its new entries record none.
	place, recorded, verr := r.hist.VisitTry(path)
	if verr != nil {
		r.mu.Unlock()
		return nil, verr
	}
	if recorded {
		x.sc.reach(place)
	} else {
		place = seq
		if p, ok := r.hist.PlaceBefore(x.sc.pathOf()); ok && p < place {
			place = p // see PlaceBefore
		}
	}
	r.mu.Unlock()
	bx := newScopedCx(x.t, path)
	bx.sc.outer = x.sc
	if place > 0 {
		bx.sc.tryPlaces = append([]int{place}, x.sc.tryPlaces...)
	}
	err = callGuarded(func() error { return fn(&Ctx[S]{x: bx}) })
	if cerr := bx.close(); cerr != nil {
		err = cerr
	}
	if err == nil {
		return nil, r.checkEnd(path)
	}
	if f, ok := tryFailure(err, path, opts.Catch); ok {
		return f, nil
	}
	return nil, err
}

// tryFailure returns the failure err carries if a Try block at path with
// catch list catch catches it.
func tryFailure(err error, path string, catch []TryCatch) (*Failure, bool) {
	if isControl(err) {
		return nil, false
	}
	has := func(k TryCatch) bool {
		if len(catch) == 0 {
			return k != CatchRollback
		}
		return slices.Contains(catch, k)
	}
	// A Rollback first: the errors of steps, joins and races hold
	// recorded errors, never one, so it is the block's own, even around
	// the step failure it answers (Rollback(err)), which it outranks.
	var rb *RollbackError
	if errors.As(err, &rb) {
		return &Failure{Source: SourceBlock, Name: path, Err: err}, has(CatchRollback)
	}
	var se *StepError
	if errors.As(err, &se) {
		if se.Kind == FailureRollback {
			return stepFailure(se), has(CatchRollback)
		}
		return stepFailure(se), has(CatchStep)
	}
	var je *JoinError
	if errors.As(err, &je) {
		return &Failure{Source: SourceJoin, Name: je.Path, Err: je}, has(CatchJoin)
	}
	var re *RaceError
	if errors.As(err, &re) {
		return &Failure{Source: SourceRace, Name: re.Path, Err: re}, has(CatchRace)
	}
	return nil, false
}
