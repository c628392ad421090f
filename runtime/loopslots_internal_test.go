package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// A deploy that prunes a loop less often (or keeps more of it) than when
// it was first recorded: its iterations still go to the slots it recorded,
// so pruning must keep within them, or an iteration overwrites one that a
// replay needs, whose step then runs again.
func TestALoopInSlotsKeepsItsSlotsWhenItsOptionsChange(t *testing.T) {
	for _, deployed := range []int32{20, workflow.NoPrune} {
		t.Run(itoa(int(deployed)), func(t *testing.T) { testLoopOptionsChange(t, deployed) })
	}
}

func testLoopOptionsChange(t *testing.T, deployed int32) {
	var interval atomic.Int32
	interval.Store(2)
	var runs atomic.Int32
	actor := rivet.Actor[foldState]{
		Name:   "folder",
		Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[foldState]) error {
			iv := int(interval.Load())
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: iv}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if i == 40 {
					return i, workflow.Break
				}
				if err := lc.Step("s", func(s *workflow.StepCtx[foldState]) error {
					runs.Add(1)
					s.State.N++
					return nil
				}); err != nil {
					return i, err
				}
				if err := waitGoAt(lc, i, 10, 30); err != nil {
					return i, err
				}
				return i + 1, nil
			})
			return err
		},
	}
	e := newFoldEnv(t, actor)
	ctx := context.Background()
	e.create()
	e.waitState(`{"n":11}`)  // waits in iteration 10
	interval.Store(deployed) // the deploy
	e.restart()
	if _, err := e.h.Send(ctx, SendRequest{Ref: e.ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	e.waitState(`{"n":31}`) // waits in iteration 30
	// Pacing, not a condition: a restart before the run reaches its wait
	// replays to it all the same.
	time.Sleep(50 * time.Millisecond)
	e.restart()
	if _, err := e.h.Send(ctx, SendRequest{Ref: e.ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if got, st := e.waitEnded(); st != WorkflowCompleted || got != `{"n":40}` || runs.Load() != 40 {
		ins, _ := e.h.Inspect(ctx, e.ref)
		t.Fatalf("workflow %s (%s), state %s, the step ran %d times: want completed with {\"n\":40}, 40 runs", st, ins.WorkflowError, got, runs.Load())
	}
}

// A loop whose iterations record names of their own (a step named after
// the item it handles): no later iteration overwrites them, and pruning,
// which deletes nothing in slots, must still drop them, or the loop's
// history grows without bound.
func TestALoopInSlotsThatRecordsNewNamesStaysBounded(t *testing.T) {
	const iterations = 100
	actor := rivet.Actor[foldState]{
		Name: "folder",
		Run: func(ctx *workflow.Ctx[foldState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 5}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if i == iterations {
					return i, workflow.Break
				}
				return i + 1, lc.Step("item-"+itoa(i), func(s *workflow.StepCtx[foldState]) error {
					s.State.N++
					return nil
				})
			})
			return err
		},
	}
	e := newFoldEnv(t, actor)
	ctx := context.Background()
	e.create()
	e.waitState(`{"n":100}`)
	if _, st := e.waitEnded(); st != WorkflowCompleted {
		t.Fatalf("workflow %s, want completed", st)
	}
	_, _, prefix, err := e.h.locate(e.ref)
	if err != nil {
		t.Fatal(err)
	}
	kvs, err := e.store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	// The loop's entry, and at most two iterations' entries per slot:
	// the one written last, and the one before, pruned.
	if len(kvs) > 1+2*10 {
		t.Fatalf("%d history keys after %d iterations of a loop with 10 slots: the pruned iterations stayed", len(kvs), iterations)
	}
	e.restart()
	if got, st := e.inspect(); got != `{"n":100}` || st != WorkflowCompleted {
		t.Fatalf("after a restart: %s, %s", got, st)
	}
}

// A retry refused as too large (it would put back more messages than one
// transaction holds) changes nothing: the next retry, from a step in a
// loop in slots, deletes that step's entry at its slot, and it runs again.
func TestARetryAfterARefusedOneDeletesTheEntryInItsSlot(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	actor := rivet.Actor[foldState]{
		Name:   "folder",
		Queues: rivet.Queues{"go": rivet.QueueOf[int](), "in": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[foldState]) error {
			if _, err := workflow.Next[int](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}}); err != nil {
				return err
			}
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 2}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if i == 6 {
					return i, workflow.Break
				}
				if _, err := workflow.NextBatch[int](lc, "take", workflow.NextOptions{Names: []string{"in"}, Count: 40}); err != nil {
					return i, err
				}
				return i + 1, lc.Step("s", func(s *workflow.StepCtx[foldState]) error {
					if i == 5 && fail.Load() {
						return workflow.Critical(errors.New("s fails in iteration 5"))
					}
					s.State.N++
					return nil
				})
			})
			return err
		},
	}
	e := newFoldEnv(t, actor)
	ctx := context.Background()
	e.create()
	for i := 0; i < 240; i++ {
		if _, err := e.h.Send(ctx, SendRequest{Ref: e.ref, Queue: "in", Body: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.h.Send(ctx, SendRequest{Ref: e.ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	waitStatus := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			got, st := e.inspect()
			if st == want {
				return
			}
			if time.Now().After(deadline) {
				ins, _ := e.h.Inspect(ctx, e.ref)
				t.Fatalf("workflow %s (%s), state %s, want %s", st, ins.WorkflowError, got, want)
			}
		}
	}
	waitStatus(WorkflowFailed)
	if _, err := e.h.RetryWorkflow(ctx, e.ref, "wait-go"); !errors.Is(err, rivet.ErrTooLarge) {
		t.Fatalf("retry from wait-go: %v, want it refused as too large: the test does not test what it says", err)
	}
	fail.Store(false)
	if _, err := e.h.RetryWorkflow(ctx, e.ref, "l/~5/s"); err != nil {
		t.Fatal(err)
	}
	waitStatus(WorkflowCompleted)
	if got, _ := e.inspect(); got != `{"n":6}` {
		t.Fatalf("state %s, want {\"n\":6}", got)
	}
}

// slotPath replaces each iteration of a loop in slots by its slot, an
// inner loop's included, and leaves every other path as it is.
func TestSlotPath(t *testing.T) {
	slots := map[string]int{"l": 10, "l/~43/in": 4, "j/b/m": 3}
	for path, want := range map[string]string{
		"l":                "l",
		"l/~43":            "l/~3",
		"l/~43/s":          "l/~3/s",
		"l/~7/s":           "l/~7/s",
		"l/~43/in":         "l/~3/in",
		"l/~43/in/~9/s":    "l/~3/in/~1/s",
		"l/~42/in/~9/s":    "l/~2/in/~9/s", // another instance of the inner loop: not in slots
		"other/~43/s":      "other/~43/s",
		"j/b/m/~5/x/y":     "j/b/m/~2/x/y",
		"l/~123456789/s/t": "l/~9/s/t",
	} {
		if got := slotPath(slots, path); got != want {
			t.Errorf("slotPath(%q) = %q, want %q", path, got, want)
		}
	}
	if got := slotPath(nil, "l/~43/s"); got != "l/~43/s" {
		t.Errorf("no loops in slots: %q", got)
	}
}

// A loop recorded while a node of an older build is registered keeps an
// entry per path, and its prunes delete them: its history stays bounded
// too (TestLongLoopHistoryStaysBounded, on a host alone, records its loop
// in slots).
func TestALoopWithoutSlotsDeletesWhatItPrunes(t *testing.T) {
	const iterations = 100
	e := newFoldEnv(t, foldActor(iterations, func(int) bool { return true }, 5))
	counted := &countingStore{Store: e.store}
	e.store = counted
	e.restart()
	e.h.SetWriteFormat(1)
	ctx := context.Background()
	e.create()
	// The loop's last prune commits with its end; the run then waits.
	if _, err := e.h.Send(ctx, SendRequest{Ref: e.ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if got, st := e.waitEnded(); st != WorkflowCompleted || got != `{"n":1000}` {
		t.Fatalf("workflow %s, state %s: want completed with {\"n\":1000}", st, got)
	}
	_, _, prefix, err := e.h.locate(e.ref)
	if err != nil {
		t.Fatal(err)
	}
	kvs, err := e.store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	iters := 0
	for _, kv := range kvs {
		var en workflow.Entry
		if err := json.Unmarshal(kv.Value, &en); err != nil {
			t.Fatal(err)
		}
		if key := kv.Key[len(prefix)+len(storage.WorkflowSuffix):]; key != en.Path {
			t.Fatalf("entry %s stored at %s: a loop recorded without slots keeps its entries at their paths", en.Path, key)
		}
		if en.Kind == workflow.KindLoop && en.Slots != 0 {
			t.Fatalf("loop recorded with %d slots while a node of an older build was registered", en.Slots)
		}
		if en.Kind == workflow.KindStep && len(en.Path) > 2 && en.Path[:2] == "l/" {
			iters++
		}
	}
	// Pruned every 5 iterations, 5 kept: at most 10 iterations at once.
	if iters == 0 || iters > 10 {
		t.Fatalf("%d iterations' entries stored after %d iterations, want 1 to 10", iters, iterations)
	}
	if counted.historyDeletes.Load() == 0 {
		t.Fatal("no history deletes: the prunes of a loop without slots delete its iterations")
	}
}
