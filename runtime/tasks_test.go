package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
)

type taskState struct {
	Count  int `json:"count"`
	Sleeps int `json:"sleeps"`
	// TaskSaw is what OnSleep found the task had left in the vars.
	TaskSaw string `json:"taskSaw"`
}

// taskVars is an activation's vars: the task writes its outcome in note;
// closed records that the runtime closed them.
type taskVars struct {
	mu     sync.Mutex
	note   string
	closed atomic.Bool
}

func (v *taskVars) Close() error { v.closed.Store(true); return nil }

func (v *taskVars) setNote(s string) {
	v.mu.Lock()
	v.note = s
	v.mu.Unlock()
}

func (v *taskVars) getNote() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.note
}

// taskProbe drives the tasks of the "tasked" actor and records what they
// met.
type taskProbe struct {
	release chan struct{} // closed: the running tasks finish their work
	started chan struct{} // gets a value as each task starts

	mu sync.Mutex
	// callErr is the error of the call each task made into its actor
	// as it ended (nil: it worked).
	callErrs []error
	// closedUnder: a task found the vars closed while it still ran.
	closedUnder bool
	// sleepKeepAwake is the error KeepAwake returned in OnSleep.
	sleepKeepAwake []error
	vars           []*taskVars
}

func newTaskProbe() *taskProbe {
	return &taskProbe{release: make(chan struct{}), started: make(chan struct{}, 16)}
}

func (p *taskProbe) lastVars() *taskVars {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.vars[len(p.vars)-1]
}

func (p *taskProbe) varsClosedUnderATask() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closedUnder
}

func (p *taskProbe) calls() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.callErrs...)
}

func taskedActor(p *taskProbe) rivet.Actor[taskState] {
	return rivet.Actor[taskState]{
		Name: "tasked",
		CreateVars: func(c *rivet.ActionCtx[taskState]) (any, error) {
			v := &taskVars{}
			p.mu.Lock()
			p.vars = append(p.vars, v)
			p.mu.Unlock()
			return v, nil
		},
		OnSleep: func(c *rivet.ActionCtx[taskState]) error {
			c.State.Sleeps++
			c.State.TaskSaw = c.Vars().(*taskVars).getNote()
			err := c.KeepAwake(func(context.Context, rivet.Client) {})
			p.mu.Lock()
			p.sleepKeepAwake = append(p.sleepKeepAwake, err)
			p.mu.Unlock()
			return nil
		},
		Actions: rivet.Actions[taskState]{
			// start runs a task that waits to be released (then counts
			// through a call into its actor) or for its context to end
			// (then, slowly, records that it was cancelled, and tries the
			// same call).
			"start": rivet.Action(func(c *rivet.ActionCtx[taskState], _ int) (bool, error) {
				v := c.Vars().(*taskVars)
				key := c.Key()
				err := c.KeepAwake(func(ctx context.Context, client rivet.Client) {
					p.started <- struct{}{}
					note := "released"
					select {
					case <-p.release:
					case <-ctx.Done():
						// Cleanup that takes a while: an orderly leave
						// waits for it before OnSleep.
						time.Sleep(100 * time.Millisecond)
						note = "cancelled"
					}
					cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					_, err := client.Get("tasked", key...).Call(cctx, "incr")
					p.mu.Lock()
					p.callErrs = append(p.callErrs, err)
					if v.closed.Load() {
						p.closedUnder = true
					}
					p.mu.Unlock()
					v.setNote(note)
				})
				return true, err
			}),
			"startPanic": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (bool, error) {
				return true, c.KeepAwake(func(context.Context, rivet.Client) { panic("task panicked") })
			}),
			"incr": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) {
				c.State.Count++
				return c.State.Count, nil
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[taskState]) (taskState, error) { return *c.State, nil }),
		},
	}
}

func getTasked(t *testing.T, h *runtime.Host, key string) taskState {
	t.Helper()
	raw, err := call(t, h, "tasked", key, "get", false)
	if err != nil {
		t.Fatal(err)
	}
	var s taskState
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("get: %s: %v", raw, err)
	}
	return s
}

func startTask(t *testing.T, p *taskProbe, h *runtime.Host, key string) {
	t.Helper()
	if _, err := call(t, h, "tasked", key, "start", true, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the task did not start")
	}
}

// A task keeps its actor in memory past its idle timeout; once it has
// ended (its call into the actor worked), the actor sleeps, and OnSleep
// cannot start another.
func TestKeepAwakeHoldsAnIdleActorInMemory(t *testing.T) {
	t.Parallel()
	p := newTaskProbe()
	e := newEnv(t, counterReg(t, taskedActor(p)), func(c *runtime.Config) { c.IdleTimeout = 50 * time.Millisecond })
	startTask(t, p, e.host, "k")
	v := p.lastVars()
	// Passes of the reaper over a whole idle timeout and more.
	from, since := e.host.ReapPasses(), time.Now()
	waitFor(t, "reaper passes", 10*time.Second, func() bool {
		return e.host.ReapPasses() >= from+8 && time.Since(since) > 200*time.Millisecond
	})
	if tasks := e.host.Stats().TasksRunning; tasks != 1 {
		t.Fatalf("Stats().TasksRunning = %d while the task runs, want 1", tasks)
	}
	if n := e.host.Stats().ActiveActors; n != 1 || v.closed.Load() || p.lastVars() != v || v.getNote() != "" {
		t.Fatalf("while its task runs: %d actors in memory, vars closed %v, vars replaced %v, task note %q; want the activation as it was",
			n, v.closed.Load(), p.lastVars() != v, v.getNote())
	}
	close(p.release)
	waitFor(t, "the actor to sleep once its task ended", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	if errs := p.calls(); len(errs) != 1 || errs[0] != nil {
		t.Fatalf("the task's call into its actor: %v, want one that worked", errs)
	}
	if tasks := e.host.Stats().TasksRunning; tasks != 0 {
		t.Fatalf("Stats().TasksRunning = %d once the task ended, want 0", tasks)
	}
	if !p.lastVars().closed.Load() {
		t.Fatal("vars still open after the actor slept")
	}
	s := getTasked(t, e.host, "k")
	if s.Count != 1 || s.Sleeps != 1 || s.TaskSaw != "released" {
		t.Fatalf("state %+v, want count 1 (the task's call), 1 sleep that saw the task's note", s)
	}
	p.mu.Lock()
	sleepErrs := append([]error(nil), p.sleepKeepAwake...)
	p.mu.Unlock()
	if len(sleepErrs) != 1 || !errors.Is(sleepErrs[0], rivet.ErrUnavailable) {
		t.Fatalf("KeepAwake in OnSleep returned %v, want UNAVAILABLE", sleepErrs)
	}

	// A task that panics is logged and counted out: the actor sleeps.
	if _, err := call(t, e.host, "tasked", "k", "startPanic", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the actor to sleep after its task panicked", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
}

// A node stop ends a task's context and waits for it before OnSleep: the
// hook sees what the task did as it ended, the vars close after it, and
// its call into the stopping node fails at once instead of hanging.
func TestAStopEndsTasksAndWaitsForThemBeforeOnSleep(t *testing.T) {
	t.Parallel()
	p := newTaskProbe()
	e := newEnv(t, counterReg(t, taskedActor(p)), nil)
	startTask(t, p, e.host, "s")
	v := p.lastVars()
	start := time.Now()
	e.restart()
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("the stop took %v: the task's call waited for something", took)
	}
	if !v.closed.Load() {
		t.Fatal("vars still open after the stop")
	}
	if p.varsClosedUnderATask() {
		t.Fatal("the vars were closed while a task still ran")
	}
	if errs := p.calls(); len(errs) != 1 || !errors.Is(errs[0], rivet.ErrUnavailable) {
		t.Fatalf("the task's call during the stop: %v, want UNAVAILABLE", errs)
	}
	if s := getTasked(t, e.host, "s"); s.Sleeps != 1 || s.TaskSaw != "cancelled" || s.Count != 0 {
		t.Fatalf("state %+v, want 1 sleep that saw the cancelled task's note, count 0", s)
	}
}

// A handoff ends the tasks of the partition's actors and waits for them
// before OnSleep, as a stop does; a destroy ends them without waiting, and
// the vars close once they have ended.
func TestHandoffAndDestroyEndTasks(t *testing.T) {
	p := newTaskProbe()
	// The host has a Remote, as a node's does: a task's call into the
	// partition being handed off must be refused here, not forwarded to
	// a node that would wait for the handoff to end.
	remote := &countingRemote{}
	withRemote(t, remote)
	e := newEnv(t, counterReg(t, taskedActor(p)), nil)
	_, own2 := secondHost(t, e)

	startTask(t, p, e.host, "m")
	v := p.lastVars()
	part := placement.Partition("tasked", storage.EncodeKey([]string{"m"}), testPartitions)
	if err := e.host.Handoff(ctx(t), part); err != nil {
		t.Fatal(err)
	}
	if !v.closed.Load() || v.getNote() != "cancelled" {
		t.Fatalf("after the handoff: vars closed %v, task note %q; want closed, cancelled", v.closed.Load(), v.getNote())
	}
	if errs := p.calls(); len(errs) != 1 || !errors.Is(errs[0], rivet.ErrUnavailable) || remote.calls.Load() != 0 {
		t.Fatalf("the task's call during the handoff: %v (forwarded: %d), want UNAVAILABLE from this node", errs, remote.calls.Load())
	}
	if got, err := own2.Claim(ctx(t), []uint32{part}); err != nil || len(got) != 1 {
		t.Fatalf("claim after handoff: %v, %v", got, err)
	}

	startTask(t, p, e.host, "d")
	v = p.lastVars()
	if err := e.host.Destroy(ctx(t), runtime.Ref{Name: "tasked", Key: []string{"d"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the destroyed actor's task to end and its vars to close", 10*time.Second, func() bool {
		return v.getNote() == "cancelled" && v.closed.Load()
	})
	if p.varsClosedUnderATask() {
		t.Fatal("the vars were closed while a task still ran")
	}
	if errs := p.calls(); len(errs) != 2 || !errors.Is(errs[1], rivet.ErrNotFound) {
		t.Fatalf("the task's call into its destroyed actor: %v, want NOT_FOUND", errs)
	}
}

// A task asked for by a turn that fails does not start, nor one asked for
// by a wake that fails: started, its call into the actor would load it
// again, whose failing wake would start another, and so on.
func TestTasksOfAFailedTurnOrWakeDoNotStart(t *testing.T) {
	t.Parallel()
	var failWake atomic.Bool
	var started atomic.Int32
	task := func(ctx context.Context, c rivet.Client) { started.Add(1) }
	act := rivet.Actor[taskState]{
		Name: "wakeTask",
		OnWake: func(c *rivet.ActionCtx[taskState]) error {
			if err := c.KeepAwake(task); err != nil {
				return err
			}
			if failWake.Load() {
				return errors.New("wake fails")
			}
			return nil
		},
		Actions: rivet.Actions[taskState]{
			"fail": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) {
				if err := c.KeepAwake(task); err != nil {
					return 0, err
				}
				return 0, errors.New("the action fails")
			}),
			"ok": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) { return 0, c.KeepAwake(task) }),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	failWake.Store(true)
	if _, err := call(t, e.host, "wakeTask", "k", "ok", true); err == nil {
		t.Fatal("a call whose wake failed succeeded")
	}
	// (One started at once may not have run yet: the count at the end
	// tells.)
	if n := started.Load(); n != 0 {
		t.Fatalf("%d tasks started by a wake that failed", n)
	}
	failWake.Store(false)
	// The failed wake's create was taken back: this call creates the
	// actor again.
	if _, err := call(t, e.host, "wakeTask", "k", "fail", true); err == nil {
		t.Fatal("the failing action succeeded")
	}
	// The wake's task, not the failed action's.
	waitFor(t, "the wake's task", 10*time.Second, func() bool { return started.Load() >= 1 })
	if _, err := call(t, e.host, "wakeTask", "k", "ok", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the action's task", 10*time.Second, func() bool { return started.Load() >= 2 })
	waitFor(t, "no task running", 10*time.Second, func() bool { return e.host.Stats().TasksRunning == 0 })
	if n := started.Load(); n != 2 {
		t.Fatalf("%d tasks started, want 2 (the wake's and the action's that succeeded)", n)
	}
}

// An actor with a task is not shed when the node holds more actors than
// its bound, though it is the idlest.
func TestATaskKeepsItsActorFromBeingShed(t *testing.T) {
	t.Parallel()
	p := newTaskProbe()
	e := newEnv(t, counterReg(t, taskedActor(p)), func(c *runtime.Config) { c.MaxActiveActors = 1 })
	startTask(t, p, e.host, "s")
	v := p.lastVars()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := call(t, e.host, "tasked", k, "incr", true); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the other actors to be shed", 20*time.Second, func() bool { return e.host.Stats().ActorsShed >= 3 })
	if v.closed.Load() || v.getNote() != "" || e.host.Stats().ActiveActors != 1 {
		t.Fatalf("the actor with a task: vars closed %v, task note %q, %d actors in memory; want it kept",
			v.closed.Load(), v.getNote(), e.host.Stats().ActiveActors)
	}
	close(p.release)
	waitFor(t, "the task to end", 10*time.Second, func() bool { return len(p.calls()) == 1 })
}

// Once an actor's last task ended it sleeps a whole idle timeout later, not
// at the reaper's next pass: the task was its activity.
func TestTheIdleClockStartsWhenTheLastTaskEnds(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	release, ending := make(chan struct{}), make(chan time.Time, 1)
	act := rivet.Actor[taskState]{
		Name:    "quietTask",
		Options: rivet.Options{IdleTimeout: idle},
		Actions: rivet.Actions[taskState]{
			"start": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) {
				return 0, c.KeepAwake(func(ctx context.Context, _ rivet.Client) {
					select {
					case <-release:
					case <-ctx.Done():
					}
					ending <- time.Now()
				})
			}),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, err := call(t, e.host, "quietTask", "q", "start", true); err != nil {
		t.Fatal(err)
	}
	from, since := e.host.ReapPasses(), time.Now()
	waitFor(t, "reaper passes past the idle timeout", 10*time.Second, func() bool {
		return e.host.ReapPasses() >= from+3 && time.Since(since) > 2*idle
	})
	if n := e.host.Stats().ActiveActors; n != 1 {
		t.Fatalf("%d actors in memory while the task runs, want 1", n)
	}
	close(release)
	ended := <-ending
	waitFor(t, "the actor to sleep", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	if d := time.Since(ended); d < idle-50*time.Millisecond {
		t.Fatalf("the actor slept %v after its task ended, want an idle timeout (%v) or more", d, idle)
	}
}

// countingRemote is a Remote that counts what reaches it and serves
// nothing.
type countingRemote struct{ calls atomic.Int32 }

func (r *countingRemote) Call(context.Context, runtime.CallRequest) (json.RawMessage, error) {
	r.calls.Add(1)
	return nil, rivet.Errorf(rivet.ErrUnavailable, "no other node here")
}

func (r *countingRemote) Send(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
	r.calls.Add(1)
	return runtime.SendResult{}, rivet.Errorf(rivet.ErrUnavailable, "no other node here")
}

func (r *countingRemote) Create(context.Context, runtime.Ref, json.RawMessage, runtime.CreateOptions) (runtime.ActorInfo, bool, error) {
	r.calls.Add(1)
	return runtime.ActorInfo{}, false, rivet.Errorf(rivet.ErrUnavailable, "no other node here")
}

// A re-entrant query's task goes with the turn it re-entered: it read that
// turn's changes before they were written, so if that turn fails, the task
// does not start.
func TestAReentrantQuerysTaskGoesWithTheTurnItReentered(t *testing.T) {
	t.Parallel()
	var started, sawCount atomic.Int32
	act := rivet.Actor[taskState]{
		Name: "reentTask",
		Actions: rivet.Actions[taskState]{
			"outer": rivet.Action(func(c *rivet.ActionCtx[taskState], fail bool) (int, error) {
				c.State.Count = 42
				if _, err := c.Client().Get("reentTask", c.Key()...).Call(c.Context(), "peek"); err != nil {
					return 0, err
				}
				if fail {
					return 0, errors.New("the outer turn fails after its re-entrant query")
				}
				return 0, nil
			}),
			"peek": rivet.Query(func(c *rivet.ActionCtx[taskState]) (int, error) {
				n := c.State.Count
				return n, c.KeepAwake(func(context.Context, rivet.Client) {
					sawCount.Store(int32(n))
					started.Add(1)
				})
			}),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, err := call(t, e.host, "reentTask", "k", "outer", true, true); err == nil {
		t.Fatal("the failing outer turn succeeded")
	}
	if _, err := call(t, e.host, "reentTask", "k", "outer", false, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task of the turn that succeeded", 10*time.Second, func() bool {
		return started.Load() >= 1 && e.host.Stats().TasksRunning == 0
	})
	if n := started.Load(); n != 1 || sawCount.Load() != 42 {
		t.Fatalf("%d tasks started, want 1 (the failed outer turn's query's task must not)", n)
	}
}

// A turn that asked for a task (KeepAwake said yes) and then ended as its
// actor's partition began to move still gets its task run, with its
// context ended, and the handoff waits for it before OnSleep (the wait
// after it took the gate).
func TestATaskAskedForAsAHandoffBeginsStillRuns(t *testing.T) {
	t.Parallel()
	inTurn, finish := make(chan struct{}), make(chan struct{})
	var ran, cancelled, done, sawDone atomic.Int32
	act := rivet.Actor[taskState]{
		Name: "lateTask",
		OnSleep: func(c *rivet.ActionCtx[taskState]) error {
			sawDone.Store(done.Load())
			return nil
		},
		Actions: rivet.Actions[taskState]{
			"kick": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) {
				err := c.KeepAwake(func(ctx context.Context, _ rivet.Client) {
					ran.Add(1)
					if ctx.Err() != nil {
						cancelled.Add(1)
					}
					// Cleanup that takes a while: OnSleep comes after it.
					time.Sleep(100 * time.Millisecond)
					done.Store(1)
				})
				close(inTurn)
				<-finish
				c.State.Count++
				return c.State.Count, err
			}),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	ref := runtime.Ref{Name: "lateTask", Key: []string{"k"}}
	callDone := make(chan error, 1)
	go func() { _, err := call(t, e.host, "lateTask", "k", "kick", true); callDone <- err }()
	<-inTurn
	handedOff := make(chan error, 1)
	go func() {
		handedOff <- e.host.Handoff(context.Background(), placement.Partition("lateTask", storage.EncodeKey([]string{"k"}), testPartitions))
	}()
	waitFor(t, "the handoff to end the actor's tasks", 10*time.Second, func() bool { return e.host.TasksEnded(ref) })
	close(finish)
	if err := <-callDone; err != nil {
		t.Fatal(err)
	}
	if err := <-handedOff; err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 1 || cancelled.Load() != 1 || sawDone.Load() != 1 {
		t.Fatalf("the task ran %d times (%d with its context ended) by the end of the handoff, done before OnSleep %v; want once, ended, done",
			ran.Load(), cancelled.Load(), sawDone.Load() == 1)
	}
}

// waitingRemote is a Remote as a node's is while this node is still the
// owner on record of a partition it is handing off: it waits for the next
// owner, then forwards there.
type waitingRemote struct {
	moved   <-chan struct{}
	next    func() *runtime.Host
	reached chan struct{} // gets a value for each call that reaches it
}

func (r *waitingRemote) Call(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
	r.reached <- struct{}{}
	select {
	case <-r.moved:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return r.next().Call(ctx, req)
}

func (r *waitingRemote) Send(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
	return runtime.SendResult{}, rivet.Errorf(rivet.ErrUnavailable, "not used")
}

func (r *waitingRemote) Create(context.Context, runtime.Ref, json.RawMessage, runtime.CreateOptions) (runtime.ActorInfo, bool, error) {
	return runtime.ActorInfo{}, false, rivet.Errorf(rivet.ErrUnavailable, "not used")
}

// An actor of another partition that calls an actor whose partition this
// node is handing off waits for the next owner (through the Remote), as a
// client's call does: only calls from the partition being handed off are
// answered here.
func TestACallIntoAPartitionBeingHandedOffWaitsForItsNextOwner(t *testing.T) {
	hold, moved := make(chan struct{}), make(chan struct{})
	var h2 *runtime.Host
	remote := &waitingRemote{moved: moved, next: func() *runtime.Host { return h2 }, reached: make(chan struct{}, 8)}
	withRemote(t, remote)
	callee := rivet.Actor[taskState]{
		Name: "slowLeaver",
		Actions: rivet.Actions[taskState]{
			// A task whose cleanup holds the handoff up.
			"start": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (bool, error) {
				return true, c.KeepAwake(func(ctx context.Context, _ rivet.Client) { <-ctx.Done(); <-hold })
			}),
			"get": rivet.Query(func(c *rivet.ActionCtx[taskState]) (int, error) { return c.State.Count, nil }),
		},
	}
	relayer := rivet.Actor[taskState]{
		Name: "relayer",
		Actions: rivet.Actions[taskState]{
			"relay": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) {
				raw, err := c.Client().Get("slowLeaver", "m").Call(c.Context(), "get")
				if err != nil {
					return 0, err
				}
				var n int
				return n, json.Unmarshal(raw, &n)
			}),
		},
	}
	e := newEnv(t, counterReg(t, callee, relayer), nil)
	var own2 *runtime.Ownership
	h2, own2 = secondHost(t, e)
	part := placement.Partition("slowLeaver", storage.EncodeKey([]string{"m"}), testPartitions)
	rkey := ""
	for i := 0; rkey == ""; i++ {
		if k := fmt.Sprint("r", i); placement.Partition("relayer", storage.EncodeKey([]string{k}), testPartitions) != part {
			rkey = k
		}
	}
	if _, err := call(t, e.host, "slowLeaver", "m", "start", true); err != nil {
		t.Fatal(err)
	}
	if _, err := call(t, e.host, "relayer", rkey, "relay", true); err != nil {
		t.Fatal(err)
	}
	handedOff := make(chan error, 1)
	go func() {
		err := e.host.Handoff(context.Background(), part)
		if err == nil {
			_, err = own2.Claim(context.Background(), []uint32{part})
		}
		close(moved)
		handedOff <- err
	}()
	waitFor(t, "the partition to be releasing", 10*time.Second, func() bool { _, ok := e.own.Releasing(part); return ok })
	relayed := make(chan error, 1)
	go func() { _, err := call(t, e.host, "relayer", rkey, "relay", false); relayed <- err }()
	// The handoff goes on once the call is on its way, wherever it went.
	select {
	case <-remote.reached:
	case err := <-relayed:
		close(hold)
		<-handedOff
		t.Fatalf("the call ended during the handoff without reaching the Remote: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the call neither reached the Remote nor ended")
	}
	close(hold)
	if err := <-handedOff; err != nil {
		t.Fatal(err)
	}
	if err := <-relayed; err != nil {
		t.Fatalf("a call from another partition into one being handed off: %v, want it served by the next owner", err)
	}
}

// OnSleep of an actor whose partition is being handed off calls an actor
// of another partition, which calls back into the sleeping actor on the
// same chain: the callback re-enters here, though it comes from another
// partition (forwarded, it would wait for a next owner that the handoff it
// holds up has not named yet).
func TestAnOnSleepCallbackThroughAnotherPartitionReenters(t *testing.T) {
	remote := &countingRemote{}
	withRemote(t, remote)
	var mu sync.Mutex
	var sleepErr error
	slept := false
	sleeper := rivet.Actor[taskState]{
		Name: "cbSleeper",
		OnSleep: func(c *rivet.ActionCtx[taskState]) error {
			_, err := c.Client().GetOrCreate("cbHelper", "h").Call(c.Context(), "bounce", c.Key()[0])
			mu.Lock()
			sleepErr, slept = err, true
			mu.Unlock()
			return nil
		},
		Actions: rivet.Actions[taskState]{
			"incr": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) { c.State.Count++; return c.State.Count, nil }),
			"get":  rivet.Query(func(c *rivet.ActionCtx[taskState]) (int, error) { return c.State.Count, nil }),
		},
	}
	helper := rivet.Actor[taskState]{
		Name: "cbHelper",
		Actions: rivet.Actions[taskState]{
			"bounce": rivet.Action(func(c *rivet.ActionCtx[taskState], key string) (int, error) {
				_, err := c.Client().Get("cbSleeper", key).Call(c.Context(), "get")
				return 0, err
			}),
		},
	}
	e := newEnv(t, counterReg(t, sleeper, helper), nil)
	hpart := placement.Partition("cbHelper", storage.EncodeKey([]string{"h"}), testPartitions)
	skey := ""
	for i := 0; skey == ""; i++ {
		if k := fmt.Sprint("s", i); placement.Partition("cbSleeper", storage.EncodeKey([]string{k}), testPartitions) != hpart {
			skey = k
		}
	}
	if _, err := call(t, e.host, "cbSleeper", skey, "incr", true); err != nil {
		t.Fatal(err)
	}
	part := placement.Partition("cbSleeper", storage.EncodeKey([]string{skey}), testPartitions)
	if err := e.host.Handoff(ctx(t), part); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slept || sleepErr != nil || remote.calls.Load() != 0 {
		t.Fatalf("OnSleep ran %v; its callback through another partition: %v (forwarded %d); want it re-entered here", slept, sleepErr, remote.calls.Load())
	}
}

// A task starts as its turn ends, not once the turn's commit lands: an
// actor whose commit takes longer than its idle timeout is not put to
// sleep before its task has run.
func TestATaskStartsBeforeItsTurnsCommitLands(t *testing.T) {
	t.Parallel()
	var started, cancelledAtStart, sleepsBefore, sleeps atomic.Int32
	const idle = 100 * time.Millisecond
	act := rivet.Actor[taskState]{
		Name:    "idleTask",
		Options: rivet.Options{IdleTimeout: idle},
		OnSleep: func(c *rivet.ActionCtx[taskState]) error { sleeps.Add(1); return nil },
		Actions: rivet.Actions[taskState]{
			"touch": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) { return 0, nil }),
			"start": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) {
				c.State.Count++
				return 0, c.KeepAwake(func(ctx context.Context, _ rivet.Client) {
					sleepsBefore.Store(sleeps.Load())
					if ctx.Err() != nil {
						cancelledAtStart.Add(1)
					}
					started.Add(1)
				})
			}),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, err := call(t, e.host, "idleTask", "k", "touch", true); err != nil {
		t.Fatal(err)
	}
	e.store.holdGate, e.store.holdEntered = make(chan struct{}), make(chan struct{})
	e.store.holdCommitSub.Store("idleTask")
	done := make(chan error, 1)
	go func() { _, err := call(t, e.host, "idleTask", "k", "start", false); done <- err }()
	<-e.store.holdEntered
	from, since := e.host.ReapPasses(), time.Now()
	waitFor(t, "reaper passes past the idle timeout, the commit held", 10*time.Second, func() bool {
		return e.host.ReapPasses() >= from+5 && time.Since(since) > 3*idle
	})
	close(e.store.holdGate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task", 10*time.Second, func() bool { return started.Load() == 1 })
	if cancelledAtStart.Load() != 0 || sleepsBefore.Load() != 0 {
		t.Fatalf("the task started with its context ended %v, after %d OnSleep runs; want it started before any", cancelledAtStart.Load() != 0, sleepsBefore.Load())
	}
}

// A handoff that runs out of time while a turn's commit is in flight
// evicts the actor; the task that turn asked for has started already, and
// the vars close only once it has ended.
func TestATaskOfATurnWhoseCommitOutlivesAHandoffFindsItsVarsOpen(t *testing.T) {
	t.Parallel()
	var started, closedAtStart atomic.Int32
	var varsMu sync.Mutex
	var vars []*taskVars
	release := make(chan struct{})
	act := rivet.Actor[taskState]{
		Name: "evictTask",
		CreateVars: func(c *rivet.ActionCtx[taskState]) (any, error) {
			v := &taskVars{}
			varsMu.Lock()
			vars = append(vars, v)
			varsMu.Unlock()
			return v, nil
		},
		Actions: rivet.Actions[taskState]{
			"start": rivet.Action(func(c *rivet.ActionCtx[taskState], wait bool) (int, error) {
				v := c.Vars().(*taskVars)
				c.State.Count++
				return 0, c.KeepAwake(func(ctx context.Context, _ rivet.Client) {
					if v.closed.Load() {
						closedAtStart.Add(1)
					}
					started.Add(1)
					if wait {
						<-release
						if v.closed.Load() {
							closedAtStart.Add(1)
						}
					}
				})
			}),
		},
	}
	e := newEnv(t, counterReg(t, act), nil)
	if _, err := call(t, e.host, "evictTask", "k", "start", true, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first task", 10*time.Second, func() bool { return started.Load() == 1 && e.host.Stats().TasksRunning == 0 })
	e.store.applyGate, e.store.applyEntered = make(chan struct{}), make(chan struct{})
	e.store.applyThenHoldSub.Store("evictTask")
	done := make(chan error, 1)
	go func() { _, err := call(t, e.host, "evictTask", "k", "start", false, true); done <- err }()
	<-e.store.applyEntered // applied; its reply waits
	hctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = e.host.Handoff(hctx, placement.Partition("evictTask", storage.EncodeKey([]string{"k"}), testPartitions))
	waitFor(t, "the evicted actor to leave memory", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	close(e.store.applyGate)
	<-done
	varsMu.Lock()
	v := vars[0]
	varsMu.Unlock()
	if started.Load() != 2 || v.closed.Load() {
		t.Fatalf("tasks started %d, vars closed %v, while the second task runs; want 2 started, vars open", started.Load(), v.closed.Load())
	}
	close(release)
	waitFor(t, "the vars to close after the task", 10*time.Second, v.closed.Load)
	if closedAtStart.Load() != 0 {
		t.Fatal("a KeepAwake task found its vars closed while it ran")
	}
}

// A task asked for during a wake that then fails does not start, whatever
// turn inside the wake asked for it: OnWake itself before a re-entrant
// write ("hook"), a re-entrant read that then writes back ("read"), or a
// re-entrant write ("write"). Each successful wake starts its one task.
func TestAFailedWakesTaskDoesNotEscapeThroughAReentrantWrite(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"hook", "read", "write"} {
		t.Run(mode, func(t *testing.T) {
			var started atomic.Int32
			var failWake atomic.Bool
			failWake.Store(true)
			task := func(context.Context, rivet.Client) { started.Add(1) }
			name := "wakeEscape" + mode
			act := rivet.Actor[taskState]{
				Name: name,
				OnWake: func(c *rivet.ActionCtx[taskState]) error {
					self := c.Client().Get(name, c.Key()...)
					var err error
					switch mode {
					case "hook":
						if err = c.KeepAwake(task); err == nil {
							_, err = self.Call(c.Context(), "incr")
						}
					case "read":
						_, err = self.Call(c.Context(), "peek")
					case "write":
						_, err = self.Call(c.Context(), "kick")
					}
					if err != nil {
						return err
					}
					if failWake.Load() {
						return errors.New("OnWake fails after its re-entrant calls")
					}
					return nil
				},
				Actions: rivet.Actions[taskState]{
					"incr": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) { c.State.Count++; return c.State.Count, nil }),
					"peek": rivet.Query(func(c *rivet.ActionCtx[taskState]) (int, error) {
						if err := c.KeepAwake(task); err != nil {
							return 0, err
						}
						_, err := c.Client().Get(name, c.Key()...).Call(c.Context(), "incr")
						return 0, err
					}),
					"kick": rivet.Action0(func(c *rivet.ActionCtx[taskState]) (int, error) {
						c.State.Count++
						return 0, c.KeepAwake(task)
					}),
					"get": rivet.Query(func(c *rivet.ActionCtx[taskState]) (int, error) { return c.State.Count, nil }),
				},
			}
			e := newEnv(t, counterReg(t, act), nil)
			if _, err := call(t, e.host, name, "k", "get", true); err == nil {
				t.Fatal("a call whose wake failed succeeded")
			}
			failWake.Store(false)
			if _, err := call(t, e.host, name, "k", "get", true); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the task of the wake that succeeded", 10*time.Second, func() bool {
				return started.Load() >= 1 && e.host.Stats().TasksRunning == 0
			})
			if n := started.Load(); n != 1 {
				t.Fatalf("%d tasks started, want 1 (the failed wake's must not)", n)
			}
		})
	}
}
