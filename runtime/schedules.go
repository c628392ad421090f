package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	// Cron expressions name IANA zones (CRON_TZ=): the node's image is
	// built FROM scratch, with no zone database of its own.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/errtext"
	"github.com/rivet-go/rivet/internal/sizes"
	"github.com/rivet-go/rivet/internal/textcut"
	"github.com/rivet-go/rivet/storage"
)

// scheduleRecord is stored at sched/<p>/<name>/<key>/<id>. The id begins
// with the call's time (schedID), so that a node claiming partitions arms
// their timers from a keys-only listing, and an actor's calls list in time
// order.
type scheduleRecord struct {
	Action    string          `json:"action"`
	Args      json.RawMessage `json:"args"`
	CreatedAt int64           `json:"created_at"` // unix ms
	// Name and EveryMs, or Name and Cron, are a recurring call's
	// (Scheduler.Every, Scheduler.Cron): each run replaces its record by
	// the next one's.
	Name    string `json:"name,omitempty"`
	EveryMs int64  `json:"every_ms,omitempty"`
	Cron    string `json:"cron,omitempty"`
	// LastRunMs and LastError are a recurring call's last run: when it
	// came due (unix ms) and how it failed ("": it ran to the end). Its
	// next run's record carries them.
	LastRunMs int64  `json:"last_run_ms,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

// recurring says whether the call is a recurring one.
func (r scheduleRecord) recurring() bool { return r.Name != "" && (r.EveryMs > 0 || r.Cron != "") }

// pendingCall is one scheduled call of an activation.
type pendingCall struct {
	id  string
	at  int64 // unix ms
	rec scheduleRecord
}

// publicID is the id users see: the storage id of a one-off call, the
// name's of a recurring one (its storage id changes with each run).
func (c pendingCall) publicID() string {
	if c.rec.Name != "" {
		return everyID(c.rec.Name)
	}
	return c.id
}

func (c pendingCall) public() rivet.ScheduledCall {
	return rivet.ScheduledCall{ID: c.publicID(), Action: c.rec.Action, Args: bytes.Clone(c.rec.Args), At: time.UnixMilli(c.at),
		CreatedAt: time.UnixMilli(c.rec.CreatedAt), Name: c.rec.Name, Every: time.Duration(c.rec.EveryMs) * time.Millisecond, Cron: c.rec.Cron,
		LastRun: lastRun(c.rec.LastRunMs), LastError: c.rec.LastError}
}

// lastRun is a recurring call's last run time (zero for none).
func lastRun(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// following returns the run of a recurring call after its run due at c.at,
// the first one after now: runs missed while no node served the actor are
// skipped, not caught up.
func (c pendingCall) following(now int64) pendingCall {
	n := c
	if c.rec.Cron != "" {
		// Parsed when it was scheduled (the zone database is built in);
		// one with no time left (past the year 2286) ends: at 0 the
		// caller drops it.
		n.at = 0
		if sched, err := parseCron(c.rec.Cron); err == nil {
			next := cronNext(sched, time.UnixMilli(max(c.at, now)))
			if ss, ok := sched.(*cron.SpecSchedule); ok && !next.IsZero() {
				next = acrossClockChanges(ss, time.UnixMilli(c.at), time.UnixMilli(max(c.at, now)), next)
			}
			if !next.IsZero() && next.UnixMilli() <= maxSchedMs {
				n.at = next.UnixMilli()
			}
		}
		n.id = everyStorageID(n.at, c.rec.Name)
		return n
	}
	n.at = c.at + c.rec.EveryMs
	if n.at <= now {
		n.at += (now - n.at) / c.rec.EveryMs * c.rec.EveryMs
		if n.at <= now {
			n.at += c.rec.EveryMs
		}
	}
	if n.at > maxSchedMs {
		// No id holds it (it would not read back): it ends, as a cron
		// call with no time left does.
		n.at = 0
	}
	n.id = everyStorageID(n.at, c.rec.Name)
	return n
}

// schedID makes the id of a call due at at (unix ms), one more of calls:
// the time, zero-padded so that ids sort by it, then 64 bits that sort it
// after the calls of the same time (they run in the order they were
// scheduled, as Rivet's do), random so that no id is used again.
func schedID(at int64, calls []pendingCall) string {
	at = max(at, 0)
	prefix := fmt.Sprintf("%013d-", at)
	// The first of its time leaves room below 2^64 for the rest.
	next := rand.Uint64N(1 << 62)
	for _, c := range calls {
		if len(c.id) != len(prefix)+16 || !strings.HasPrefix(c.id, prefix) {
			continue // another time's, a recurring call's or a destroy's
		}
		last, err := strconv.ParseUint(c.id[len(prefix):], 16, 64)
		if err != nil {
			continue
		}
		if last >= math.MaxUint64-1<<33 {
			// Only an id made before ids were ordered can be this high:
			// random, as they were.
			next = rand.Uint64()
			break
		}
		next = max(next, last+1+rand.Uint64N(1<<32))
	}
	return prefix + fmt.Sprintf("%016x", next)
}

// schedIDTime returns the time (unix ms) an id made by schedID names.
func schedIDTime(id string) (int64, bool) {
	if len(id) < 14 || id[13] != '-' {
		return 0, false
	}
	at, err := strconv.ParseInt(id[:13], 10, 64)
	return at, err == nil
}

// schedTimer is the timers' id of an actor's scheduled calls: one item per
// actor, at its earliest call. It cannot be an actor id (names have no NUL),
// whose item wakes the workflow instead.
func schedTimer(actorID string) string { return "\x00sched/" + actorID }

func isSchedTimer(id string) bool { return strings.HasPrefix(id, "\x00sched/") }

// readSchedules reads an actor's scheduled calls, the earliest first.
func (h *Host) readSchedules(ctx context.Context, part uint32, name, enc string) ([]pendingCall, error) {
	prefix := storage.ScheduleActorPrefix(part, name, enc)
	kvs, err := h.store.List(ctx, prefix, storage.ListOptions{})
	if err != nil {
		return nil, err
	}
	calls := make([]pendingCall, 0, len(kvs))
	for _, kv := range kvs {
		id := kv.Key[len(prefix):]
		at, ok := schedIDTime(id)
		var rec scheduleRecord
		if !ok || json.Unmarshal(kv.Value, &rec) != nil {
			h.log.Warn("a scheduled call's record does not decode: ignored", zap.String("key", kv.Key))
			continue
		}
		calls = append(calls, pendingCall{id: id, at: at, rec: rec})
	}
	return calls, nil // in key order, which is time order
}

// loadScheduleTimers arms the timers of the scheduled calls of the given
// partitions (want), from a keys-only listing: one timer per actor, at its
// earliest call. Called with the wakeups when partitions are claimed.
func (h *Host) loadScheduleTimers(ctx context.Context, parts []uint32, want map[uint32]bool) error {
	type first struct {
		ref Ref
		at  int64
	}
	// Keys list in order, so an actor's first is its earliest call, and
	// its calls follow one another.
	earliest := map[string]first{}
	last := ""
	err := h.eachInParts(ctx, parts, storage.SchedulesPrefix, storage.SchedulePartitionPrefix, true, func(kv storage.KV) {
		// sched/<p:5>/<name>/<enc>/<id>
		rest := strings.TrimPrefix(kv.Key, storage.SchedulesPrefix)
		if len(rest) < 7 || rest[5] != '/' {
			return
		}
		name, rest, ok := cut(rest[6:], '/')
		if !ok {
			return
		}
		enc, id, ok := cut(rest, '/')
		if !ok {
			return
		}
		at, ok := schedIDTime(id)
		actorID := name + "/" + enc
		if !ok || actorID == last {
			return
		}
		last = actorID
		if ref, ok := h.ownedRef(name, enc, want); ok {
			earliest[actorID] = first{ref, at}
		}
	})
	if err != nil {
		return err
	}
	for actorID, f := range earliest {
		h.timers.scheduleEarlier(f.ref, schedTimer(actorID), time.UnixMilli(f.at))
	}
	if len(earliest) > 0 {
		h.log.Info("scheduled calls loaded", zap.Int("actors", len(earliest)), zap.Int("partitions", len(parts)))
	}
	return nil
}

// turnSchedule is the Scheduler an action gets. It changes the
// activation's calls (a.sched) in place, as the action changes its state:
// the turn's commit writes what changed since the last commit
// (activation.saveState), and a failed turn puts back the calls as of
// that commit (restoreState). A call into the same actor made from the
// action (a re-entrant turn) sees and commits those changes as it does
// the state's.
type turnSchedule struct {
	a        *activation
	readOnly bool
	now      time.Time
	// te is the turn's events, whose end is the turn's: the Scheduler of
	// an ActionCtx or StepCtx kept past its turn would change the calls
	// without the gate, for no commit of its own (nil: no such check).
	te *turnEvents
	// snapped: a query's beside a step's body (turnGate), which reads
	// snap, the calls as last saved, not the activation's, which the body
	// may change.
	snapped bool
	snap    []pendingCall
}

// calls are the calls the turn sees.
func (s *turnSchedule) calls() []pendingCall {
	if s.snapped {
		return s.snap
	}
	return s.a.sched
}

// over reports whether the turn has ended (the Scheduler was kept past it).
func (s *turnSchedule) over() bool {
	if s.te == nil {
		return false
	}
	s.a.evMu.Lock()
	defer s.a.evMu.Unlock()
	return s.te.ended
}

// readOnlyErr is the error of a read-only action's Scheduler asked to do
// what. Every method that changes the calls checks readOnly before it
// reads or writes the activation's list: a query's turn may run beside a
// step's body (turnGate), which changes it.
func (s *turnSchedule) readOnlyErr(what string) error {
	return rivet.Errorf(rivet.ErrInternal, "a read-only action of %s cannot %s (make it with rivet.Action)", s.a.describe(), what)
}

// overErr is the error of a Scheduler used after its turn.
func (s *turnSchedule) overErr() error {
	return rivet.Errorf(rivet.ErrInternal, "actor %s: its Scheduler was used after its turn ended (an ActionCtx or StepCtx kept past its turn)", s.a.describe())
}

// A turn's writes go to etcd in one transaction, whose bounds (etcd's
// defaults: 128 operations, 1.5 MiB) the state and the other writes of
// the turn share: a turn adds or removes at most this many calls, the
// messages it enqueues counted with them (limitTurnMessages), with
// arguments of at most this many bytes in all. (An actor holds up to
// rivet.MaxSchedules calls, scheduled over several turns.)
const (
	limitTurnCalls = 64
	limitTurnBytes = sizes.TurnBytes
)

// maxSchedMs is the latest time a call can have: ids hold 13 digits of
// unix milliseconds (the year 2286).
const maxSchedMs = 9_999_999_999_999

func (a *activation) newTurnSchedule(readOnly bool, te *turnEvents) *turnSchedule {
	s := a.turnScheduleOf(readOnly, te)
	return &s
}

// turnScheduleOf is newTurnSchedule's value, for a turn that allocates it
// with other things (a step's: stepTurn).
func (a *activation) turnScheduleOf(readOnly bool, te *turnEvents) turnSchedule {
	return turnSchedule{a: a, readOnly: readOnly, now: time.Now(), te: te}
}

// After and Every count from when they are called ("d from now"), not from
// the turn's start (now): an action that worked a while before it
// scheduled (a slow call) had its call come due that much early.
func (s *turnSchedule) After(d time.Duration, action string, args ...any) (string, error) {
	return s.At(time.Now().Add(max(d, 0)), action, args...)
}

func (s *turnSchedule) At(t time.Time, action string, args ...any) (string, error) {
	if t.IsZero() {
		return "", rivet.Errorf(rivet.ErrInvalidArgument, "schedule %s at the zero time: an unset time.Time (a past time runs as soon as possible: say so with After(0))", action)
	}
	at := max(t.UnixMilli(), 0)
	if at > maxSchedMs {
		return "", rivet.Errorf(rivet.ErrInvalidArgument, "schedule %s at %s: calls can be scheduled up to the year 2286", action, t.UTC().Format(time.RFC3339))
	}
	c, err := s.newCall(action, args, scheduleRecord{})
	if err != nil {
		return "", err
	}
	c.id, c.at = schedID(at, s.a.sched), at
	s.a.sched = insertCall(s.a.sched, c)
	return c.id, nil
}

// MinEvery is the shortest interval of a recurring call.
const MinEvery = time.Second

func (s *turnSchedule) Every(name string, every time.Duration, action string, args ...any) (string, error) {
	if err := rivet.ValidateName("recurring call name", name); err != nil {
		return "", err
	}
	if every < MinEvery {
		return "", rivet.Errorf(rivet.ErrInvalidArgument, "schedule %s every %v: the interval must be at least %v", name, every, MinEvery)
	}
	at := time.Now().Add(every).UnixMilli()
	if at > maxSchedMs {
		// As At's: an id holds 13 digits of milliseconds.
		return "", rivet.Errorf(rivet.ErrInvalidArgument, "schedule %s every %v: its first run would be after the year 2286, the latest a call can have", name, every)
	}
	return s.recurring(scheduleRecord{Name: name, EveryMs: every.Milliseconds()}, at, action, args)
}

// recurring schedules the recurring call rec (its name and interval or
// expression) of action with args, its first run at at. An existing call
// of the name is replaced: it does not count against the limit, and stays
// if the new one is refused, or if it is the same call (keepSame).
func (s *turnSchedule) recurring(rec scheduleRecord, at int64, action string, args []any) (string, error) {
	if s.over() {
		return "", s.overErr() // before the list is touched
	}
	if s.readOnly {
		// Before the list is touched too: a query's may run beside a
		// step's body, which changes it.
		return "", s.readOnlyErr("schedule a call")
	}
	prev := s.a.sched
	s.a.sched = slices.DeleteFunc(slices.Clone(prev), func(c pendingCall) bool { return c.rec.Name == rec.Name })
	c, err := s.newCall(action, args, rec)
	if err != nil || keepSame(prev, c) {
		s.a.sched = prev
		if err != nil {
			return "", err
		}
		return everyID(rec.Name), nil
	}
	c.at = at
	c.id = everyStorageID(c.at, rec.Name)
	s.a.sched = insertCall(s.a.sched, c)
	return everyID(rec.Name), nil
}

func (s *turnSchedule) Cron(name, expr, action string, args ...any) (string, error) {
	if err := rivet.ValidateName("recurring call name", name); err != nil {
		return "", err
	}
	sched, err := parseCron(expr)
	if err != nil {
		return "", rivet.Errorf(rivet.ErrInvalidArgument, "schedule %s on %q: %v", name, expr, err)
	}
	next := cronNext(sched, s.now)
	if ss, ok := sched.(*cron.SpecSchedule); ok && !next.IsZero() {
		// The first run follows the rule where clocks change as the
		// later ones do (pendingCall.following).
		next = acrossClockChanges(ss, s.now, s.now, next)
	}
	if next.IsZero() || next.UnixMilli() > maxSchedMs {
		return "", rivet.Errorf(rivet.ErrInvalidArgument, "schedule %s on %q: it never comes due", name, expr)
	}
	return s.recurring(scheduleRecord{Name: name, Cron: expr}, next.UnixMilli(), action, args)
}

// cronParser reads Scheduler.Cron's expressions: five fields or a
// descriptor, with an optional CRON_TZ= zone.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// acrossClockChanges corrects next, robfig's next run of ss after from
// (prev being the run that came due), where the zone's clocks change, as
// Vixie cron does: a run at a wall-clock time the zone repeats when its
// clocks go back runs once, not twice; one at a time the zone skips when
// they go forward runs that day, shifted by the gap (02:30 on a night that
// skips from 02:00 to 03:00 runs at 03:30), rather than not at all.
func acrossClockChanges(ss *cron.SpecSchedule, prev, from, next time.Time) time.Time {
	loc := ss.Location
	// A wall-clock time at or before the last run's, later in time: the
	// clocks went back, and it ran in the first pass of the repeated
	// times (not only the time of the last run itself: every run of the
	// repeated hour, 01:00 and 01:30, runs once).
	for i := 0; !next.IsZero() && !wallClockAfter(next.In(loc), prev.In(loc)); i++ {
		if i >= maxRepeatedRuns {
			return time.Time{}
		}
		next = cronNext(ss, next)
	}
	if next.IsZero() {
		return next
	}
	_, fromOff := from.In(loc).Zone()
	oldOff := fromOff
	if _, nextOff := next.In(loc).Zone(); nextOff <= fromOff {
		// The clocks may have gone forward just before from: the
		// shifted runs of a gap lie in the gap's length after the
		// change, and the run that came due may be only the first of
		// them (02:00 run at 03:00, and 02:30 still to run at 03:30).
		start, _ := from.In(loc).ZoneBounds()
		if start.IsZero() {
			return next
		}
		_, before := start.Add(-time.Nanosecond).In(loc).Zone()
		if before >= fromOff || !from.Before(start.Add(time.Duration(fromOff-before)*time.Second)) {
			return next
		}
		oldOff = before
	}
	// The clocks went forward in between (or just before from): the run
	// as a clock that did not change would see it, if its wall-clock time
	// is one the zone skipped.
	fixed := *ss
	fixed.Location = time.FixedZone("", oldOff)
	w := fixed.Next(from).In(fixed.Location)
	if w.IsZero() {
		return next
	}
	real := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, loc)
	if sameWallClock(real, w) {
		return next // not in a gap
	}
	// In the gap: w itself, the wall-clock time read at the offset before
	// the change, is it shifted by the gap. (time.Date's choice in a gap
	// is not that: west of UTC it takes the later offset, which moves the
	// run back before the gap, even to the day before.)
	if !w.After(from) || !w.Before(next) {
		return next
	}
	return w.In(loc)
}

// maxRepeatedRuns bounds the runs acrossClockChanges skips in times a zone
// repeats: one a minute for the longest such change (a day).
const maxRepeatedRuns = 24 * 60

// wallClockAfter says whether a, in its zone, reads a later date and time
// (to the second) than b in the same zone.
func wallClockAfter(a, b time.Time) bool {
	wa := time.Date(a.Year(), a.Month(), a.Day(), a.Hour(), a.Minute(), a.Second(), 0, time.UTC)
	wb := time.Date(b.Year(), b.Month(), b.Day(), b.Hour(), b.Minute(), b.Second(), 0, time.UTC)
	return wa.After(wb)
}

// sameWallClock says whether a and b, in the same zone, read the same date
// and time to the second.
func sameWallClock(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd && a.Hour() == b.Hour() && a.Minute() == b.Minute() && a.Second() == b.Second()
}

// cronNext is sched.Next(from), the expression's first time after from,
// made sure to be after it: where a zone's clocks change at an odd minute,
// robfig's answer can be before its argument (Chatham, whose clocks go back
// from 03:45 to 02:45: Next of 02:45 to 03:14 that night is 02:45). A
// recurring call's next run at the time of the run that came due would have
// its id, replace it, and be due at once, for ever. Later arguments, a
// minute apart, find the time after; if none within three hours does, there
// is none (zero).
func cronNext(sched cron.Schedule, from time.Time) time.Time {
	next := sched.Next(from)
	for i := 1; !next.IsZero() && !next.After(from); i++ {
		if i > 180 {
			return time.Time{}
		}
		next = sched.Next(from.Add(time.Duration(i) * time.Minute))
	}
	return next
}

// parseCron parses a cron expression. "@every" is refused: Every is for
// intervals, and it would allow ones under MinEvery.
func parseCron(expr string) (cron.Schedule, error) {
	if strings.Contains(expr, "@every") {
		return nil, errors.New("@every is not a cron expression here: use Scheduler.Every")
	}
	t := strings.TrimSpace(expr)
	if !strings.HasPrefix(t, "CRON_TZ=") && !strings.HasPrefix(t, "TZ=") {
		// robfig's default is the process's zone: nodes with different
		// TZ settings would disagree on the same call's times.
		t = "CRON_TZ=UTC " + t
	} else if zone, fields, _ := strings.Cut(t[strings.IndexByte(t, '=')+1:], " "); zone == "Local" {
		return nil, errors.New("the zone Local is each node's own: name an IANA zone")
	} else if strings.TrimSpace(fields) == "" {
		// robfig's parser panics on a zone with no space after it.
		return nil, errors.New("no fields after the zone: give 5 fields or a descriptor, as in CRON_TZ=Europe/Paris 0 9 * * *")
	}
	return cronParser.Parse(t)
}

// keepSame says whether calls holds a recurring call just like c (its
// name, interval or expression, action and arguments): scheduling it
// again (in OnWake, say) keeps its pending run rather than push it back, or
// drop one that is due.
func keepSame(calls []pendingCall, c pendingCall) bool {
	for _, p := range calls {
		if p.rec.Name == c.rec.Name {
			r := p.rec
			r.CreatedAt = c.rec.CreatedAt
			r.LastRunMs, r.LastError = c.rec.LastRunMs, c.rec.LastError // its history, not the call
			return sameRecord(r, c.rec)
		}
	}
	return false
}

// setSchedSaved records calls as the activation's committed calls (as of
// the writes last queued), and whether a destroy is among them: every turn
// asks (destroyPending), and a scan of up to MaxSchedules calls is for
// when they change, not for every turn.
func (a *activation) setSchedSaved(calls []pendingCall) {
	a.schedSaved = calls
	a.destroySaved = hasDestroy(calls)
}

func hasDestroy(calls []pendingCall) bool {
	return slices.ContainsFunc(calls, func(c pendingCall) bool { return c.rec.Action == destroyAction })
}

// destroyPending says whether a destroy the actor asked for
// (ActionCtx.Destroy) is queued for commit or stored: the actor takes no
// more calls or workflow turns but its own. Called by the turn holder.
func (a *activation) destroyPending() bool { return a.destroySaved }

// errBeingDestroyed refuses a call or a message to an actor that asked to
// be destroyed: as if it were gone already.
func errBeingDestroyed(a *activation) error {
	return rivet.Errorf(rivet.ErrNotFound, "actor %s is being destroyed", a.describe())
}

// destroyAction is the action of the call ActionCtx.Destroy stores: not a
// valid action name, so no actor's action can be it. Its run destroys the
// actor (Host.Destroy) instead of calling an action.
const destroyAction = "$destroy"

// destroy stores a call that destroys the actor as soon as the turn's
// writes are durable (rivet.ActionCtx.Destroy).
func (s *turnSchedule) destroy() error {
	if s.over() {
		return s.overErr()
	}
	if s.readOnly {
		return s.readOnlyErr("destroy it")
	}
	if hasDestroy(s.a.sched) {
		return nil
	}
	at := s.now.UnixMilli()
	s.a.sched = insertCall(s.a.sched, pendingCall{id: destroyID(at), at: at,
		rec: scheduleRecord{Action: destroyAction, Args: json.RawMessage("[]"), CreatedAt: at}})
	return nil
}

// destroyID is the storage id of a destroy due at at: its key says what
// it is, so that a timer finds a due destroy of an actor not in memory
// from one key (destroyDue).
func destroyID(at int64) string { return fmt.Sprintf("%013d-%s", at, destroyAction) }

// destroyDue says whether a stored call of ref, not in memory, is a
// destroy that is due: keys only, in time order, up to the first not due.
// Not only the earliest: a call overdue when the actor asked to be
// destroyed sorts before the destroy, and it never runs (fireOne), so
// the destroy must not wait for a load whose hooks may fail.
func (h *Host) destroyDue(ctx context.Context, ref Ref) bool {
	enc, part, _, err := h.locate(ref)
	if err != nil {
		return false
	}
	prefix := storage.ScheduleActorPrefix(part, ref.Name, enc)
	now := h.timers.now().UnixMilli()
	opts := storage.ListOptions{KeysOnly: true, Limit: destroyDuePage}
	for {
		kvs, err := h.store.List(ctx, prefix, opts)
		if err != nil {
			return false
		}
		for _, kv := range kvs {
			id := kv.Key[len(prefix):]
			at, ok := schedIDTime(id)
			switch {
			case !ok:
				continue
			case strings.HasSuffix(id, "-"+destroyAction):
				// Due from the request on, whatever this node's clock
				// says of its time (the requester's, which may be ahead).
				return true
			case at > now:
				return false
			}
		}
		if len(kvs) < opts.Limit {
			return false
		}
		opts.StartAfter = kvs[len(kvs)-1].Key
	}
}

// destroyDuePage is how many keys destroyDue reads at a time: the destroy
// is the first of them unless calls were overdue at the request.
const destroyDuePage = 16

// everyID is the id of the recurring call name: the same across its runs.
// It cannot be a one-off call's id, which starts with a digit.
func everyID(name string) string { return "every:" + name }

// everyStorageID is the storage id of the run of recurring call name due
// at at (unix ms): the time first, as schedID's.
func everyStorageID(at int64, name string) string { return fmt.Sprintf("%013d-%s", at, everyID(name)) }

// newCall validates a call of action with args, as one more call of the
// activation, and returns it without its time and id; rec holds what the
// caller adds (a recurring call's name and interval).
func (s *turnSchedule) newCall(action string, args []any, rec scheduleRecord) (pendingCall, error) {
	if s.over() {
		return pendingCall{}, s.overErr()
	}
	if s.readOnly {
		return pendingCall{}, s.readOnlyErr("schedule a call")
	}
	sp := s.a.spec
	act, ok := sp.Actions[action]
	if !ok {
		return pendingCall{}, rivet.Errorf(rivet.ErrInvalidArgument, "schedule: actor %s has no action %q (it has %s)", sp.Name, action, knownNames(sp.Actions))
	}
	if len(args) != act.Arity {
		return pendingCall{}, rivet.Errorf(rivet.ErrInvalidArgument, "schedule: action %s takes %d argument(s), got %d", action, act.Arity, len(args))
	}
	raw, err := rivet.MarshalArgs(args...)
	if err != nil {
		return pendingCall{}, rivet.Errorf(rivet.ErrInvalidArgument, "schedule %s: %v", action, err)
	}
	if act.Check != nil {
		var split []json.RawMessage
		if err := json.Unmarshal(raw, &split); err != nil {
			return pendingCall{}, rivet.Errorf(rivet.ErrInvalidArgument, "schedule %s: %v", action, err)
		}
		if err := act.Check(split); err != nil {
			// Named as the schedule's, or it reads as the caller's own
			// arguments' mistake.
			var re *rivet.Error
			if errors.As(err, &re) {
				return pendingCall{}, rivet.Errorf(re.Kind, "schedule %s: %s", action, re.Message)
			}
			return pendingCall{}, rivet.Errorf(rivet.ErrInvalidArgument, "schedule %s: %v", action, err)
		}
	}
	if limit := s.a.h.cfg.MaxMessageBytes; len(raw) > limit {
		return pendingCall{}, rivet.Errorf(rivet.ErrTooLarge, "schedule %s: its arguments are %d bytes, the limit is %d", action, len(raw), limit)
	}
	if n, b := s.a.schedChanges(); n+len(s.a.staged) >= limitTurnCalls {
		return pendingCall{}, rivet.Errorf(rivet.ErrTooLarge, "schedule %s: one turn schedules and cancels at most %d calls, with the messages it enqueues (they commit in one transaction)", action, limitTurnCalls)
	} else if b+s.a.stagedBytes()+len(raw) > limitTurnBytes {
		return pendingCall{}, rivet.Errorf(rivet.ErrTooLarge, "schedule %s: the calls one turn schedules have at most %d bytes of arguments in all, with the messages it enqueues (they commit in one transaction)", action, limitTurnBytes)
	}
	// A destroy the actor asked for is the runtime's record, not one of
	// its calls: it takes no slot (a scan only at the limit).
	if n := len(s.a.sched); n >= rivet.MaxSchedules && (n > rivet.MaxSchedules || !hasDestroy(s.a.sched)) {
		return pendingCall{}, rivet.Reasonf(rivet.ErrQueueFull, "schedule", "full", "schedule %s: actor %s has %d pending scheduled calls, the limit", action, s.a.describe(), rivet.MaxSchedules)
	}
	rec.Action, rec.Args, rec.CreatedAt = action, raw, s.now.UnixMilli()
	return pendingCall{rec: rec}, nil
}

// insertCall returns a copy of calls with c in its place by time.
func insertCall(calls []pendingCall, c pendingCall) []pendingCall {
	i, _ := slices.BinarySearchFunc(calls, c.id, func(p pendingCall, id string) int { return strings.Compare(p.id, id) })
	return slices.Insert(slices.Clip(calls), i, c) // clipped: a copy, as others share the array
}

// withoutCall returns calls without the one of storage id id (a copy if
// there was one).
func withoutCall(calls []pendingCall, id string) []pendingCall {
	for i, c := range calls {
		if c.id == id {
			return slices.Concat(calls[:i], calls[i+1:])
		}
	}
	return calls
}

func (s *turnSchedule) Get(id string) (rivet.ScheduledCall, bool) {
	if s.over() {
		return rivet.ScheduledCall{}, false // no longer its turn's to read
	}
	for _, c := range s.calls() {
		if c.publicID() == id && c.rec.Action != destroyAction {
			return c.public(), true
		}
	}
	return rivet.ScheduledCall{}, false
}

func (s *turnSchedule) List() []rivet.ScheduledCall {
	if s.over() {
		return nil // no longer its turn's to read
	}
	// The actor's own calls: a destroy it asked for is the runtime's
	// record (inspect shows it), which a loop cancelling every call it
	// lists must not withdraw.
	calls := s.calls()
	out := make([]rivet.ScheduledCall, 0, len(calls))
	for _, c := range calls {
		if c.rec.Action != destroyAction {
			out = append(out, c.public())
		}
	}
	return out
}

func (s *turnSchedule) Cancel(id string) (bool, error) {
	if s.over() {
		return false, s.overErr()
	}
	if s.readOnly {
		return false, s.readOnlyErr("cancel a scheduled call")
	}
	for _, c := range s.a.sched {
		if c.publicID() == id && c.rec.Action != destroyAction {
			if n, _ := s.a.schedChanges(); n+len(s.a.staged) >= limitTurnCalls {
				return false, rivet.Errorf(rivet.ErrTooLarge, "cancel: one turn schedules and cancels at most %d calls, with the messages it enqueues (they commit in one transaction)", limitTurnCalls)
			}
			s.a.sched = withoutCall(s.a.sched, c.id)
			return true, nil
		}
	}
	return false, nil
}

// schedChanges counts the calls added or removed since the last commit,
// and the bytes of the added ones' arguments.
func (a *activation) schedChanges() (n, bytes int) {
	for _, op := range a.schedOps() {
		n++
		bytes += len(op.Value)
	}
	return n, bytes
}

// schedOps returns the writes that take storage from the calls of the
// last commit (schedSaved) to the activation's: a delete per removed call,
// a record per added one (records do not change in place; a recurring
// call replaced within the same millisecond keeps its id and is written
// again).
func (a *activation) schedOps() []storage.Op {
	if sameCalls(a.sched, a.schedSaved) {
		return nil
	}
	var ops []storage.Op
	now := make(map[string]*pendingCall, len(a.sched))
	for i := range a.sched {
		now[a.sched[i].id] = &a.sched[i]
	}
	was := make(map[string]*pendingCall, len(a.schedSaved))
	for i := range a.schedSaved {
		c := &a.schedSaved[i]
		was[c.id] = c
		if now[c.id] == nil {
			ops = append(ops, storage.Delete(storage.ScheduleKey(a.part, a.ref.Name, a.enc, c.id)))
		}
	}
	for i := range a.sched {
		c := &a.sched[i]
		if w := was[c.id]; w != nil && sameRecord(w.rec, c.rec) {
			continue
		}
		b, err := json.Marshal(c.rec)
		if err != nil {
			panic(err) // strings, a valid JSON array and numbers
		}
		ops = append(ops, storage.Put(storage.ScheduleKey(a.part, a.ref.Name, a.enc, c.id), b))
	}
	return ops
}

// sameCalls says whether two views of the calls are one: the common case
// of a turn that scheduled nothing.
func sameCalls(x, y []pendingCall) bool {
	return len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
}

func sameRecord(x, y scheduleRecord) bool {
	return x.Action == y.Action && x.CreatedAt == y.CreatedAt && x.Name == y.Name && x.EveryMs == y.EveryMs && x.Cron == y.Cron && bytes.Equal(x.Args, y.Args) &&
		x.LastRunMs == y.LastRunMs && x.LastError == y.LastError
}

// maxLastError bounds the error a recurring call's record keeps of its
// last run.
const maxLastError = 512

// clipError cuts an error's text to at most maxLastError bytes, on a
// character, its end marked.
func clipError(s string) string { return clipText(s, maxLastError) }

// clipText cuts s to at most n bytes (n > 3), on a character, "..." at
// the end of a cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return textcut.Prefix(s, n-3) + "..."
}

// schedSavedNow records the activation's calls as committed with the
// writes just queued, and arms the timer for the earliest. Called by the
// turn holder after queueing schedOps.
func (a *activation) schedSavedNow() {
	if sameCalls(a.sched, a.schedSaved) {
		return
	}
	a.setSchedSaved(a.sched)
	if len(a.sched) > 0 {
		// Earlier than any armed: a call was added. (A removed call's
		// timer is left: it finds nothing due and re-arms.)
		a.h.timers.scheduleEarlier(a.ref, schedTimer(a.id), time.UnixMilli(a.sched[0].at))
	}
}

// saveSchedules commits the changes to the calls alone (a read-only
// action's run, an operator's cancel). Called by the turn holder.
func (a *activation) saveSchedules() error {
	ops := a.schedOps()
	if len(ops) == 0 {
		return nil
	}
	if _, err := a.enqueue(ops...); err != nil {
		return err
	}
	a.schedSavedNow()
	return nil
}

// fireMax bounds the calls one wake of an actor's timer runs before it
// lets the other due timers go first: an action that schedules itself
// with After(0) must not hold the wake loop's slot for ever.
const fireMax = 100

// fireSchedules runs the actor's calls that are due, one turn each, and
// arms its timer for the next.
func (h *Host) fireSchedules(it *wakeItem) {
	if err := h.begin(); err != nil {
		return
	}
	defer h.end()
	sp, err := h.spec(it.ref)
	if err != nil {
		if errors.Is(err, rivet.ErrUnknownActor) {
			h.log.Warn("scheduled calls of an unknown actor type: left stored", refField(it.ref), zap.Error(err))
		} else {
			// Not this node's now (a handoff under way): the next owner
			// runs them.
			h.log.Debug("scheduled calls left for the partition's next owner", refField(it.ref), zap.Error(err))
		}
		return
	}
	for range fireMax {
		if h.isStopping() {
			return // the rest stay stored: the actor's next owner runs them
		}
		more, err := h.fireOne(it.ref, sp)
		switch {
		case err == nil && more:
			continue
		case err == nil:
			return
		case errors.Is(err, rivet.ErrNotFound):
			return // destroyed: its calls went with it
		case errors.Is(err, rivet.ErrUnavailable) && !h.stillOwns(it.ref):
			return // the partition's next owner loads the timer
		default:
			it.fails++
			it.storageFailed = errors.Is(err, rivet.ErrUnavailable) || errors.Is(err, rivet.ErrTimeout)
			delay := wakeRetryDelay(it.fails, it.storageFailed)
			h.log.Warn("running a scheduled call failed; trying again later", refField(it.ref), zap.Error(err), zap.Int("failures", it.fails), zap.Duration("retry_in", delay))
			h.timers.retryEarlier(it, h.timers.now().Add(delay))
			return
		}
	}
	h.timers.scheduleEarlier(it.ref, it.id, h.timers.now())
}

// fireOne runs the actor's earliest call if it is due, as a turn of its
// own whose writes also remove the call, and says whether another may be
// due. In that turn it arms the actor's timer for the next call, so that
// no turn that schedules one can come between and be overwritten. The
// error is storage's or the actor's loading, never the action's: an
// action that fails still uses its call up (Rivet does not retry either).
func (h *Host) fireOne(ref Ref, sp *rivet.Spec) (more bool, err error) {
	outcome := 0 // 1: ran, 2: failed (used up)
	ctx, cancel := context.WithTimeout(h.baseCtx, h.cfg.ActionTimeout)
	defer cancel()
	chain := h.newChain()
	if !h.inMemory(ref) && h.destroyDue(ctx, ref) {
		// A due destroy of an actor not in memory is Destroy alone: its
		// own load starts no workflow, and hooks that fail do not stop it.
		return false, h.Destroy(ctx, ref)
	}
	destroy := false
	defer func() {
		if destroy && err == nil {
			// Destroy deletes the call with the rest of the actor; if it
			// fails, the call stays and is tried again.
			if err = h.Destroy(ctx, ref); err == nil {
				more = false
			}
		}
	}()
	_, _, err = h.turn(ctx, TurnAction, ref, sp, false, nil, chain, func(a *activation) error {
		now := h.timers.now().UnixMilli()
		if len(a.sched) == 0 {
			// A timer a turn armed for a call it then cancelled (or
			// whose write failed): nothing to wait for.
			h.timers.cancel(schedTimer(a.id))
			return nil
		}
		if a.destroyPending() {
			// The actor asked to be destroyed: it takes no more calls, as
			// it takes no requests, not even one due before the request
			// (overdue), so its destroy runs first. It is due from the
			// request on, whatever this node's clock says of its time:
			// that is the requester's clock, which may be ahead of this
			// one (a partition moved to a node whose clock is behind),
			// and a call due before the request would come due first.
			if slices.ContainsFunc(a.sched, func(p pendingCall) bool { return p.rec.Action == destroyAction }) {
				destroy = true
				return nil
			}
		}
		if c := a.sched[0]; c.at > now {
			h.timers.schedule(a.ref, schedTimer(a.id), time.UnixMilli(c.at))
			return nil
		}
		// The run's own change to the calls: it leaves them, and a
		// recurring call's next run joins them, whatever the action
		// does (a failed run is not retried, but the next one comes).
		// Made before the action runs, which sees it (and may cancel or
		// replace the next run), as a re-entrant turn of it does.
		c := a.sched[0]
		if c.rec.Action == destroyAction {
			// Its own turn (Destroy's), after this one.
			destroy = true
			return nil
		}
		more = true
		var next *pendingCall
		if c.rec.recurring() {
			if n := c.following(now); n.at > 0 {
				n.rec.LastRunMs, n.rec.LastError = c.at, ""
				next = &n
			}
		}
		// failed records, in the next run's record, how this one failed
		// (also in the calls, if the run's change is in them already).
		failed := func(why string) {
			if next == nil {
				return
			}
			next.rec.LastError = clipError(why)
			// The run's own next record, not a replacement of the call a
			// re-entrant turn saved under the same id (a cron call's id is
			// its time and name).
			if i := slices.IndexFunc(a.sched, func(p pendingCall) bool { return p.id == next.id && p.rec.LastRunMs == c.at }); i >= 0 {
				a.sched = slices.Clone(a.sched) // the committed calls may share its array
				a.sched[i].rec.LastError = next.rec.LastError
			}
		}
		ran := func() {
			a.sched = withoutCall(a.sched, c.id)
			if next != nil {
				a.sched = insertCall(a.sched, *next)
			}
		}
		// reran puts the run's change back after something went back to
		// the calls as last committed (restoreState: a failed turn, this
		// one's or a re-entrant one's), unless a re-entrant turn committed
		// it already (or replaced or cancelled the call).
		reran := func() {
			if slices.ContainsFunc(a.sched, func(p pendingCall) bool { return p.id == c.id }) {
				ran()
			}
		}
		// cancelled says whether the action left no call of a recurring
		// run's name: it cancelled the call (its next run, which it sees).
		// Read before a failure goes back to the calls as last committed.
		cancelled := func() bool {
			return next != nil && !slices.ContainsFunc(a.sched, func(p pendingCall) bool { return p.publicID() == c.publicID() })
		}
		// failedRun is the run's change to the calls after a failure:
		// the action's changes are discarded, and the next run comes all
		// the same (reran), unless the action cancelled it (stop). The
		// failure of a run that means to stop the call (what it polls is
		// gone) would otherwise undo that, and it would run, and fail,
		// for ever.
		failedRun := func(stop bool) {
			reran()
			if stop {
				// A copy: the committed calls may share its array.
				a.sched = slices.DeleteFunc(slices.Clone(a.sched), func(p pendingCall) bool { return p.publicID() == c.publicID() })
			}
		}
		saveFailed := func() error {
			if err := a.saveSchedules(); err != nil {
				return err
			}
			outcome = 2
			return nil
		}
		drop := func(why string, err error) error {
			h.log.Warn("scheduled call failed; not retried", actorField(a), zap.String("action", c.rec.Action), zap.String("id", c.publicID()), zap.String("why", why), errField(err))
			return saveFailed()
		}
		// A call that no longer fits the actor's code is used up; a
		// recurring one's run is, as a failed run, and its next run
		// comes: the code that fits it may be back by then (a rolling
		// upgrade's older node fired a call of a new action, and lost it
		// for good: a user trial; a deployment rolled back).
		unfit := func(why string, err error) error {
			if next == nil {
				a.sched = withoutCall(a.sched, c.id)
				return drop(why, err)
			}
			failed(why)
			ran()
			h.log.Warn("recurring scheduled call skipped a run: it no longer fits the actor's code; its next run comes (deploy the code that has the action, or cancel the call: rivetctl schedule cancel)",
				actorField(a), zap.String("action", c.rec.Action), zap.String("id", c.publicID()), zap.String("why", why), errField(err))
			return saveFailed()
		}
		act, ok := sp.Actions[c.rec.Action]
		if !ok {
			return unfit("the actor has no such action now", nil)
		}
		var args []json.RawMessage
		if err := json.Unmarshal(c.rec.Args, &args); err != nil || len(args) != act.Arity {
			return unfit(fmt.Sprintf("its arguments do not fit the action now (it takes %d)", act.Arity), err)
		}
		ran()
		call := c.public()
		te := a.beginTurnEvents(chain, false)
		kept, wrote := false, false
		defer func() { a.finishTurnEvents(te, kept, wrote) }()
		ts := a.newTurnSchedule(act.ReadOnly, te)
		env := rivet.Env{Ctx: ctx, Name: a.ref.Name, Key: a.ref.Key, Client: &hostClient{h: h, chain: chain, from: a}, Schedule: ts, Destroy: ts.destroy, Enqueue: ts, Events: te, Fired: &call, Vars: a.vars, Tasks: te}
		enc, err := invokeScheduled(h, a, act, env, args)
		if err != nil {
			stop := cancelled()
			a.restoreState() // the state and the calls as last committed
			if h.baseCtx.Err() != nil {
				// The node stops: not the action's failure. The call
				// stays stored (unless a re-entrant turn of it committed
				// its run already); the actor's next owner runs it.
				return rivet.Errorf(rivet.ErrUnavailable, "node %s is stopping", h.cfg.NodeID)
			}
			failed(errtext.Of(err))
			failedRun(stop)
			why := "the action returned an error"
			if errors.Is(err, errScheduledPanic) {
				why = "the action panicked"
			}
			return drop(why, err)
		}
		// A re-entrant turn of the action that failed went back to the
		// calls as last committed, the run's removal undone: without it,
		// a run that ended well would stay stored and run again at once.
		reran()
		if act.ReadOnly {
			if err := a.saveSchedules(); err != nil {
				return err
			}
			kept = true
			outcome = 1
			return nil
		}
		stop := cancelled() // saveState goes back to the calls as last committed if it refuses the change
		w, err := a.saveEncoded(enc.b, enc.changed, enc.err)
		if err != nil {
			if errors.Is(err, rivet.ErrTooLarge) || errors.Is(err, rivet.ErrInternal) {
				// The change was discarded (the state over its limit,
				// or not JSON): the action's failure, not storage's.
				failed(errtext.Of(err))
				failedRun(stop)
				return drop("its change to the state was refused", err)
			}
			return err
		}
		kept, wrote = true, w
		outcome = 1
		return nil
	})
	if err == nil {
		// Counted once durable.
		switch outcome {
		case 1:
			h.schedFired.Add(1)
		case 2:
			h.schedFailed.Add(1)
		}
	}
	return more, err
}

// invokeScheduled runs a scheduled call's action, a panic turned into its
// error (a call whose action panics is used up, as one that fails), and so
// is runtime.Goexit: the action runs aside, and the wakeup worker that runs
// the call, with the actor's gate held, goes on. The state the action left
// is encoded aside too (a mutating action that succeeded), for the same
// reason: a MarshalJSON that calls runtime.Goexit, or panics, makes a state
// that does not encode, and the call is used up as for one that returns an
// error.
func invokeScheduled(h *Host, a *activation, act rivet.ActionSpec, env rivet.Env, args []json.RawMessage) (enc encodedState, err error) {
	invoked := false
	if aside(func() {
		err = invokeScheduledAside(h, a, act, env, args)
		invoked = true
		if err == nil && !act.ReadOnly {
			enc.b, enc.changed, enc.err = a.encodeStateGuarded()
		}
	}) {
		if invoked {
			h.log.Error("actor code called runtime.Goexit encoding the state after a scheduled call", actorField(a))
			return encodedState{err: errors.New("its MarshalJSON called runtime.Goexit")}, nil
		}
		h.log.Error("actor code called runtime.Goexit in a scheduled call", actorField(a))
		return encodedState{}, errors.New("the action called runtime.Goexit")
	}
	return enc, err
}

// encodedState is what encodeState returned.
type encodedState struct {
	b       []byte
	changed bool
	err     error
}

// invokeScheduledAside is invokeScheduled's body, on a goroutine of its own.
func invokeScheduledAside(h *Host, a *activation, act rivet.ActionSpec, env rivet.Env, args []json.RawMessage) (err error) {
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("actor panicked in a scheduled call", actorField(a), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			err = fmt.Errorf("%w: %v", errScheduledPanic, r)
		}
	}()
	_, err = act.Invoke(env, a.state, args)
	return err
}

// errScheduledPanic is the error of a scheduled call whose action
// panicked, for the log line that drops the call to say so.
var errScheduledPanic = errors.New("panic")

// schedulesOf returns the actor's scheduled calls as storage holds them (the
// committed ones), the earliest first.
func (h *Host) schedulesOf(ctx context.Context, part uint32, ref Ref) ([]rivet.ScheduledCall, error) {
	enc, _, _, err := h.locate(ref)
	if err != nil {
		return nil, err
	}
	calls, err := h.readSchedules(ctx, part, ref.Name, enc)
	if err != nil {
		return nil, err
	}
	out := make([]rivet.ScheduledCall, len(calls))
	for i, c := range calls {
		out[i] = c.public()
	}
	return out, nil
}

// CancelScheduledCall removes one of an actor's scheduled calls, as
// Scheduler.Cancel does in an action, and says whether there was one: an
// operator's stop for a call the actor has no action to cancel (a
// recurring call that keeps failing).
func (h *Host) CancelScheduledCall(ctx context.Context, ref Ref, id string) (bool, error) {
	if err := h.begin(); err != nil {
		return false, err
	}
	defer h.end()
	if id == "" {
		return false, rivet.Errorf(rivet.ErrInvalidArgument, "the scheduled call's id is empty (rivetctl inspect lists them)")
	}
	if strings.HasSuffix(id, "-"+destroyAction) {
		// Callers were told NOT_FOUND from the request on: withdrawn, the
		// actor would come back.
		return false, rivet.Errorf(rivet.ErrInvalidArgument, "%s is the destroy actor %s %s asked for, not a scheduled call: it cannot be cancelled", id, ref.Name, keyString(ref.Key))
	}
	sp, err := h.spec(ref)
	if err != nil {
		return false, err
	}
	cancelled := false
	// An actor not in memory is loaded as Destroy loads it (turnFor): its
	// hooks' failure does not stop the cancel, which is the operator's
	// stop for the call of an actor that cannot wake (the call would wake
	// it, and fail, for ever). Such a load starts no workflow: this call
	// leaves it evicted, the workflow to run again from storage.
	was := h.loaded(ref)
	_, _, err = h.turnFor(ctx, TurnAdmin, ref, sp, false, nil, h.newChain(), true, func(a *activation) error {
		if a != was && sp.Run != nil && a.runner() == nil {
			defer h.evictAndRerun(a)
		}
		if cancelled, _ = a.newTurnSchedule(false, nil).Cancel(id); !cancelled {
			return nil
		}
		if err := a.saveSchedules(); err != nil {
			return err
		}
		if len(a.sched) == 0 {
			// Its timer would load the actor to find nothing due: one
			// that cannot wake would fail that for ever.
			h.timers.cancel(schedTimer(a.id))
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	if cancelled {
		h.log.Info("scheduled call cancelled", refField(ref), zap.String("id", id))
	}
	return cancelled, nil
}
