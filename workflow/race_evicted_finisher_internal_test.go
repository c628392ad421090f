package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/caller"
)

// stopHost is a host whose clock stands still, with a hook on commits: a
// test stops the run from it at the instant it chooses. It records nothing
// and takes no messages.
type stopHost struct {
	now      time.Time
	onCommit func(ws []HistoryWrite)
	notify   chan struct{}
}

func (h *stopHost) Now() time.Time { return h.now }
func (h *stopHost) Timer(at time.Time) (<-chan time.Time, func()) {
	c := make(chan time.Time, 1)
	if !at.After(h.now) {
		c <- h.now
	}
	return c, func() {}
}
func (h *stopHost) RunStep(context.Context, bool, func(StepEnv) []HistoryWrite) error { return nil }
func (h *stopHost) Commit(_ context.Context, ws []HistoryWrite) error {
	if h.onCommit != nil {
		h.onCommit(ws)
	}
	return nil
}
func (h *stopHost) Client() caller.Client { return nil }
func (h *stopHost) Receive(context.Context, []string, int, func([]RawMessage) []HistoryWrite) ([]RawMessage, error) {
	return nil, nil
}
func (h *stopHost) MessageNotify() <-chan struct{} { return h.notify }
func (h *stopHost) Complete(context.Context, uint64, json.RawMessage, []HistoryWrite) error {
	return nil
}
func (h *stopHost) Actor() (string, []string) { return "test", []string{"test"} }
func (h *stopHost) Waiting(Wake)              {}

// A race's finisher held by a sibling still at work (which may yet finish
// first), when the run is evicted: the sibling, past its sleep's commit,
// blocks only after the stop came, and its wait says a second from now.
// The finisher's wait says nothing (it waited for the sibling, not for
// the host), and its finish is lost with the run, to be made again by the
// next one. That one must come at once, as the finisher would have won
// now: at the sleep's deadline instead, the race is still decided for it
// at its time (its replay records that), but the code after the race
// starts a second late, and counts its own timeouts from there (seed 5 of
// TestRandomSim ended a second late so, evicted at such an instant).
func TestAWaitBegunAfterTheStopWhileAFinisherWaitsYieldsAtOnce(t *testing.T) {
	ctx, evict := context.WithCancel(context.Background())
	defer evict()
	h := &stopHost{now: t0, notify: make(chan struct{})}
	var (
		r       *run
		stopped sync.Once
		failed  string
	)
	h.onCommit = func(ws []HistoryWrite) {
		if len(ws) == 0 || ws[0].Put == nil || ws[0].Put.Path != "r/a/z" {
			return
		}
		// The sleep's pending entry: a is at work, at t0. b finished at
		// t0 and waits for it (a, declared first, would win a tie).
		stopped.Do(func() {
			if !untilLocked(r, func() bool { return len(r.waiting) == 1 && r.waiting[0].races[0].b == 1 }) {
				failed = "b never waited for the decision"
			}
			evict()
		})
	}
	wantYieldedAtOnce(t, raceOfSleepAndFinisher(ctx, h, &r), failed)
}

// A sleep whose wait begins after the stop, with no race to decide, keeps
// its own wake: the next run comes at the sleep's end, not at once for a
// replay that would find the workflow asleep (a node stopped just after a
// sleep's commit stored "now" as the workflow's wakeup, and a test reading
// its wakeup after a restart found none).
func TestASleepBegunAfterTheStopYieldsUntilItsEnd(t *testing.T) {
	ctx, evict := context.WithCancel(context.Background())
	defer evict()
	h := &stopHost{now: t0, notify: make(chan struct{})}
	h.onCommit = func(ws []HistoryWrite) {
		if len(ws) > 0 && ws[0].Put != nil && ws[0].Put.Path == "z" {
			evict() // the sleep's pending entry, before its wait
		}
	}
	out := Run(ctx, func(c *Ctx[struct{}]) error { return c.Sleep("z", time.Second) }, h, nil)
	if out.Status != RunYielded || !out.Wake.At.Equal(t0.Add(time.Second)) {
		t.Fatalf("outcome %s %v until %v, want yielded until the sleep's end (%v)", out.Status, out.Err, out.Wake.At, t0.Add(time.Second))
	}
}

// As above, but the finisher's wait ends with the stop before the sibling
// at work begins its own: the run must still be woken at once. The
// finisher was held when the stop came, and its finish is lost with the
// run however soon it noticed (seed 84 of TestRandomSim, evicted after
// a sibling's sleep's commit, slept a thousand hours on a race decided
// at once).
func TestAWaitBegunAfterTheStopYieldsAtOnceOnceTheFinisherLeft(t *testing.T) {
	ctx, evict := context.WithCancel(context.Background())
	defer evict()
	h := &stopHost{now: t0, notify: make(chan struct{})}
	var (
		r       *run
		stopped sync.Once
		failed  string
	)
	h.onCommit = func(ws []HistoryWrite) {
		if len(ws) == 0 || ws[0].Put == nil || ws[0].Put.Path != "r/a/z" {
			return
		}
		stopped.Do(func() {
			var rc *race
			if !untilLocked(r, func() bool {
				if len(r.waiting) == 1 && r.waiting[0].races[0].b == 1 {
					rc = r.waiting[0].races[0].r
					return true
				}
				return false
			}) {
				failed = "b never waited for the decision"
				return
			}
			evict()
			// a, still in its sleep's commit, begins its wait only once
			// b left its own.
			if !untilLocked(r, func() bool { return rc.holding == 0 }) {
				failed = "b never stopped waiting"
			}
		})
	}
	wantYieldedAtOnce(t, raceOfSleepAndFinisher(ctx, h, &r), failed)
}

// untilLocked polls cond, with r.mu held, for up to 10 s.
func untilLocked(r *run, cond func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// raceOfSleepAndFinisher runs a race of a, which sleeps a second, and b,
// which finishes at once, on h, setting *r to the run first.
func raceOfSleepAndFinisher(ctx context.Context, h *stopHost, r **run) Outcome {
	return Run(ctx, func(c *Ctx[struct{}]) error {
		*r = c.x.t.r
		_, _, err := Race(c, "r", []RaceBranch[struct{}, int]{
			{Name: "a", Run: func(c *Ctx[struct{}]) (int, error) { return 0, c.Sleep("z", time.Second) }},
			{Name: "b", Run: func(c *Ctx[struct{}]) (int, error) { return 1, nil }},
		})
		return err
	}, h, nil)
}

// wantYieldedAtOnce fails t unless out yielded until t0, the clock's
// instant, or a hook of the test failed.
func wantYieldedAtOnce(t *testing.T, out Outcome, failed string) {
	t.Helper()
	if failed != "" {
		t.Fatal(failed)
	}
	if out.Status != RunYielded {
		t.Fatalf("outcome %s %v, want yielded", out.Status, out.Err)
	}
	if !out.Wake.At.Equal(t0) {
		t.Fatalf("yielded until %v, want at once (%v): the race was to be decided now", out.Wake.At, t0)
	}
}

// A race's finisher held by a sibling at work, which fails after the
// stop came without waiting again (the stop came at its failure's record,
// in the race's entry): its end would have let the finisher win at once,
// so the run must be woken at once, not when a third branch's sleep ends
// (seed 654 of TestRandomSim with -sim.evict, evicted at such a commit,
// slept until a message came, an hour later).
func TestASiblingThatFailsAfterTheStopWhileAFinisherWaitsYieldsAtOnce(t *testing.T) {
	ctx, evict := context.WithCancel(context.Background())
	defer evict()
	h := &stopHost{now: t0, notify: make(chan struct{})}
	h.onCommit = func(ws []HistoryWrite) {
		for _, w := range ws {
			if w.Put != nil && w.Put.Path == "r" && w.Put.Branches["a"].Status == StatusFailed {
				evict()
			}
		}
	}
	var rp atomic.Pointer[run]
	fail := make(chan struct{})
	failed := ""
	go func() {
		defer close(fail)
		for rp.Load() == nil {
			time.Sleep(time.Millisecond)
		}
		// b finished at t0 and waits for a (declared first, at work at
		// t0); c sleeps an hour. Then a fails.
		r := rp.Load()
		if !untilLocked(r, func() bool { return len(r.waiting) == 2 && r.active == 1 }) {
			failed = "b and c never waited"
		}
	}()
	out := Run(ctx, func(c *Ctx[struct{}]) error {
		rp.Store(c.x.t.r)
		_, _, err := Race(c, "r", []RaceBranch[struct{}, int]{
			{Name: "a", Run: func(c *Ctx[struct{}]) (int, error) { <-fail; return 0, errors.New("boom") }},
			{Name: "b", Run: func(c *Ctx[struct{}]) (int, error) { return 1, nil }},
			{Name: "c", Run: func(c *Ctx[struct{}]) (int, error) { return 2, c.Sleep("z", time.Hour) }},
		})
		return err
	}, h, nil)
	wantYieldedAtOnce(t, out, failed)
}

// A race's finisher that waits while a sibling still replays its
// recorded entries (no winner is picked meanwhile), when the run is
// evicted: the replaying sibling is at work, as one whose floor holds the
// finisher is, and a wait another sibling begins after the stop must
// yield the run at once, not at its own deadline (seed 3273 of
// TestRandomSim with -sim.evict slept a thousand hours so, on a race its
// finisher had won at once).
func TestAWaitBegunAfterTheStopWhileAFinisherWaitsForAReplayYieldsAtOnce(t *testing.T) {
	ctx, evict := context.WithCancel(context.Background())
	defer evict()
	h := &stopHost{now: t0, notify: make(chan struct{})}
	var rp atomic.Pointer[run]
	release := make(chan struct{})
	failed := ""
	h.onCommit = func(ws []HistoryWrite) {
		if len(ws) == 0 || ws[0].Put == nil || ws[0].Put.Path != "r/b/z" {
			return
		}
		// b's sleep's pending entry: b is at work. c finished at t0 and
		// waits for a, which replayed its step and has not ended.
		r := rp.Load()
		if !untilLocked(r, func() bool { return len(r.waiting) == 1 && r.waiting[0].races[0].b == 2 }) {
			failed = "c never waited for the decision"
		}
		evict()
		close(release)
	}
	hist := []Entry{
		{Path: "r", Seq: 1, Kind: KindRace, Status: StatusPending, Time: t0, StartedAt: t0, Branches: map[string]Branch{"a": {Status: StatusPending}, "b": {Status: StatusPending}, "c": {Status: StatusPending}}},
		{Path: "r/a/s", Seq: 1, Kind: KindStep, Status: StatusCompleted, Time: t0, Attempts: 1, LastAttemptAt: t0, Output: json.RawMessage(`1`)},
	}
	out := Run(ctx, func(c *Ctx[struct{}]) error {
		rp.Store(c.x.t.r)
		_, _, err := Race(c, "r", []RaceBranch[struct{}, int]{
			{Name: "a", Run: func(c *Ctx[struct{}]) (int, error) {
				if _, err := Step(c, "s", func(*StepCtx[struct{}]) (int, error) { return 1, nil }); err != nil {
					return 0, err
				}
				<-release
				return 0, errors.New("late")
			}},
			{Name: "b", Run: func(c *Ctx[struct{}]) (int, error) { return 1, c.Sleep("z", time.Hour) }},
			{Name: "c", Run: func(c *Ctx[struct{}]) (int, error) { return 2, nil }},
		})
		return err
	}, h, hist)
	wantYieldedAtOnce(t, out, failed)
}

// blockingReceiveHost is a stopHost whose first Receive blocks until
// release is closed, and tells entered when it starts: its caller holds
// the races' claims meanwhile.
type blockingReceiveHost struct {
	stopHost
	once             sync.Once
	entered, release chan struct{}
}

func (h *blockingReceiveHost) Receive(context.Context, []string, int, func([]RawMessage) []HistoryWrite) ([]RawMessage, error) {
	h.once.Do(func() { close(h.entered) })
	<-h.release
	return nil, nil
}

// A race branch waiting for the claim, woken because it changed before
// the run was stopped, but back under the run's lock only after: it was
// at work when the stop came, and the run must be woken at once, not
// when what another branch waits for comes (seed 76 of TestRandomSim
// with -sim.evict -sim.evictruns 30, evicted at such an instant, waited
// for a message while its race was to be decided at once). The test
// holds the run's lock from the change to the stop: the woken branch
// sees the stop first, however soon it runs, and only the change itself
// says that it came before.
func TestAWaitWokenBeforeTheStopYieldsAtOnce(t *testing.T) {
	out, failed := wokenBeforeTheStop()
	wantYieldedAtOnce(t, out, failed)
}

// wokenBeforeTheStop runs a race of a, which holds the claim while it
// receives, and b, which waits for it: the claim changes, and the run is
// stopped before b is back under the run's lock.
func wokenBeforeTheStop() (out Outcome, failed string) {
	ctx, evict := context.WithCancel(context.Background())
	defer evict()
	h := &blockingReceiveHost{stopHost: stopHost{now: t0, notify: make(chan struct{})}, entered: make(chan struct{}), release: make(chan struct{})}
	var rp atomic.Pointer[run]
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(h.release)
		<-h.entered
		r := rp.Load()
		if !untilLocked(r, func() bool { return len(r.waiting) == 1 && r.waiting[0].races[0].b == 1 }) {
			failed = "b never waited for the claim"
			return
		}
		r.mu.Lock()
		r.waiting[0].races[0].r.signalLocked()
		// b wakes, and waits for the lock until the stop came.
		evict()
		r.mu.Unlock()
	}()
	out = Run(ctx, func(c *Ctx[struct{}]) error {
		rp.Store(c.x.t.r)
		_, _, err := Race(c, "r", []RaceBranch[struct{}, int]{
			{Name: "a", Run: func(c *Ctx[struct{}]) (int, error) {
				_, err := Next[int](c, "m", NextOptions{Names: []string{"qa"}})
				return 0, err
			}},
			{Name: "b", Run: func(c *Ctx[struct{}]) (int, error) {
				<-h.entered
				_, err := Next[int](c, "m", NextOptions{Names: []string{"qb"}})
				return 1, err
			}},
		})
		return err
	}, h, nil)
	<-done
	return out, failed
}

// nowHookHost is a stopHost that calls onNow, once armed, on the next
// reading of its clock: the run reads it with its lock held when it tells
// the host it is blocked (run.reportLocked), just after a wait's
// registration changed the races.
type nowHookHost struct {
	stopHost
	armed   atomic.Bool
	onNow   func()
	onTimer func()
}

func (h *nowHookHost) Now() time.Time {
	if h.armed.CompareAndSwap(true, false) {
		h.onNow()
	}
	return h.now
}

func (h *nowHookHost) Timer(at time.Time) (<-chan time.Time, func()) {
	if h.onTimer != nil {
		h.onTimer()
	}
	return h.stopHost.Timer(at)
}

// A race's finisher held by a sibling at work, which then begins its
// sleep: the sleep's registration moves the sibling's floor to its end and
// wakes the finisher, which may now win, and the run is stopped at once,
// before the finisher's goroutine looked (here: in the same hold of the
// run's lock). It was at work when the stop came: the run must be woken at
// once, not at the sibling's sleep's end (seed 84 of TestRandomSim under
// -race -cpu 1 with -sim.evict slept a thousand hours so on a race its
// finisher decided at once, about 2 runs in 60).
func TestAFinisherWokenJustBeforeTheStopYieldsAtOnce(t *testing.T) {
	ctx, evict := context.WithCancel(context.Background())
	defer evict()
	h := &nowHookHost{stopHost: stopHost{now: t0, notify: make(chan struct{})}}
	var (
		r      *run
		failed string
	)
	h.onCommit = func(ws []HistoryWrite) {
		if len(ws) == 0 || ws[0].Put == nil || ws[0].Put.Path != "r/a/z" {
			return
		}
		// a's sleep's pending entry: b finished at t0 and waits for a
		// (at work at t0, declared first, it would win a tie).
		if !untilLocked(r, func() bool { return len(r.waiting) == 1 && r.waiting[0].races[0].b == 1 }) {
			failed = "b never waited for the decision"
		}
		// a's wait reads the clock next when it tells the host that
		// the run is blocked, after its registration woke b.
		h.onTimer = func() { h.armed.Store(true) }
	}
	h.onNow = evict
	out := Run(ctx, func(c *Ctx[struct{}]) error {
		r = c.x.t.r
		_, _, err := Race(c, "r", []RaceBranch[struct{}, int]{
			{Name: "a", Run: func(c *Ctx[struct{}]) (int, error) { return 0, c.Sleep("z", time.Hour) }},
			{Name: "b", Run: func(c *Ctx[struct{}]) (int, error) { return 1, nil }},
		})
		return err
	}, h, nil)
	wantYieldedAtOnce(t, out, failed)
}
