package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type dozeState struct {
	Woke bool `json:"woke"`
}

var dozer = rivet.Actor[dozeState]{
	Name: "dozer",
	Run: func(ctx *workflow.Ctx[dozeState]) error {
		if err := ctx.Sleep("nap", 2*time.Second); err != nil {
			return err
		}
		return ctx.Step("wake", func(s *workflow.StepCtx[dozeState]) error { s.State.Woke = true; return nil })
	},
}

// A partition claimed while its wakeups cannot be read (a re-fence, a
// handoff in, a lease re-established, with etcd failing a read) still
// wakes its sleeping workflows: the load is tried again. Its previous
// owner dropped their timers with the partition.
func TestWakeupsOfAClaimedPartitionAreLoadedDespiteAFailedRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, dozer), func(c *runtime.Config) { c.IdleTimeout = 200 * time.Millisecond })
	ref := runtime.Ref{Name: "dozer", Key: []string{"d"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deactivation", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	p, _ := e.host.PartitionOf(ref)
	if err := e.host.Handoff(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	e.store.failListPrefix.Store(storage.WakeupPartitionPrefix(p))
	if parts, err := e.own.Claim(ctx(t), []uint32{p}); err != nil || len(parts) != 1 {
		t.Fatalf("claim: %v %v", parts, err)
	}
	if v, _ := e.store.failListPrefix.Load().(string); v != "" {
		t.Fatal("the wakeup load did not run")
	}
	waitFor(t, "the sleeper to wake", 20*time.Second, func() bool {
		return string(inspect(t, e.host, "dozer", "d").State) == `{"woke":true}`
	})
}

// longNapper sleeps an hour: its wakeup is armed, not due, for a test's
// whole run.
var longNapper = rivet.Actor[dozeState]{
	Name: "longNapper",
	Run: func(ctx *workflow.Ctx[dozeState]) error {
		return ctx.Sleep("nap", time.Hour)
	},
}

// A retried load of a claimed partition's wakeups bounds each page it
// reads, not the whole load: 50,000 sleeping workflows took 3.5 s to load
// on a busy machine (a user trial), and an index larger than one deadline
// allowed was read again from its start, for ever: its workflows not due
// yet kept the first pages' keys, and those past them were never armed.
// Here each page takes 150 ms and the load's seven pages more than the
// 400 ms each page is allowed.
func TestARetriedWakeupLoadBoundsEachPageNotTheWhole(t *testing.T) {
	// Restored in a cleanup registered before the env's, so after its
	// host stopped: a deferred restore raced the host's reads.
	oldPage, oldTimeout := runtime.SetListPage(1), runtime.SetLoadWakeupsPageTimeout(400*time.Millisecond)
	t.Cleanup(func() { runtime.SetListPage(oldPage); runtime.SetLoadWakeupsPageTimeout(oldTimeout) })
	e := newEnv(t, counterReg(t, longNapper), func(c *runtime.Config) {
		c.Partitions = 1 // every napper in it
		c.IdleTimeout = 200 * time.Millisecond
	})
	const nappers = 6
	refs := make([]runtime.Ref, nappers)
	for i := range refs {
		refs[i] = runtime.Ref{Name: "longNapper", Key: []string{fmt.Sprint(i)}}
		if _, _, err := e.host.GetOrCreate(ctx(t), refs[i], nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every nap armed", 10*time.Second, func() bool {
		for _, ref := range refs {
			if _, ok := e.host.NextWakeup(ref); !ok {
				return false
			}
		}
		return true
	})
	waitFor(t, "deactivation", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	if err := e.host.Handoff(ctx(t), 0); err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if _, ok := e.host.NextWakeup(ref); ok {
			t.Fatalf("%v: still armed after the handoff", ref)
		}
	}
	e.store.listDelay.Store(int64(150 * time.Millisecond))
	e.store.failListPrefix.Store(storage.WakeupPartitionPrefix(0))
	if parts, err := e.own.Claim(ctx(t), []uint32{0}); err != nil || len(parts) != 1 {
		t.Fatalf("claim: %v %v", parts, err)
	}
	waitFor(t, "every nap armed again", 20*time.Second, func() bool {
		for _, ref := range refs {
			if _, ok := e.host.NextWakeup(ref); !ok {
				return false
			}
		}
		return true
	})
}

// The commit that records a workflow's end, refused once (etcd: too many
// requests), is tried again soon, not only when a request comes.
func TestARefusedEndOfWorkflowIsRecordedLater(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, dozer), nil)
	e.store.refuseCommitSub.Store(storage.WorkflowStatusSuffix)
	if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "dozer", Key: []string{"f"}}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refused end", 20*time.Second, func() bool { v, _ := e.store.refuseCommitSub.Load().(string); return v == "" })
	waitFor(t, "the end recorded", 20*time.Second, func() bool {
		return inspect(t, e.host, "dozer", "f").WorkflowStatus == runtime.WorkflowCompleted
	})
}

// A workflow that waits only for messages (its wakeup record asks for no
// timer) is not activated by a claim of its partition: a message sent to
// it writes a record that is due.
func TestAClaimDoesNotWakeAWorkflowWaitingOnlyForMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, ticker), func(c *runtime.Config) { c.IdleTimeout = 300 * time.Millisecond })
	tick(t, e, "idle")
	waitFor(t, "the tick", 10*time.Second, func() bool { return seen(t, e, "idle") == 1 })
	waitFor(t, "deactivation", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	e.cfg.IdleTimeout = time.Minute // a wrong wake would stay active
	e.restart()
	time.Sleep(500 * time.Millisecond) // time for a wrong wake (absence: cannot flake)
	if st := e.host.Stats(); st.ActiveActors != 0 {
		t.Fatalf("a workflow waiting only for messages was activated by the claim (%d active)", st.ActiveActors)
	}
	tick(t, e, "idle")
	waitFor(t, "the second tick", 10*time.Second, func() bool { return seen(t, e, "idle") == 2 })
}

type boxState struct {
	Seen int `json:"seen"`
}

// servingMailbox is an actor with actions whose workflow counts the
// messages of q it takes, in a loop of receives that wait up to an hour.
func servingMailbox(actions rivet.Actions[boxState]) rivet.Actor[boxState] {
	return rivet.Actor[boxState]{
		Name:   "mailbox",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[boxState]) error {
			return ctx.Loop("serve", func(lc *workflow.Ctx[boxState]) error {
				_, err := workflow.Next[int](lc, "m", workflow.NextOptions{Timeout: time.Hour})
				if err != nil && !errors.Is(err, workflow.ErrTimeout) {
					return err
				}
				return lc.Step("count", func(s *workflow.StepCtx[boxState]) error { s.State.Seen++; return nil })
			})
		},
		Actions: actions,
	}
}

// A message sent while the node stops is taken after a restart, not only
// at the deadline of the receive its workflow was in: the stopping
// workflow's wakeup record (written without the actor's turn) and the
// Send's (which saw the older time and wrote none) raced.
func TestAMessageSentDuringAStopIsTakenAfterTheRestart(t *testing.T) {
	t.Parallel()
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	mailbox := servingMailbox(rivet.Actions[boxState]{
		"block": rivet.Query(func(c *rivet.ActionCtx[boxState]) (int, error) {
			entered <- struct{}{}
			<-block
			return 0, nil
		}),
	})
	e := newEnv(t, counterReg(t, mailbox), nil)
	ref := runtime.Ref{Name: "mailbox", Key: []string{"m"}}
	send := func() error {
		_, err := e.host.Send(context.Background(), runtime.SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), CreateIfMissing: true})
		return err
	}
	seenN := func() int {
		var st boxState
		_ = json.Unmarshal(inspect(t, e.host, "mailbox", "m").State, &st)
		return st.Seen
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first message", 10*time.Second, func() bool { return seenN() == 1 })
	// The orderings below are made likely by short pauses; if one does not
	// happen, the test is weaker, not wrong.
	time.Sleep(200 * time.Millisecond) // the next receive's deadline is recorded
	callDone := make(chan error, 1)
	go func() { _, err := call(t, e.host, "mailbox", "m", "block", false); callDone <- err }()
	<-entered
	sendDone := make(chan error, 1)
	go func() { sendDone <- send() }() // waits for the turn
	time.Sleep(200 * time.Millisecond)
	e.store.holdGate, e.store.holdEntered = make(chan struct{}), make(chan struct{})
	e.store.holdCommitSub.Store(storage.WakeupsPrefix)
	stopped := make(chan struct{})
	go func() { e.stop(); close(stopped) }()
	<-e.store.holdEntered // the stopping workflow's record is on its way
	close(block)          // the Send's turn runs now
	time.Sleep(300 * time.Millisecond)
	close(e.store.holdGate)
	if err := <-sendDone; err != nil {
		t.Fatalf("send: %v", err)
	}
	<-callDone
	<-stopped
	e.start()
	waitFor(t, "the message sent during the stop", 20*time.Second, func() bool { return seenN() == 2 })
}

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// wakeupEnv is a host with a counter actor whose wakeups its timers run
// by a fake clock.
type wakeupEnv struct {
	*env
	t     *testing.T
	ref   runtime.Ref
	part  uint32
	clock *fakeClock
}

// newWakeupEnv creates the counter actor key, out of memory.
func newWakeupEnv(t *testing.T, key string) *wakeupEnv {
	e := newEnv(t, counterReg(t), nil)
	if n := callInt(t, e.host, "counter", key, "increment", true, 1); n != 1 {
		t.Fatalf("count = %d, want 1", n)
	}
	ref := runtime.Ref{Name: "counter", Key: []string{key}}
	w := &wakeupEnv{env: e, t: t, ref: ref, part: placement.Partition("counter", storage.EncodeKey(ref.Key), testPartitions), clock: &fakeClock{now: time.Now()}}
	w.deactivate()
	e.host.SetWakeClock(w.clock.Now)
	return w
}

// deactivate takes the actor out of memory: its partition is handed off
// and claimed again.
func (w *wakeupEnv) deactivate() {
	t := w.t
	t.Helper()
	if err := w.host.Handoff(ctx(t), w.part); err != nil {
		t.Fatal(err)
	}
	if parts, err := w.own.Claim(ctx(t), []uint32{w.part}); err != nil || len(parts) != 1 {
		t.Fatalf("claim: %v %v", parts, err)
	}
	if n := w.host.Stats().ActiveActors; n != 0 {
		t.Fatalf("%d actors in memory, want 0", n)
	}
}

// key returns the storage key of the actor's record suffix.
func (w *wakeupEnv) key(suffix string) string {
	return storage.ActorPrefix(w.part, "counter", storage.EncodeKey(w.ref.Key)) + suffix
}

// setState writes the actor's stored state.
func (w *wakeupEnv) setState(state string) {
	t := w.t
	t.Helper()
	tok, ok := w.own.Token(w.part)
	if !ok {
		t.Fatalf("partition %d not owned", w.part)
	}
	txn := storage.Txn{Fence: storage.Fence{Partition: w.part, Token: tok}, Ops: []storage.Op{storage.Put(w.key(storage.StateSuffix), []byte(state))}}
	if err := w.store.Store.Commit(ctx(t), txn); err != nil {
		t.Fatal(err)
	}
}

// wakeNow schedules a wakeup of the actor at the clock's time.
func (w *wakeupEnv) wakeNow() {
	w.t.Helper()
	if err := w.host.ScheduleWakeup(w.ref, w.clock.Now()); err != nil {
		w.t.Fatal(err)
	}
}

// nextRetry waits until the wakeup that came due at the clock's time has
// been tried and scheduled again, and returns in how long.
func (w *wakeupEnv) nextRetry() time.Duration {
	w.t.Helper()
	now := w.clock.Now()
	var at time.Time
	waitFor(w.t, "the wakeup to be tried and scheduled again", 20*time.Second, func() bool {
		var ok bool
		at, ok = w.host.NextWakeup(w.ref)
		return ok && at.After(now)
	})
	return at.Sub(now)
}

// runDue moves the clock to the actor's wakeup and lets the host run it.
func (w *wakeupEnv) runDue() {
	w.t.Helper()
	at, ok := w.host.NextWakeup(w.ref)
	if !ok {
		w.t.Fatal("no wakeup scheduled")
	}
	w.clock.Set(at)
	w.host.KickWakeups()
}

// A wakeup whose actor cannot be activated (its state does not decode) is
// tried again later and later, up to a minute apart, not every second for
// ever, each time with a warning. Once the actor activates, the retries
// end; a later wakeup that fails starts again from a second.
func TestAWakeupThatKeepsFailingBacksOffUpToAMinute(t *testing.T) {
	t.Parallel()
	w := newWakeupEnv(t, "broken")
	w.setState("not json")
	w.wakeNow()
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, time.Minute, time.Minute} {
		if got := w.nextRetry(); got != want {
			t.Fatalf("retry %d after %v, want %v", i+1, got, want)
		}
		w.runDue()
	}
	// Repaired: the next try activates it, and nothing is left to retry.
	w.nextRetry()
	w.setState(`{"count":7}`)
	w.runDue()
	waitFor(t, "the actor to activate", 20*time.Second, func() bool { return w.host.Stats().ActiveActors == 1 })
	waitFor(t, "the retries to end", 20*time.Second, func() bool { _, ok := w.host.NextWakeup(w.ref); return !ok })
	if n := callInt(t, w.host, "counter", "broken", "getCount", false); n != 7 {
		t.Fatalf("count = %d, want 7", n)
	}

	w.deactivate()
	w.setState("not json")
	w.wakeNow()
	if got := w.nextRetry(); got != time.Second {
		t.Fatalf("first retry of a new wakeup after %v, want 1s", got)
	}
}

// A wakeup that fails because storage does (a read fails, the partition
// still ours) backs off too, but only up to 5 s, so that the actor runs
// soon after storage is back.
func TestAWakeupFailingOnStorageIsTriedAgainWithinSeconds(t *testing.T) {
	t.Parallel()
	w := newWakeupEnv(t, "unreadable")
	meta := w.key(storage.MetaSuffix)
	w.store.failGetSub.Store(meta)
	w.wakeNow()
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second} {
		if got := w.nextRetry(); got != want {
			t.Fatalf("retry %d after %v, want %v", i+1, got, want)
		}
		if w.store.failGetSub.Load() != "" {
			t.Fatal("the wakeup failed without reading storage")
		}
		if i < 4 {
			w.store.failGetSub.Store(meta) // the next read fails too
		}
		w.runDue()
	}
	waitFor(t, "the actor to activate once storage reads again", 20*time.Second, func() bool { return w.host.Stats().ActiveActors == 1 })
	waitFor(t, "the retries to end", 20*time.Second, func() bool { _, ok := w.host.NextWakeup(w.ref); return !ok })
}

// A wall clock stepped forward past a wakeup fires it within the wake
// loop's bound on a sleep, not when the sleep computed before the step
// would have ended (here two hours of real time).
func TestAWakeupFiresSoonAfterTheWallClockStepsPastIt(t *testing.T) {
	old := runtime.SetWakeLoopMaxWait(100 * time.Millisecond) // before any host runs
	t.Cleanup(func() { runtime.SetWakeLoopMaxWait(old) })     // after they stopped
	w := newWakeupEnv(t, "stepped")
	at := w.clock.Now().Add(2 * time.Hour)
	if err := w.host.ScheduleWakeup(w.ref, at); err != nil {
		t.Fatal(err)
	}
	// The loop took the kick, and sleeps towards a wakeup two hours away
	// by the clock.
	waitFor(t, "the wake loop to see the wakeup", 20*time.Second, func() bool { return !w.host.WakeKickPending() })
	w.clock.Set(at) // stepped, and nothing kicks the loop
	waitFor(t, "the actor woken", 20*time.Second, func() bool { return w.host.Stats().ActiveActors == 1 })
}

// A restarted node loads every sleeping workflow's wakeup and every
// scheduled call, when they fill many pages of its listing: of a few
// partitions (each read alone) and of many (one pass over all of them).
func TestWakeupsAndCallsLoadAcrossPagesAfterARestart(t *testing.T) {
	for _, parts := range []uint32{16, 64} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			defer runtime.SetListPage(runtime.SetListPage(2))
			e := newEnv(t, counterReg(t, sleeper, alarm), func(c *runtime.Config) {
				c.Partitions = parts
				c.IdleTimeout = 200 * time.Millisecond
			})
			const actors = 5
			for i := range actors {
				key := fmt.Sprintf("s%d", i)
				if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "sleeper", Key: []string{key}}, nil); err != nil {
					t.Fatal(err)
				}
				// Three calls each: an actor's calls span pages.
				for n := range 3 {
					callString(t, e.host, "alarm", key, "addLater", true, 1500+100*n, 1)
				}
			}
			waitFor(t, "every sleep to be recorded", 10*time.Second, func() bool {
				for i := range actors {
					h, err := e.host.History(ctx(t), runtime.Ref{Name: "sleeper", Key: []string{fmt.Sprintf("s%d", i)}})
					if err != nil || len(h.Entries) == 0 {
						return false
					}
				}
				return true
			})
			e.store.mostListed.Store(0)
			// A pass whose revision is compacted under it goes on.
			e.store.compactListOnce.Store(true)
			e.restart()
			// Nothing calls the actors: only the loaded timers bring
			// them back (Inspect reads storage without loading them).
			waitFor(t, "every workflow to wake and every call to run", 30*time.Second, func() bool {
				for i := range actors {
					key := fmt.Sprintf("s%d", i)
					ins, err := e.host.Inspect(ctx(t), runtime.Ref{Name: "sleeper", Key: []string{key}})
					if err != nil || ins.WorkflowStatus != runtime.WorkflowCompleted {
						return false
					}
					if ins, err := e.host.Inspect(ctx(t), runtime.Ref{Name: "alarm", Key: []string{key}}); err != nil || len(ins.Schedules) != 0 {
						return false
					}
				}
				return true
			})
			if e.store.compactListOnce.Load() {
				t.Fatal("no read of the restart was at an older revision: the listing was not paged")
			}
			// Read a page at a time: a node holds no more of them at once.
			if most := e.store.mostListed.Load(); most > 2 {
				t.Fatalf("one read of the restart returned %d keys, more than a page (2)", most)
			}
			for i := range actors {
				if st := alarmOf(t, e.host, fmt.Sprintf("s%d", i)); st.Count != 3 {
					t.Fatalf("alarm s%d after its calls: %+v, want 3", i, st)
				}
			}
		})
	}
}

// A pass over the wakeups or the scheduled calls reads its pages as the
// keys were at one moment (the revision of its first page), as one range
// would, while writes go on beside it.
func TestAPagedPassReadsAtOneRevision(t *testing.T) {
	defer runtime.SetListPage(runtime.SetListPage(2))
	e := newEnv(t, counterReg(t, sleeper, alarm), func(c *runtime.Config) {
		c.Partitions = 64 // one pass over each prefix
	})
	for i := range 3 {
		key := fmt.Sprintf("s%d", i)
		if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "sleeper", Key: []string{key}}, nil); err != nil {
			t.Fatal(err)
		}
		for n := range 2 {
			callString(t, e.host, "alarm", key, "addLater", true, 60000+100*n, 1)
		}
	}
	waitFor(t, "every sleep to be recorded", 10*time.Second, func() bool {
		for i := range 3 {
			h, err := e.host.History(ctx(t), runtime.Ref{Name: "sleeper", Key: []string{fmt.Sprintf("s%d", i)}})
			if err != nil || len(h.Entries) == 0 {
				return false
			}
		}
		return true
	})
	e.store.moveOnList.Store(true)
	e.restart()
	e.store.moveOnList.Store(false)
	e.store.listRevMu.Lock()
	reads := append([][2]int64(nil), e.store.listRevs...)
	e.store.listRevMu.Unlock()
	// Two passes (wakeups, then calls), each of a first read now and
	// pages at its revision.
	var at int64
	passes := 0
	for i, r := range reads {
		if r[0] == 0 {
			at = r[1]
			passes++
			continue
		}
		if r[0] != at {
			t.Fatalf("read %d of %v was at revision %d, not at its pass's first (%d)", i, reads, r[0], at)
		}
	}
	if passes != 2 || len(reads) < 6 {
		t.Fatalf("reads %v: want two passes of several pages", reads)
	}
}

// The idle reaper stops the sleeping workflows of actors with no OnSleep
// several at once, not one after another: each stop commits the
// workflow's wakeup record, and a node held 47,000 sleeping workflows
// (2 GB) for over a minute past their idle timeout, about 450 stopped a
// second (a user trial). Here each such commit takes 100 ms: one after
// another, the 40 nappers took 4 s to leave memory from the first.
func TestTheReaperStopsSleepingWorkflowsSeveralAtOnce(t *testing.T) {
	e := newEnv(t, counterReg(t, longNapper), func(c *runtime.Config) {
		// Long enough that none is idle before they are all in memory.
		c.IdleTimeout = 5 * time.Second
	})
	const nappers = 40
	refs := make([]runtime.Ref, nappers)
	for i := range refs {
		refs[i] = runtime.Ref{Name: "longNapper", Key: []string{fmt.Sprint(i)}}
		if _, _, err := e.host.GetOrCreate(ctx(t), refs[i], nil); err != nil {
			t.Fatal(err)
		}
	}
	// A sleep in memory arms no timer: the stop records it.
	waitFor(t, "every napper in memory", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == nappers })
	e.store.wakeupCommitDelay.Store(int64(100 * time.Millisecond))
	t.Cleanup(func() { e.store.wakeupCommitDelay.Store(0) })
	if n := e.host.Stats().ActiveActors; n != nappers {
		t.Fatalf("%d nappers in memory before their idle timeout, want %d", n, nappers)
	}
	waitFor(t, "the first napper out of memory", 20*time.Second, func() bool { return e.host.Stats().ActiveActors < nappers })
	// One after another, at least 3.9 s from here.
	waitFor(t, "every napper out of memory", 2500*time.Millisecond, func() bool { return e.host.Stats().ActiveActors == 0 })
	for _, ref := range refs {
		if at, ok := e.host.NextWakeup(ref); !ok || time.Until(at) < 30*time.Minute {
			t.Fatalf("%v: wakeup %v %v, want its nap's end", ref, at, ok)
		}
	}
}
