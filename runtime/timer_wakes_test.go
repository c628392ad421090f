package runtime_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type firedState struct {
	Fired int `json:"fired"`
}

// dueReminders is a reminder workflow, one per actor, that sleeps until
// due (recorded by its first step, so that a replay sleeps until the same
// instant) and then records that it fired. onWake is its OnWake hook;
// fired counts the runs of the firing step's body by key.
func dueReminders(due time.Time, onWake func() error, mu *sync.Mutex, fired map[string]int) rivet.Actor[firedState] {
	return rivet.Actor[firedState]{
		Name:   "dueReminder",
		OnWake: func(*rivet.ActionCtx[firedState]) error { return onWake() },
		Run: func(ctx *workflow.Ctx[firedState]) error {
			at, err := workflow.Step(ctx, "plan", func(*workflow.StepCtx[firedState]) (int64, error) { return due.UnixMilli(), nil })
			if err != nil {
				return err
			}
			if err := ctx.SleepUntil("nap", time.UnixMilli(at)); err != nil {
				return err
			}
			return ctx.Step("fire", func(s *workflow.StepCtx[firedState]) error {
				s.State.Fired++
				mu.Lock()
				fired[s.Key()[0]]++
				mu.Unlock()
				return nil
			})
		},
		Actions: rivet.Actions[firedState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[firedState]) (int, error) { return c.State.Fired, nil }),
		},
	}
}

// createAsleep creates n dueReminder actors and waits until every one has
// left memory (idle timeout), so that only the node's wake loop can wake
// them; it reports whether that was done well before due.
func createAsleep(t *testing.T, e *env, n int, due time.Time) bool {
	t.Helper()
	for i := range n {
		if _, err := e.host.Create(ctx(t), runtime.Ref{Name: "dueReminder", Key: []string{fmt.Sprint("r", i)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every reminder out of memory", 60*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	t.Logf("all %d asleep in storage %v before their instant", n, time.Until(due).Round(time.Millisecond))
	return time.Until(due) >= time.Second
}

// asleepBefore builds (with build) an env whose n dueReminders sleep until
// lead from now, and creates them asleep. The setup's time is the
// machine's: on a loaded one, 200 creations and their idle timeouts took
// 13 s and more of a 15 s lead, and some reminders were due before all
// were asleep. Then the env is stopped, its firings forgotten, and a fresh
// one tried with twice the lead, up to a minute: the test is of the wakes,
// which need every reminder asleep in storage first.
func asleepBefore(t *testing.T, n int, lead time.Duration, mu *sync.Mutex, fired map[string]int, build func(due time.Time) *env) *env {
	t.Helper()
	for {
		due := time.Now().Add(lead)
		e := build(due)
		if createAsleep(t, e, n, due) {
			return e
		}
		if lead >= time.Minute {
			t.Fatalf("setup took until %v before the reminders' instant, with a lead of %v: they were not all asleep in storage", time.Until(due), lead)
		}
		e.stop()
		mu.Lock()
		clear(fired)
		mu.Unlock()
		lead *= 2
	}
}

// Reminders due at one instant wake side by side, not a few at a time:
// a wake holds its slot while it loads the actor (etcd reads in a row, and
// its OnWake hook), and the node's rate of wakes is its slots over a
// load's time. At 16 slots, 25,000 reminders due in one minute fired up to
// a minute late. Here each load is held open until 40 of them are in at
// once, which 16 slots never allow. The hold ends, for all, at one shared
// deadline set by the first load to arrive, not one per load: a per-load
// wait short enough for 16 slots' three rounds to end in time also let a
// slow machine's stragglers arrive after the first loads gave up.
func TestDueRemindersLoadSideBySide(t *testing.T) {
	t.Parallel()
	const n, want = 48, 40
	var (
		blocking, reached atomic.Bool
		inFlight, most    atomic.Int64
		holdUntil         atomic.Int64 // unix ns; set by the first load held
		mu                sync.Mutex
		fired             = map[string]int{}
	)
	onWake := func() error {
		if !blocking.Load() {
			return nil
		}
		holdUntil.CompareAndSwap(0, time.Now().Add(20*time.Second).UnixNano())
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); cur > m && !most.CompareAndSwap(m, cur); m = most.Load() {
		}
		if cur >= want {
			reached.Store(true)
		}
		for !reached.Load() && time.Now().UnixNano() < holdUntil.Load() {
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	asleepBefore(t, n, 10*time.Second, &mu, fired, func(due time.Time) *env {
		return newEnv(t, counterReg(t, dueReminders(due, onWake, &mu, fired)), func(c *runtime.Config) { c.IdleTimeout = 200 * time.Millisecond })
	})
	blocking.Store(true)
	waitFor(t, "every reminder fired", 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(fired) == n
	})
	if m := most.Load(); m < want {
		t.Errorf("at most %d reminders loading at once, want at least %d", m, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, c := range fired {
		if c != 1 {
			t.Errorf("reminder %s fired %d times", k, c)
		}
	}
}

// A node that stops while it wakes a crowd of due reminders loses none and
// fires none twice: those it had not woken (or not finished) wake on the
// restarted node from their records, and each reminder's firing step is
// committed exactly once.
func TestDueRemindersFireOnceAcrossAStopMidWake(t *testing.T) {
	t.Parallel()
	const n = 200
	var (
		slow  atomic.Bool
		mu    sync.Mutex
		fired = map[string]int{}
	)
	onWake := func() error {
		if slow.Load() {
			time.Sleep(30 * time.Millisecond) // a slow load: the wakes take a while
		}
		return nil
	}
	e := asleepBefore(t, n, 15*time.Second, &mu, fired, func(due time.Time) *env {
		return newEnv(t, counterReg(t, dueReminders(due, onWake, &mu, fired)), func(c *runtime.Config) { c.IdleTimeout = 200 * time.Millisecond })
	})
	slow.Store(true)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(fired)
	}
	waitFor(t, "the first reminder fired", 30*time.Second, func() bool { return count() > 0 })
	// Counted between the stop and the start: after the start the new
	// host may already be firing the rest.
	e.stop()
	k := count()
	e.start()
	if k >= n {
		t.Fatalf("all %d reminders fired before the stop: the test checks nothing", k)
	} else {
		t.Logf("%d of %d reminders fired before the stop", k, n)
	}
	waitFor(t, "every reminder fired after the restart", 60*time.Second, func() bool { return count() == n })
	// The firing step's body counts before its commit and the workflow's
	// end are recorded: a reminder whose run the stop cut after its body
	// (counted before the stop) may finish after all the others have
	// fired. Each is waited for by Inspect, which reads without loading
	// the actor, so that only the restarted node's own wakes may finish
	// it: a workflow left unfinished until a call loads it fails here.
	deadline := time.Now().Add(30 * time.Second)
	for i := range n {
		key := fmt.Sprint("r", i)
		for {
			st := inspect(t, e.host, "dueReminder", key).WorkflowStatus
			if st == runtime.WorkflowCompleted {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("reminder %s: workflow %s 30s after every reminder fired, want completed", key, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for i := range n {
		key := fmt.Sprint("r", i)
		if got := callInt(t, e.host, "dueReminder", key, "get", false); got != 1 {
			t.Errorf("reminder %s: fired %d times in its state, want 1", key, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for k, c := range fired {
		if c != 1 {
			t.Logf("reminder %s: its firing step's body ran %d times (a body the stop cut short runs again)", k, c)
		}
	}
}
