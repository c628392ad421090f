package runtime

// Scenarios of the two storage features of format 2 (statehome.go: a
// step's state rides in its history entry; loopslots.go: a loop keeps its
// iterations in slots) against the primitives that write inside loop
// iterations: nested loops, races, joins with Do steps, receives, retried
// and caught attempts, rollbacks, retries from an entry, actions between
// steps, destroy and create again. Each restarts the host (memory gone,
// storage kept) where it matters and checks the state a load finds, how
// often the steps ran, and that the workflow ends as it would have without
// the restarts. The "pacing" sleeps before a restart let the run reach its
// wait: a restart before it replays to it all the same.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// send sends 1 to the actor's queue q.
func (e *foldEnv) send(q string) {
	e.t.Helper()
	if _, err := e.h.Send(context.Background(), SendRequest{Ref: e.ref, Queue: q, Body: json.RawMessage(`1`)}); err != nil {
		e.t.Fatal(err)
	}
}

// endedWith waits for the workflow to end and fails unless it completed
// with the state want.
func (e *foldEnv) endedWith(want string) {
	e.t.Helper()
	got, st := e.waitEnded()
	if st != WorkflowCompleted || got != want {
		ins, _ := e.h.Inspect(context.Background(), e.ref)
		e.t.Fatalf("workflow %s (%s), state %s: want completed, %s", st, ins.WorkflowError, got, want)
	}
}

// A slotted loop in a slotted loop's iterations, restarted while the
// inner loop waits for a message: every step ran once, the state is whole.
func TestNestedLoopsInSlotsSurviveRestarts(t *testing.T) {
	var runs atomic.Int32
	actor := rivet.Actor[foldState]{
		Name:    "folder",
		Queues:  rivet.Queues{"go": rivet.QueueOf[int]()},
		Actions: foldActions(),
		Run: func(ctx *workflow.Ctx[foldState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "o", HistoryPruneInterval: 2}, func(oc *workflow.Ctx[foldState], i int) (int, error) {
				if i == 10 {
					return i, workflow.Break
				}
				_, err := workflow.LoopWith(oc, workflow.LoopOptions[int]{Name: "in", HistoryPruneInterval: 1}, func(lc *workflow.Ctx[foldState], j int) (int, error) {
					if j == 5 {
						return j, workflow.Break
					}
					if err := lc.Step("s-"+itoa(j%3), func(s *workflow.StepCtx[foldState]) error {
						runs.Add(1)
						s.State.N++
						return nil
					}); err != nil {
						return j, err
					}
					if (i == 5 || i == 8) && j == 3 {
						if _, err := workflow.Next[int](lc, "wait", workflow.NextOptions{Names: []string{"go"}}); err != nil {
							return j, err
						}
					}
					return j + 1, nil
				})
				return i + 1, err
			})
			return err
		},
	}
	e := newFoldEnv(t, actor)
	e.create()
	e.waitState(`{"n":29}`)
	time.Sleep(50 * time.Millisecond) // pacing
	e.stateAfterRestart(`{"n":29}`, "")
	e.send("go")
	e.waitState(`{"n":44}`)
	time.Sleep(50 * time.Millisecond) // pacing
	e.restart()
	e.send("go")
	e.endedWith(`{"n":50}`)
	if runs.Load() != 50 {
		t.Fatalf("the steps ran %d times, want 50 (once each)", runs.Load())
	}
	e.stateAfterRestart(`{"n":50}`, "after the end")
}

// A race in each slotted iteration whose loser may change the state before
// it loses (b's step, +100, if it takes the actor's turn before a's; a,
// +1, always wins): the loser's history goes, the changes it committed
// stay, across restarts. Which branch takes the turn first is not
// decided, so the test checks what holds either way: a's twelve steps, as
// many of b's as there were, none lost by a restart.
func TestARaceInASlottedIterationKeepsTheLosersState(t *testing.T) {
	var runs atomic.Int32
	actor := rivet.Actor[foldState]{
		Name:   "folder",
		Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[foldState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 1}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if i == 12 {
					return i, workflow.Break
				}
				_, _, err := workflow.Race(lc, "r", []workflow.RaceBranch[foldState, int]{
					{Name: "a", Run: func(bc *workflow.Ctx[foldState]) (int, error) {
						return 1, bc.Step("sa", func(s *workflow.StepCtx[foldState]) error {
							runs.Add(1)
							s.State.N += 1
							return nil
						})
					}},
					{Name: "b", Run: func(bc *workflow.Ctx[foldState]) (int, error) {
						if err := bc.Step("sb", func(s *workflow.StepCtx[foldState]) error {
							s.State.N += 100
							return nil
						}); err != nil {
							return 0, err
						}
						return 0, errors.New("b loses")
					}},
				})
				if err != nil {
					return i, err
				}
				if err := waitGoAt(lc, i, 7); err != nil {
					return i, err
				}
				return i + 1, nil
			})
			return err
		},
	}
	e := newFoldEnv(t, actor)
	// n is a's steps + 100 per step of b's that committed.
	split := func() (as, bs int) {
		t.Helper()
		got, _ := e.inspect()
		var st foldState
		if err := json.Unmarshal([]byte(got), &st); err != nil {
			t.Fatal(err)
		}
		return st.N % 100, st.N / 100
	}
	e.create()
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	waitUntil(t, wctx, "a's step of iteration 7", func() bool { return runs.Load() >= 8 })
	time.Sleep(50 * time.Millisecond) // pacing
	e.restart()
	as, bs := split()
	if as != 8 || bs > 8 {
		t.Fatalf("after a restart in iteration 7: %d of a's steps and %d of b's, want 8 and at most 8", as, bs)
	}
	e.send("go")
	if _, st := e.waitEnded(); st != WorkflowCompleted {
		t.Fatalf("workflow %s, want completed", st)
	}
	as2, bs2 := split()
	if as2 != 12 || bs2 < bs || bs2 > 12 {
		t.Fatalf("at the end: %d of a's steps and %d of b's, want 12 and from %d (those before the restart) to 12", as2, bs2, bs)
	}
	if runs.Load() != 12 {
		t.Fatalf("the winner's step ran %d times, want 12 (once per iteration)", runs.Load())
	}
	e.stateAfterRestart(fmt.Sprintf(`{"n":%d}`, 100*bs2+12), "after the end")
}

// Actions (which write the state key) between the steps of a slotted loop,
// with restarts: no increment is lost, whichever key holds the newest
// state.
func TestActionsBetweenSlottedStepsAreKeptAcrossRestarts(t *testing.T) {
	e := newFoldEnv(t, foldActor(300, func(int) bool { return true }, 5))
	e.create()
	adds := 0
	// Bounded: an increment lost for good leaves the state one short of
	// 300+adds however many more actions run, and this loop would call
	// add until the test binary's timeout.
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, _ := e.inspect()
		var s foldState
		_ = json.Unmarshal([]byte(got), &s)
		if s.N >= 300+adds {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %s after %d actions: the 300 steps and the actions' increments never all landed", got, adds)
		}
		e.call("add", 1)
		adds++
		if adds%20 == 0 {
			e.restart()
			got2, _ := e.inspect()
			var s2 foldState
			_ = json.Unmarshal([]byte(got2), &s2)
			if s2.N < adds {
				t.Fatalf("after a restart: state %s, fewer than the %d increments of the actions", got2, adds)
			}
		}
	}
	want := `{"n":` + itoa(300+adds) + `}`
	e.waitState(want)
	e.stateAfterRestart(want, "")
	e.send("go")
	e.endedWith(`{"n":` + itoa((300+adds)*10) + `}`)
}

// workflow retry --from an entry of a slotted loop: refused before the
// loop's last checkpoint (no state kept for it), and from an iteration
// since, only the iterations from there run again.
func TestRetryFromAnIterationOfASlottedLoop(t *testing.T) {
	var fails atomic.Bool
	fails.Store(true)
	var runs atomic.Int32
	actor := rivet.Actor[foldState]{
		Name: "folder",
		Run: func(ctx *workflow.Ctx[foldState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 2}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if i == 20 {
					return i, workflow.Break
				}
				if err := lc.Step("s", func(s *workflow.StepCtx[foldState]) error {
					runs.Add(1)
					s.State.N++
					return nil
				}); err != nil {
					return i, err
				}
				if i == 15 {
					if err := lc.Step("f", func(s *workflow.StepCtx[foldState]) error {
						if fails.Load() {
							return workflow.Critical(errors.New("f fails"))
						}
						return nil
					}); err != nil {
						return i, err
					}
				}
				return i + 1, nil
			})
			return err
		},
	}
	e := newFoldEnv(t, actor)
	e.create()
	if _, st := e.waitEnded(); st != WorkflowFailed {
		t.Fatalf("workflow %s, want failed (step f)", st)
	}
	e.restart()
	if _, err := e.h.RetryWorkflow(context.Background(), e.ref, "l/~12/s"); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("retry from l/~12/s, before the loop's last checkpoint (14): %v; want INVALID_ARGUMENT", err)
	}
	fails.Store(false)
	if _, err := e.h.RetryWorkflow(context.Background(), e.ref, "l/~14/s"); err != nil {
		t.Fatal(err)
	}
	// Iterations 0 to 15 ran s before f failed; the retry runs 14 to 19:
	// 22 runs, each adding 1 (a retry does not take state back).
	e.endedWith(`{"n":22}`)
	if runs.Load() != 22 {
		e.dump()
		t.Fatalf("step s ran %d times, want 22 (iterations 0 to 15, then 14 to 19)", runs.Load())
	}
}

// stateAfterRestart restarts the host and fails unless a load (Inspect of
// the actor out of memory) finds the state want; when says at what point
// of the scenario, for the message.
func (e *foldEnv) stateAfterRestart(want, when string) {
	e.t.Helper()
	e.restart()
	if got, _ := e.inspect(); got != want {
		e.dump()
		if when != "" {
			when += ", "
		}
		e.t.Fatalf("%safter a restart: state %s, want %s", when, got, want)
	}
}

// dump logs the actor's keys, for a failure's message.
func (e *foldEnv) dump() {
	_, _, prefix, _ := e.h.locate(e.ref)
	kvs, _ := e.store.List(context.Background(), prefix, storage.ListOptions{})
	for _, kv := range kvs {
		e.t.Logf("%s @%d = %.200s", kv.Key[len(prefix):], kv.ModRevision, kv.Value)
	}
}

// Caught failures (TryStep) and failed attempts that changed the state,
// in a slotted loop: their changes roll forward, once each, and a load
// finds them.
func TestFailedAttemptsInASlottedLoopRollForward(t *testing.T) {
	var runs atomic.Int32
	actor := rivet.Actor[foldState]{
		Name: "folder",
		Run: func(ctx *workflow.Ctx[foldState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 1}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if i == 6 {
					return i, workflow.Break
				}
				_, f, err := workflow.TryStep(lc, "t", func(s *workflow.StepCtx[foldState]) (int, error) {
					s.State.N += 1000
					return 0, workflow.Critical(errors.New("no"))
				})
				if err != nil {
					return i, err
				}
				if f == nil {
					return i, errors.New("no failure")
				}
				_, err = workflow.StepOpts(lc, workflow.StepOptions{Name: "s", RetryBackoffBase: time.Millisecond, MaxRetries: 5}, func(s *workflow.StepCtx[foldState]) (int, error) {
					n := runs.Add(1)
					s.State.N++
					if n%3 != 0 {
						return 0, errors.New("retry me")
					}
					return 0, nil
				})
				return i + 1, err
			})
			return err
		},
	}
	e := newFoldEnv(t, actor)
	e.create()
	e.endedWith(`{"n":6018}`)
	e.stateAfterRestart(`{"n":6018}`, "")
}

// A receive in each slotted iteration, restarted every few messages: no
// message lost or taken twice.
func TestReceivesInASlottedLoopAcrossRestarts(t *testing.T) {
	actor := rivet.Actor[foldState]{
		Name:   "folder",
		Queues: rivet.Queues{"go": rivet.QueueOf[int](), "x": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[foldState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 1}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if i == 8 {
					return i, workflow.Break
				}
				m, err := workflow.Next[int](lc, "m", workflow.NextOptions{Names: []string{"go"}})
				if err != nil {
					return i, err
				}
				if err := lc.Step("s", func(s *workflow.StepCtx[foldState]) error {
					s.State.N += m.Body
					return nil
				}); err != nil {
					return i, err
				}
				return i + 1, nil
			})
			return err
		},
	}
	e := newFoldEnv(t, actor)
	e.create()
	for i := 0; i < 8; i++ {
		e.send("go")
		e.waitState(`{"n":` + itoa(i+1) + `}`)
		if i%3 == 1 {
			e.restart()
		}
	}
	e.endedWith(`{"n":8}`)
	e.stateAfterRestart(`{"n":8}`, "after the end")
}

// A join in each slotted iteration: a Do branch, a step branch, and a loop
// that keeps its history (NoPrune) with a different number of iterations
// each time, which leaves leftovers in the slots. Restarted twice: no
// divergence, the Do body ran once per iteration.
func TestAJoinInASlottedIterationRunsItsDoOnce(t *testing.T) {
	var runs atomic.Int32
	actor := rivet.Actor[foldState]{
		Name:   "folder",
		Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[foldState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "o", HistoryPruneInterval: 1}, func(oc *workflow.Ctx[foldState], i int) (int, error) {
				if i == 9 {
					return i, workflow.Break
				}
				_, err := workflow.Join(oc, "j", workflow.Branches[foldState, int]{
					"a": func(bc *workflow.Ctx[foldState]) (int, error) {
						return workflow.Do(bc, "d", func(*workflow.DoCtx) (int, error) { runs.Add(1); return 1, nil })
					},
					"b": func(bc *workflow.Ctx[foldState]) (int, error) {
						return 0, bc.Step("s", func(s *workflow.StepCtx[foldState]) error { s.State.N++; return nil })
					},
					"c": func(bc *workflow.Ctx[foldState]) (int, error) {
						_, err := workflow.LoopWith(bc, workflow.LoopOptions[int]{Name: "in", HistoryPruneInterval: workflow.NoPrune}, func(lc *workflow.Ctx[foldState], j int) (int, error) {
							if j == 1+(i*7)%5 {
								return j, workflow.Break
							}
							return j + 1, lc.Step("x"+itoa(j), func(s *workflow.StepCtx[foldState]) error { s.State.N += 10; return nil })
						})
						return 0, err
					},
				})
				if err != nil {
					return i, err
				}
				if err := waitGoAt(oc, i, 4, 6); err != nil {
					return i, err
				}
				return i + 1, nil
			})
			return err
		},
	}
	want := func(k int) int {
		n := k
		for i := 0; i < k; i++ {
			n += 10 * (1 + (i*7)%5)
		}
		return n
	}
	e := newFoldEnv(t, actor)
	e.create()
	e.waitState(`{"n":` + itoa(want(5)) + `}`)
	time.Sleep(50 * time.Millisecond) // pacing
	e.restart()
	e.send("go")
	e.waitState(`{"n":` + itoa(want(7)) + `}`)
	time.Sleep(50 * time.Millisecond) // pacing
	e.restart()
	e.send("go")
	e.endedWith(`{"n":` + itoa(want(9)) + `}`)
	if runs.Load() != 9 {
		t.Fatalf("the Do body ran %d times, want 9 (once per iteration)", runs.Load())
	}
}

// A rollback of a slotted loop's steps: the handlers of the iterations
// still kept run (those pruned are gone, as in the original:
// docs/architecture.md), their state changes commit, and a load finds the
// state the rollback left.
func TestARolledBackSlottedLoopKeepsItsStateAcrossARestart(t *testing.T) {
	actor := rivet.Actor[foldState]{
		Name: "folder",
		Run: func(ctx *workflow.Ctx[foldState]) error {
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 2}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if _, err := workflow.StepWithRollback(lc, workflow.StepOptions{Name: "s"}, func(s *workflow.StepCtx[foldState]) (int, error) {
					s.State.N += 100
					return i, nil
				}, func(s *workflow.StepCtx[foldState], v int) error {
					s.State.N -= 1
					return nil
				}); err != nil {
					return i, err
				}
				if i == 7 {
					return i, lc.StepWith(workflow.StepOptions{Name: "f", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[foldState]) error {
						return errors.New("down")
					})
				}
				return i + 1, nil
			})
			return err
		},
	}
	e := newFoldEnv(t, actor)
	e.create()
	// Eight steps of +100; the last checkpoint kept iterations 4 to 7,
	// whose handlers take 1 each.
	if got, st := e.waitEnded(); st != WorkflowFailed || got != `{"n":796}` {
		e.dump()
		t.Fatalf("workflow %s, state %s: want failed with {\"n\":796}", st, got)
	}
	e.stateAfterRestart(`{"n":796}`, "")
}

// An actor destroyed and created again under its key, with restarts in
// between: the new one starts from nothing, whatever its predecessor's
// entries held.
func TestADestroyedActorCreatedAgainStartsFresh(t *testing.T) {
	e := newFoldEnv(t, foldActor(7, func(int) bool { return true }, 2))
	e.create()
	e.waitState(`{"n":7}`)
	if err := e.h.Destroy(context.Background(), e.ref); err != nil {
		t.Fatal(err)
	}
	e.create()
	e.waitState(`{"n":7}`)
	e.call("add", 3)
	e.stateAfterRestart(`{"n":10}`, "")
	if err := e.h.Destroy(context.Background(), e.ref); err != nil {
		t.Fatal(err)
	}
	e.restart()
	e.create()
	e.waitState(`{"n":7}`)
	e.stateAfterRestart(`{"n":7}`, "created again")
	e.send("go")
	e.endedWith(`{"n":70}`)
}

// slowStore delays every commit, so that actions queue behind the
// workflow's commits in flight.
type slowStore struct{ storage.Store }

func (s *slowStore) Commit(ctx context.Context, txns ...storage.Txn) error {
	time.Sleep(200 * time.Microsecond)
	return s.Store.Commit(ctx, txns...)
}

// Actions arriving while a workflow's step commits are in flight (a slow
// store): the state key they write and the entries the steps fold their
// state into interleave; a load after a restart finds every increment.
func TestActionsDuringSlowCommitsAreNotLost(t *testing.T) {
	t.Parallel()
	for round := 0; round < 5; round++ {
		e := newFoldEnv(t, foldActor(200, func(int) bool { return true }, 3))
		e.store = &slowStore{Store: e.store}
		e.restart()
		e.create()
		// The workflow runs its steps meanwhile, on its own goroutine.
		for i := 0; i < 100; i++ {
			if _, err := e.h.Call(context.Background(), CallRequest{Ref: e.ref, Action: "add", Args: json.RawMessage(`[1]`)}); err != nil {
				t.Fatal(err)
			}
		}
		e.waitState(`{"n":300}`)
		e.stateAfterRestart(`{"n":300}`, fmt.Sprintf("round %d (200 steps, 100 actions)", round))
	}
}

// workflow retry --from a slotted loop that completed, whose newest state
// (before the failed step after it) an entry in a stale slot may hold: the
// retry keeps the state, and the loop's steps run again.
func TestRetryFromASlottedLoopKeepsTheState(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	var runs atomic.Int32
	actor := rivet.Actor[foldState]{
		Name:    "folder",
		Actions: foldActions(),
		Run: func(ctx *workflow.Ctx[foldState]) error {
			if err := ctx.Step("first", func(s *workflow.StepCtx[foldState]) error { s.State.N += 1000; return nil }); err != nil {
				return err
			}
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 2}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if i == 9 {
					return i, workflow.Break
				}
				return i + 1, lc.Step("s"+itoa(i%4), func(s *workflow.StepCtx[foldState]) error {
					runs.Add(1)
					if i < 3 {
						s.State.N++
					}
					return nil
				})
			})
			if err != nil {
				return err
			}
			return ctx.Step("last", func(s *workflow.StepCtx[foldState]) error {
				if fail.Load() {
					return workflow.Critical(errors.New("no"))
				}
				return nil
			})
		},
	}
	e := newFoldEnv(t, actor)
	e.create()
	if _, st := e.waitEnded(); st != WorkflowFailed {
		t.Fatalf("workflow %s, want failed (step last)", st)
	}
	e.restart()
	fail.Store(false)
	if _, err := e.h.RetryWorkflow(context.Background(), e.ref, "l"); err != nil {
		t.Fatal(err)
	}
	e.endedWith(`{"n":1006}`)
	if runs.Load() != 18 {
		t.Fatalf("the loop's steps ran %d times, want 18 (9, and 9 again after the retry)", runs.Load())
	}
	e.stateAfterRestart(`{"n":1006}`, "")
}
