package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type stepsState struct {
	Done []string `json:"done"`
}

func getState(c *rivet.ActionCtx[stepsState]) (stepsState, error) { return *c.State, nil }

// stepsActor runs the given step names in order, then waits on a queue so
// that the workflow is still unfinished when the test changes its code.
func stepsActor(names ...string) rivet.Actor[stepsState] {
	return rivet.Actor[stepsState]{
		Name:   "steps",
		Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
		Run: func(ctx *workflow.Ctx[stepsState]) error {
			for _, n := range names {
				if err := ctx.Step(n, func(s *workflow.StepCtx[stepsState]) error {
					s.State.Done = append(s.State.Done, n)
					return nil
				}); err != nil {
					return err
				}
			}
			_, err := workflow.Next[struct{}](ctx, "wait-go")
			return err
		},
		Actions: rivet.Actions[stepsState]{"getState": rivet.Query(getState)},
	}
}

func waitFor(t *testing.T, what string, within time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func inspect(t *testing.T, h *runtime.Host, name, key string) runtime.Inspection {
	t.Helper()
	ins, err := h.Inspect(ctx(t), runtime.Ref{Name: name, Key: []string{key}})
	if err != nil {
		t.Fatal(err)
	}
	return ins
}

func TestDivergenceFailsTheWorkflowAndNothingElse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		v2       []string
		wantPath string
	}{
		{"renamed at the root", []string{"a", "renamed"}, "b"},
		{"removed", []string{"a"}, "b"},
		{"reordered", []string{"b", "a"}, "a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, counterReg(t, stepsActor("a", "b")), nil)
			callInt(t, e.host, "counter", "other", "increment", true, 1)
			if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "steps", Key: []string{"x"}}, nil); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "v1 to run both steps", 10*time.Second, func() bool {
				return strings.Contains(string(inspect(t, e.host, "steps", "x").State), `"b"`)
			})
			e.reg = counterReg(t, stepsActor(c.v2...))
			e.restart()
			// Wake it: any call activates the actor and replays its workflow.
			raw, err := call(t, e.host, "steps", "x", "getState", false)
			if err != nil {
				t.Fatalf("actions must keep working on a diverged actor: %v", err)
			}
			if string(raw) != `{"done":["a","b"]}` {
				t.Fatalf("state = %s", raw)
			}
			waitFor(t, "the workflow to fail", 10*time.Second, func() bool {
				return inspect(t, e.host, "steps", "x").WorkflowStatus == runtime.WorkflowFailed
			})
			ins := inspect(t, e.host, "steps", "x")
			if !strings.Contains(ins.WorkflowError, c.wantPath) || !strings.Contains(strings.ToLower(ins.WorkflowError), "diverge") {
				t.Fatalf("workflow error %q should name the divergence at %q", ins.WorkflowError, c.wantPath)
			}
			if n := callInt(t, e.host, "counter", "other", "increment", false, 1); n != 2 {
				t.Fatalf("another actor was affected: count %d", n)
			}
			// A Send that waits on the failed workflow says so.
			_, err = e.host.Send(ctx(t), runtime.SendRequest{Ref: runtime.Ref{Name: "steps", Key: []string{"x"}}, Queue: "go", Body: json.RawMessage(`{}`), Wait: true})
			if !errors.Is(err, rivet.ErrWorkflowFailed) {
				t.Fatalf("send with wait to a failed workflow: %v, want ErrWorkflowFailed", err)
			} else if re := (*rivet.Error)(nil); !errors.As(err, &re) || re.Group+"."+re.Code != "workflow.failed" {
				t.Fatalf("send with wait to a failed workflow: %v, want the reason workflow.failed", err)
			}
		})
	}
}

var flakyCalls atomic.Int64
var flakyHealthy atomic.Bool

type flakyState struct {
	Result string `json:"result"`
}

var flaky = rivet.Actor[flakyState]{
	Name: "flaky",
	Run: func(ctx *workflow.Ctx[flakyState]) error {
		v, err := workflow.StepOpts(ctx, workflow.StepOptions{Name: "call-api", RetryBackoffBase: time.Millisecond, RetryBackoffMax: 5 * time.Millisecond},
			func(s *workflow.StepCtx[flakyState]) (string, error) {
				flakyCalls.Add(1)
				if !flakyHealthy.Load() {
					return "", errors.New("api down")
				}
				return "ok", nil
			})
		if err != nil {
			return err
		}
		return ctx.Step("save", func(s *workflow.StepCtx[flakyState]) error {
			s.State.Result = v
			return nil
		})
	},
	Actions: rivet.Actions[flakyState]{"getState": rivet.Query(func(c *rivet.ActionCtx[flakyState]) (flakyState, error) { return *c.State, nil })},
}

func TestExhaustedStepFailsTheWorkflowVisiblyAndRetryRecovers(t *testing.T) {
	t.Parallel()
	flakyCalls.Store(0)
	flakyHealthy.Store(false)
	e := newEnv(t, counterReg(t, flaky), nil)
	ref := runtime.Ref{Name: "flaky", Key: []string{"f"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "flaky", "f").WorkflowStatus == runtime.WorkflowFailed
	})
	if n := flakyCalls.Load(); n != 4 {
		t.Fatalf("step ran %d times, want 1 + 3 retries", n)
	}
	// The list of failed workflows names it, with its error.
	failed := func() []runtime.ActorInfo {
		t.Helper()
		res, err := e.host.List(ctx(t), runtime.ListOptions{FailedWorkflows: true})
		if err != nil {
			t.Fatal(err)
		}
		return res.Actors
	}
	if fl := failed(); len(fl) != 1 || fl[0].Ref.Name != "flaky" || fl[0].Ref.Key[0] != "f" || !strings.Contains(fl[0].WorkflowError, "api down") ||
		fl[0].WorkflowFailedAt.IsZero() || fl[0].CreatedAt.IsZero() {
		t.Fatalf("failed workflows = %+v, want flaky/f with its error", fl)
	}
	// A second one that fails, then is destroyed, leaves the list.
	g := runtime.Ref{Name: "flaky", Key: []string{"g"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), g, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second workflow to fail", 20*time.Second, func() bool { return len(failed()) == 2 })
	if err := e.host.Destroy(ctx(t), g); err != nil {
		t.Fatal(err)
	}
	if fl := failed(); len(fl) != 1 || fl[0].Ref.Key[0] != "f" {
		t.Fatalf("failed workflows after destroying one = %+v, want flaky/f alone", fl)
	}
	hist, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist.Entries) == 0 || hist.Entries[0].Path != "call-api" || hist.Entries[0].Status != "exhausted" || hist.Entries[0].Attempts != 4 || !strings.Contains(hist.Entries[0].Error, "api down") {
		t.Fatalf("history = %+v", hist.Entries)
	}
	// The failure is sticky across a restart.
	e.restart()
	if _, err := call(t, e.host, "flaky", "f", "getState", false); err != nil {
		t.Fatal(err)
	}
	if st := inspect(t, e.host, "flaky", "f").WorkflowStatus; st != runtime.WorkflowFailed {
		t.Fatalf("after restart workflow is %s, want failed", st)
	}
	flakyHealthy.Store(true)
	removed, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if err != nil || removed != 1 {
		t.Fatalf("retry: removed %d, %v", removed, err)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "flaky", "f").WorkflowStatus == runtime.WorkflowCompleted
	})
	if raw, _ := call(t, e.host, "flaky", "f", "getState", false); string(raw) != `{"result":"ok"}` {
		t.Fatalf("state after retry = %s", raw)
	}
	if fl := failed(); len(fl) != 0 {
		t.Fatalf("failed workflows after a retry that completed = %+v, want none", fl)
	}
	if all, err := e.host.List(ctx(t), runtime.ListOptions{Name: "flaky"}); err != nil || len(all.Actors) != 1 {
		t.Fatalf("actors = %+v, %v; want flaky/f", all.Actors, err)
	}
}

type sleeperState struct {
	Woke bool `json:"woke"`
}

var sleeper = rivet.Actor[sleeperState]{
	Name: "sleeper",
	Run: func(ctx *workflow.Ctx[sleeperState]) error {
		if err := ctx.Sleep("nap", 1500*time.Millisecond); err != nil {
			return err
		}
		return ctx.Step("wake", func(s *workflow.StepCtx[sleeperState]) error {
			s.State.Woke = true
			return nil
		})
	},
}

// A sleeping workflow survives a restart of its node and is woken at its
// deadline by the wakeup index, with no request to bring it back.
func TestSleepSurvivesRestartAndWakesWithoutARequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, sleeper), nil)
	ref := runtime.Ref{Name: "sleeper", Key: []string{"s"}}
	start := time.Now()
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sleep to be recorded", 10*time.Second, func() bool {
		h, err := e.host.History(ctx(t), ref)
		return err == nil && len(h.Entries) > 0 && h.Entries[0].Path == "nap"
	})
	e.restart()
	// Nothing calls the actor: only the stored wakeup can bring it back.
	// Inspect reads storage without loading the actor.
	waitFor(t, "the workflow to wake and finish", 20*time.Second, func() bool {
		ins, err := e.host.Inspect(ctx(t), ref)
		return err == nil && string(ins.State) == `{"woke":true}` && ins.WorkflowStatus == runtime.WorkflowCompleted
	})
	if since := time.Since(start); since < 1500*time.Millisecond {
		t.Fatalf("woke after %v, before the deadline", since)
	}
}

type loopState struct {
	N int `json:"n"`
}

// A long loop keeps a bounded history: pruning deletes old iterations.
func TestLongLoopHistoryStaysBounded(t *testing.T) {
	t.Parallel()
	const iterations = 10000
	looper := rivet.Actor[loopState]{
		Name: "looper",
		Run: func(ctx *workflow.Ctx[loopState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "count"}, func(lc *workflow.Ctx[loopState], i int) (int, error) {
				if i == iterations {
					return i, workflow.Break
				}
				if err := lc.Step("bump", func(s *workflow.StepCtx[loopState]) error {
					s.State.N++
					return nil
				}); err != nil {
					return i, err
				}
				return i + 1, nil
			})
			return err
		},
	}
	e := newEnv(t, counterReg(t, looper), nil)
	ref := runtime.Ref{Name: "looper", Key: []string{"l"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	maxIters := 0
	waitFor(t, "10,000 iterations", 5*time.Minute, func() bool {
		kvs, err := e.store.List(context.Background(), storage.ActorsPrefix, storage.ListOptions{})
		if err != nil {
			return false
		}
		// By the entries' paths: their keys name the slot, not the
		// iteration.
		iters := map[string]bool{}
		for _, kv := range kvs {
			var en struct{ Path string }
			if !strings.Contains(kv.Key, "/wf/") || json.Unmarshal(kv.Value, &en) != nil {
				continue
			}
			if rest, ok := strings.CutPrefix(en.Path, "count/~"); ok {
				iters[strings.SplitN(rest, "/", 2)[0]] = true
			}
		}
		maxIters = max(maxIters, len(iters))
		ins, err := e.host.Inspect(context.Background(), ref)
		return err == nil && ins.WorkflowStatus == runtime.WorkflowCompleted
	})
	if raw := inspect(t, e.host, "looper", "l").State; string(raw) != `{"n":10000}` {
		t.Fatalf("state = %s", raw)
	}
	// Defaults: prune every 20 iterations, keep 20.
	if maxIters > 40 {
		t.Fatalf("up to %d iterations of history were stored at once, want at most 40", maxIters)
	}
	t.Logf("at most %d iterations stored at once", maxIters)
}

type echoState struct {
	Seen int `json:"seen"`
}

// echoer completes each message of its "ask" queue with the body doubled.
var echoer = rivet.Actor[echoState]{
	Name:   "echoer",
	Queues: rivet.Queues{"ask": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[echoState]) error {
		return ctx.Loop("serve", func(lc *workflow.Ctx[echoState]) error {
			msg, err := workflow.Next[int](lc, "wait-ask")
			if err != nil {
				return err
			}
			if err := lc.Step("count", func(s *workflow.StepCtx[echoState]) error {
				s.State.Seen++
				return nil
			}); err != nil {
				return err
			}
			return msg.Complete(msg.Body * 2)
		})
	},
}

func TestSendWaitReturnsTheCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, echoer), nil)
	ref := runtime.Ref{Name: "echoer", Key: []string{"e"}}
	for i := 1; i <= 3; i++ {
		res, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "ask", Body: json.RawMessage(fmt.Sprint(i)), CreateIfMissing: true, Wait: true, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != runtime.SendCompleted || string(res.Response) != fmt.Sprint(2*i) {
			t.Fatalf("send %d: %+v, want completed with %d", i, res, 2*i)
		}
	}
	// Without wait, Send returns once the message is durable.
	res, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "ask", Body: json.RawMessage(`5`)})
	if err != nil || res.Status != runtime.SendEnqueued {
		t.Fatalf("send without wait: %+v, %v", res, err)
	}
	waitFor(t, "the fourth message to be served", 10*time.Second, func() bool {
		return string(inspect(t, e.host, "echoer", "e").State) == `{"seen":4}`
	})
}

type codedState struct {
	Code string `json:"code"`
}

// A user error's code survives the step's failure record and a replay: the
// workflow that catches it sees the same code after a restart.
var coded = rivet.Actor[codedState]{
	Name: "coded",
	Run: func(ctx *workflow.Ctx[codedState]) error {
		_, failure, err := workflow.TryStepOpts(ctx, workflow.StepOptions{Name: "charge", MaxRetries: workflow.NoRetries},
			func(s *workflow.StepCtx[codedState]) (int, error) {
				return 0, rivet.UserError("card_declined", "the card was declined", nil)
			})
		if err != nil {
			return err
		}
		var coded interface{ ErrorCode() string }
		code := "none"
		if failure != nil && errors.As(failure.Err, &coded) {
			code = coded.ErrorCode()
		}
		if err := ctx.Sleep("pause", 200*time.Millisecond); err != nil {
			return err
		}
		return ctx.Step("record", func(s *workflow.StepCtx[codedState]) error {
			s.State.Code = code
			return nil
		})
	},
}

func TestUserErrorCodeSurvivesReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, coded), func(c *runtime.Config) { c.IdleTimeout = 50 * time.Millisecond })
	ref := runtime.Ref{Name: "coded", Key: []string{"c"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pause to be recorded", 10*time.Second, func() bool {
		h, err := e.host.History(ctx(t), ref)
		return err == nil && len(h.Entries) >= 2
	})
	// Restart while it sleeps: the record step runs after a replay of the
	// failed charge, which must still carry its code.
	e.restart()
	waitFor(t, "the workflow to complete", 10*time.Second, func() bool {
		return inspect(t, e.host, "coded", "c").WorkflowStatus == runtime.WorkflowCompleted
	})
	if st := string(inspect(t, e.host, "coded", "c").State); st != `{"code":"card_declined"}` {
		t.Fatalf("state = %s, want the code recorded across the replay", st)
	}
}

// Destroy of an actor whose workflow sleeps removes everything of it: its
// state, history, index entry and wakeup record. Nothing written later by
// the stopped workflow brings any of it back.
func TestDestroyOfASleepingWorkflowLeavesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, sleeper), nil)
	ref := runtime.Ref{Name: "sleeper", Key: []string{"gone"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sleep to be recorded", 10*time.Second, func() bool {
		h, err := e.host.History(ctx(t), ref)
		return err == nil && len(h.Entries) > 0
	})
	if err := e.host.Destroy(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	e.stop() // every pending write lands
	kvs, err := e.store.List(context.Background(), "", storage.ListOptions{KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if strings.Contains(kv.Key, "sleeper") {
			t.Errorf("left behind after Destroy: %s", kv.Key)
		}
	}
}

// doomedActor counts its workflow's runs (each is workflow code running)
// and the executions of its steps, which come once a message arrives.
func doomedActor(runs, steps *atomic.Int32) rivet.Actor[tickState] {
	return rivet.Actor[tickState]{
		Name:   "doomed",
		Queues: rivet.Queues{"m": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[tickState]) error {
			runs.Add(1)
			if _, err := workflow.Next[int](ctx, "wait-m"); err != nil {
				return err
			}
			if _, err := workflow.Do(ctx, "effect", func(*workflow.DoCtx) (int, error) { steps.Add(1); return 0, nil }); err != nil {
				return err
			}
			return ctx.Step("count", func(s *workflow.StepCtx[tickState]) error { steps.Add(1); s.State.Seen++; return nil })
		},
	}
}

// queueUnseen stores a message for an actor not in memory as Send does
// (with a wakeup record that is due), without activating it: as if its
// wakeup timer had not fired yet.
func queueUnseen(t *testing.T, e *env, ref runtime.Ref, queue string, seq uint64) {
	t.Helper()
	enc := storage.EncodeKey(ref.Key)
	p := placement.Partition(ref.Name, enc, testPartitions)
	tok, ok := e.own.Token(p)
	if !ok {
		t.Fatalf("partition %d not owned", p)
	}
	now := time.Now().UnixMilli()
	msg, _ := json.Marshal(map[string]any{"body": 1, "created_at": now})
	wake, _ := json.Marshal(map[string]any{"at": now})
	if err := e.store.Commit(ctx(t), storage.Txn{Fence: storage.Fence{Partition: p, Token: tok}, Ops: []storage.Op{
		storage.Put(storage.ActorPrefix(p, ref.Name, enc)+storage.QueueSuffix+fmt.Sprintf("%020d/%s", seq, queue), msg),
		storage.Put(storage.WakeupKey(p, ref.Name, enc), wake),
	}}); err != nil {
		t.Fatal(err)
	}
}

// Destroy of an actor that is not in memory does not start its workflow:
// a workflow with work due at once (here a queued message; a sleep that
// ended is the same) would run workflow code, and a step's effect, in the
// moment before the delete. Both an actor deactivated while it waited and
// one not loaded since its node restarted. (A run is workflow code, and
// counted: the test fails whenever Destroy starts the workflow. Whether
// the step ran too depends on its race with Destroy's stop.)
func TestDestroyOfAnInactiveActorRunsNoWorkflowCode(t *testing.T) {
	t.Parallel()
	var runs, steps atomic.Int32
	e := newEnv(t, counterReg(t, doomedActor(&runs, &steps)), func(c *runtime.Config) { c.IdleTimeout = 200 * time.Millisecond })
	refOf := func(key string) runtime.Ref { return runtime.Ref{Name: "doomed", Key: []string{key}} }
	for _, key := range []string{"evicted", "restarted"} {
		if _, _, err := e.host.GetOrCreate(ctx(t), refOf(key), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Deactivated while they wait for a message: their wakeup records ask
	// for no timer.
	waitFor(t, "both workflows to wait and be deactivated", 10*time.Second, func() bool {
		return runs.Load() == 2 && e.host.Stats().ActiveActors == 0
	})
	destroy := func(key string) {
		t.Helper()
		before := runs.Load()
		if err := e.host.Destroy(ctx(t), refOf(key)); err != nil {
			t.Fatalf("destroy %s: %v", key, err)
		}
		if n := runs.Load() - before; n != 0 {
			t.Errorf("destroy %s started its workflow (%d run(s))", key, n)
		}
		if n := steps.Load(); n != 0 {
			t.Errorf("destroy %s: %d step(s) of its workflow ran", key, n)
		}
		if _, err := e.host.Get(ctx(t), refOf(key)); !errors.Is(err, rivet.ErrNotFound) {
			t.Errorf("Get after destroy %s = %v, want NOT_FOUND", key, err)
		}
		if n := e.host.Stats().ActiveActors; n != 0 {
			t.Errorf("%d actor(s) in memory after destroy %s", n, key)
		}
	}
	queueUnseen(t, e, refOf("evicted"), "m", 1)
	destroy("evicted")

	e.restart() // its record asks for no timer: nothing loads it
	queueUnseen(t, e, refOf("restarted"), "m", 1)
	destroy("restarted")
	if _, err := e.host.Inspect(ctx(t), refOf("restarted")); !errors.Is(err, rivet.ErrNotFound) {
		t.Errorf("Inspect after destroy = %v, want NOT_FOUND", err)
	}
}

// A Destroy whose delete fails on an actor it loaded without its workflow
// leaves no activation serving with its workflow stopped: the workflow runs
// again from storage, without a request, and takes the message that was
// due.
func TestAFailedDestroyOfAnInactiveActorLeavesItsWorkflowToRun(t *testing.T) {
	t.Parallel()
	var runs, steps atomic.Int32
	e := newEnv(t, counterReg(t, doomedActor(&runs, &steps)), func(c *runtime.Config) { c.IdleTimeout = 200 * time.Millisecond })
	ref := runtime.Ref{Name: "doomed", Key: []string{"kept"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to wait and be deactivated", 10*time.Second, func() bool {
		return runs.Load() == 1 && e.host.Stats().ActiveActors == 0
	})
	queueUnseen(t, e, ref, "m", 1)
	e.store.refuseCommitSub.Store(storage.IndexPrefix + "doomed/")
	if err := e.host.Destroy(ctx(t), ref); !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("Destroy whose delete was refused = %v, want UNAVAILABLE", err)
	}
	waitFor(t, "the workflow to take the message", 20*time.Second, func() bool { return steps.Load() == 2 })
	if n := runs.Load(); n != 2 {
		t.Fatalf("the workflow ran %d times, want twice (created, then after the failed destroy)", n)
	}
}

type tickState struct {
	Seen int `json:"seen"`
}

var ticker = rivet.Actor[tickState]{
	Name:   "ticker",
	Queues: rivet.Queues{"tick": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[tickState]) error {
		return ctx.Loop("serve", func(lc *workflow.Ctx[tickState]) error {
			if _, err := workflow.Next[int](lc, "wait-tick"); err != nil {
				return err
			}
			return lc.Step("count", func(s *workflow.StepCtx[tickState]) error {
				s.State.Seen++
				return nil
			})
		})
	},
}

func seen(t *testing.T, e *env, key string) int {
	var st tickState
	_ = json.Unmarshal(inspect(t, e.host, "ticker", key).State, &st)
	return st.Seen
}

func tick(t *testing.T, e *env, key string) {
	t.Helper()
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: runtime.Ref{Name: "ticker", Key: []string{key}}, Queue: "tick", Body: json.RawMessage(`1`), CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
}

// One failed commit of the workflow stops its run, not the workflow: with
// no further request to wake it, it runs again from storage and takes the
// message.
func TestWorkflowResumesAfterATransientCommitError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, ticker), nil)
	tick(t, e, "c")
	waitFor(t, "the first tick", 10*time.Second, func() bool { return seen(t, e, "c") == 1 })
	e.store.failCommitSub.Store("wf/serve/~1/count")
	tick(t, e, "c")
	waitFor(t, "the tick whose receive failed to commit", 15*time.Second, func() bool { return seen(t, e, "c") == 2 })
}

// One failed read of a queued message does not strand it: a message queued
// while the node was down is read from storage, the read fails once, and
// with no request to wake it the workflow still takes it.
func TestQueuedMessageSurvivesATransientReadError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, ticker), nil)
	tick(t, e, "r")
	waitFor(t, "the first tick", 10*time.Second, func() bool { return seen(t, e, "r") == 1 })
	e.stop()
	enc := storage.EncodeKey([]string{"r"})
	prefix := storage.ActorPrefix(placement.Partition("ticker", enc, testPartitions), "ticker", enc)
	// Queued as Send queues it: the message and a wakeup record that is
	// due, in one transaction.
	now := time.Now().UnixMilli()
	msg := fmt.Sprintf(`{"body":1,"created_at":%d}`, now)
	wake := fmt.Sprintf(`{"at":%d}`, now)
	if err := e.store.Store.Commit(ctx(t), storage.Txn{Ops: []storage.Op{
		storage.Put(fmt.Sprintf("%sq/%020d/tick", prefix, 100), []byte(msg)),
		storage.Put(storage.WakeupKey(placement.Partition("ticker", enc, testPartitions), "ticker", enc), []byte(wake)),
	}}); err != nil {
		t.Fatal(err)
	}
	e.store.failGetSub.Store("/q/")
	e.start()
	waitFor(t, "the message queued while the node was down", 15*time.Second, func() bool { return seen(t, e, "r") == 2 })
}

type batchState struct {
	Taken []int `json:"taken"`
}

// A batch receive asking for more messages than one transaction holds takes
// what fits, and the rest on the next receive; nothing wedges.
func TestBatchReceiveLargerThanATransaction(t *testing.T) {
	t.Parallel()
	batcher := rivet.Actor[batchState]{
		Name:   "batcher",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[batchState]) error {
			if err := ctx.Sleep("let-them-queue", 300*time.Millisecond); err != nil {
				return err
			}
			return ctx.Loop("take", func(lc *workflow.Ctx[batchState]) error {
				ms, err := workflow.NextBatch[int](lc, "batch", workflow.NextOptions{Count: 500, Timeout: time.Second})
				if err != nil {
					return err
				}
				if len(ms) == 0 {
					return workflow.Break
				}
				return lc.Step("count", func(s *workflow.StepCtx[batchState]) error {
					s.State.Taken = append(s.State.Taken, len(ms))
					return nil
				})
			})
		},
	}
	e := newEnv(t, counterReg(t, batcher), nil)
	ref := runtime.Ref{Name: "batcher", Key: []string{"b"}}
	for range 200 {
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the workflow to take every message", 30*time.Second, func() bool {
		return inspect(t, e.host, "batcher", "b").WorkflowStatus == runtime.WorkflowCompleted
	})
	var st batchState
	_ = json.Unmarshal(inspect(t, e.host, "batcher", "b").State, &st)
	total := 0
	for _, n := range st.Taken {
		total += n
	}
	if total != 200 || len(st.Taken) < 2 {
		t.Fatalf("batches taken %v (total %d), want all 200 over several receives", st.Taken, total)
	}
}

type joinState struct {
	Sum int `json:"sum"`
}

// parallelJoin's three branches each wait, inside a Do step, until all
// three are inside theirs: it completes only if Do bodies run at the same
// time (Step bodies take the actor's turn one after another).
func parallelJoin(inside *atomic.Int32) rivet.Actor[joinState] {
	return rivet.Actor[joinState]{
		Name: "parallelJoin",
		Run: func(ctx *workflow.Ctx[joinState]) error {
			branch := func(name string, v int) func(*workflow.Ctx[joinState]) (int, error) {
				return func(bc *workflow.Ctx[joinState]) (int, error) {
					return workflow.Do(bc, "fetch-"+name, func(d *workflow.DoCtx) (int, error) {
						inside.Add(1)
						deadline := time.Now().Add(10 * time.Second)
						for inside.Load() < 3 {
							if time.Now().After(deadline) {
								return 0, workflow.Critical(errors.New("the other branches never ran alongside"))
							}
							time.Sleep(time.Millisecond)
						}
						return v, nil
					})
				}
			}
			got, err := workflow.Join(ctx, "gather", workflow.Branches[joinState, int]{
				"a": branch("a", 1), "b": branch("b", 2), "c": branch("c", 4),
			})
			if err != nil {
				return err
			}
			return ctx.Step("sum", func(s *workflow.StepCtx[joinState]) error {
				s.State.Sum = got["a"] + got["b"] + got["c"]
				return nil
			})
		},
	}
}

func TestDoStepsOfJoinBranchesRunAtTheSameTime(t *testing.T) {
	t.Parallel()
	var inside atomic.Int32
	e := newEnv(t, counterReg(t, parallelJoin(&inside)), nil)
	ref := runtime.Ref{Name: "parallelJoin", Key: []string{"p"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the join to finish", 20*time.Second, func() bool {
		ins := inspect(t, e.host, "parallelJoin", "p")
		return ins.WorkflowStatus == runtime.WorkflowCompleted || ins.WorkflowStatus == runtime.WorkflowFailed
	})
	ins := inspect(t, e.host, "parallelJoin", "p")
	if ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != `{"sum":7}` {
		t.Fatalf("workflow %s (%s), state %s", ins.WorkflowStatus, ins.WorkflowError, ins.State)
	}
}

var (
	loopRetryHealthy atomic.Bool
	loopRetryMu      sync.Mutex
	loopRetryRuns    = map[int]int{}
)

type loopRetryState struct {
	Sum int `json:"sum"`
}

// loopRetry runs iterations 0-7 of a loop that checkpoints every 4, one
// step each; the step of iteration 6 fails (no retries) until healthy.
var loopRetry = rivet.Actor[loopRetryState]{
	Name: "loopRetry",
	Run: func(ctx *workflow.Ctx[loopRetryState]) error {
		_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 4, HistorySize: 50}, func(c *workflow.Ctx[loopRetryState], i int) (int, error) {
			err := c.StepWith(workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[loopRetryState]) error {
				loopRetryMu.Lock()
				loopRetryRuns[i]++
				loopRetryMu.Unlock()
				if i == 6 && !loopRetryHealthy.Load() {
					return errors.New("down")
				}
				s.State.Sum += i
				return nil
			})
			if err != nil {
				return i, err
			}
			if i == 7 {
				return i, workflow.Break
			}
			return i + 1, nil
		})
		return err
	},
}

// retry --from an entry inside a loop: from an iteration before the loop's
// last checkpoint it is refused (the loop kept no state to go back there;
// deleting the entries would skip those iterations), and from the
// checkpoint's iteration on it re-runs each iteration from there.
func TestRetryFromInsideALoop(t *testing.T) {
	t.Parallel()
	loopRetryHealthy.Store(false)
	loopRetryMu.Lock()
	clear(loopRetryRuns) // a second run of the test (-count) starts afresh
	loopRetryMu.Unlock()
	e := newEnv(t, counterReg(t, loopRetry), nil)
	ref := runtime.Ref{Name: "loopRetry", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "loopRetry", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	loopRetryHealthy.Store(true)
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "l/~2/s"); !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "resumes at iteration 4") {
		t.Fatalf("retry from before the checkpoint: %v, want INVALID_ARGUMENT naming iteration 4", err)
	}
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "l/~4/s"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "loopRetry", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	loopRetryMu.Lock()
	defer loopRetryMu.Unlock()
	want := map[int]int{0: 1, 1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 6: 2, 7: 1}
	if !reflect.DeepEqual(loopRetryRuns, want) {
		t.Fatalf("step runs per iteration %v, want %v", loopRetryRuns, want)
	}
	// A completed loop cannot be re-entered either.
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "l/~7/s"); !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "has completed") {
		t.Fatalf("retry inside a completed loop: %v, want INVALID_ARGUMENT", err)
	}
}

// Tests that share these do not run in parallel with each other (see
// TestMain).
var (
	caughtRuns    atomic.Int64
	caughtHealthy atomic.Bool
)

type caughtState struct {
	Path string `json:"path"`
}

// tryX tries step x, which always fails; a Try catches it.
func tryX(ctx *workflow.Ctx[caughtState]) (*workflow.Failure, error) {
	return ctx.Try("try", func(c *workflow.Ctx[caughtState]) error {
		return c.StepWith(workflow.StepOptions{Name: "x", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[caughtState]) error {
			caughtRuns.Add(1)
			return errors.New("x is down for good")
		})
	})
}

// caught tries a step that always fails (a Try catches it and the code
// takes a fallback), then runs a step that fails until healthy.
var caught = rivet.Actor[caughtState]{
	Name: "caught",
	Run: func(ctx *workflow.Ctx[caughtState]) error {
		f, err := tryX(ctx)
		if err != nil {
			return err
		}
		path := "main"
		if f != nil {
			path = "fallback"
		}
		return ctx.StepWith(workflow.StepOptions{Name: "y", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[caughtState]) error {
			if !caughtHealthy.Load() {
				return errors.New("y is down")
			}
			s.State.Path = path
			return nil
		})
	},
}

// retry without --from retries the failure that ended the workflow, not
// one a Try caught on the way: the caught step does not run again, and the
// workflow goes on down the path it took.
func TestRetryWithoutFromLeavesCaughtFailures(t *testing.T) {
	t.Parallel()
	caughtRuns.Store(0)
	caughtHealthy.Store(false)
	e := newEnv(t, counterReg(t, caught), nil)
	ref := runtime.Ref{Name: "caught", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "caught", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	caughtHealthy.Store(true)
	removed, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if err != nil || removed != 1 {
		t.Fatalf("retry: removed %d, %v; want 1 (y only)", removed, err)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "caught", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	if n := caughtRuns.Load(); n != 1 {
		t.Fatalf("the caught step ran %d times, want 1", n)
	}
	// A workflow that completed keeps them too: a retry of it deletes
	// nothing, and replays.
	if removed, err := e.host.RetryWorkflow(ctx(t), ref, ""); err != nil || removed != 0 {
		t.Fatalf("retry of the completed workflow: removed %d, %v; want 0", removed, err)
	}
	waitFor(t, "the workflow retried again to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "caught", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	if n := caughtRuns.Load(); n != 1 {
		t.Fatalf("after a retry of the completed workflow, the caught step ran %d times, want 1", n)
	}
}

// caughtPlain is caught, except that it fails with its own error (naming no
// entry) until healthy; and it has a settled join.
var caughtPlain = rivet.Actor[caughtState]{
	Name: "caughtPlain",
	Run: func(ctx *workflow.Ctx[caughtState]) error {
		if _, err := tryX(ctx); err != nil {
			return err
		}
		if _, err := workflow.Join(ctx, "j", workflow.Branches[caughtState, int]{
			"a": func(c *workflow.Ctx[caughtState]) (int, error) {
				return workflow.Step(c, "s", func(*workflow.StepCtx[caughtState]) (int, error) { return 1, nil })
			},
		}); err != nil {
			return err
		}
		if err := ctx.Step("after", func(*workflow.StepCtx[caughtState]) error { return nil }); err != nil {
			return err
		}
		if !caughtHealthy.Load() {
			return errors.New("the workflow's own error")
		}
		return nil
	},
}

// After a failure that names no entry (the workflow's own error), retry
// without --from deletes nothing, caught failures included, and replays
// with the code deployed now; --from inside a settled join is refused (the
// join keeps its result, so the entry would never run again).
func TestRetryAfterAnErrorNamingNoEntry(t *testing.T) {
	caughtRuns.Store(0)
	caughtHealthy.Store(false)
	e := newEnv(t, counterReg(t, caughtPlain), nil)
	ref := runtime.Ref{Name: "caughtPlain", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "caughtPlain", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "j/a/s"); !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "has settled") {
		t.Fatalf("retry from inside a settled join: %v, want INVALID_ARGUMENT", err)
	}
	caughtHealthy.Store(true)
	removed, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if err != nil || removed != 0 {
		t.Fatalf("retry: removed %d, %v; want 0", removed, err)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "caughtPlain", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	if n := caughtRuns.Load(); n != 1 {
		t.Fatalf("the caught step ran %d times, want 1", n)
	}
}

// gated records a rollback checkpoint and a version check (entries without
// a time) before its steps; step b fails until healthy.
var gated = rivet.Actor[caughtState]{
	Name: "gated",
	Run: func(ctx *workflow.Ctx[caughtState]) error {
		if err := ctx.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		v, err := ctx.GetVersion("v", 2)
		if err != nil {
			return err
		}
		if err := ctx.Step("a", func(*workflow.StepCtx[caughtState]) error { return nil }); err != nil {
			return err
		}
		return ctx.StepWith(workflow.StepOptions{Name: "b", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[caughtState]) error {
			if !caughtHealthy.Load() {
				return errors.New("b is down")
			}
			s.State.Path = fmt.Sprint("version ", v)
			return nil
		})
	},
	Actions: rivet.Actions[caughtState]{"getState": rivet.Query(func(c *rivet.ActionCtx[caughtState]) (caughtState, error) { return *c.State, nil })},
}

// retry --from keeps what was recorded before the entry, the entries that
// carry no time (a rollback checkpoint, a version check) included: they
// were deleted, and the replay diverged or re-resolved the version.
func TestRetryFromKeepsEarlierEntriesWithoutATime(t *testing.T) {
	caughtHealthy.Store(false)
	e := newEnv(t, counterReg(t, gated), nil)
	ref := runtime.Ref{Name: "gated", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "gated", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	caughtHealthy.Store(true)
	removed, err := e.host.RetryWorkflow(ctx(t), ref, "b")
	if err != nil || removed != 1 {
		t.Fatalf("retry --from b: removed %d, %v; want 1", removed, err)
	}
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "gated", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	if raw, _ := call(t, e.host, "gated", "k", "getState", false); string(raw) != `{"path":"version 2"}` {
		t.Fatalf("state %s, want version 2", raw)
	}
}

// Inspect says what would wake a sleeping workflow: the queues it waits
// on and its timeout while it is in memory; after a restart, the time its
// wakeup record holds (a message activates it, and its replay decides).
func TestInspectSaysWhatWakesASleepingWorkflow(t *testing.T) {
	waiter := func(name string, timeout time.Duration) rivet.Actor[stepsState] {
		return rivet.Actor[stepsState]{
			Name:   name,
			Queues: rivet.Queues{"go": rivet.QueueOf[struct{}](), "other": rivet.QueueOf[struct{}]()},
			Run: func(ctx *workflow.Ctx[stepsState]) error {
				_, err := workflow.Next[struct{}](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}, Timeout: timeout})
				return err
			},
		}
	}
	e := newEnv(t, counterReg(t, waiter("timed", time.Hour), waiter("untimed", 0)), nil)
	before := time.Now()
	for _, name := range []string{"timed", "untimed"} {
		if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: name, Key: []string{"x"}}, nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, name+" to wait", 10*time.Second, func() bool {
			return inspect(t, e.host, name, "x").WorkflowStatus == runtime.WorkflowSleeping
		})
	}
	after := time.Now()

	ins := inspect(t, e.host, "timed", "x")
	at := ins.WorkflowWake.At
	if at.Before(before.Add(time.Hour).Truncate(time.Millisecond)) || at.After(after.Add(time.Hour)) {
		t.Errorf("in memory: wakes at %v, want an hour after the receive began (%v to %v)", at, before, after)
	}
	if !reflect.DeepEqual(ins.WorkflowWake.Queues, []string{"go"}) || ins.WorkflowWake.AnyQueue {
		t.Errorf("in memory: wakes on %v (any %v), want [go]", ins.WorkflowWake.Queues, ins.WorkflowWake.AnyQueue)
	}
	if ins := inspect(t, e.host, "untimed", "x"); !ins.WorkflowWake.At.IsZero() || !reflect.DeepEqual(ins.WorkflowWake.Queues, []string{"go"}) {
		t.Errorf("in memory, no timeout: wake %+v, want no time and [go]", ins.WorkflowWake)
	}
	// History says the same.
	history := func(name string) runtime.History {
		t.Helper()
		h, err := e.host.History(ctx(t), runtime.Ref{Name: name, Key: []string{"x"}})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := history("timed"); h.WorkflowStatus != runtime.WorkflowSleeping || !h.WorkflowWake.At.Equal(at) || !reflect.DeepEqual(h.WorkflowWake.Queues, []string{"go"}) {
		t.Errorf("history in memory: status %q, wake %+v; want sleeping, at %v on [go]", h.WorkflowStatus, h.WorkflowWake, at)
	}

	e.restart()
	ins = inspect(t, e.host, "timed", "x")
	if ins.Active || ins.WorkflowStatus != runtime.WorkflowSleeping {
		t.Fatalf("after a restart: active %v, status %q; want a sleeping actor not in memory", ins.Active, ins.WorkflowStatus)
	}
	if !ins.WorkflowWake.At.Equal(at.Truncate(time.Millisecond)) || ins.WorkflowWake.Queues != nil {
		t.Errorf("after a restart: wake %+v, want the stored time %v and no queues", ins.WorkflowWake, at)
	}
	if ins := inspect(t, e.host, "untimed", "x"); ins.Active || !ins.WorkflowWake.IsZero() {
		t.Errorf("after a restart, no timeout: active %v, wake %+v, want nothing known", ins.Active, ins.WorkflowWake)
	}
	if h := history("timed"); h.WorkflowStatus != runtime.WorkflowSleeping || !h.WorkflowWake.At.Equal(at.Truncate(time.Millisecond)) || h.WorkflowWake.Queues != nil {
		t.Errorf("history after a restart: status %q, wake %+v; want sleeping, at the stored %v", h.WorkflowStatus, h.WorkflowWake, at)
	}
	if ins := inspect(t, e.host, "timed", "x"); ins.Active {
		t.Errorf("History activated the actor")
	}
}

// retryFromHealthy makes retryFrom's step succeed.
var retryFromHealthy atomic.Bool

type retryFromState struct {
	Got []int `json:"got"`
}

// retryFrom takes a message, then fails a step with it until healthy.
var retryFrom = rivet.Actor[retryFromState]{
	Name:   "retryFrom",
	Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[retryFromState]) error {
		m, err := workflow.Next[int](ctx, "m")
		if err != nil {
			return err
		}
		return ctx.StepWith(workflow.StepOptions{Name: "use", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[retryFromState]) error {
			if !retryFromHealthy.Load() {
				return errors.New("down")
			}
			s.State.Got = append(s.State.Got, m.Body)
			return nil
		})
	},
}

// A retry from a receive (or from before one) puts the messages it took
// back in their queue, in the retry's own commit: the receive's entry was
// their only copy, and the replayed receive takes them again, also after a
// restart.
func TestRetryFromAReceiveGivesItsMessagesBack(t *testing.T) {
	t.Parallel()
	retryFromHealthy.Store(false)
	e := newEnv(t, counterReg(t, retryFrom), nil)
	ref := runtime.Ref{Name: "retryFrom", Key: []string{"k"}}
	for _, body := range []string{`7`, `8`} {
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(body), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "retryFrom", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	for _, restart := range []bool{false, true} {
		retryFromHealthy.Store(true)
		if _, err := e.host.RetryWorkflow(ctx(t), ref, "m"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
			return inspect(t, e.host, "retryFrom", "k").WorkflowStatus == runtime.WorkflowCompleted
		})
		var st retryFromState
		if err := json.Unmarshal(inspect(t, e.host, "retryFrom", "k").State, &st); err != nil {
			t.Fatal(err)
		}
		want := []int{7}
		if restart {
			want = []int{7, 7} // the completed run's message, taken again
		}
		if !reflect.DeepEqual(st.Got, want) {
			t.Fatalf("after retry --from m (restart %v): got %v, want %v (message 8 stays queued)", restart, st.Got, want)
		}
		if q := inspect(t, e.host, "retryFrom", "k").Queues; len(q) != 1 || q[0].Depth != 1 {
			t.Fatalf("queues %+v, want message 8 alone in q", q)
		}
		e.restart()
	}
}

// manyTakesHealthy makes manyTakes' step succeed.
var manyTakesHealthy atomic.Bool

// manyTakes takes 30 messages, one receive each, then fails a step.
var manyTakes = rivet.Actor[retryFromState]{
	Name:   "manyTakes",
	Queues: rivet.Queues{"q": rivet.QueueOf[string]()},
	Run: func(ctx *workflow.Ctx[retryFromState]) error {
		for i := range 30 {
			if _, err := workflow.Next[string](ctx, fmt.Sprintf("m%02d", i)); err != nil {
				return err
			}
		}
		return ctx.StepWith(workflow.StepOptions{Name: "use", MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[retryFromState]) error {
			if !manyTakesHealthy.Load() {
				return errors.New("down")
			}
			s.State.Got = append(s.State.Got, 30)
			return nil
		})
	},
}

// A retry that would put back more messages than one transaction holds is
// refused as too large, and changes nothing: split, a crash between its
// commits would leave a message both queued and recorded as taken. A retry
// from a later entry then works.
func TestARetryPuttingBackTooManyMessagesIsRefused(t *testing.T) {
	t.Parallel()
	manyTakesHealthy.Store(false)
	e := newEnv(t, counterReg(t, manyTakes), nil)
	ref := runtime.Ref{Name: "manyTakes", Key: []string{"k"}}
	body, _ := json.Marshal(strings.Repeat("x", 60000))
	for range 30 {
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "q", Body: body, CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the workflow to fail", 30*time.Second, func() bool {
		return inspect(t, e.host, "manyTakes", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	manyTakesHealthy.Store(true)
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "m00"); !errors.Is(err, rivet.ErrTooLarge) || !strings.Contains(err.Error(), "retry from a later entry") {
		t.Fatalf("retry --from m00: %v, want ErrTooLarge saying to retry from a later entry", err)
	}
	if ins := inspect(t, e.host, "manyTakes", "k"); ins.WorkflowStatus != runtime.WorkflowFailed || len(ins.Queues) != 0 {
		t.Fatalf("after the refused retry: workflow %s, queues %+v; want failed, nothing queued", ins.WorkflowStatus, ins.Queues)
	}
	if _, err := e.host.RetryWorkflow(ctx(t), ref, "m29"); err != nil {
		t.Fatalf("retry --from m29: %v", err)
	}
	waitFor(t, "the retried workflow to complete", 30*time.Second, func() bool {
		return inspect(t, e.host, "manyTakes", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
}

// What Inspect and History return is the caller's: editing the queues a
// sleeping workflow waits on must not change what the next look says.
func TestInspectWakeQueuesAreTheCallers(t *testing.T) {
	e := newEnv(t, counterReg(t, rivet.Actor[stepsState]{
		Name:   "waiter",
		Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
		Run: func(ctx *workflow.Ctx[stepsState]) error {
			_, err := workflow.Next[struct{}](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}})
			return err
		},
	}), nil)
	ref := runtime.Ref{Name: "waiter", Key: []string{"x"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to wait", 10*time.Second, func() bool {
		return inspect(t, e.host, "waiter", "x").WorkflowStatus == runtime.WorkflowSleeping
	})
	inspect(t, e.host, "waiter", "x").WorkflowWake.Queues[0] = "edited"
	h, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	h.WorkflowWake.Queues[0] = "edited too"
	if ins := inspect(t, e.host, "waiter", "x"); !reflect.DeepEqual(ins.WorkflowWake.Queues, []string{"go"}) {
		t.Fatalf("after a caller edited a result: wakes on %v, want [go]", ins.WorkflowWake.Queues)
	}
}
