package seed_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/examples/seed"
	"github.com/rivet-go/rivet/node"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/pkg/v3/logutil.(*MergeLogger).outputLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// env is one real node with the example actors, a client of it, and the
// examples' HTTP API.
type env struct {
	t   *testing.T
	c   *client.Client
	api *exampleapi.TestServer
	ctx context.Context
}

func newEnv(t *testing.T, counts map[string]int) *env {
	t.Helper()
	api := exampleapi.NewTestServer(counts)
	t.Cleanup(api.Close)
	t.Setenv(exampleapi.EnvVar, api.URL)
	reg, err := examples.Registry()
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.Logger = zap.NewNop()
	if os.Getenv("SEED_TEST_LOG") != "" {
		cfg.Logger, _ = zap.NewDevelopment()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	n, err := node.Start(ctx, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if err := n.Stop(sctx); err != nil {
			t.Errorf("node stop: %v", err)
		}
	})
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &env{t: t, c: c, api: api, ctx: ctx}
}

// eventually polls the actor's getState until ok accepts it.
func eventually[S any](e *env, actor, key string, within time.Duration, ok func(S) bool) S {
	e.t.Helper()
	deadline := time.Now().Add(within)
	var last S
	for {
		raw, err := e.c.Actor(actor, key).Call(e.ctx, "getState")
		if err == nil {
			var s S
			if err := json.Unmarshal(raw, &s); err != nil {
				e.t.Fatalf("getState %s: %v", raw, err)
			}
			if ok(s) {
				return s
			}
			last = s
		}
		if time.Now().After(deadline) {
			ins, _ := e.c.Actor(actor, key).Inspect(e.ctx)
			e.t.Fatalf("%s %s: state %+v not reached within %v (last err %v; workflow %s %s)", actor, key, last, within, err, ins.WorkflowStatus, ins.WorkflowError)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReminderFiresAfterItsTime(t *testing.T) {
	e := newEnv(t, nil)
	h := e.c.Actor("reminderActor", "main")
	sent := time.Now()
	if err := h.Send(e.ctx, "reminders", map[string]any{"text": "send weekly report", "at": sent.Add(time.Second).UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	st := eventually(e, "reminderActor", "main", 20*time.Second, func(s struct{ Fired []string }) bool { return len(s.Fired) > 0 })
	if len(st.Fired) != 1 || st.Fired[0] != "send weekly report" {
		t.Fatalf("fired = %v", st.Fired)
	}
	if since := time.Since(sent); since < time.Second {
		t.Fatalf("reminder fired after %v, before its time", since)
	}
	wantEntries(e, "reminderActor", "main",
		"reminder-loop",
		"reminder-loop/~N/record-reminder",
		"reminder-loop/~N/wait-reminder",
		"reminder-loop/~N/wait-until-reminder")
}

// wantState checks that getState answers exactly want (as JSON: the seed's
// field names, nulls included).
func wantState(e *env, actor, key, want string) {
	e.t.Helper()
	raw, err := e.c.Actor(actor, key).Call(e.ctx, "getState")
	if err != nil {
		e.t.Fatalf("%s %s getState: %v", actor, key, err)
	}
	var got, exp any
	if err := json.Unmarshal(raw, &got); err != nil {
		e.t.Fatalf("getState %s: %v", raw, err)
	}
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		e.t.Fatal(err)
	}
	if !reflect.DeepEqual(got, exp) {
		e.t.Fatalf("%s %s getState = %s, want %s", actor, key, raw, want)
	}
}

func send(e *env, actor, key, queue string, body any) {
	e.t.Helper()
	if err := e.c.Actor(actor, key).Send(e.ctx, queue, body); err != nil {
		e.t.Fatalf("send %s %s %s: %v", actor, key, queue, err)
	}
}

func TestTimeoutActorSavesTheCharge(t *testing.T) {
	e := newEnv(t, nil)
	wantState(e, "timeoutActor", "main", `{"lastChargeId":null}`)
	send(e, "timeoutActor", "main", "charge", map[string]any{"orderId": "o1"})
	eventually(e, "timeoutActor", "main", 20*time.Second, func(s struct{ LastChargeID *string }) bool { return s.LastChargeID != nil })
	wantState(e, "timeoutActor", "main", `{"lastChargeId":"charge-o1"}`)
	wantEntries(e, "timeoutActor", "main",
		"charge-loop",
		"charge-loop/~N/charge-card",
		"charge-loop/~N/save-charge",
		"charge-loop/~N/wait-charge")
}

func TestDashboardJoinsTheThreeCounts(t *testing.T) {
	e := newEnv(t, map[string]int{"/users": 3, "/orders": 5, "/revenue": 7})
	wantState(e, "dashboardActor", "main", `{"summary":null}`)
	send(e, "dashboardActor", "main", "refresh", map[string]any{})
	eventually(e, "dashboardActor", "main", 20*time.Second, func(s struct{ Summary *seed.Summary }) bool { return s.Summary != nil })
	wantState(e, "dashboardActor", "main", `{"summary":{"users":3,"orders":5,"revenue":7}}`)
	if gets := e.api.Gets(); gets["/users"] != 1 || gets["/orders"] != 1 || gets["/revenue"] != 1 {
		t.Fatalf("API GETs = %v, want one of each", gets)
	}
	wantEntries(e, "dashboardActor", "main",
		"dashboard-loop",
		"dashboard-loop/~N/fetch-summary",
		"dashboard-loop/~N/fetch-summary/orders/fetch-orders",
		"dashboard-loop/~N/fetch-summary/revenue/fetch-revenue",
		"dashboard-loop/~N/fetch-summary/users/fetch-users",
		"dashboard-loop/~N/save-summary",
		"dashboard-loop/~N/wait-refresh")
}

func TestAuctionIsSoldOnABid(t *testing.T) {
	e := newEnv(t, nil)
	send(e, "auctionActor", "item-123", "bids", map[string]any{"amount": 100})
	eventually(e, "auctionActor", "item-123", 20*time.Second, func(s struct{ Result *string }) bool { return s.Result != nil })
	wantState(e, "auctionActor", "item-123", `{"result":"sold"}`)
	wantPosts(t, e.api, []exampleapi.Request{
		{Path: "/auctions/item-123"},
		{Path: "/auctions/item-123/finalize", Body: `{"outcome":"bid"}`},
	})
	wantEntries(e, "auctionActor", "item-123", "list-item", "bid-or-expire", "bid-or-expire/bid/wait-bid", "finalize")
}

func TestAuctionExpiresWithoutABid(t *testing.T) {
	// Set before the node starts and restored after it stopped (cleanups
	// run last-registered first), so no workflow reads it meanwhile.
	old := seed.AuctionTimeout
	seed.AuctionTimeout = 300 * time.Millisecond
	t.Cleanup(func() { seed.AuctionTimeout = old })
	e := newEnv(t, nil)
	wantState(e, "auctionActor", "item-123", `{"result":null}`)
	eventually(e, "auctionActor", "item-123", 20*time.Second, func(s struct{ Result *string }) bool { return s.Result != nil })
	wantState(e, "auctionActor", "item-123", `{"result":"expired"}`)
	wantPosts(t, e.api, []exampleapi.Request{
		{Path: "/auctions/item-123"},
		{Path: "/auctions/item-123/finalize", Body: `{"outcome":"expire"}`},
	})
	// A bid after the end changes nothing.
	send(e, "auctionActor", "item-123", "bids", map[string]any{"amount": 100})
	wantState(e, "auctionActor", "item-123", `{"result":"expired"}`)
	wantEntries(e, "auctionActor", "item-123", "list-item", "bid-or-expire", "bid-or-expire/expire/auction-timeout", "finalize")
}

func wantPosts(t *testing.T, api *exampleapi.TestServer, want []exampleapi.Request) {
	t.Helper()
	if got := api.Posts(); !reflect.DeepEqual(got, want) {
		t.Fatalf("API POSTs = %+v, want %+v", got, want)
	}
}

func TestFanInOutMergesTheCounts(t *testing.T) {
	e := newEnv(t, map[string]int{"/users": 3, "/orders": 5, "/invoices": 11})
	wantState(e, "fanInOutActor", "main", `{"total":0}`)
	send(e, "fanInOutActor", "main", "refresh", map[string]any{})
	eventually(e, "fanInOutActor", "main", 20*time.Second, func(s struct{ Total int }) bool { return s.Total != 0 })
	wantState(e, "fanInOutActor", "main", `{"total":19}`)
	wantEntries(e, "fanInOutActor", "main",
		"join-loop",
		"join-loop/~N/merge-results",
		"join-loop/~N/parallel-work",
		"join-loop/~N/parallel-work/invoices/fetch-invoices",
		"join-loop/~N/parallel-work/orders/fetch-orders",
		"join-loop/~N/parallel-work/users/fetch-users",
		"join-loop/~N/wait-refresh")
}

func TestScatterGatherSumsTheShards(t *testing.T) {
	e := newEnv(t, nil)
	send(e, "scatterGatherActor", "main", "scatter", map[string]any{"input": 2})
	eventually(e, "scatterGatherActor", "main", 20*time.Second, func(s struct{ LastSum int }) bool { return s.LastSum != 0 })
	wantState(e, "scatterGatherActor", "main", `{"lastSum":60}`)
	wantEntries(e, "scatterGatherActor", "main",
		"scatter-gather-loop",
		"scatter-gather-loop/~N/aggregate",
		"scatter-gather-loop/~N/gather",
		"scatter-gather-loop/~N/gather/shardA/call-shard-a",
		"scatter-gather-loop/~N/gather/shardB/call-shard-b",
		"scatter-gather-loop/~N/gather/shardC/call-shard-c",
		"scatter-gather-loop/~N/wait-scatter")
}

// The seed's poll loop starts with the actor: attempts 1 and 2 fail (the
// backoff doubles to 200, then 400 ms), attempt 3 succeeds (healthy, back to
// 100), and so on. Every state seen must be one the loop can be in: right
// after "poll-target" of attempt n (the previous attempt's backoff and
// status), or after its "grow-backoff" or "reset-backoff".
func TestPollBackoffGrowsThenResets(t *testing.T) {
	e := newEnv(t, nil)
	type state struct {
		Attempts  int    `json:"attempts"`
		BackoffMs int    `json:"backoffMs"`
		Status    string `json:"status"`
	}
	settled := func(n int) state {
		switch {
		case n == 0:
			return state{0, 100, "unknown"}
		case n%3 == 0:
			return state{n, 100, "healthy"}
		default:
			return state{n, 100 << (n % 3), "retrying"}
		}
	}
	h := e.c.Actor("pollBackoffActor", "main")
	seen := map[state]bool{}
	var order []state
	last := -1
	deadline := time.Now().Add(20 * time.Second)
	for last < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("attempt 4 not reached within 20s; states seen: %v", order)
		}
		raw, err := h.Call(e.ctx, "getState")
		if err != nil {
			t.Fatal(err)
		}
		var s state
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatal(err)
		}
		prev := settled(max(s.Attempts-1, 0))
		if s != settled(s.Attempts) && s != (state{s.Attempts, prev.BackoffMs, prev.Status}) {
			t.Fatalf("state %+v is none the poll loop can be in (seen before: %v)", s, order)
		}
		if s.Attempts < last {
			t.Fatalf("attempts went back from %d to %d", last, s.Attempts)
		}
		last = s.Attempts
		if !seen[s] {
			seen[s] = true
			order = append(order, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, want := range []state{settled(1), settled(2), settled(3)} {
		if !seen[want] {
			t.Errorf("state %+v never seen; seen: %v", want, order)
		}
	}
	t.Logf("states seen: %v", order)
	wantEntries(e, "pollBackoffActor", "main",
		"poll-loop",
		"poll-loop/~N/grow-backoff",
		"poll-loop/~N/healthy-interval",
		"poll-loop/~N/poll-target",
		"poll-loop/~N/reset-backoff",
		"poll-loop/~N/retry-delay")
}

func TestCoordinatorDispatchesToTheWorker(t *testing.T) {
	e := newEnv(t, nil)
	send(e, "coordinatorActor", "main", "task", map[string]any{"taskId": "t1", "workerId": "w1", "value": 21})
	eventually(e, "coordinatorActor", "main", 20*time.Second, func(s struct{ LastTaskID *string }) bool { return s.LastTaskID != nil })
	wantState(e, "coordinatorActor", "main", `{"lastTaskId":"t1","lastResult":42}`)
	wantEntries(e, "coordinatorActor", "main",
		"orchestrator-loop",
		"orchestrator-loop/~N/dispatch-rpc",
		"orchestrator-loop/~N/record-result",
		"orchestrator-loop/~N/wait-task")
}

func TestOrchestratorReconcilesItsChildren(t *testing.T) {
	e := newEnv(t, nil)
	send(e, "orchestratorActor", "main", "batch", map[string]any{"payload": 2})
	eventually(e, "orchestratorActor", "main", 20*time.Second, func(s struct{ LastTotal int }) bool { return s.LastTotal != 0 })
	wantState(e, "orchestratorActor", "main", `{"lastTotal":18}`)
	// "start-children" created the three children.
	for _, child := range []string{"child-a", "child-b", "child-c"} {
		if _, err := e.c.Get("childWorkerActor", child).Call(e.ctx, "getState"); err != nil {
			t.Errorf("child %s: %v", child, err)
		}
	}
	wantEntries(e, "orchestratorActor", "main",
		"orchestrate-loop",
		"orchestrate-loop/~N/collect-updates",
		"orchestrate-loop/~N/collect-updates/a/run-child-a",
		"orchestrate-loop/~N/collect-updates/b/run-child-b",
		"orchestrate-loop/~N/collect-updates/c/run-child-c",
		"orchestrate-loop/~N/reconcile",
		"orchestrate-loop/~N/wait-batch",
		"start-children")
}

func TestTimeoutFallbackFallsBack(t *testing.T) {
	e := newEnv(t, nil)
	wantState(e, "timeoutFallbackActor", "main", `{"lastSource":"none","lastValue":""}`)
	send(e, "timeoutFallbackActor", "main", "request", map[string]any{})
	eventually(e, "timeoutFallbackActor", "main", 20*time.Second, func(s struct{ LastSource string }) bool { return s.LastSource != "none" })
	wantState(e, "timeoutFallbackActor", "main", `{"lastSource":"fallback","lastValue":"fallback"}`)
	wantEntries(e, "timeoutFallbackActor", "main",
		"timeout-loop",
		"timeout-loop/~N/fallback-call",
		"timeout-loop/~N/primary-vs-timeout",
		"timeout-loop/~N/primary-vs-timeout/timeout/primary-timeout",
		"timeout-loop/~N/record-choice",
		"timeout-loop/~N/wait-request")
}

// iterationNumber matches a loop iteration's segment of a history path.
var iterationNumber = regexp.MustCompile(`~[0-9]+`)

// wantEntries checks the names the actor's workflow recorded (loop
// iterations as ~N), which are the seed's: history compatibility with the
// spec depends on them, and no other test looks at most of them.
func wantEntries(e *env, actor, key string, want ...string) {
	e.t.Helper()
	h, err := e.c.Actor(actor, key).History(e.ctx)
	if err != nil {
		e.t.Fatalf("%s %s history: %v", actor, key, err)
	}
	seen := map[string]bool{}
	for _, en := range h.Entries {
		seen[iterationNumber.ReplaceAllString(en.Path, "~N")] = true
	}
	got := slices.Sorted(maps.Keys(seen))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		e.t.Fatalf("%s %s history paths = %q, want %q", actor, key, got, want)
	}
}
