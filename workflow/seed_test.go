package workflow_test

// The patterns of the seed ("Timers & Concurrency"), run against the
// in-memory host: the workflows are the example actors' own (package
// examples/seed, whose tests run them on a real node); here the engine runs
// them with simulated time. Their HTTP calls go to an in-process API
// (exampleapi) and their calls to other actors to those actors' actions
// (workers).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/examples/seed"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

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

// CallWith is Call: these actors run each call once anyway (the seed's
// child orchestration gives its calls idempotency keys).
func (h actorHandle) CallWith(ctx context.Context, action string, _ caller.CallOptions, args ...any) (json.RawMessage, error) {
	return h.Call(ctx, action, args...)
}

func (h actorHandle) Send(context.Context, string, any) error { return errors.New("not supported") }

// seedAPI serves the examples' HTTP API (EXAMPLES_API_URL) for one test:
// GET answers the count set here for its path.
func seedAPI(t *testing.T) *exampleapi.TestServer {
	t.Helper()
	api := exampleapi.NewTestServer(map[string]int{"/users": 3, "/orders": 4, "/revenue": 5, "/invoices": 6})
	t.Cleanup(api.Close)
	t.Setenv(exampleapi.EnvVar, api.URL)
	return api
}

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
	h := newHost(seed.ReminderActor.State)
	h.Send("reminders", seed.Reminder{Text: "send weekly report", At: t0.Add(time.Second).UnixMilli()})
	h.Send("reminders", seed.Reminder{Text: "already due", At: t0.Add(-time.Hour).UnixMilli()})
	driveSeed(t, h, seed.ReminderActor.Run, 0)
	if got := h.State().Fired; !reflect.DeepEqual(got, []string{"send weekly report", "already due"}) {
		t.Fatalf("fired %v", got)
	}
	if e := entryAt(t, h.History(), "reminder-loop/~0/wait-until-reminder"); !e.Deadline.Equal(t0.Add(time.Second)) {
		t.Fatalf("sleep %+v", e)
	}
}

func TestSeedTimeouts(t *testing.T) {
	h := newHost(seed.TimeoutActor.State)
	h.Send("charge", seed.ChargeRequest{OrderID: "o-1"})
	driveSeed(t, h, seed.TimeoutActor.Run, 0)
	if got := h.State().LastChargeID; got == nil || *got != "charge-o-1" {
		t.Fatalf("charge %v", got)
	}
}

func TestSeedJoin(t *testing.T) {
	seedAPI(t)
	h := newHost(seed.DashboardActor.State)
	h.Send("refresh", seed.Refresh{})
	driveSeed(t, h, seed.DashboardActor.Run, 0)
	if got := h.State().Summary; got == nil || *got != (seed.Summary{Users: 3, Orders: 4, Revenue: 5}) {
		t.Fatalf("summary %+v", got)
	}
}

func TestSeedRace(t *testing.T) {
	for _, bid := range []bool{true, false} {
		api := seedAPI(t)
		h := newHost(seed.AuctionActor.State)
		if bid {
			h.Send("bids", seed.Bid{Amount: 100})
		}
		out := drive(t, h, seed.AuctionActor.Run)
		want := map[bool]string{true: "sold", false: "expired"}[bid]
		if out.Status != workflow.RunCompleted || h.State().Result == nil || *h.State().Result != want {
			t.Fatalf("bid=%v: %+v %v", bid, out, h.State().Result)
		}
		outcome := map[bool]string{true: "bid", false: "expire"}[bid]
		if got, want := api.Posts(), []exampleapi.Request{
			{Path: "/auctions/item-123"},
			{Path: "/auctions/item-123/finalize", Body: `{"outcome":"` + outcome + `"}`},
		}; !reflect.DeepEqual(got, want) {
			t.Fatalf("bid=%v: API POSTs %+v, want %+v", bid, got, want)
		}
	}
}

func TestSeedFanInOut(t *testing.T) {
	seedAPI(t)
	h := newHost(seed.FanInOutActor.State)
	h.Send("refresh", struct{}{})
	driveSeed(t, h, seed.FanInOutActor.Run, 1)
	if got := h.State().Total; got != 13 {
		t.Fatalf("total %v", got)
	}
}

// workers answers the example actors' calls to other actors with the
// called example actor's own action, run on a fresh state (the workers keep
// none). The exception is the primary service, whose fetchValue waits 500 ms
// of real time: its stand-in lets them pass on the simulated clock instead.
func workers(t *testing.T, clock *workflowtest.Clock) actorsClient {
	t.Helper()
	specs := map[string]*rivet.Spec{}
	for _, d := range []rivet.Definition{seed.ShardActor, seed.WorkerActor, seed.ChildWorkerActor, seed.FallbackServiceActor} {
		sp, err := d.Spec()
		if err != nil {
			t.Fatal(err)
		}
		specs[sp.Name] = sp
	}
	return func(ctx context.Context, name, key, action string, args []any) (any, error) {
		if name == seed.PrimaryServiceActor.Name && action == "fetchValue" {
			// Slower than the race's 200 ms timeout: time passes once the
			// timeout branch sleeps (its timer and this step's timeout).
			if err := clock.WaitTimers(ctx, 2); err != nil {
				return nil, err
			}
			clock.Advance(500 * time.Millisecond)
			<-ctx.Done()
			return nil, ctx.Err()
		}
		sp, ok := specs[name]
		if !ok {
			return nil, fmt.Errorf("no actor %s", name)
		}
		a, ok := sp.Actions[action]
		if !ok || a.Arity != len(args) {
			return nil, fmt.Errorf("no action %s.%s of %d arguments", name, action, len(args))
		}
		raw := make([]json.RawMessage, len(args))
		for i, arg := range args {
			b, err := json.Marshal(arg)
			if err != nil {
				return nil, err
			}
			raw[i] = b
		}
		state, err := sp.NewState(nil)
		if err != nil {
			return nil, err
		}
		return a.Invoke(rivet.Env{Ctx: ctx, Name: name, Key: []string{key}}, state, raw)
	}
}

func TestSeedScatterGather(t *testing.T) {
	h := newHost(seed.ScatterGatherActor.State)
	h.Client = workers(t, h.Clock)
	h.Send("scatter", seed.ScatterMessage{Input: 2})
	driveSeed(t, h, seed.ScatterGatherActor.Run, 1)
	if got := h.State().LastSum; got != 60 {
		t.Fatalf("sum %d", got)
	}
}

func TestSeedPollBackoff(t *testing.T) {
	h := newHost(seed.PollBackoffActor.State)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h.Drive(ctx, seed.PollBackoffActor.Run, workflowtest.DriveOptions{Stop: func(workflow.Wake) bool { return h.State().Attempts >= 7 }})
	// Polls 1, 2 fail (backoff 200, 400 ms), 3 succeeds (reset, 1 s), 4, 5
	// fail, 6 succeeds, 7 fails.
	if got := h.State(); got != (seed.PollBackoffState{Attempts: 7, BackoffMs: 200, Status: "retrying"}) {
		t.Fatalf("state %+v", got)
	}
	if want := t0.Add(200*time.Millisecond + 400*time.Millisecond + time.Second + 200*time.Millisecond + 400*time.Millisecond + time.Second); !h.Clock.Now().Equal(want) {
		t.Fatalf("now +%v, want +%v", h.Clock.Now().Sub(t0), want.Sub(t0))
	}
}

func TestSeedCoordinator(t *testing.T) {
	h := newHost(seed.CoordinatorActor.State)
	h.Client = workers(t, h.Clock)
	h.Send("task", seed.TaskMessage{TaskID: "t-1", WorkerID: "w-1", Value: 21})
	driveSeed(t, h, seed.CoordinatorActor.Run, 1)
	if got := h.State(); got.LastTaskID == nil || *got.LastTaskID != "t-1" || got.LastResult != 42 {
		t.Fatalf("state %+v", got)
	}
}

func TestSeedChildWorkers(t *testing.T) {
	h := newHost(seed.OrchestratorActor.State)
	h.Client = workers(t, h.Clock)
	h.Send("batch", seed.BatchMessage{Payload: 5})
	driveSeed(t, h, seed.OrchestratorActor.Run, 1)
	if got := h.State().LastTotal; got != 45 {
		t.Fatalf("total %d", got)
	}
}

func TestSeedTimeoutFallback(t *testing.T) {
	h := newHost(seed.TimeoutFallbackActor.State)
	h.Client = workers(t, h.Clock)
	h.Send("request", struct{}{})
	driveSeed(t, h, seed.TimeoutFallbackActor.Run, 0)
	if got := h.State(); got != (seed.TimeoutFallbackState{LastSource: "fallback", LastValue: "fallback"}) {
		t.Fatalf("state %+v", got)
	}
}
