package workflowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/examples/seed"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// driveUntil drives run until stop says the workflow got where the test
// wanted it (the seed's loops never end), bounded in time and activations.
func driveUntil[S any](t *testing.T, h *workflowtest.Host[S], run func(*workflow.Ctx[S]) error, stop func() bool) workflow.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := h.Drive(ctx, run, workflowtest.DriveOptions{MaxActivations: 100, Stop: func(workflow.Wake) bool { return stop() }})
	if ctx.Err() != nil {
		t.Fatalf("the run did not end in time: %+v", out)
	}
	return out
}

// The seed's coordinator calls the worker its task names; a worker that
// fails twice (a node that is restarting, which a real call answers
// UNAVAILABLE) makes the step retry, its third attempt gets the answer,
// and the record shows each call with its arguments and what it got.
func TestFakeClientCoordinatorRetriesAFailingWorker(t *testing.T) {
	fc := workflowtest.NewFakeClient()
	var mu sync.Mutex
	failures := 2
	workflowtest.HandleAction(fc, "workerActor", "runTask", func(ctx context.Context, key []string, value int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		if failures > 0 {
			failures--
			return 0, rivet.Errorf(rivet.ErrUnavailable, "worker %s is restarting", key[0])
		}
		return value * 2, nil
	})
	h := workflowtest.NewHost(seed.CoordinatorActor.State, workflowtest.NewClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)))
	h.Name, h.QueueTypes, h.Client = seed.CoordinatorActor.Name, seed.CoordinatorActor.Queues.Types(), fc
	h.Send("task", seed.TaskMessage{TaskID: "t-1", WorkerID: "w-7", Value: 21})

	out := driveUntil(t, h, seed.CoordinatorActor.Run, func() bool { return h.State().LastTaskID != nil })
	if !errors.Is(out.Err, workflowtest.ErrStopped) {
		t.Fatalf("outcome %v %v, want the run stopped once the task was recorded", out.Status, out.Err)
	}
	if st := h.State(); *st.LastTaskID != "t-1" || st.LastResult != 42 {
		t.Fatalf("state %q %d, want t-1 42", *st.LastTaskID, st.LastResult)
	}
	calls := fc.Calls()
	if len(calls) != 3 {
		t.Fatalf("%d calls, want 3 (two failed attempts, one that succeeded): %v", len(calls), calls)
	}
	for i, c := range calls {
		if c.Name != "workerActor" || !slices.Equal(c.Key, []string{"w-7"}) || !c.CreateIfMissing || c.Action != "runTask" ||
			len(c.Args) != 1 || string(c.Args[0]) != "21" || !c.Done {
			t.Fatalf("call %d: %v, want GetOrCreate(workerActor, w-7).runTask(21)", i, c)
		}
		if i < 2 && !errors.Is(c.Err, rivet.ErrUnavailable) || i == 2 && (c.Err != nil || string(c.Result) != "42") {
			t.Fatalf("call %d: %v", i, c)
		}
	}
}

// A worker that fails every time uses up the step's retries: the
// workflow fails with a StepError that counts them and keeps the
// worker's code, which a test of the workflow's failure path checks.
func TestFakeClientHandlerErrorsExhaustTheStep(t *testing.T) {
	fc := workflowtest.NewFakeClient()
	workflowtest.HandleAction(fc, "workerActor", "runTask", func(ctx context.Context, key []string, value int) (int, error) {
		return 0, rivet.UserError("overloaded", "worker has too much to do", nil)
	})
	h := workflowtest.NewHost(seed.CoordinatorActor.State, workflowtest.NewClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)))
	h.Name, h.QueueTypes, h.Client = seed.CoordinatorActor.Name, seed.CoordinatorActor.Queues.Types(), fc
	h.Send("task", seed.TaskMessage{TaskID: "t-1", WorkerID: "w-7", Value: 21})

	out := driveUntil(t, h, seed.CoordinatorActor.Run, func() bool { return false })
	var se *workflow.StepError
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &se) {
		t.Fatalf("outcome %v %v, want failed with a StepError", out.Status, out.Err)
	}
	var code interface{ ErrorCode() string }
	if se.Kind != workflow.FailureExhausted || se.Attempts != 1+workflow.DefaultMaxRetries || !errors.As(se.Err, &code) || code.ErrorCode() != "overloaded" {
		t.Fatalf("step error %+v, want exhausted after %d attempts with code overloaded", se, 1+workflow.DefaultMaxRetries)
	}
	if n := len(fc.Calls()); n != 1+workflow.DefaultMaxRetries {
		t.Fatalf("%d calls, want one an attempt", n)
	}
}

// The seed's child orchestration calls its children with idempotency keys
// (rivet.CallWith), the batch's in a join whose branches call at once. A
// crash before the start-children step's commit runs the step again: its
// calls come again with the same keys, and, as on a node, each child
// answers from its record without running again.
func TestFakeClientOrchestratorCallsEachChildOnceThroughACrash(t *testing.T) {
	fc := workflowtest.NewFakeClient()
	var mu sync.Mutex
	ran := map[string][]int{} // child -> the payloads it processed
	workflowtest.HandleAction(fc, "childWorkerActor", "process", func(ctx context.Context, key []string, payload int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		ran[key[0]] = append(ran[key[0]], payload)
		return payload * 3, nil
	})
	h := workflowtest.NewHost(seed.OrchestratorActor.State, workflowtest.NewClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)))
	h.Name, h.QueueTypes, h.Client = seed.OrchestratorActor.Name, seed.OrchestratorActor.Queues.Types(), fc
	h.CrashAt(1, false) // start-children's commit, lost
	h.Send("batch", seed.BatchMessage{Payload: 5})

	driveUntil(t, h, seed.OrchestratorActor.Run, func() bool { return h.State().LastTotal != 0 })
	if got := h.State().LastTotal; got != 45 {
		t.Fatalf("total %d, want 45 (3 children x 5 x 3)", got)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, child := range []string{"child-a", "child-b", "child-c"} {
		if !slices.Equal(ran[child], []int{0, 5}) {
			t.Fatalf("%s processed %v, want [0 5]: started once, through the crash, then the batch", child, ran[child])
		}
	}
	dups, keys := 0, map[string]bool{}
	for _, c := range fc.Calls() {
		if c.IdempotencyKey == "" || c.Err != nil {
			t.Fatalf("call %v, want one with a key that succeeded", c)
		}
		keys[c.IdempotencyKey] = true
		if c.Duplicate {
			dups++
			if string(c.Args[0]) != "0" || string(c.Result) != "0" {
				t.Fatalf("duplicate %v, want start-children's call again, answered from the record", c)
			}
		}
	}
	if n := len(fc.Calls()); dups != 3 || n != 9 || len(keys) != 6 {
		t.Fatalf("%d calls, %d duplicates, %d keys; want 9, 3 (the start calls again) and 6: %v", n, dups, len(keys), fc.Calls())
	}
}

// paymentStatus is a workflow's record of what a Get found.
type paymentStatus struct{ Payment string }

// lookUpPayment reads a payment through Get, which does not create it: a
// payment that does not exist is a path of its own.
func lookUpPayment(c *workflow.Ctx[paymentStatus]) error {
	return c.Step("look-up", func(s *workflow.StepCtx[paymentStatus]) error {
		st, err := rivet.Call[string](s.Context(), s.Client().Get("payments", "p-1"), "status")
		switch {
		case errors.Is(err, rivet.ErrNotFound):
			s.State.Payment = "missing"
			return nil
		case err != nil:
			return workflow.Critical(err)
		}
		s.State.Payment = st
		return nil
	})
}

// Get of an actor the test did not create is rivet.ErrNotFound, as from a
// node, so that a workflow's not-found path can be tested; once created
// (or called through GetOrCreate), Get finds it.
func TestFakeClientGetOfAnActorThatDoesNotExistIsNotFound(t *testing.T) {
	run := func(fc *workflowtest.FakeClient) string {
		t.Helper()
		h := workflowtest.NewHost(paymentStatus{}, workflowtest.NewClock(time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)))
		h.Client = fc
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, _ := h.Drive(ctx, lookUpPayment, workflowtest.DriveOptions{}); out.Status != workflow.RunCompleted {
			t.Fatalf("outcome %v %v", out.Status, out.Err)
		}
		return h.State().Payment
	}
	fc := workflowtest.NewFakeClient()
	fc.Handle("payments", "status", func(context.Context, workflowtest.FakeCall) (any, error) { return "paid", nil })
	if got := run(fc); got != "missing" {
		t.Fatalf("payment %q, want missing", got)
	}
	c := fc.Calls()[0]
	var re *rivet.Error
	if c.CreateIfMissing || !errors.Is(c.Err, rivet.ErrNotFound) || !errors.As(c.Err, &re) || re.Code != "not_found" {
		t.Fatalf("call %v, want Get's, not found, with the node's code", c)
	}

	fc.Create("payments", "p-1")
	if got := run(fc); got != "paid" {
		t.Fatalf("payment %q once created, want paid", got)
	}

	fc = workflowtest.NewFakeClient()
	fc.Handle("payments", "status", func(context.Context, workflowtest.FakeCall) (any, error) { return "paid", nil })
	if _, err := fc.GetOrCreate("payments", "p-1").Call(context.Background(), "status"); err != nil {
		t.Fatal(err)
	}
	if got := run(fc); got != "paid" {
		t.Fatalf("payment %q once called through GetOrCreate, want paid", got)
	}
}

// What the test did not register fails as a node fails it, each with its
// own error kind, in the node's order.
func TestFakeClientRefusesWhatNobodyRegistered(t *testing.T) {
	ctx := context.Background()
	fc := workflowtest.NewFakeClient()
	workflowtest.HandleAction(fc, "payments", "charge", func(_ context.Context, _ []string, cents int) (int, error) { return cents, nil })
	fc.Queue("payments", "refunds", nil)
	for _, tc := range []struct {
		what string
		err  error
		want error
	}{
		{"unknown actor", callErr(fc.GetOrCreate("paymnets", "p"), "charge", 1), rivet.ErrUnknownActor},
		{"unknown action", callErr(fc.GetOrCreate("payments", "p"), "chrage", 1), rivet.ErrUnknownAction},
		{"unknown action of an actor that does not exist", callErr(fc.Get("payments", "q"), "chrage", 1), rivet.ErrUnknownAction},
		{"Get of an actor that does not exist", callErr(fc.Get("payments", "q"), "charge", 1), rivet.ErrNotFound},
		{"send to an unknown queue", fc.GetOrCreate("payments", "p").Send(ctx, "refund", 1), rivet.ErrUnknownQueue},
		{"send through Get to an actor that does not exist", fc.Get("payments", "q").Send(ctx, "refunds", 1), rivet.ErrNotFound},
		{"wrong argument count", callErr(fc.GetOrCreate("payments", "p"), "charge"), rivet.ErrInvalidArgument},
		{"argument of the wrong type", callErr(fc.GetOrCreate("payments", "p"), "charge", "ten"), rivet.ErrInvalidArgument},
		{"arguments that do not marshal", callErr(fc.GetOrCreate("payments", "p"), "charge", func() {}), rivet.ErrInvalidArgument},
	} {
		var re *rivet.Error
		if !errors.Is(tc.err, tc.want) || !errors.As(tc.err, &re) {
			t.Errorf("%s: %v, want a *rivet.Error of %v", tc.what, tc.err, tc.want)
		}
	}
	if n := len(fc.Calls()); n != 9 {
		t.Fatalf("%d calls recorded, want every one of the 9", n)
	}
}

func callErr(h caller.Handle, action string, args ...any) error {
	_, err := h.Call(context.Background(), action, args...)
	return err
}

// Sends reach the queue's function and are recorded; rivet.Enqueue,
// SendWait and SendWith work through the fake's handles, with the results
// a node gives.
func TestFakeClientSends(t *testing.T) {
	ctx := context.Background()
	fc := workflowtest.NewFakeClient()
	fc.Queue("worker", "tasks", func(_ context.Context, c workflowtest.FakeCall) (any, error) {
		var n int
		if err := json.Unmarshal(c.Body, &n); err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, rivet.Errorf(rivet.ErrQueueFull, "worker's queue tasks is full")
		}
		if n == 99 {
			return caller.SendResult{Status: caller.SendTimedOut, MessageState: caller.MessageTaken}, nil
		}
		return n * 2, nil
	})
	fc.Queue("worker", "log", nil)
	w := fc.GetOrCreate("worker", "w-1")

	if err := w.Send(ctx, "tasks", 1); err != nil {
		t.Fatal(err)
	}
	if res, err := rivet.Enqueue(ctx, w, "tasks", 2); err != nil || res.MessageID != 2 || res.Status != rivet.SendEnqueued {
		t.Fatalf("Enqueue: %+v %v", res, err)
	}
	if res, err := rivet.SendWait(ctx, w, "tasks", 3, time.Second); err != nil || res.Status != rivet.SendCompleted || string(res.Response) != "6" {
		t.Fatalf("SendWait: %+v %v, want completed with 6", res, err)
	}
	if res, err := rivet.SendWait(ctx, w, "tasks", 99, 0); err != nil || res.Status != rivet.SendTimedOut || res.MessageID != 4 || res.MessageState != rivet.MessageTaken {
		t.Fatalf("SendWait of a message the function says times out: %+v %v", res, err)
	}
	if res, err := rivet.SendWait(ctx, w, "log", "x", 0); err != nil || res.Status != rivet.SendTimedOut || res.MessageState != rivet.MessageQueued {
		t.Fatalf("SendWait to a queue nobody completes: %+v %v, want timed out, queued", res, err)
	}
	if err := w.Send(ctx, "tasks", -1); !errors.Is(err, rivet.ErrQueueFull) {
		t.Fatalf("send the function refuses: %v", err)
	}
	opts := rivet.SendOptions{IdempotencyKey: "k"}
	first, err := rivet.SendWith(ctx, w, "tasks", 5, opts)
	if err != nil || first.Duplicate {
		t.Fatalf("SendWith: %+v %v", first, err)
	}
	again, err := rivet.SendWith(ctx, w, "tasks", 5, opts)
	if err != nil || !again.Duplicate || again.MessageID != first.MessageID {
		t.Fatalf("SendWith again: %+v %v, want a duplicate of message %d", again, err, first.MessageID)
	}
	if _, err := rivet.SendWith(ctx, w, "tasks", 6, opts); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("SendWith of another body with the key: %v", err)
	}
	calls := fc.Calls()
	if len(calls) != 9 {
		t.Fatalf("%d sends recorded, want 9: %v", len(calls), calls)
	}
	if c := calls[2]; c.Queue != "tasks" || string(c.Body) != "3" || !c.Wait || c.Timeout != time.Second || c.SendResult.Status != rivet.SendCompleted {
		t.Fatalf("SendWait's record %v", c)
	}
	if c := calls[7]; !c.Duplicate || c.IdempotencyKey != "k" {
		t.Fatalf("duplicate's record %v", c)
	}
}

// CallWith with a key answers the same call again from its record, and
// refuses the key with another; CallQuery reaches the action as a query.
func TestFakeClientCallKeysAndQueries(t *testing.T) {
	ctx := context.Background()
	fc := workflowtest.NewFakeClient()
	var mu sync.Mutex
	runs := 0
	workflowtest.HandleAction(fc, "payments", "charge", func(_ context.Context, key []string, cents int) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		runs++
		return fmt.Sprintf("receipt-%s-%d-%d", key[0], cents, runs), nil
	})
	fc.Handle("payments", "balance", func(context.Context, workflowtest.FakeCall) (any, error) { return 7, nil })
	p := fc.GetOrCreate("payments", "p-1")
	opts := rivet.CallOptions{IdempotencyKey: "order-1"}
	first, err := rivet.CallWith[string](ctx, p, "charge", opts, 100)
	if err != nil {
		t.Fatal(err)
	}
	again, err := rivet.CallWith[string](ctx, p, "charge", opts, 100)
	if err != nil || again != first || runs != 1 {
		t.Fatalf("the call again with its key: %q %v, %d runs; want %q from the record, 1 run", again, err, runs, first)
	}
	if _, err := rivet.CallWith[string](ctx, p, "charge", opts, 200); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("the key with other arguments: %v", err)
	}
	if other, err := rivet.CallWith[string](ctx, fc.GetOrCreate("payments", "p-2"), "charge", opts, 100); err != nil || other == first {
		t.Fatalf("the key at another actor: %q %v, want a call of its own", other, err)
	}
	if n, err := rivet.CallQuery[int](ctx, p, "balance"); err != nil || n != 7 {
		t.Fatalf("CallQuery: %d %v", n, err)
	}
	calls := fc.Calls()
	if c := calls[1]; !c.Duplicate || c.Result == nil {
		t.Fatalf("the call again: %v, want a duplicate with the first's result", c)
	}
	if c := calls[len(calls)-1]; !c.ReadOnly || c.Args != nil {
		t.Fatalf("the query: %v", c)
	}
}

// Calls, sends and Calls itself from many goroutines at once, as a join's
// branches make them (run with -race).
func TestFakeClientConcurrentUse(t *testing.T) {
	fc := workflowtest.NewFakeClient()
	workflowtest.HandleAction(fc, "shard", "compute", func(_ context.Context, _ []string, n int) (int, error) { return n, nil })
	fc.Queue("shard", "in", nil)
	const goroutines, each = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := fc.GetOrCreate("shard", fmt.Sprint(g))
			for i := range each {
				if n, err := rivet.Call[int](context.Background(), h, "compute", i); err != nil || n != i {
					t.Errorf("call: %d %v", n, err)
				}
				if err := h.Send(context.Background(), "in", i); err != nil {
					t.Error(err)
				}
				_ = fc.Calls()
			}
		}()
	}
	wg.Wait()
	calls := fc.Calls()
	if len(calls) != 2*goroutines*each {
		t.Fatalf("%d recorded, want %d", len(calls), 2*goroutines*each)
	}
	ids := map[string]bool{} // an actor's IDs are its own
	for _, c := range calls {
		if c.Queue != "" {
			ids[fmt.Sprint(c.Key, c.SendResult.MessageID)] = true
			if c.SendResult.MessageID < 1 || c.SendResult.MessageID > each {
				t.Fatalf("%v: message ID out of 1..%d", c, each)
			}
		}
	}
	if len(ids) != goroutines*each {
		t.Fatalf("%d message IDs, want one a send", len(ids))
	}
}
