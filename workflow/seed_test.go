package workflow_test

// The patterns of the seed ("Timers & Concurrency"), line for line in Go,
// each run against the in-memory host.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// --- Timers -----------------------------------------------------------------

type ReminderState struct {
	Fired []string `json:"fired"`
}

type Reminder struct {
	Text string `json:"text"`
	At   int64  `json:"at"`
}

func reminderRun(ctx *workflow.Ctx[ReminderState]) error {
	return ctx.Loop("reminder-loop", func(ctx *workflow.Ctx[ReminderState]) error {
		message, err := workflow.Next[Reminder](ctx, "wait-reminder")
		if err != nil {
			return err
		}
		runAt := time.UnixMilli(max(ctx.Now().UnixMilli(), message.Body.At))
		if err := ctx.SleepUntil("wait-until-reminder", runAt); err != nil {
			return err
		}
		return ctx.Step("record-reminder", func(step *workflow.StepCtx[ReminderState]) error {
			step.State.Fired = append(step.State.Fired, message.Body.Text)
			return nil
		})
	})
}

// --- Timeouts ---------------------------------------------------------------

type TimeoutState struct {
	LastChargeID *string `json:"lastChargeId"`
}

type Charge struct {
	OrderID string `json:"orderId"`
}

func chargeCard(ctx context.Context, orderID string) (string, error) { return "charge-" + orderID, nil }

func timeoutRun(ctx *workflow.Ctx[TimeoutState]) error {
	return ctx.Loop("charge-loop", func(loopCtx *workflow.Ctx[TimeoutState]) error {
		message, err := workflow.Next[Charge](loopCtx, "wait-charge")
		if err != nil {
			return err
		}
		chargeID, err := workflow.StepOpts(loopCtx, workflow.StepOptions{
			Name:             "charge-card",
			Timeout:          5 * time.Second,
			RetryOnTimeout:   true,
			MaxRetries:       5,
			RetryBackoffBase: 200 * time.Millisecond,
			RetryBackoffMax:  2 * time.Second,
		}, func(step *workflow.StepCtx[TimeoutState]) (string, error) {
			return chargeCard(step.Context(), message.Body.OrderID)
		})
		if err != nil {
			return err
		}
		return loopCtx.Step("save-charge", func(step *workflow.StepCtx[TimeoutState]) error {
			step.State.LastChargeID = &chargeID
			return nil
		})
	})
}

// --- Join -------------------------------------------------------------------

type Summary struct {
	Users   int `json:"users"`
	Orders  int `json:"orders"`
	Revenue int `json:"revenue"`
}

type DashboardState struct {
	Summary *Summary `json:"summary"`
}

var counts = map[string]int{"/users": 3, "/orders": 4, "/revenue": 5, "/invoices": 6}

func fetchCount(ctx context.Context, path string) (int, error) {
	n, ok := counts[path]
	if !ok {
		return 0, fmt.Errorf("fetch %s failed: 404", path)
	}
	return n, nil
}

func dashboardRun(ctx *workflow.Ctx[DashboardState]) error {
	return ctx.Loop("dashboard-loop", func(loopCtx *workflow.Ctx[DashboardState]) error {
		if _, err := workflow.Next[struct{}](loopCtx, "wait-refresh"); err != nil {
			return err
		}
		fetch := func(name, path string) func(*workflow.Ctx[DashboardState]) (int, error) {
			return func(branchCtx *workflow.Ctx[DashboardState]) (int, error) {
				return workflow.Step(branchCtx, name, func(s *workflow.StepCtx[DashboardState]) (int, error) {
					return fetchCount(s.Context(), path)
				})
			}
		}
		summary, err := workflow.Join(loopCtx, "fetch-summary", workflow.Branches[DashboardState, int]{
			"users":   fetch("fetch-users", "/users"),
			"orders":  fetch("fetch-orders", "/orders"),
			"revenue": fetch("fetch-revenue", "/revenue"),
		})
		if err != nil {
			return err
		}
		return loopCtx.Step("save-summary", func(step *workflow.StepCtx[DashboardState]) error {
			step.State.Summary = &Summary{Users: summary["users"], Orders: summary["orders"], Revenue: summary["revenue"]}
			return nil
		})
	})
}

// --- Race -------------------------------------------------------------------

type AuctionState struct {
	Result *string `json:"result"`
}

type Bid struct {
	Amount int `json:"amount"`
}

func auctionRun(ctx *workflow.Ctx[AuctionState]) error {
	if err := ctx.Step("list-item", func(*workflow.StepCtx[AuctionState]) error { return nil }); err != nil {
		return err
	}
	winner, _, err := workflow.Race(ctx, "bid-or-expire", []workflow.RaceBranch[AuctionState, int]{
		{Name: "bid", Run: func(branchCtx *workflow.Ctx[AuctionState]) (int, error) {
			bid, err := workflow.Next[Bid](branchCtx, "wait-bid")
			return bid.Body.Amount, err
		}},
		{Name: "expire", Run: func(branchCtx *workflow.Ctx[AuctionState]) (int, error) {
			return 0, branchCtx.Sleep("auction-timeout", 24*time.Hour)
		}},
	})
	if err != nil {
		return err
	}
	return ctx.Step("finalize", func(step *workflow.StepCtx[AuctionState]) error {
		result := "expired"
		if winner == "bid" {
			result = "sold"
		}
		step.State.Result = &result
		return nil
	})
}

// --- Fan-out / fan-in (join) ------------------------------------------------

type FanState struct {
	Total int `json:"total"`
}

func fanInOutRun(ctx *workflow.Ctx[FanState]) error {
	return ctx.Loop("join-loop", func(loopCtx *workflow.Ctx[FanState]) error {
		batch, err := workflow.NextBatch[struct{}](loopCtx, "wait-refresh", workflow.NextOptions{Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		fetch := func(name, path string) func(*workflow.Ctx[FanState]) (int, error) {
			return func(branchCtx *workflow.Ctx[FanState]) (int, error) {
				return workflow.Step(branchCtx, name, func(s *workflow.StepCtx[FanState]) (int, error) { return fetchCount(s.Context(), path) })
			}
		}
		joined, err := workflow.Join(loopCtx, "parallel-work", workflow.Branches[FanState, int]{
			"users":    fetch("fetch-users", "/users"),
			"orders":   fetch("fetch-orders", "/orders"),
			"invoices": fetch("fetch-invoices", "/invoices"),
		})
		if err != nil {
			return err
		}
		return loopCtx.Step("merge-results", func(step *workflow.StepCtx[FanState]) error {
			step.State.Total = joined["users"] + joined["orders"] + joined["invoices"]
			return nil
		})
	})
}

// --- Scatter-gather across actors --------------------------------------------

type ScatterMessage struct {
	Input int `json:"input"`
}

type ScatterState struct {
	LastSum int `json:"lastSum"`
}

// call runs an action through a handle and decodes its result (the root
// package's rivet.Call, which this package may not import).
func call[R any](ctx context.Context, h caller.Handle, action string, args ...any) (R, error) {
	var out R
	raw, err := h.Call(ctx, action, args...)
	if err != nil {
		return out, err
	}
	return out, json.Unmarshal(raw, &out)
}

func callShard(step *workflow.StepCtx[ScatterState], shardID string, input int) (int, error) {
	return call[int](step.Context(), step.Client().GetOrCreate("shardActor", shardID), "compute", input)
}

func scatterGatherRun(ctx *workflow.Ctx[ScatterState]) error {
	return ctx.Loop("scatter-gather-loop", func(loopCtx *workflow.Ctx[ScatterState]) error {
		batch, err := workflow.NextBatch[ScatterMessage](loopCtx, "wait-scatter", workflow.NextOptions{Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		scatter := batch[0].Body
		shard := func(name, id string) func(*workflow.Ctx[ScatterState]) (int, error) {
			return func(joinCtx *workflow.Ctx[ScatterState]) (int, error) {
				return workflow.Step(joinCtx, name, func(step *workflow.StepCtx[ScatterState]) (int, error) {
					return callShard(step, id, scatter.Input)
				})
			}
		}
		gathered, err := workflow.Join(loopCtx, "gather", workflow.Branches[ScatterState, int]{
			"shardA": shard("call-shard-a", "a"),
			"shardB": shard("call-shard-b", "b"),
			"shardC": shard("call-shard-c", "c"),
		})
		if err != nil {
			return err
		}
		return loopCtx.Step("aggregate", func(step *workflow.StepCtx[ScatterState]) error {
			step.State.LastSum = gathered["shardA"] + gathered["shardB"] + gathered["shardC"]
			return nil
		})
	})
}

// --- Poll + backoff loop -----------------------------------------------------

type PollState struct {
	Attempts  int    `json:"attempts"`
	BackoffMs int    `json:"backoffMs"`
	Status    string `json:"status"`
}

func pollExternal(attempt int) bool { return attempt%3 == 0 }

func pollBackoffRun(ctx *workflow.Ctx[PollState]) error {
	return ctx.Loop("poll-loop", func(loopCtx *workflow.Ctx[PollState]) error {
		success, err := workflow.Step(loopCtx, "poll-target", func(step *workflow.StepCtx[PollState]) (bool, error) {
			step.State.Attempts++
			return pollExternal(step.State.Attempts), nil
		})
		if err != nil {
			return err
		}
		if success {
			if err := loopCtx.Step("reset-backoff", func(step *workflow.StepCtx[PollState]) error {
				step.State.Status = "healthy"
				step.State.BackoffMs = 100
				return nil
			}); err != nil {
				return err
			}
			return loopCtx.Sleep("healthy-interval", time.Second)
		}
		retryDelay, err := workflow.Step(loopCtx, "grow-backoff", func(ctx *workflow.StepCtx[PollState]) (int, error) {
			ctx.State.Status = "retrying"
			ctx.State.BackoffMs = min(ctx.State.BackoffMs*2, 5000)
			return ctx.State.BackoffMs, nil
		})
		if err != nil {
			return err
		}
		return loopCtx.Sleep("retry-delay", time.Duration(retryDelay)*time.Millisecond)
	})
}

// --- Coordinator -> worker RPC -------------------------------------------------

type TaskMessage struct {
	TaskID   string `json:"taskId"`
	WorkerID string `json:"workerId"`
	Value    int    `json:"value"`
}

type CoordinatorState struct {
	LastTaskID *string `json:"lastTaskId"`
	LastResult int     `json:"lastResult"`
}

func coordinatorRun(ctx *workflow.Ctx[CoordinatorState]) error {
	return ctx.Loop("orchestrator-loop", func(loopCtx *workflow.Ctx[CoordinatorState]) error {
		batch, err := workflow.NextBatch[TaskMessage](loopCtx, "wait-task", workflow.NextOptions{Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		task := batch[0].Body
		result, err := workflow.Step(loopCtx, "dispatch-rpc", func(step *workflow.StepCtx[CoordinatorState]) (int, error) {
			return call[int](step.Context(), step.Client().GetOrCreate("workerActor", task.WorkerID), "runTask", task.Value)
		})
		if err != nil {
			return err
		}
		return loopCtx.Step("record-result", func(step *workflow.StepCtx[CoordinatorState]) error {
			step.State.LastTaskID = &task.TaskID
			step.State.LastResult = result
			return nil
		})
	})
}

// --- Child worker orchestration ------------------------------------------------

type OrchestratorState struct {
	LastTotal int `json:"lastTotal"`
}

func orchestratorRun(ctx *workflow.Ctx[OrchestratorState]) error {
	if err := ctx.Step("start-children", func(step *workflow.StepCtx[OrchestratorState]) error {
		for _, id := range []string{"child-a", "child-b", "child-c"} {
			if _, err := step.Client().GetOrCreate("childWorkerActor", id).Call(step.Context(), "process", 0); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	return ctx.Loop("orchestrate-loop", func(loopCtx *workflow.Ctx[OrchestratorState]) error {
		batch, err := workflow.NextBatch[struct {
			Payload int `json:"payload"`
		}](loopCtx, "wait-batch", workflow.NextOptions{Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		payload := batch[0].Body.Payload
		child := func(name, id string) func(*workflow.Ctx[OrchestratorState]) (int, error) {
			return func(joinCtx *workflow.Ctx[OrchestratorState]) (int, error) {
				return workflow.Step(joinCtx, name, func(step *workflow.StepCtx[OrchestratorState]) (int, error) {
					return call[int](step.Context(), step.Client().GetOrCreate("childWorkerActor", id), "process", payload)
				})
			}
		}
		results, err := workflow.Join(loopCtx, "collect-updates", workflow.Branches[OrchestratorState, int]{
			"a": child("run-child-a", "child-a"),
			"b": child("run-child-b", "child-b"),
			"c": child("run-child-c", "child-c"),
		})
		if err != nil {
			return err
		}
		return loopCtx.Step("reconcile", func(step *workflow.StepCtx[OrchestratorState]) error {
			step.State.LastTotal = results["a"] + results["b"] + results["c"]
			return nil
		})
	})
}

// --- Timeout + fallback actor --------------------------------------------------

type FallbackState struct {
	LastSource string `json:"lastSource"`
	LastValue  string `json:"lastValue"`
}

func timeoutFallbackRun(ctx *workflow.Ctx[FallbackState]) error {
	return ctx.Loop("timeout-loop", func(loopCtx *workflow.Ctx[FallbackState]) error {
		if _, err := workflow.NextBatch[struct{}](loopCtx, "wait-request", workflow.NextOptions{Timeout: 30 * time.Second}); err != nil {
			return err
		}
		winner, value, err := workflow.Race(loopCtx, "primary-vs-timeout", []workflow.RaceBranch[FallbackState, string]{
			{Name: "primary", Run: func(raceCtx *workflow.Ctx[FallbackState]) (string, error) {
				return workflow.Step(raceCtx, "call-primary", func(step *workflow.StepCtx[FallbackState]) (string, error) {
					return call[string](step.Context(), step.Client().GetOrCreate("primaryServiceActor", "main"), "fetchValue")
				})
			}},
			{Name: "timeout", Run: func(raceCtx *workflow.Ctx[FallbackState]) (string, error) {
				if err := raceCtx.Sleep("primary-timeout", 200*time.Millisecond); err != nil {
					return "", err
				}
				return "timeout", nil
			}},
		})
		if err != nil {
			return err
		}
		source := "primary"
		if winner == "timeout" {
			value, err = workflow.Step(loopCtx, "fallback-call", func(step *workflow.StepCtx[FallbackState]) (string, error) {
				return call[string](step.Context(), step.Client().GetOrCreate("fallbackServiceActor", "main"), "fetchValue")
			})
			if err != nil {
				return err
			}
			source = "fallback"
		}
		return loopCtx.Step("record-choice", func(step *workflow.StepCtx[FallbackState]) error {
			step.State.LastSource = source
			step.State.LastValue = value
			return nil
		})
	})
}

// --- the tests -------------------------------------------------------------------

// actorsClient is a caller.Client whose actors are functions of (name, key,
// action, args).
type actorsClient func(ctx context.Context, name, key, action string, args []any) (any, error)

func (f actorsClient) GetOrCreate(name string, key ...string) caller.Handle {
	return actorHandle{f, name, fmt.Sprint(key)}
}
func (f actorsClient) Get(name string, key ...string) caller.Handle {
	return f.GetOrCreate(name, key...)
}

type actorHandle struct {
	f         actorsClient
	name, key string
}

func (h actorHandle) Call(ctx context.Context, action string, args ...any) (json.RawMessage, error) {
	v, err := h.f(ctx, h.name, h.key, action, args)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func (h actorHandle) Send(context.Context, string, any) error { return errors.New("not supported") }

// driveSeed runs a seed actor's workflow until it waits for input that is
// not there (or, with a timed receive, until it is idle a second time).
func driveSeed[S any](t *testing.T, h *workflowtest.Host[S], fn func(*workflow.Ctx[S]) error, idleAfter int) workflow.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	idle := 0
	out, _ := h.Drive(ctx, fn, workflowtest.DriveOptions{Stop: func(w workflow.Wake) bool {
		if len(h.Queue()) == 0 {
			idle++
		}
		return idle > idleAfter
	}})
	if out.Status != workflow.RunYielded {
		t.Fatalf("outcome %+v", out)
	}
	return out
}

func TestSeedTimers(t *testing.T) {
	h := newHost(ReminderState{})
	h.Send("reminders", Reminder{Text: "send weekly report", At: t0.Add(time.Second).UnixMilli()})
	h.Send("reminders", Reminder{Text: "already due", At: t0.Add(-time.Hour).UnixMilli()})
	driveSeed(t, h, reminderRun, 0)
	if got := h.State().Fired; !reflect.DeepEqual(got, []string{"send weekly report", "already due"}) {
		t.Fatalf("fired %v", got)
	}
	if e := entryAt(t, h.History(), "reminder-loop/~0/wait-until-reminder"); !e.Deadline.Equal(t0.Add(time.Second)) {
		t.Fatalf("sleep %+v", e)
	}
}

func TestSeedTimeouts(t *testing.T) {
	h := newHost(TimeoutState{})
	h.Send("charge", Charge{OrderID: "o-1"})
	driveSeed(t, h, timeoutRun, 0)
	if got := h.State().LastChargeID; got == nil || *got != "charge-o-1" {
		t.Fatalf("charge %v", got)
	}
}

func TestSeedJoin(t *testing.T) {
	h := newHost(DashboardState{})
	h.Send("refresh", struct{}{})
	driveSeed(t, h, dashboardRun, 0)
	if got := h.State().Summary; got == nil || *got != (Summary{3, 4, 5}) {
		t.Fatalf("summary %+v", got)
	}
}

func TestSeedRace(t *testing.T) {
	for _, bid := range []bool{true, false} {
		h := newHost(AuctionState{})
		if bid {
			h.Send("bids", Bid{Amount: 100})
		}
		out := drive(t, h, auctionRun)
		want := map[bool]string{true: "sold", false: "expired"}[bid]
		if out.Status != workflow.RunCompleted || h.State().Result == nil || *h.State().Result != want {
			t.Fatalf("bid=%v: %+v %v", bid, out, h.State().Result)
		}
	}
}

func TestSeedFanInOut(t *testing.T) {
	h := newHost(FanState{})
	h.Send("refresh", struct{}{})
	driveSeed(t, h, fanInOutRun, 1)
	if got := h.State().Total; got != 13 {
		t.Fatalf("total %d", got)
	}
}

func workers(clock *workflowtest.Clock) actorsClient {
	return func(ctx context.Context, name, key, action string, args []any) (any, error) {
		switch name + "." + action {
		case "shardActor.compute":
			return args[0].(int) * 10, nil
		case "workerActor.runTask":
			return args[0].(int) * 2, nil
		case "childWorkerActor.process":
			return args[0].(int) * 3, nil
		case "primaryServiceActor.fetchValue":
			// Slower than the race's 200 ms timeout: time passes once the
			// timeout branch sleeps (its timer and this step's timeout).
			if err := clock.WaitTimers(ctx, 2); err != nil {
				return nil, err
			}
			clock.Advance(500 * time.Millisecond)
			<-ctx.Done()
			return nil, ctx.Err()
		case "fallbackServiceActor.fetchValue":
			return "fallback", nil
		}
		return nil, fmt.Errorf("no action %s.%s", name, action)
	}
}

func TestSeedScatterGather(t *testing.T) {
	h := newHost(ScatterState{})
	h.Client = workers(h.Clock)
	h.Send("scatter", ScatterMessage{Input: 2})
	driveSeed(t, h, scatterGatherRun, 1)
	if got := h.State().LastSum; got != 60 {
		t.Fatalf("sum %d", got)
	}
}

func TestSeedPollBackoff(t *testing.T) {
	h := newHost(PollState{BackoffMs: 100, Status: "unknown"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h.Drive(ctx, pollBackoffRun, workflowtest.DriveOptions{Stop: func(workflow.Wake) bool { return h.State().Attempts >= 7 }})
	// Polls 1, 2 fail (backoff 200, 400 ms), 3 succeeds (reset, 1 s), 4, 5
	// fail, 6 succeeds, 7 fails.
	if got := h.State(); got != (PollState{Attempts: 7, BackoffMs: 200, Status: "retrying"}) {
		t.Fatalf("state %+v", got)
	}
	if want := t0.Add(200*time.Millisecond + 400*time.Millisecond + time.Second + 200*time.Millisecond + 400*time.Millisecond + time.Second); !h.Clock.Now().Equal(want) {
		t.Fatalf("now +%v, want +%v", h.Clock.Now().Sub(t0), want.Sub(t0))
	}
}

func TestSeedCoordinator(t *testing.T) {
	h := newHost(CoordinatorState{})
	h.Client = workers(h.Clock)
	h.Send("tasks", TaskMessage{TaskID: "t-1", WorkerID: "w-1", Value: 21})
	driveSeed(t, h, coordinatorRun, 1)
	if got := h.State(); got.LastTaskID == nil || *got.LastTaskID != "t-1" || got.LastResult != 42 {
		t.Fatalf("state %+v", got)
	}
}

func TestSeedChildWorkers(t *testing.T) {
	h := newHost(OrchestratorState{})
	h.Client = workers(h.Clock)
	h.Send("batches", map[string]int{"payload": 5})
	driveSeed(t, h, orchestratorRun, 1)
	if got := h.State().LastTotal; got != 45 {
		t.Fatalf("total %d", got)
	}
}

func TestSeedTimeoutFallback(t *testing.T) {
	h := newHost(FallbackState{})
	h.Client = workers(h.Clock)
	h.Send("requests", struct{}{})
	driveSeed(t, h, timeoutFallbackRun, 0)
	if got := h.State(); got != (FallbackState{LastSource: "fallback", LastValue: "fallback"}) {
		t.Fatalf("state %+v", got)
	}
}
