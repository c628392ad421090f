package node_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/internal/metricstest"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/workflow"
)

// Job is a message of metricsWorker's "jobs" queue.
type Job struct {
	N int `json:"n"`
}

type workerState struct {
	Done int `json:"done"`
}

// metricsWorker's workflow takes jobs and runs a step for each; its
// "backlog" queue is never read, so its messages stay pending.
var metricsWorker = rivet.Actor[workerState]{
	Name:   "metricsWorker",
	Queues: rivet.Queues{"jobs": rivet.QueueOf[Job](), "backlog": rivet.QueueOf[Job]()},
	Run: func(ctx *workflow.Ctx[workerState]) error {
		return ctx.Loop("jobs-loop", func(c *workflow.Ctx[workerState]) error {
			if _, err := workflow.Next[Job](c, "take", workflow.NextOptions{Names: []string{"jobs"}}); err != nil {
				return err
			}
			return c.Step("work", func(s *workflow.StepCtx[workerState]) error {
				s.State.Done++
				return nil
			})
		})
	},
	Actions: rivet.Actions[workerState]{
		"getDone": rivet.Query(func(c *rivet.ActionCtx[workerState]) (int, error) { return c.State.Done, nil }),
	},
}

// metricsFailing's workflow fails: its one step fails twice, for good.
var metricsFailing = rivet.Actor[struct{}]{
	Name: "metricsFailing",
	Run: func(ctx *workflow.Ctx[struct{}]) error {
		return ctx.StepWith(workflow.StepOptions{Name: "boom", MaxRetries: 1, RetryBackoffBase: 10 * time.Millisecond},
			func(*workflow.StepCtx[struct{}]) error { return errors.New("boom") })
	},
}

// scrape reads the node's /metrics.
func scrape(t *testing.T, addr string) (series, sums map[string]float64) {
	t.Helper()
	series, sums, err := metricstest.Scrape("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return series, sums
}

// A node under a small load of actions, queue messages and workflows shows
// every metric of issue 5 on its HTTP port with a non-zero value, and says
// it is ready (gRPC health and /readyz) only once its partitions settled.
func TestMetricsAfterLoadAndReadiness(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor, metricsWorker, metricsFailing)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A fixed HTTP port, so that /readyz can be polled while the node starts.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpAddr := lis.Addr().String()
	lis.Close()
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.HTTPAddr = httpAddr
	cfg.Logger = zap.New(core)

	var (
		pollWG      sync.WaitGroup
		readyEarly  bool // /readyz said ok before the partitions settled
		sawNotReady bool // written by the poller, read after pollWG.Wait
	)
	started := make(chan struct{})
	pollWG.Add(1)
	go func() {
		defer pollWG.Done()
		hc := &http.Client{Timeout: time.Second}
		for {
			select {
			case <-started:
				return
			default:
			}
			resp, err := hc.Get("http://" + httpAddr + "/readyz")
			if err != nil {
				time.Sleep(2 * time.Millisecond)
				continue
			}
			resp.Body.Close()
			// Read after the answer: the node logs that its partitions
			// settled before it turns SERVING.
			settled := logs.FilterMessageSnippet("settled").Len()+logs.FilterMessageSnippet("serving anyway").Len() > 0
			switch {
			case resp.StatusCode == http.StatusOK && !settled:
				readyEarly = true
			case resp.StatusCode == http.StatusServiceUnavailable:
				sawNotReady = true
			}
		}
	}()
	n, err := node.Start(ctx, cfg, reg)
	close(started)
	pollWG.Wait()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop(ctx)
	if readyEarly {
		t.Error("/readyz said ok before the partitions settled")
	}
	t.Logf("/readyz polled during start: not ready seen = %v", sawNotReady)
	if code, body := get(t, "http://"+httpAddr+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after start = %d %s", code, body)
	}

	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ok, err := c.Healthy(ctx); err != nil || !ok {
		t.Fatalf("gRPC health after start = %v, %v", ok, err)
	}

	// The load.
	for i := range 20 {
		if _, err := rivet.Call[int](ctx, c.GetOrCreate("counter", "m"+strconv.Itoa(i%4)), "increment", 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Actor("counter", "m0").Call(ctx, "nope"); !errors.Is(err, rivet.ErrUnknownAction) {
		t.Fatalf("unknown action: %v", err)
	}
	// An unregistered name counts under actor="": bad input makes up no
	// label values.
	if _, err := c.Actor("noSuchActor", "x").Call(ctx, "get"); !errors.Is(err, rivet.ErrUnknownActor) {
		t.Fatalf("unknown actor: %v", err)
	}
	w := c.Actor("metricsWorker", "w")
	for i := range 5 {
		if err := w.Send(ctx, "jobs", Job{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := w.Send(ctx, "backlog", Job{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Create(ctx, "metricsFailing", []string{"f"}, nil); err != nil {
		t.Fatal(err)
	}

	nonZero := []string{
		// counters
		`rivet_calls_total{action="increment",actor="counter",code="ok",reason=""}`, `rivet_calls_total{action="",actor="counter",code="actor.unknown_action",reason="actor.unknown_action"}`,
		`rivet_calls_total{action="",actor="",code="actor.unknown_actor",reason="actor.unknown_actor"}`,
		`rivet_call_duration_seconds_count{action="increment",actor="counter",outcome="ok"}`,
		`rivet_call_duration_seconds_count{action="",actor="counter",outcome="error"}`,
		"rivet_commits_total", "rivet_commit_batches_total", "rivet_partitions_claimed_total", "rivet_lease_renewals_total",
		"rivet_queue_messages_sent_total", "rivet_queue_messages_received_total",
		`rivet_workflow_steps_total{actor="metricsWorker",status="completed"}`, `rivet_workflow_steps_total{actor="metricsFailing",status="failed"}`,
		`rivet_workflow_steps_total{actor="metricsFailing",status="exhausted"}`, `rivet_workflow_failures_total{actor="metricsFailing"}`,
		// gauges
		"rivet_active_actors", "rivet_partitions_owned", "rivet_cluster_members_alive",
		"rivet_queue_messages", `rivet_workflows_running{actor="metricsWorker"}`,
		// histograms
		`rivet_turn_duration_seconds_count{kind="action"}`, `rivet_turn_duration_seconds_count{kind="send"}`,
		`rivet_turn_duration_seconds_count{kind="step"}`, `rivet_turn_duration_seconds_count{kind="receive"}`,
		`rivet_turn_wait_seconds_count{kind="action"}`, `rivet_turn_wait_seconds_count{kind="step"}`, "rivet_turn_wait_seconds_sum",
		"rivet_turn_duration_seconds_sum", "rivet_call_duration_seconds_count", "rivet_call_duration_seconds_sum",
		"rivet_commit_batch_size_count", "rivet_commit_batch_size_sum", "rivet_commit_batch_ops_sum",
		"rivet_commit_duration_seconds_count", "rivet_commit_duration_seconds_sum",
		// the Go and process collectors
		"go_goroutines", "process_resident_memory_bytes",
	}
	// Present, and zero here: nothing failed in the committer.
	present := []string{"rivet_forwards_total", "rivet_commit_failures_total", "rivet_commit_retries_total",
		"rivet_commit_waiting", "rivet_lease_losses_total", `rivet_workflows_completed_total{actor="metricsWorker"}`, "rivet_partitions_handed_off_total",
		"rivet_partitions_refenced_total", "rivet_commit_stalls_total", `rivet_workflow_cancellations_total{actor="metricsWorker"}`, "rivet_actors_shed_total",
		// Workflow series by actor type, for each type with a workflow
		// (none for counter, which has none).
		`rivet_workflow_steps_total{actor="metricsWorker",status="failed"}`, `rivet_workflow_failures_total{actor="metricsWorker"}`,
		`rivet_scheduled_calls_total{result="ok"}`, `rivet_scheduled_calls_total{result="failed"}`,
		"rivet_event_subscribers", "rivet_events_delivered_total", "rivet_event_subscribers_dropped_total",
		`rivet_actor_hook_failures_total{hook="wake"}`, `rivet_actor_hook_failures_total{hook="sleep"}`,
		`rivet_actor_hook_failures_total{hook="destroy"}`, "rivet_actor_tasks_running",
		`rivet_port_full_total{port="grpc"}`, `rivet_port_full_total{port="http"}`, "rivet_request_read_timeouts_total"}

	// Exact once the workflow has taken its messages: waited for, as
	// the workflow runs on after the calls above returned.
	exact := map[string]float64{
		"rivet_queue_messages":                                                      3, // the backlog
		"rivet_queue_messages_received_total":                                       5,
		"rivet_queue_messages_sent_total":                                           8,
		`rivet_workflow_steps_total{actor="metricsWorker",status="completed"}`:      5,
		`rivet_workflow_steps_total{actor="metricsFailing",status="failed"}`:        1,
		`rivet_workflow_steps_total{actor="metricsFailing",status="exhausted"}`:     1,
		`rivet_calls_total{action="increment",actor="counter",code="ok",reason=""}`: 20,
	}
	var series, sums map[string]float64
	var missing, wrong []string
	for deadline := time.Now().Add(30 * time.Second); ; {
		series, sums = scrape(t, httpAddr)
		missing, wrong = missing[:0], wrong[:0]
		for _, m := range nonZero {
			v, ok := series[m]
			if !ok {
				v = sums[m] // a name summed over its labels
			}
			if v <= 0 {
				missing = append(missing, m)
			}
		}
		for m, want := range exact {
			if got := series[m]; got != want {
				wrong = append(wrong, fmt.Sprintf("%s = %v, want %v", m, got, want))
			}
		}
		if len(missing) == 0 && len(wrong) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, w := range wrong {
		t.Error(w)
	}
	if len(missing) > 0 {
		t.Errorf("metrics zero or absent after the load: %v", missing)
	}
	for _, m := range present {
		if _, ok := series[m]; !ok {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	for s := range series {
		if strings.Contains(s, "noSuchActor") {
			t.Errorf("a series is labelled by an unregistered actor name: %s", s)
		}
	}
	for s := range series {
		if strings.Contains(s, `key=`) {
			t.Errorf("a series is labelled by actor key: %s", s)
		}
	}

	// Log lines about an actor name it and its key, under the node's ID.
	failed := logs.FilterMessage("workflow failed").All()
	if len(failed) == 0 {
		t.Fatal("no \"workflow failed\" log line")
	}
	fields := failed[0].ContextMap()
	if fields["node"] != n.ID() || fields["actor"] != "metricsFailing" {
		t.Errorf("workflow failed log fields = %v; want node %s, actor metricsFailing, key [f]", fields, n.ID())
	}
	if k, ok := fields["key"].([]any); !ok || len(k) != 1 || k[0] != "f" {
		t.Errorf("workflow failed log key = %#v, want [f]", fields["key"])
	}
	// So do those of a step's failed attempts (the first of a step is
	// always logged), with the attempt and its error.
	attempts := logs.FilterMessage("workflow step attempt failed: it will be retried after its backoff").All()
	if len(attempts) != 1 {
		t.Fatalf("%d step attempt failures logged, want 1 (metricsFailing's first attempt)", len(attempts))
	}
	fields = attempts[0].ContextMap()
	if attempts[0].Level != zapcore.WarnLevel || fields["node"] != n.ID() || fields["actor"] != "metricsFailing" || fields["step"] != "boom" || fields["attempt"] != int64(1) || fields["error"] != "boom" {
		t.Errorf("step attempt failure logged at %v with %v; want WARN, node %s, actor metricsFailing, step boom, attempt 1, error boom", attempts[0].Level, fields, n.ID())
	}
	for s := range series {
		if strings.HasPrefix(s, "rivet_workflow") && strings.Contains(s, `actor="counter"`) {
			t.Errorf("a workflow series for an actor type without a workflow: %s", s)
		}
	}

	// The stop's last log line says how long each part of it took.
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := logs.FilterMessage("stopped").All()
	if len(stopped) != 1 {
		t.Fatalf("%d \"stopped\" log lines, want 1", len(stopped))
	}
	fields = stopped[0].ContextMap()
	for _, f := range []string{"took", "gossip_leave", "calls_and_actors", "partitions_released", "close"} {
		if d, ok := fields[f].(time.Duration); !ok || d < 0 {
			t.Errorf("\"stopped\" log field %s = %#v, want a duration", f, fields[f])
		}
	}
}

// The partition counters count each move once: on every node, partitions
// claimed less those handed off is what it owns, through a join and a
// drain. A handoff that a second look of the balancer planned for a
// partition whose first handoff had not begun yet found it released
// already, and counted it again (a drain of 516 partitions counted 706).
func TestPartitionMetricsCountEachMoveOnce(t *testing.T) {
	t.Parallel()
	const parts = 512
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	endpoints := etcdtest.Start(t)
	start := func(id string, join []string) *node.Node {
		cfg := clusterConfig(t, id, endpoints, "/moves-test/", parts, join)
		cfg.HTTPAddr = "127.0.0.1:0"
		return startNode(t, ctx, cfg, reg)
	}
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	settled := func() bool {
		return a.Ownership().Owned()+b.Ownership().Owned() == parts && a.BalancerSettledForTest() && b.BalancerSettledForTest()
	}
	check := func(when string) {
		t.Helper()
		for _, n := range []*node.Node{a, b} {
			series, _ := scrape(t, n.HTTPAddr())
			claimed, handed := series["rivet_partitions_claimed_total"], series["rivet_partitions_handed_off_total"]
			owned := series["rivet_partitions_owned"]
			if claimed-handed != owned {
				t.Errorf("%s: node %s: rivet_partitions_claimed_total %v - rivet_partitions_handed_off_total %v != rivet_partitions_owned %v",
					when, n.ID(), claimed, handed, owned)
			}
			// Nor does a partition take a second handoff slot while its
			// handoff is under way (it found the partition released).
			if idle := n.BalancerIdleHandoffsForTest(); idle != 0 {
				t.Errorf("%s: node %s: %d handoffs found their partition released already", when, n.ID(), idle)
			}
		}
	}
	waitUntil(t, "B to take its share", 60*time.Second, func() bool { return settled() && b.Ownership().Owned() > 0 })
	check("after B joined")
	c, err := client.New(a.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Drain(ctx, "b", false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "B drained", 60*time.Second, func() bool { return b.Ownership().Owned() == 0 && settled() })
	check("after B's drain")
}

// restSleeper's workflow sleeps for an hour: it runs (in memory) until
// its actor is deactivated.
var restSleeper = rivet.Actor[struct{}]{
	Name: "restSleeper",
	Run:  func(ctx *workflow.Ctx[struct{}]) error { return ctx.Sleep("nap", time.Hour) },
}

// restKeeper's keep runs a background task until the actor leaves memory
// or 200 ms passed.
var restKeeper = rivet.Actor[struct{}]{
	Name: "restKeeper",
	Actions: rivet.Actions[struct{}]{
		"keep": rivet.Action0(func(c *rivet.ActionCtx[struct{}]) (bool, error) {
			return true, c.KeepAwake(func(ctx context.Context, _ rivet.Client) {
				select {
				case <-time.After(200 * time.Millisecond):
				case <-ctx.Done():
				}
			})
		}),
	},
}

// The gauges come back to rest once the load ends and its actors have
// been idle past --idle-timeout (no actor, workflow, queued message, task,
// subscription or commit left counted), and `rivetctl stats` says what
// /metrics says.
func TestGaugesComeBackToRestOnceTheLoadEnds(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor, metricsWorker, restSleeper, restKeeper)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.Runtime.IdleTimeout = time.Second
	cfg.Logger = zap.NewNop()
	n := startNode(t, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	w := c.Actor("metricsWorker", "w")
	for i := range 2 {
		if err := w.Send(ctx, "jobs", Job{N: i}); err != nil {
			t.Fatal(err)
		}
		if err := w.Send(ctx, "backlog", Job{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Create(ctx, "restSleeper", []string{"s"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Actor("restKeeper", "k").Call(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Actor("counter", "c").Subscribe(ctx, "newCount")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Actor("counter", "c").Call(ctx, "increment", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Next(ctx); err != nil {
		t.Fatal(err)
	}
	// Under the load: the gauges count it.
	loaded := map[string]float64{`rivet_workflows_running{actor="metricsWorker"}`: 1, `rivet_workflows_running{actor="restSleeper"}`: 1, "rivet_queue_messages": 2, "rivet_event_subscribers": 1}
	waitUntil(t, "the gauges to count the load", 30*time.Second, func() bool {
		series, _ := scrape(t, n.HTTPAddr())
		for m, want := range loaded {
			if series[m] != want {
				return false
			}
		}
		return true
	})
	sub.Close()

	gauges := []string{"rivet_active_actors", `rivet_workflows_running{actor="metricsWorker"}`, `rivet_workflows_running{actor="restSleeper"}`, "rivet_queue_messages", "rivet_actor_tasks_running",
		"rivet_event_subscribers", "rivet_commit_waiting"}
	var series, sums map[string]float64
	deadline := time.Now().Add(30 * time.Second)
	for {
		series, sums = scrape(t, n.HTTPAddr())
		rest := true
		for _, m := range gauges {
			rest = rest && series[m] == 0
		}
		if rest {
			break
		}
		if time.Now().After(deadline) {
			for _, m := range gauges {
				if v := series[m]; v != 0 {
					t.Errorf("%s = %v once every actor had been idle past its timeout, want 0", m, v)
				}
			}
			t.FailNow()
		}
		time.Sleep(50 * time.Millisecond)
	}

	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		stat   string
		got    uint64
		metric string
		want   float64
	}{
		{"active actors", st.ActiveActors, "rivet_active_actors", series["rivet_active_actors"]},
		{"calls", st.Calls, "rivet_calls_total (summed)", sums["rivet_calls_total"]},
		{"commits", st.Commits, "rivet_commits_total", series["rivet_commits_total"]},
		{"commit batches", st.CommitBatches, "rivet_commit_batches_total", series["rivet_commit_batches_total"]},
		{"partitions owned", uint64(st.PartitionsOwned), "rivet_partitions_owned", series["rivet_partitions_owned"]},
	} {
		if float64(s.got) != s.want {
			t.Errorf("stats %s = %d, /metrics %s = %v", s.stat, s.got, s.metric, s.want)
		}
	}
	if st.Calls != 2 {
		t.Errorf("stats calls = %d, want 2 (keep, increment)", st.Calls)
	}
}

// countedFlow's workflow runs, for each job it takes, a step, a Do and a
// join of two Do branches: four step attempts, all completed. Its refuse
// action fails on purpose.
var countedFlow = rivet.Actor[struct{}]{
	Name:   "countedFlow",
	Queues: rivet.Queues{"jobs": rivet.QueueOf[Job]()},
	Run: func(ctx *workflow.Ctx[struct{}]) error {
		return ctx.Loop("jobs", func(c *workflow.Ctx[struct{}]) error {
			if _, err := workflow.Next[Job](c, "take"); err != nil {
				return err
			}
			if err := c.Step("step", func(*workflow.StepCtx[struct{}]) error { return nil }); err != nil {
				return err
			}
			one := func(*workflow.DoCtx) (int, error) { return 1, nil }
			if _, err := workflow.Do(c, "do", one); err != nil {
				return err
			}
			_, err := workflow.Join(c, "join", workflow.Branches[struct{}, int]{
				"a": func(b *workflow.Ctx[struct{}]) (int, error) { return workflow.Do(b, "do-a", one) },
				"b": func(b *workflow.Ctx[struct{}]) (int, error) { return workflow.Do(b, "do-b", one) },
			})
			return err
		})
	},
	Actions: rivet.Actions[struct{}]{
		"refuse": rivet.Action0(func(*rivet.ActionCtx[struct{}]) (int, error) {
			return 0, rivet.UserError("refused", "no", nil)
		}),
	},
}

// countedFailure's workflow fails: its step fails three times (two
// retries), the last for good.
var countedFailure = rivet.Actor[struct{}]{
	Name: "countedFailure",
	Run: func(ctx *workflow.Ctx[struct{}]) error {
		return ctx.StepWith(workflow.StepOptions{Name: "boom", MaxRetries: 2, RetryBackoffBase: 10 * time.Millisecond},
			func(*workflow.StepCtx[struct{}]) error { return errors.New("boom") })
	},
}

// The counters count exactly what they say: calls by outcome, step
// attempts of every kind (steps, Do, join branches) by status, messages
// sent and taken, and a workflow's failure, again after a retry; the
// failed workflow is listed as such (rivetctl actors --failed) until it
// is retried.
func TestCountersCountExactly(t *testing.T) {
	reg, err := rivet.Setup(countedFlow, countedFailure)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.Logger = zap.NewNop()
	n := startNode(t, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	expect := func(what string, want map[string]float64) {
		t.Helper()
		var series map[string]float64
		deadline := time.Now().Add(30 * time.Second)
		for {
			series, _ = scrape(t, n.HTTPAddr())
			ok := true
			for m, v := range want {
				ok = ok && series[m] == v
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		for m, v := range want {
			if series[m] != v {
				t.Errorf("%s: %s = %v, want %v", what, m, series[m], v)
			}
		}
		t.FailNow()
	}

	f := c.Actor("countedFlow", "f")
	for i := range 3 {
		if err := f.Send(ctx, "jobs", Job{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := f.Call(ctx, "refuse"); !errors.Is(err, rivet.ErrUser) {
			t.Fatalf("refuse: %v, want the actor's error", err)
		}
	}
	if _, err := f.Call(ctx, "nope"); !errors.Is(err, rivet.ErrUnknownAction) {
		t.Fatalf("nope: %v, want ErrUnknownAction", err)
	}
	if _, err := c.Create(ctx, "countedFailure", []string{"x"}, nil); err != nil {
		t.Fatal(err)
	}
	expect("after the load", map[string]float64{
		`rivet_calls_total{action="refuse",actor="countedFlow",code="user",reason=""}`:                               2,
		`rivet_calls_total{action="",actor="countedFlow",code="actor.unknown_action",reason="actor.unknown_action"}`: 1,
		"rivet_queue_messages_sent_total":                                       3,
		"rivet_queue_messages_received_total":                                   3,
		`rivet_workflow_steps_total{actor="countedFlow",status="completed"}`:    3 * 4,
		`rivet_workflow_steps_total{actor="countedFailure",status="failed"}`:    2,
		`rivet_workflow_steps_total{actor="countedFailure",status="exhausted"}`: 1,
		`rivet_workflow_failures_total{actor="countedFailure"}`:                 1,
		`rivet_workflows_completed_total{actor="countedFlow"}`:                  0,
	})
	failed, err := c.ListFailed(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0].Name != "countedFailure" || !strings.Contains(failed[0].WorkflowError, "boom") {
		t.Fatalf("failed workflows listed: %+v, want countedFailure's, with its error", failed)
	}

	if _, err := c.Actor("countedFailure", "x").RetryWorkflow(ctx, ""); err != nil {
		t.Fatal(err)
	}
	expect("after a retry", map[string]float64{
		`rivet_workflow_steps_total{actor="countedFailure",status="failed"}`:    4,
		`rivet_workflow_steps_total{actor="countedFailure",status="exhausted"}`: 2,
		`rivet_workflow_failures_total{actor="countedFailure"}`:                 2,
	})
}

// A node that runs an embedded etcd member serves the member's metrics on
// its own HTTP port beside its own (the compose files publish no etcd
// port, so this is where an operator scrapes them); a node of an external
// etcd serves none, though its process holds a member (the test's), whose
// figures are not the node's etcd's.
func TestMetricsIncludeTheEmbeddedEtcdMember(t *testing.T) {
	reg, err := rivet.Setup(counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(endpoints []string) *node.Node {
		cfg := node.DefaultLocalConfig(t.TempDir())
		cfg.EtcdEndpoints = endpoints
		cfg.Logger = zap.NewNop()
		n, err := node.Start(ctx, cfg, reg)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	n := start(nil)
	series, sums := scrape(t, n.HTTPAddr())
	if got := series["etcd_server_has_leader"]; got != 1 {
		t.Errorf("etcd_server_has_leader = %v, want 1", got)
	}
	for _, name := range []string{"etcd_mvcc_db_total_size_in_bytes", "etcd_server_quota_backend_bytes", "etcd_disk_wal_fsync_duration_seconds_count"} {
		if sums[name] <= 0 {
			t.Errorf("%s = %v, want above 0", name, sums[name])
		}
	}
	if got := sums["rivet_partitions_owned"]; got == 0 {
		t.Errorf("the node's own metrics are missing beside etcd's: rivet_partitions_owned = %v", got)
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	n = start(etcdtest.Start(t))
	defer n.Stop(ctx)
	_, sums = scrape(t, n.HTTPAddr())
	for name := range sums {
		if strings.HasPrefix(name, "etcd_") {
			t.Errorf("a node of an external etcd serves %s", name)
		}
	}
	if got := sums["rivet_partitions_owned"]; got == 0 {
		t.Errorf("rivet_partitions_owned = %v on the node of an external etcd", got)
	}
}
