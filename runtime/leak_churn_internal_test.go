package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type leakState struct {
	N int `json:"n"`
}

// leakSizes is what the host holds: goroutines, actors in memory and
// retiring, timers, subscriptions' actors, sleep chains. The goroutines are
// the process's, so the tests that use it do not run in parallel (see
// TestMain in host_test.go).
type leakSizes struct{ goroutines, actors, retiring, timers, heap, subs, chains int }

func (h *Host) leakSizes() leakSizes {
	var s leakSizes
	s.goroutines = goruntime.NumGoroutine()
	h.mu.Lock()
	s.actors, s.retiring = len(h.actors), len(h.retiring)
	h.mu.Unlock()
	h.timers.mu.Lock()
	s.timers, s.heap = len(h.timers.byID), len(h.timers.heap)
	h.timers.mu.Unlock()
	h.events.mu.Lock()
	s.subs = len(h.events.subs)
	h.events.mu.Unlock()
	h.sleepChains.Range(func(any, any) bool { s.chains++; return true })
	return s
}

// Many actors come into memory and leave it (idle, or shed past
// MaxActiveActors), having run actions, scheduled calls, queue sends and
// workflows that sleep and complete, or having been destroyed with a call
// still scheduled: the host holds nothing of them afterwards.
func TestActorChurnLeavesHostMapsEmpty(t *testing.T) {
	act := rivet.Actor[leakState]{
		Name:   "leaky",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Events: rivet.Events{"e": rivet.EventOf[int]()},
		Run: func(ctx *workflow.Ctx[leakState]) error {
			m, err := workflow.Next[int](ctx, "m")
			if err != nil {
				return err
			}
			if err := ctx.Sleep("nap", 20*time.Millisecond); err != nil {
				return err
			}
			return ctx.Step("add", func(s *workflow.StepCtx[leakState]) error { s.State.N += m.Body; return nil })
		},
		Actions: rivet.Actions[leakState]{
			"arm": rivet.Action(func(c *rivet.ActionCtx[leakState], far bool) (int, error) {
				if err := c.Broadcast("e", c.State.N); err != nil {
					return 0, err
				}
				d := 10 * time.Millisecond
				if far {
					d = time.Hour
				}
				if _, err := c.Schedule().After(d, "noop"); err != nil {
					return 0, err
				}
				return c.State.N, nil
			}),
			"noop": rivet.Action0(func(c *rivet.ActionCtx[leakState]) (int, error) { return c.State.N, nil }),
			"gone": rivet.Action0(func(c *rivet.ActionCtx[leakState]) (int, error) { return 0, c.Destroy() }),
		},
	}
	reg, err := rivet.Setup(act)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	defer store.Close()
	h, _ := memHostWith(t, reg, store, func(c *Config) {
		c.IdleTimeout = 100 * time.Millisecond
		c.MaxActiveActors = 10
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	round := func(i int) {
		ref := Ref{Name: "leaky", Key: []string{fmt.Sprint("k", i)}}
		if _, err := h.Call(ctx, CallRequest{Ref: ref, Action: "arm", Args: json.RawMessage(fmt.Sprintf("[%v]", i%3 == 0)), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
		sub, err := h.Subscribe(ctx, ref, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage("1"), IdempotencyKey: fmt.Sprint("s", i)}); err != nil {
			t.Fatal(err)
		}
		sub.Close()
		if i%3 == 0 {
			// Destroyed with a call an hour away.
			if _, err := h.Call(ctx, CallRequest{Ref: ref, Action: "gone"}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := h.Call(ctx, CallRequest{Ref: Ref{Name: "leaky", Key: []string{"none"}}, Action: "noop"}); err == nil {
			t.Fatal("a call to a missing actor succeeded")
		}
	}
	idle := func(what string, base leakSizes) leakSizes {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s := h.leakSizes()
			if s.goroutines <= base.goroutines+3 && s.actors == 0 && s.retiring == 0 && s.timers <= base.timers && s.heap <= base.heap && s.subs == 0 && s.chains == 0 && h.InFlight() == 0 {
				t.Logf("%s: %+v", what, s)
				return s
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Logf("goroutines at the failure:\n%s", buf[:goruntime.Stack(buf, true)])
				t.Fatalf("%s: %+v, baseline %+v, %d in flight", what, s, base, h.InFlight())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := range 3 {
		round(i)
	}
	base := idle("warm-up", leakSizes{goroutines: 1 << 20, timers: 1 << 20, heap: 1 << 20})
	for i := 3; i < 150; i++ {
		round(i)
	}
	idle("churn", base)
}

// memHostWith is memHostOn with the host's configuration tuned by tune.
func memHostWith(t *testing.T, reg *rivet.Registry, store storage.Store, tune func(*Config)) (*Host, func(context.Context) error) {
	t.Helper()
	const parts = 4
	ctx, cancel := context.WithCancel(context.Background())
	com := storage.NewCommitter(store, storage.DefaultCommitterConfig())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = com.Run(ctx) }()
	own := NewOwnership(store, NodeRecord{NodeID: "n1"}, 5*time.Second, nil)
	if err := own.Establish(ctx, AllPartitions(parts)); err != nil {
		cancel()
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = own.Run(ctx) }()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Partitions = "n1", parts
	tune(&cfg)
	h, err := New(cfg, reg, store, com, own)
	if err != nil {
		cancel()
		wg.Wait()
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		cancel()
		wg.Wait()
		t.Fatal(err)
	}
	var once sync.Once
	stop := func(sctx context.Context) error {
		var err error
		once.Do(func() {
			err = h.Stop(sctx)
			_ = own.Resign(sctx)
			cancel()
			wg.Wait()
		})
		return err
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = stop(sctx)
	})
	return h, stop
}

// leakVars counts the vars open.
type leakVars struct{ open *atomic.Int64 }

func (v leakVars) Close() error { v.open.Add(-1); return nil }

// Vars that are io.Closers are closed whichever way their activation goes:
// idle, shed, destroyed, an OnWake that fails (on a create and on a load),
// with a KeepAwake task running; and the host forgets all of it.
func TestActorVarsChurnClosesEveryVars(t *testing.T) {
	var open atomic.Int64
	act := rivet.Actor[leakState]{
		Name: "vars",
		CreateVars: func(c *rivet.ActionCtx[leakState]) (any, error) {
			open.Add(1)
			return leakVars{&open}, nil
		},
		OnWake: func(c *rivet.ActionCtx[leakState]) error {
			if c.Key()[0] == "bad" || c.State.N < 0 {
				return errors.New("no wake")
			}
			return nil
		},
		OnSleep: func(c *rivet.ActionCtx[leakState]) error { return nil },
		Actions: rivet.Actions[leakState]{
			"set": rivet.Action(func(c *rivet.ActionCtx[leakState], n int) (int, error) {
				c.State.N = n
				return n, nil
			}),
			"task": rivet.Action0(func(c *rivet.ActionCtx[leakState]) (int, error) {
				return 0, c.KeepAwake(func(ctx context.Context, _ rivet.Client) {
					select {
					case <-ctx.Done():
					case <-time.After(30 * time.Millisecond):
					}
				})
			}),
			"gone": rivet.Action0(func(c *rivet.ActionCtx[leakState]) (int, error) { return 0, c.Destroy() }),
		},
	}
	reg, err := rivet.Setup(act)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	defer store.Close()
	h, _ := memHostWith(t, reg, store, func(c *Config) {
		c.IdleTimeout = 100 * time.Millisecond
		c.MaxActiveActors = 5
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	call := func(key, action, args string) error {
		_, err := h.Call(ctx, CallRequest{Ref: Ref{Name: "vars", Key: []string{key}}, Action: action, Args: json.RawMessage(args), CreateIfMissing: true})
		return err
	}
	for i := range 60 {
		key := fmt.Sprint("v", i)
		if err := call(key, "task", ""); err != nil {
			t.Fatal(err)
		}
		switch i % 4 {
		case 0:
			if err := call(key, "gone", ""); err != nil {
				t.Fatal(err)
			}
		case 1:
			// Its next wake fails.
			if err := call(key, "set", "[-1]"); err != nil {
				t.Fatal(err)
			}
		}
		if err := call("bad", "task", ""); err == nil {
			t.Fatal("a create whose OnWake fails succeeded")
		}
	}
	// The actors whose wake fails, loaded again.
	time.Sleep(300 * time.Millisecond)
	for i := 1; i < 60; i += 4 {
		if err := call(fmt.Sprint("v", i), "set", "[1]"); err == nil {
			t.Fatal("a call to an actor whose OnWake fails succeeded")
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := h.leakSizes()
		if open.Load() == 0 && s.actors == 0 && s.retiring == 0 && s.chains == 0 {
			t.Logf("%+v, vars open %d", s, open.Load())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%+v, vars open %d", s, open.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Workflows that race a message against a sleep (either winning), join
// branches, and time out a step, across many actors that then leave
// memory: no goroutine, timer or map entry of theirs stays.
func TestWorkflowRaceJoinTimeoutChurnLeavesNothing(t *testing.T) {
	act := rivet.Actor[leakState]{
		Name:   "racer",
		Queues: rivet.Queues{"bid": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[leakState]) error {
			for i := range 2 {
				_, _, err := workflow.Race(ctx, fmt.Sprint("race", i), []workflow.RaceBranch[leakState, int]{
					{Name: "bid", Run: func(c *workflow.Ctx[leakState]) (int, error) {
						m, err := workflow.Next[int](c, "m")
						return m.Body, err
					}},
					{Name: "expire", Run: func(c *workflow.Ctx[leakState]) (int, error) {
						return 0, c.Sleep("nap", 30*time.Millisecond)
					}},
				})
				if err != nil {
					return err
				}
			}
			if _, err := workflow.Join(ctx, "join", workflow.Branches[leakState, int]{
				"a": func(c *workflow.Ctx[leakState]) (int, error) { return 1, c.Sleep("s", 5*time.Millisecond) },
				"b": func(c *workflow.Ctx[leakState]) (int, error) { return 2, nil },
			}); err != nil {
				return err
			}
			err := ctx.StepWith(workflow.StepOptions{Name: "slow", Timeout: 10 * time.Millisecond}, func(s *workflow.StepCtx[leakState]) error {
				<-s.Context().Done()
				return s.Context().Err()
			})
			if err == nil {
				return errors.New("the step did not time out")
			}
			return nil // the workflow completes
		},
		Actions: rivet.Actions[leakState]{
			"noop": rivet.Action0(func(c *rivet.ActionCtx[leakState]) (int, error) { return 0, nil }),
		},
	}
	reg, err := rivet.Setup(act)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	defer store.Close()
	h, _ := memHostWith(t, reg, store, func(c *Config) { c.IdleTimeout = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	round := func(i int) {
		ref := Ref{Name: "racer", Key: []string{fmt.Sprint("r", i)}}
		if _, err := h.Call(ctx, CallRequest{Ref: ref, Action: "noop", CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "bid", Body: json.RawMessage("1")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	idle := func(what string, base leakSizes) leakSizes {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			s := h.leakSizes()
			st := h.Stats()
			if s.goroutines <= base.goroutines+3 && s.actors == 0 && s.retiring == 0 && s.timers == 0 && s.heap == 0 && st.WorkflowsRunning == 0 {
				t.Logf("%s: %+v, completed %d, failed %d", what, s, st.WorkflowsCompleted, st.WorkflowsFailed)
				if st.WorkflowsFailed != 0 {
					t.Fatalf("%d workflows failed", st.WorkflowsFailed)
				}
				return s
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Logf("goroutines at the failure:\n%s", buf[:goruntime.Stack(buf, true)])
				t.Fatalf("%s: %+v, baseline %+v, %+v", what, s, base, st)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := range 2 {
		round(i)
	}
	base := idle("warm-up", leakSizes{goroutines: 1 << 20})
	for i := 2; i < 60; i++ {
		round(i)
	}
	idle("churn", base)
}
