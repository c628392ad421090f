package runtime_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type alarmState struct {
	Count int      `json:"count"`
	Fired []string `json:"fired"` // ids of the scheduled calls that ran add
	Ticks int      `json:"ticks"`
}

// alarm schedules calls of its own actions.
var alarm = rivet.Actor[alarmState]{
	Name: "alarm",
	Actions: rivet.Actions[alarmState]{
		"addLater": rivet.Action2(func(c *rivet.ActionCtx[alarmState], ms, n int) (string, error) {
			return c.Schedule().After(time.Duration(ms)*time.Millisecond, "add", n)
		}),
		"addAt": rivet.Action2(func(c *rivet.ActionCtx[alarmState], unixMs int64, n int) (string, error) {
			return c.Schedule().At(time.UnixMilli(unixMs), "add", n)
		}),
		"add": rivet.Action(func(c *rivet.ActionCtx[alarmState], n int) (int, error) {
			c.State.Count += n
			if f, ok := c.Fired(); ok {
				c.State.Fired = append(c.State.Fired, f.ID)
			}
			return c.State.Count, nil
		}),
		// addLaterThenFail schedules, then fails: nothing is scheduled.
		"addLaterThenFail": rivet.Action(func(c *rivet.ActionCtx[alarmState], n int) (int, error) {
			if _, err := c.Schedule().After(0, "add", n); err != nil {
				return 0, err
			}
			return 0, rivet.UserError("nope", "changed my mind", nil)
		}),
		"schedule": rivet.Action2(func(c *rivet.ActionCtx[alarmState], action string, args []any) (string, error) {
			return c.Schedule().After(time.Hour, action, args...)
		}),
		"boomLater": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (string, error) {
			return c.Schedule().After(0, "boom")
		}),
		"boom": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			c.State.Count = -1000 // discarded: the action fails
			return 0, rivet.UserError("boom", "scheduled failure", nil)
		}),
		// tick runs three times, each run scheduling the next.
		"tick": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			c.State.Ticks++
			if c.State.Ticks < 3 {
				if _, err := c.Schedule().After(50*time.Millisecond, "tick"); err != nil {
					return 0, err
				}
			}
			return c.State.Ticks, nil
		}),
		"cancel": rivet.Action(func(c *rivet.ActionCtx[alarmState], id string) (bool, error) {
			return c.Schedule().Cancel(id)
		}),
		"list": rivet.Query(func(c *rivet.ActionCtx[alarmState]) ([]string, error) {
			var out []string
			for _, s := range c.Schedule().List() {
				out = append(out, s.Action+"@"+s.At.UTC().Format(time.RFC3339))
			}
			return out, nil
		}),
		"scheduleFromQuery": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (string, error) {
			return c.Schedule().After(0, "add", 1)
		}),
		"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (alarmState, error) { return *c.State, nil }),
		"addAtZero": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (string, error) {
			return c.Schedule().At(time.Time{}, "add", 1)
		}),
		// outer schedules a call an hour away, then calls the actor
		// again (a re-entrant turn), which schedules or cancels.
		"outer": rivet.Action2(func(c *rivet.ActionCtx[alarmState], action string, args []any) (bool, error) {
			if _, err := c.Schedule().After(time.Hour, "add", 1000); err != nil {
				return false, err
			}
			_, err := c.Client().Get("alarm", c.Key()...).Call(c.Context(), action, args...)
			return err == nil, err
		}),
		"addMany": rivet.Action(func(c *rivet.ActionCtx[alarmState], n int) (int, error) {
			for i := range n {
				if _, err := c.Schedule().After(time.Hour, "add", i); err != nil {
					return i, err
				}
			}
			return n, nil
		}),
		"every": rivet.Action2(func(c *rivet.ActionCtx[alarmState], name string, p every) (string, error) {
			return c.Schedule().Every(name, time.Duration(p.Ms)*time.Millisecond, p.Action, p.Args...)
		}),
		"quit": rivet.Action(func(c *rivet.ActionCtx[alarmState], fail bool) (int, error) {
			if err := c.Destroy(); err != nil {
				return 0, err
			}
			if fail {
				return 0, rivet.UserError("changed_mind", "changed my mind", nil)
			}
			return c.State.Count, nil
		}),
		"quitQuery": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (int, error) { return 0, c.Destroy() }),
		"cron": rivet.Action2(func(c *rivet.ActionCtx[alarmState], name string, p cronSpec) (string, error) {
			return c.Schedule().Cron(name, p.Expr, p.Action, p.Args...)
		}),
		// tickTwice runs every second until its second run, which
		// cancels it.
		"tickTwice": rivet.Action0(func(c *rivet.ActionCtx[alarmState]) (int, error) {
			c.State.Ticks++
			f, ok := c.Fired()
			if ok && c.State.Ticks == 2 {
				_, err := c.Schedule().Cancel(f.ID)
				return c.State.Ticks, err
			}
			return c.State.Ticks, nil
		}),
	},
}

type cronSpec struct {
	Expr   string `json:"expr"`
	Action string `json:"action"`
	Args   []any  `json:"args"`
}

type every struct {
	Ms     int64  `json:"ms"`
	Action string `json:"action"`
	Args   []any  `json:"args"`
}

func alarmOf(t *testing.T, h *runtime.Host, key string) alarmState {
	t.Helper()
	return alarmStateOf(t, h, "alarm", key)
}

// alarmStateOf is the state of an actor of name that keeps an alarmState
// and answers "get" with it.
func alarmStateOf(t *testing.T, h *runtime.Host, name, key string) alarmState {
	t.Helper()
	raw, err := call(t, h, name, key, "get", false)
	if err != nil {
		t.Fatal(err)
	}
	var st alarmState
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func callString(t *testing.T, h *runtime.Host, name, key, action string, create bool, args ...any) string {
	t.Helper()
	raw, err := call(t, h, name, key, action, create, args...)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return s
}

// A scheduled call runs once, at its time, with its arguments, and knows
// it was scheduled; storage then holds no record of it.
func TestAScheduledCallRunsOnceAtItsTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	t0 := time.Now()
	id := callString(t, e.host, "alarm", "a", "addLater", true, 300, 5)
	ins := inspect(t, e.host, "alarm", "a")
	if len(ins.Schedules) != 1 || ins.Schedules[0].ID != id || ins.Schedules[0].Action != "add" || string(ins.Schedules[0].Args) != "[5]" {
		t.Fatalf("inspect after scheduling: %+v", ins.Schedules)
	}
	// (Times are stored to the millisecond: a call can come up to 1 ms
	// before t0 + 300 ms.)
	if at := ins.Schedules[0].At.Sub(t0); at < 299*time.Millisecond || at > 5*time.Second {
		t.Fatalf("scheduled %v after the call, want 300ms", at)
	}
	waitFor(t, "the call", 10*time.Second, func() bool { return alarmOf(t, e.host, "a").Count == 5 })
	if el := time.Since(t0); el < 299*time.Millisecond {
		t.Fatalf("ran %v after it was scheduled, before its time", el)
	}
	st := alarmOf(t, e.host, "a")
	if len(st.Fired) != 1 || st.Fired[0] != id {
		t.Fatalf("fired ids %v, want [%s]", st.Fired, id)
	}
	if ins := inspect(t, e.host, "alarm", "a"); len(ins.Schedules) != 0 {
		t.Fatalf("a call that ran is still stored: %+v", ins.Schedules)
	}
	// Counted once the call's turn has committed, after its state is
	// readable: waited for, not read at once.
	waitFor(t, "the call to be counted", 10*time.Second, func() bool { return e.host.Stats().SchedulesFired >= 1 })
	if s := e.host.Stats(); s.SchedulesFired != 1 || s.SchedulesFailed != 0 {
		t.Fatalf("stats fired %d failed %d, want 1 and 0", s.SchedulesFired, s.SchedulesFailed)
	}
}

// A call scheduled by an action that then fails is not scheduled, and bad
// calls are refused when scheduled, not when they come due.
func TestSchedulingIsPartOfTheTurn(t *testing.T) {
	e := newEnv(t, counterReg(t, alarm), nil)
	if _, err := call(t, e.host, "alarm", "b", "addLaterThenFail", true, 1); !errors.Is(err, rivet.ErrUser) {
		t.Fatalf("failing action: %v", err)
	}
	for _, c := range []struct {
		action string
		args   []any
		kind   error
		says   string
	}{
		{"nope", nil, rivet.ErrInvalidArgument, "has no action"},
		{"add", nil, rivet.ErrInvalidArgument, "takes 1 argument"},
		{"add", []any{"x"}, rivet.ErrInvalidArgument, "schedule add: argument 1"},
	} {
		_, err := call(t, e.host, "alarm", "b", "schedule", true, c.action, c.args)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("schedule %s %v: %v, want %v saying %q", c.action, c.args, err, c.kind, c.says)
		}
	}
	if _, err := call(t, e.host, "alarm", "b", "scheduleFromQuery", true); err == nil || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("scheduling from a query: %v", err)
	}
	if ins := inspect(t, e.host, "alarm", "b"); len(ins.Schedules) != 0 {
		t.Fatalf("refused schedules were stored: %+v", ins.Schedules)
	}
	if st := alarmOf(t, e.host, "b"); st.Count != 0 {
		t.Fatalf("count %d: a discarded call ran", st.Count)
	}
}

// A scheduled call whose action fails is used up: not retried, its
// changes discarded.
func TestAFailedScheduledCallIsNotRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	callString(t, e.host, "alarm", "c", "boomLater", true)
	waitFor(t, "the failure", 10*time.Second, func() bool { return e.host.Stats().SchedulesFailed == 1 })
	if ins := inspect(t, e.host, "alarm", "c"); len(ins.Schedules) != 0 {
		t.Fatalf("a failed call is still stored: %+v", ins.Schedules)
	}
	if st := alarmOf(t, e.host, "c"); st.Count != 0 {
		t.Fatalf("count %d: the failed call's change was kept", st.Count)
	}
}

// Calls list earliest first; Cancel removes one; a call can schedule the
// next (a periodic job).
func TestScheduledCallsListCancelAndRepeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	callString(t, e.host, "alarm", "d", "addAt", true, base.Add(2*time.Minute).UnixMilli(), 2)
	mid := callString(t, e.host, "alarm", "d", "addAt", true, base.Add(time.Minute).UnixMilli(), 1)
	callString(t, e.host, "alarm", "d", "addAt", true, base.UnixMilli(), 0)
	raw, err := call(t, e.host, "alarm", "d", "list", false)
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) string { return base.Add(d).UTC().Format(time.RFC3339) }
	if want := `["add@` + at(0) + `","add@` + at(time.Minute) + `","add@` + at(2*time.Minute) + `"]`; string(raw) != want {
		t.Fatalf("list = %s, want %s", raw, want)
	}
	if raw, err := call(t, e.host, "alarm", "d", "cancel", false, mid); err != nil || string(raw) != "true" {
		t.Fatalf("cancel: %s %v, want true", raw, err)
	}
	if raw, err := call(t, e.host, "alarm", "d", "cancel", false, mid); err != nil || string(raw) != "false" {
		t.Fatalf("cancelling it again: %s %v, want false", raw, err)
	}
	if ins := inspect(t, e.host, "alarm", "d"); len(ins.Schedules) != 2 || ins.Schedules[0].At.UnixMilli() != base.UnixMilli() {
		t.Fatalf("after the cancel: %+v", ins.Schedules)
	}

	if _, err := call(t, e.host, "alarm", "d", "tick", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "three ticks", 10*time.Second, func() bool { return alarmOf(t, e.host, "d").Ticks == 3 })
	if ins := inspect(t, e.host, "alarm", "d"); len(ins.Schedules) != 2 {
		t.Fatalf("after the ticks: %d calls, want the 2 far ones", len(ins.Schedules))
	}
}

// A call survives a restart of its node, and one that came due while no
// node served the actor runs when one does; an actor out of memory is
// activated for its call.
func TestScheduledCallsSurviveARestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), func(c *runtime.Config) { c.IdleTimeout = 200 * time.Millisecond })
	t0 := time.Now()
	callString(t, e.host, "alarm", "e", "addLater", true, 1000, 1)
	callString(t, e.host, "alarm", "e", "addLater", true, 3000, 10)
	e.stop()
	time.Sleep(time.Until(t0.Add(1200 * time.Millisecond))) // the first comes due while stopped
	e.start()
	// Nothing calls the actor until both ran: their timers alone wake it
	// (Inspect reads storage without activating it).
	ref := runtime.Ref{Name: "alarm", Key: []string{"e"}}
	waitFor(t, "both calls", 20*time.Second, func() bool {
		ins, err := e.host.Inspect(ctx(t), ref)
		return err == nil && len(ins.Schedules) == 0
	})
	if n := e.host.Stats().SchedulesFired; n == 0 {
		t.Fatal("the restarted node ran no call")
	}
	if st := alarmOf(t, e.host, "e"); st.Count != 11 || len(st.Fired) != 2 {
		t.Fatalf("after both calls: %+v", st)
	}
}

// Destroying an actor removes its calls.
func TestDestroyRemovesScheduledCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	callString(t, e.host, "alarm", "f", "addLater", true, 200, 1)
	if err := e.host.Destroy(ctx(t), runtime.Ref{Name: "alarm", Key: []string{"f"}}); err != nil {
		t.Fatal(err)
	}
	kvs, err := e.store.List(ctx(t), storage.SchedulesPrefix, storage.ListOptions{})
	if err != nil || len(kvs) != 0 {
		t.Fatalf("stored calls after destroy: %v %v", kvs, err)
	}
	time.Sleep(400 * time.Millisecond) // past its time (absence: cannot flake)
	if _, err := call(t, e.host, "alarm", "f", "get", false); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("after destroy and the call's time: %v, want not found", err)
	}
}

// An actor holds at most rivet.MaxSchedules pending calls, one turn
// schedules at most what fits one transaction, and times past what an id
// holds are refused.
func TestScheduledCallsAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	if n, err := call(t, e.host, "alarm", "g", "addMany", true, 65); !errors.Is(err, rivet.ErrTooLarge) || !strings.Contains(err.Error(), "at most 64") {
		t.Fatalf("65 calls in one turn: %s %v, want too large", n, err)
	}
	if _, err := call(t, e.host, "alarm", "g", "addAt", true, time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), 1); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("a call in 2300: %v, want invalid argument", err)
	}
	if _, err := call(t, e.host, "alarm", "g", "addAtZero", true); !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "zero time") {
		t.Fatalf("a call at the zero time: %v, want invalid argument", err)
	}
	if ins := inspect(t, e.host, "alarm", "g"); len(ins.Schedules) != 0 {
		t.Fatalf("refused turns stored %d calls", len(ins.Schedules))
	}
	for range rivet.MaxSchedules / 50 {
		if n := callInt(t, e.host, "alarm", "g", "addMany", true, 50); n != 50 {
			t.Fatalf("addMany: %d", n)
		}
	}
	_, err := call(t, e.host, "alarm", "g", "schedule", true, "add", []any{0})
	var re *rivet.Error
	if !errors.Is(err, rivet.ErrQueueFull) || !errors.As(err, &re) || re.Group != "schedule" || re.Code != "full" {
		t.Fatalf("call %d: %v, want queue full (schedule.full)", rivet.MaxSchedules+1, err)
	}
}

// A call moves with its partition and runs on the next owner.
func TestAScheduledCallRunsOnThePartitionsNextOwner(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	h2, own2 := secondHost(t, e)
	callString(t, e.host, "alarm", "h", "addLater", true, 3000, 3) // time for the handoff on a busy machine
	p := placement.Partition("alarm", storage.EncodeKey([]string{"h"}), testPartitions)
	if err := e.host.Handoff(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	if got, err := own2.Claim(ctx(t), []uint32{p}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	waitFor(t, "the call on the next owner", 10*time.Second, func() bool { return h2.Stats().SchedulesFired == 1 })
	if st := alarmOf(t, h2, "h"); st.Count != 3 {
		t.Fatalf("count %d on the next owner, want 3", st.Count)
	}
	if s := e.host.Stats(); s.SchedulesFired != 0 {
		t.Fatalf("the old owner ran %d calls", s.SchedulesFired)
	}
}

// A call's run and its removal commit together: a commit that failed
// unapplied runs the call again later, and one that applied but whose
// reply was lost (outcome unknown) does not; either way it counts once.
func TestAScheduledCallCountsOnceAcrossFailedCommits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault func(e *env)
	}{
		{"unapplied", func(e *env) { e.store.failCommitSub.Store(storage.SchedulesPrefix) }},
		{"applied-reply-lost", func(e *env) { e.store.applyThenFailSub.Store(storage.SchedulesPrefix) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWith(t, counterReg(t, alarm), nil, true)
			callString(t, e.host, "alarm", "i", "addLater", true, 300, 7)
			tc.fault(e)
			waitFor(t, "the fault", 10*time.Second, func() bool {
				v1, _ := e.store.failCommitSub.Load().(string)
				v2, _ := e.store.applyThenFailSub.Load().(string)
				return v1 == "" && v2 == ""
			})
			waitFor(t, "the call, stored no more", 20*time.Second, func() bool {
				// (Refused while the doubt re-fences the partition.)
				ins, err := e.host.Inspect(ctx(t), runtime.Ref{Name: "alarm", Key: []string{"i"}})
				return err == nil && len(ins.Schedules) == 0
			})
			// A second run, if any, would come within the retry's delay.
			time.Sleep(1500 * time.Millisecond)
			if st := alarmOf(t, e.host, "i"); st.Count != 7 || len(st.Fired) != 1 {
				t.Fatalf("state %+v: want the call counted once", st)
			}
		})
	}
}

// A recurring call runs every interval under one id, until cancelled;
// naming it again replaces it; a run that fails does not stop the next.
func TestRecurringCalls(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	for _, c := range []struct {
		name string
		p    every
		says string
	}{
		{"beat", every{Ms: 999, Action: "add", Args: []any{1}}, "at least 1s"},
		{"1beat", every{Ms: 1000, Action: "add", Args: []any{1}}, "recurring call name"},
		{"beat", every{Ms: 1000, Action: "nope"}, "has no action"},
	} {
		if _, err := call(t, e.host, "alarm", "r", "every", true, c.name, c.p); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("every %s %+v: %v, want an error saying %q", c.name, c.p, err, c.says)
		}
	}
	// The wall clock, as the calls' times (Round strips the monotonic
	// reading): a wall clock stepped during the test moves both alike,
	// where the monotonic one saw three runs in 2.994 s once in CI.
	t0 := time.Now().Round(0)
	if id := callString(t, e.host, "alarm", "r", "every", true, "beat", every{Ms: 1000, Action: "add", Args: []any{1}}); id != "every:beat" {
		t.Fatalf("id %q, want every:beat", id)
	}
	callString(t, e.host, "alarm", "r", "every", true, "fail", every{Ms: 1000, Action: "boom"})
	waitFor(t, "three beats", 20*time.Second, func() bool { return alarmOf(t, e.host, "r").Count >= 3 })
	if el := time.Since(t0); el < 2999*time.Millisecond {
		t.Fatalf("three runs of a 1 s call within %v", el)
	}
	ins := inspect(t, e.host, "alarm", "r")
	if len(ins.Schedules) != 2 || ins.Schedules[0].Every != time.Second || ins.Schedules[1].Every != time.Second {
		t.Fatalf("scheduled: %+v, want beat and fail, every 1s", ins.Schedules)
	}
	for _, f := range alarmOf(t, e.host, "r").Fired {
		if f != "every:beat" {
			t.Fatalf("a run saw id %q, want every:beat", f)
		}
	}
	if n := e.host.Stats().SchedulesFailed; n < 2 {
		t.Fatalf("%d failed runs of the failing call: it stopped after a failure", n)
	}
	// Each keeps its last run: when it came due, and how it ended.
	ins = inspect(t, e.host, "alarm", "r")
	beat, fail := ins.Schedules[0], ins.Schedules[1]
	if beat.ID != "every:beat" {
		beat, fail = fail, beat
	}
	if beat.LastRun.Before(t0) || beat.LastRun.After(time.Now()) || beat.LastError != "" {
		t.Fatalf("beat's last run %v %q, want a time since the start and no error", beat.LastRun, beat.LastError)
	}
	if fail.LastRun.Before(t0) || !strings.Contains(fail.LastError, "scheduled failure") {
		t.Fatalf("fail's last run %v %q, want its error", fail.LastRun, fail.LastError)
	}
	// Scheduled again as it is (an OnWake that sets it up each time), it
	// keeps its history.
	callString(t, e.host, "alarm", "r", "every", false, "fail", every{Ms: 1000, Action: "boom"})
	for _, s := range inspect(t, e.host, "alarm", "r").Schedules {
		if s.ID == "every:fail" && (s.LastRun.IsZero() || s.LastError == "") {
			t.Fatalf("fail scheduled again as it was lost its last run: %+v", s)
		}
	}

	// Replaced: one call of the name, with the new interval.
	callString(t, e.host, "alarm", "r", "every", false, "beat", every{Ms: 3_600_000, Action: "add", Args: []any{5}})
	if _, err := call(t, e.host, "alarm", "r", "cancel", false, "every:fail"); err != nil {
		t.Fatal(err)
	}
	ins = inspect(t, e.host, "alarm", "r")
	if len(ins.Schedules) != 1 || ins.Schedules[0].ID != "every:beat" || ins.Schedules[0].Every != time.Hour || string(ins.Schedules[0].Args) != "[5]" {
		t.Fatalf("after replacing beat and cancelling fail: %+v", ins.Schedules)
	}

	// A run can cancel its own call.
	callString(t, e.host, "alarm", "r2", "every", true, "tick", every{Ms: 1000, Action: "tickTwice"})
	waitFor(t, "the second tick", 20*time.Second, func() bool { return alarmOf(t, e.host, "r2").Ticks == 2 })
	waitFor(t, "the call cancelled", 10*time.Second, func() bool { return len(inspect(t, e.host, "alarm", "r2").Schedules) == 0 })
	time.Sleep(1500 * time.Millisecond) // a third run would come by now (absence: cannot flake)
	if n := alarmOf(t, e.host, "r2").Ticks; n != 2 {
		t.Fatalf("%d ticks after the run that cancelled its call", n)
	}
}

// A call into the same actor from inside an action (a re-entrant turn)
// schedules and cancels too: the outer turn's own changes do not undo it.
func TestReentrantTurnsScheduleAndCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	if _, err := call(t, e.host, "alarm", "j", "outer", true, "addLater", []any{100, 5}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the call the inner turn scheduled", 10*time.Second, func() bool { return e.host.Stats().SchedulesFired == 1 })
	if st := alarmOf(t, e.host, "j"); st.Count != 5 {
		t.Fatalf("count %d, want 5", st.Count)
	}

	id := callString(t, e.host, "alarm", "k", "addLater", true, 300, 7)
	if _, err := call(t, e.host, "alarm", "k", "outer", false, "cancel", []any{id}); err != nil {
		t.Fatal(err)
	}
	if n := len(inspect(t, e.host, "alarm", "k").Schedules); n != 1 {
		t.Fatalf("%d calls stored, want the outer turn's only", n)
	}
	time.Sleep(600 * time.Millisecond) // past the cancelled call's time (absence: cannot flake)
	if st := alarmOf(t, e.host, "k"); st.Count != 0 {
		t.Fatalf("count %d: the call the inner turn cancelled ran", st.Count)
	}
	raw, err := call(t, e.host, "alarm", "k", "list", false)
	if err != nil || strings.Count(string(raw), "add@") != 1 {
		t.Fatalf("list: %s %v, want the outer turn's call only", raw, err)
	}
}

// An operator cancels a call the actor has no action to cancel: a
// recurring call that keeps failing.
func TestAnOperatorCancelsAScheduledCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	ref := runtime.Ref{Name: "alarm", Key: []string{"op"}}
	callString(t, e.host, "alarm", "op", "every", true, "bad", every{Ms: 1000, Action: "boom"})
	waitFor(t, "a failed run", 10*time.Second, func() bool { return e.host.Stats().SchedulesFailed >= 1 })
	if ok, err := e.host.CancelScheduledCall(ctx(t), ref, "every:bad"); err != nil || !ok {
		t.Fatalf("cancel: %v %v, want true", ok, err)
	}
	if ok, err := e.host.CancelScheduledCall(ctx(t), ref, "every:bad"); err != nil || ok {
		t.Fatalf("cancel again: %v %v, want false", ok, err)
	}
	if _, err := e.host.CancelScheduledCall(ctx(t), ref, ""); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("cancel of an empty id: %v, want invalid argument", err)
	}
	if _, err := e.host.CancelScheduledCall(ctx(t), runtime.Ref{Name: "alarm", Key: []string{"none"}}, "x"); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("cancel on a missing actor: %v, want not found", err)
	}
	if ins := inspect(t, e.host, "alarm", "op"); len(ins.Schedules) != 0 {
		t.Fatalf("after the cancel: %+v", ins.Schedules)
	}
	failed := e.host.Stats().SchedulesFailed
	time.Sleep(1500 * time.Millisecond) // a next run would come by now (absence: cannot flake)
	if n := e.host.Stats().SchedulesFailed; n != failed {
		t.Fatalf("%d more runs after the cancel", n-failed)
	}
}

// A cron call runs at its expression's times, in its zone, and then at the
// next one; expressions that do not parse, or are intervals, are refused.
func TestCronCallsRunAtTheirTimes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	for _, c := range []struct{ expr, says string }{
		{"* * *", "expected exactly 5 fields"},
		{"61 * * * *", "above maximum"},
		{"@every 1s", "use Scheduler.Every"},
		{"CRON_TZ=Mars/Olympus 0 9 * * *", "provided bad location"},
		{"0 0 30 2 *", "never comes due"}, // February 30th
		// A zone and nothing after it: robfig's parser panicked on it,
		// and the call failed as an actor's panic (INTERNAL).
		{"CRON_TZ=UTC", "no fields after the zone"},
		{" TZ=Europe/Paris ", "no fields after the zone"},
	} {
		if _, err := call(t, e.host, "alarm", "c", "cron", true, "beat", cronSpec{Expr: c.expr, Action: "add", Args: []any{1}}); !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("cron %q: %v, want an invalid argument saying %q", c.expr, err, c.says)
		}
	}

	// In its zone: 9:30 in Kolkata (UTC+5:30, no daylight saving) is 4:00 UTC.
	callString(t, e.host, "alarm", "z", "cron", true, "standup", cronSpec{Expr: "CRON_TZ=Asia/Kolkata 30 9 * * *", Action: "add", Args: []any{1}})
	ins := inspect(t, e.host, "alarm", "z")
	if len(ins.Schedules) != 1 || ins.Schedules[0].ID != "every:standup" || ins.Schedules[0].Cron != "CRON_TZ=Asia/Kolkata 30 9 * * *" {
		t.Fatalf("scheduled: %+v", ins.Schedules)
	}
	if at := ins.Schedules[0].At.UTC(); at.Hour() != 4 || at.Minute() != 0 || at.Sub(time.Now()) > 24*time.Hour || at.Before(time.Now()) {
		t.Fatalf("9:30 in Kolkata is next at %v UTC, want 04:00 within a day", at)
	}

	// Scheduling a name again just as it is keeps its pending run (an
	// OnWake that schedules on every wake must not push it back, or drop
	// one that is due); anything else about it replaces it.
	callString(t, e.host, "alarm", "z", "every", false, "hourly", every{Ms: 3_600_000, Action: "add", Args: []any{1}})
	at := func(id string) time.Time {
		for _, c := range inspect(t, e.host, "alarm", "z").Schedules {
			if c.ID == id {
				return c.At
			}
		}
		t.Fatalf("no call %s", id)
		return time.Time{}
	}
	was := at("every:hourly")
	waitFor(t, "the clock to move on", 10*time.Second, func() bool { return time.Since(was.Add(-time.Hour)) > 5*time.Millisecond })
	callString(t, e.host, "alarm", "z", "every", false, "hourly", every{Ms: 3_600_000, Action: "add", Args: []any{1}})
	if now := at("every:hourly"); !now.Equal(was) {
		t.Fatalf("the same call scheduled again moved from %v to %v", was, now)
	}
	callString(t, e.host, "alarm", "z", "every", false, "hourly", every{Ms: 3_600_000, Action: "add", Args: []any{2}})
	if now := at("every:hourly"); now.Equal(was) {
		t.Fatal("a call of the name with other arguments did not replace it")
	}

	// Every minute: the host's timers run on a clock moved past each
	// minute in turn.
	var offset atomic.Int64
	e.host.SetWakeClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	callString(t, e.host, "alarm", "m", "cron", true, "tick", cronSpec{Expr: "* * * * *", Action: "add", Args: []any{1}})
	first := inspect(t, e.host, "alarm", "m").Schedules[0].At
	if first.Second() != 0 || first.Sub(time.Now()) > time.Minute {
		t.Fatalf("first run of every minute at %v", first)
	}
	// The real clock can cross a minute while the test reads (CI once
	// created the call 10 ms before one): each round takes the due time
	// and count as they are, and waits for the run to move the call on.
	for run := 1; run <= 2; run++ {
		ran := alarmOf(t, e.host, "m").Count
		due := inspect(t, e.host, "alarm", "m").Schedules[0].At
		offset.Store(int64(time.Until(due) + time.Second))
		e.host.KickWakeups()
		waitFor(t, "a run of the cron call", 20*time.Second, func() bool {
			next := inspect(t, e.host, "alarm", "m").Schedules
			return len(next) == 1 && next[0].At.After(due)
		})
		next := inspect(t, e.host, "alarm", "m").Schedules
		if len(next) != 1 || !next[0].At.Equal(due.Add(time.Minute)) {
			t.Fatalf("after run %d (due %v), next: %+v, want one a minute later", run, due, next)
		}
		if n := alarmOf(t, e.host, "m").Count; n <= ran {
			t.Fatalf("the call due at %v moved on without running: count %d, was %d", due, n, ran)
		}
	}
}

// An action destroys its own actor after its turn: stored with the turn,
// so a restart before it runs does not lose it; a failed turn or a
// read-only action destroys nothing.
func TestAnActionDestroysItsActorAfterItsTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, alarm), nil)
	callInt(t, e.host, "alarm", "q", "add", true, 3)
	if n := callInt(t, e.host, "alarm", "q", "quit", false, false); n != 3 {
		t.Fatalf("quit answered %d, want the state it saw", n)
	}
	waitFor(t, "the actor to be destroyed", 20*time.Second, func() bool {
		_, err := call(t, e.host, "alarm", "q", "get", false)
		return errors.Is(err, rivet.ErrNotFound)
	})

	callInt(t, e.host, "alarm", "f", "add", true, 1)
	if _, err := call(t, e.host, "alarm", "f", "quit", false, true); err == nil {
		t.Fatal("the failing quit succeeded")
	}
	if _, err := call(t, e.host, "alarm", "f", "quitQuery", false); !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("Destroy from a read-only action: %v, want ErrInternal", err)
	}
	if n := len(inspect(t, e.host, "alarm", "f").Schedules); n != 0 {
		t.Fatalf("%d calls stored after a failed turn and a read-only one asked to destroy", n)
	}

	// Stored: the timers of this host are an hour behind, so the destroy
	// does not run before the restart; the next host runs it.
	callInt(t, e.host, "alarm", "r", "add", true, 1)
	e.host.SetWakeClock(func() time.Time { return time.Now().Add(-time.Hour) })
	callInt(t, e.host, "alarm", "r", "quit", false, false)
	if ins := inspect(t, e.host, "alarm", "r"); len(ins.Schedules) != 1 || ins.Schedules[0].Action != "$destroy" {
		t.Fatalf("scheduled after quit: %+v, want the destroy", ins.Schedules)
	}
	e.restart()
	waitFor(t, "the stored destroy to run after the restart", 20*time.Second, func() bool {
		_, err := call(t, e.host, "alarm", "r", "get", false)
		return errors.Is(err, rivet.ErrNotFound)
	})
	if _, err := call(t, e.host, "alarm", "f", "get", false); err != nil {
		t.Fatalf("the actor whose quit failed: %v", err)
	}
}

// A workflow step destroys its actor once its commit is durable, while
// the workflow sleeps on.
func TestAStepDestroysItsActor(t *testing.T) {
	t.Parallel()
	act := rivet.Actor[alarmState]{
		Name: "selfdestruct",
		Actions: rivet.Actions[alarmState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (alarmState, error) { return *c.State, nil }),
		},
		Run: func(ctx *workflow.Ctx[alarmState]) error {
			if _, err := workflow.Step(ctx, "finish", func(s *workflow.StepCtx[alarmState]) (int, error) {
				s.State.Count++
				return 0, s.Destroy()
			}); err != nil {
				return err
			}
			return ctx.Sleep("linger", time.Hour)
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, err := call(t, e.host, "selfdestruct", "s", "get", true); err != nil && !errors.Is(err, rivet.ErrNotFound) {
		t.Fatal(err)
	}
	waitFor(t, "the step's destroy", 20*time.Second, func() bool {
		_, err := call(t, e.host, "selfdestruct", "s", "get", false)
		return errors.Is(err, rivet.ErrNotFound)
	})
}

// A workflow step schedules calls of its actor's actions: they commit with
// the step's record, so they run, and a replay of the step after a restart
// schedules nothing again.
func TestAStepSchedulesCalls(t *testing.T) {
	t.Parallel()
	act := rivet.Actor[alarmState]{
		Name: "planner",
		Actions: rivet.Actions[alarmState]{
			"add": rivet.Action(func(c *rivet.ActionCtx[alarmState], n int) (int, error) {
				c.State.Count += n
				return c.State.Count, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[alarmState]) (alarmState, error) { return *c.State, nil }),
		},
		Run: func(ctx *workflow.Ctx[alarmState]) error {
			if _, err := workflow.Step(ctx, "plan", func(s *workflow.StepCtx[alarmState]) (string, error) {
				if _, err := s.Schedule().After(0, "add", 1); err != nil {
					return "", err
				}
				return s.Schedule().After(time.Hour, "add", 100)
			}); err != nil {
				return err
			}
			return ctx.Sleep("wait", time.Hour)
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, err := call(t, e.host, "planner", "p", "get", true); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		raw, err := call(t, e.host, "planner", "p", "get", false)
		if err != nil {
			t.Fatal(err)
		}
		var st alarmState
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		return st.Count
	}
	waitFor(t, "the call the step scheduled", 20*time.Second, func() bool { return count() == 1 })
	e.restart()
	// Loaded again: the workflow replays its step (which does not run) and
	// sleeps again.
	waitFor(t, "the replayed workflow to sleep", 20*time.Second, func() bool {
		in := inspect(t, e.host, "planner", "p")
		return count() == 1 && in.Active && !in.WorkflowWake.At.IsZero()
	})
	in := inspect(t, e.host, "planner", "p")
	if len(in.Schedules) != 1 || in.Schedules[0].Action != "add" || string(in.Schedules[0].Args) != "[100]" {
		t.Fatalf("after the replay, scheduled: %+v, want the one hour-away call", in.Schedules)
	}
	if n := count(); n != 1 {
		t.Fatalf("count %d after the replay, want 1", n)
	}
}

// A due scheduled call of an actor whose wake keeps failing (its
// CreateVars cannot connect, after a restart or a move) is tried again
// with the timers' backoff, not at once: the actor's load re-armed its
// timer at the call's time, already past, so every failed wake started
// the next at once, hundreds a second, each reading the actor from storage.
func TestAScheduledCallOfAnActorThatCannotWakeBacksOff(t *testing.T) {
	t.Parallel()
	var failVars atomic.Bool
	type st struct {
		Runs int `json:"runs"`
	}
	act := rivet.Actor[st]{
		Name:    "flakyvars",
		Options: rivet.Options{IdleTimeout: 50 * time.Millisecond},
		CreateVars: func(c *rivet.ActionCtx[st]) (any, error) {
			if failVars.Load() {
				return nil, errors.New("no connection")
			}
			return nil, nil
		},
		Actions: rivet.Actions[st]{
			"later": rivet.Action(func(c *rivet.ActionCtx[st], ms int) (string, error) {
				return c.Schedule().After(time.Duration(ms)*time.Millisecond, "run")
			}),
			"run": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
				c.State.Runs++
				return c.State.Runs, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[st]) (st, error) { return *c.State, nil }),
		},
	}
	e := newEnv(t, counterReg(t, act), func(c *runtime.Config) { c.IdleTimeout = 50 * time.Millisecond })
	callString(t, e.host, "flakyvars", "a", "later", true, 500)
	waitFor(t, "the actor's sleep", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	failVars.Store(true)
	waitFor(t, "a failed wake", 10*time.Second, func() bool { return e.host.Stats().WakeHooksFailed > 0 })
	// A window to count the wakes in (not a synchronisation): the call's
	// first retry comes a second after the failure, the next two later.
	time.Sleep(1500 * time.Millisecond)
	if n := e.host.Stats().WakeHooksFailed; n > 5 {
		t.Errorf("%d failed wakes in 1.5 s, want the first and a retry or two (backed off)", n)
	}
	failVars.Store(false)
	waitFor(t, "the call, once the actor wakes", 10*time.Second, func() bool {
		raw, err := call(t, e.host, "flakyvars", "a", "get", false)
		var s st
		return err == nil && json.Unmarshal(raw, &s) == nil && s.Runs == 1
	})
}
