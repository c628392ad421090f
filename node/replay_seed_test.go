package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples"
	"github.com/rivet-go/rivet/examples/exampleapi"
	"github.com/rivet-go/rivet/examples/seed"
	"github.com/rivet-go/rivet/node/nodetest"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type tryState struct {
	Done   []string `json:"done"`
	Caught []string `json:"caught"`
}

// tryRun runs each job of queue "jobs" in a try block, in a step named
// work: a job "bad" fails that step, which the block catches; a job
// "fatal" fails the step after the block, which fails the workflow.
func tryRun(work string) func(*workflow.Ctx[tryState]) error {
	return func(c *workflow.Ctx[tryState]) error {
		return c.Loop("jobs", func(c *workflow.Ctx[tryState]) error {
			m, err := workflow.Next[string](c, "next-job")
			if err != nil {
				return err
			}
			f, err := c.Try("attempt", func(c *workflow.Ctx[tryState]) error {
				return c.Step(work, func(*workflow.StepCtx[tryState]) error {
					if m.Body == "bad" {
						return workflow.Critical(errors.New("bad job"))
					}
					return nil
				})
			})
			if err != nil {
				return err
			}
			return c.Step("finish", func(s *workflow.StepCtx[tryState]) error {
				if m.Body == "fatal" {
					return workflow.Critical(errors.New("fatal job"))
				}
				if f != nil {
					s.State.Caught = append(s.State.Caught, f.Error())
				}
				s.State.Done = append(s.State.Done, m.Body)
				return nil
			})
		})
	}
}

var tryActor = rivet.Actor[tryState]{
	Name:   "tryActor",
	Queues: rivet.Queues{"jobs": rivet.QueueOf[string]()},
	Run:    tryRun("work"),
	Actions: rivet.Actions[tryState]{
		"getState": rivet.Query(func(c *rivet.ActionCtx[tryState]) (tryState, error) { return *c.State, nil }),
	},
}

// seedDefs is every example actor and tryActor, with each of deployed in
// place of the one of its name.
func seedDefs(t *testing.T, deployed ...rivet.Definition) []rivet.Definition {
	t.Helper()
	byName := map[string]rivet.Definition{}
	for _, d := range deployed {
		s, err := d.Spec()
		if err != nil {
			t.Fatal(err)
		}
		byName[s.Name] = d
	}
	var defs []rivet.Definition
	for _, d := range append(examples.All(), tryActor) {
		s, err := d.Spec()
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := byName[s.Name]; ok {
			d = c
		}
		defs = append(defs, d)
	}
	return defs
}

// replayEnv is a node hosting seedDefs and a client of it.
type replayEnv struct {
	t       *testing.T
	ctx     context.Context
	c       *client.Client
	replays int
}

var anyIteration = regexp.MustCompile(`~[0-9]+`)

// at returns the last entry of hist whose path is path, where "~N" in
// path stands for any iteration.
func at(hist []workflow.Entry, path string) *workflow.Entry {
	re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(path), "~N", "~[0-9]+") + "$")
	for i := len(hist) - 1; i >= 0; i-- {
		if re.MatchString(hist[i].Path) {
			return &hist[i]
		}
	}
	return nil
}

// exportOf exports the actor's history, through its JSON document as
// rivetctl history --raw writes it.
func (e *replayEnv) exportOf(actor, key string) (*workflow.HistoryExport, []workflow.Entry) {
	e.t.Helper()
	x, err := e.c.Actor(actor, key).NoCreate().ExportHistory(e.ctx)
	if err != nil {
		e.t.Fatalf("export %s %s: %v", actor, key, err)
	}
	b, err := json.Marshal(x)
	if err != nil {
		e.t.Fatal(err)
	}
	if x, err = workflow.DecodeHistoryExport(b); err != nil {
		e.t.Fatalf("export %s %s: %v\n%s", actor, key, err, b)
	}
	hist, err := x.History()
	if err != nil {
		e.t.Fatal(err)
	}
	return x, hist
}

func replayWithin[S any](ctx context.Context, x *workflow.HistoryExport, run func(*workflow.Ctx[S]) error) (error, bool) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := workflowtest.Replay(rctx, x, run)
	return err, rctx.Err() == nil
}

func dump(x *workflow.HistoryExport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %v %s %s at %s:", x.Actor, x.Key, x.WorkflowStatus, x.WorkflowError, x.ExportedAt.Format(time.RFC3339Nano))
	for _, raw := range x.Entries {
		b.WriteString("\n  ")
		b.Write(raw)
	}
	return b.String()
}

// replayUntil exports the actor's history again and again until done
// accepts it, and replays every export with run, the code that recorded
// it: a replay is nil, or for a failed workflow its recorded failure.
// It returns the last export.
func replayUntil[S any](e *replayEnv, actor, key string, run func(*workflow.Ctx[S]) error, what string, done func([]workflow.Entry, *workflow.HistoryExport) bool) *workflow.HistoryExport {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		x, hist := e.exportOf(actor, key)
		err, ended := replayWithin(e.ctx, x, run)
		e.replays++
		switch {
		case !ended:
			e.t.Fatalf("%s %s: the replay did not end within 10 s (%v) of\n%s", actor, key, err, dump(x))
		case x.WorkflowStatus == "failed" && (err == nil || err.Error() != x.WorkflowError):
			e.t.Fatalf("%s %s: a failed workflow replays with %v, want its failure %q", actor, key, err, x.WorkflowError)
		case x.WorkflowStatus != "failed" && err != nil && !failingNow(err, hist):
			e.t.Fatalf("%s %s: its own code replays with %v, want nil; the history:\n%s", actor, key, err, dump(x))
		}
		if done(hist, x) {
			return x
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s %s: not %s within 15 s:\n%s", actor, key, what, dump(x))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failingNow says that err is the failure of a step the history holds as
// failed for good: exported between that step's commit and the status's,
// the workflow is still running and its replay fails as the run does.
func failingNow(err error, hist []workflow.Entry) bool {
	var se *workflow.StepError
	if !errors.As(err, &se) {
		return false
	}
	e := at(hist, se.Path)
	return e != nil && e.Status == workflow.StatusExhausted
}

// once takes the first export: the workflow waits for a message.
func once([]workflow.Entry, *workflow.HistoryExport) bool { return true }

// waits says that the entry at path is there: the workflow got that far
// (a receive that waits records nothing until it takes a message).
func waits(path string) func([]workflow.Entry, *workflow.HistoryExport) bool {
	return func(hist []workflow.Entry, _ *workflow.HistoryExport) bool { return at(hist, path) != nil }
}

func (e *replayEnv) send(actor, key, queue string, body any) {
	e.t.Helper()
	if err := e.c.Actor(actor, key).Send(e.ctx, queue, body); err != nil {
		e.t.Fatalf("send %s %s %s: %v", actor, key, queue, err)
	}
}

func (e *replayEnv) create(actor, key string) {
	e.t.Helper()
	if _, err := e.c.Actor(actor, key).Call(e.ctx, "getState"); err != nil {
		e.t.Fatalf("%s %s getState: %v", actor, key, err)
	}
}

// divergence replays run against x and returns the *DivergenceError it
// must find.
func divergence[S any](t *testing.T, ctx context.Context, x *workflow.HistoryExport, run func(*workflow.Ctx[S]) error) *workflow.DivergenceError {
	t.Helper()
	err, ended := replayWithin(ctx, x, run)
	var de *workflow.DivergenceError
	if !ended || !errors.As(err, &de) {
		t.Fatalf("%s %v: the changed code replays with %v (ended %v), want a *workflow.DivergenceError; the history:\n%s", x.Actor, x.Key, err, ended, dump(x))
	}
	return de
}

// Every seed example's workflow, exported from a real node at many points
// of its scenario (waiting for a message, asleep, in a join or race, after
// it looped, with its loop pruned, in a try block, failed, cancelled),
// replays with its own code to nil, or a failed one to its recorded
// failure: a
// replayer that flagged code that did not change would not be trusted.
// Changed code (a receive renamed in a pruned loop, a race branch's sleep
// renamed, a reordered pair, a step renamed in a try block) replays to the
// very divergence the node fails the run with once that code is deployed
// on it; a step renamed in a join that settled replays to nil, and the
// node's run goes on.
func TestReplayAgreesWithTheNodeOnEverySeedExample(t *testing.T) {
	api := exampleapi.NewTestServer(map[string]int{"/users": 3, "/orders": 5, "/revenue": 7, "/invoices": 11})
	t.Cleanup(api.Close)
	t.Setenv(exampleapi.EnvVar, api.URL)
	dir := t.TempDir()
	c, stop := nodetest.Start(t, dir, seedDefs(t)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := &replayEnv{t: t, ctx: ctx, c: c}

	// Timers: asleep until a reminder's time, then more reminders than a
	// loop keeps (two prune intervals), so that it is pruned.
	reminder := seed.ReminderActor.Run
	e.send("reminderActor", "r", "reminders", seed.Reminder{Text: "first", At: time.Now().Add(300 * time.Millisecond).UnixMilli()})
	replayUntil(e, "reminderActor", "r", reminder, "asleep until the reminder", func(hist []workflow.Entry, _ *workflow.HistoryExport) bool {
		s := at(hist, "reminder-loop/~0/wait-until-reminder")
		return s != nil && s.Status == workflow.StatusPending
	})
	replayUntil(e, "reminderActor", "r", reminder, "past the reminder", waits("reminder-loop/~0/record-reminder"))
	for i := range 45 {
		e.send("reminderActor", "r", "reminders", seed.Reminder{Text: fmt.Sprint("r", i)})
	}
	replayUntil(e, "reminderActor", "r", reminder, "past 45 more reminders with its loop pruned", func(hist []workflow.Entry, _ *workflow.HistoryExport) bool {
		l := at(hist, "reminder-loop")
		return l != nil && l.PrunedBefore > 0 && at(hist, "reminder-loop/~45/record-reminder") != nil
	})

	// Timeouts: a step with a timeout, twice.
	timeout := seed.TimeoutActor.Run
	e.create("timeoutActor", "t")
	replayUntil(e, "timeoutActor", "t", timeout, "exported", once)
	e.send("timeoutActor", "t", "charge", seed.ChargeRequest{OrderID: "o1"})
	replayUntil(e, "timeoutActor", "t", timeout, "waiting for a second charge", waits("charge-loop/~0/save-charge"))
	e.send("timeoutActor", "t", "charge", seed.ChargeRequest{OrderID: "o2"})
	replayUntil(e, "timeoutActor", "t", timeout, "waiting for a third charge", waits("charge-loop/~1/save-charge"))

	// Joins: the dashboard's, fan-in/out's, scatter-gather's (calling
	// shard actors) and the orchestrator's (calling its children).
	dashboard := seed.DashboardActor.Run
	e.create("dashboardActor", "d")
	replayUntil(e, "dashboardActor", "d", dashboard, "exported", once)
	e.send("dashboardActor", "d", "refresh", seed.Refresh{})
	replayUntil(e, "dashboardActor", "d", dashboard, "waiting for a second refresh", waits("dashboard-loop/~0/save-summary"))

	fan := seed.FanInOutActor.Run
	e.create("fanInOutActor", "f")
	replayUntil(e, "fanInOutActor", "f", fan, "exported", once)
	e.send("fanInOutActor", "f", "refresh", map[string]any{})
	replayUntil(e, "fanInOutActor", "f", fan, "waiting for a second refresh", waits("join-loop/~0/merge-results"))

	scatter := seed.ScatterGatherActor.Run
	e.send("scatterGatherActor", "s", "scatter", seed.ScatterMessage{Input: 2})
	replayUntil(e, "scatterGatherActor", "s", scatter, "waiting for a second scatter", waits("scatter-gather-loop/~0/aggregate"))
	e.send("scatterGatherActor", "s", "scatter", seed.ScatterMessage{Input: 3})
	replayUntil(e, "scatterGatherActor", "s", scatter, "waiting for a third scatter", waits("scatter-gather-loop/~1/aggregate"))

	orch := seed.OrchestratorActor.Run
	e.send("orchestratorActor", "o", "batch", seed.BatchMessage{Payload: 2})
	replayUntil(e, "orchestratorActor", "o", orch, "waiting for a second batch", waits("orchestrate-loop/~0/reconcile"))

	// Coordinator and worker.
	coord := seed.CoordinatorActor.Run
	e.send("coordinatorActor", "c", "task", seed.TaskMessage{TaskID: "t1", WorkerID: "w1", Value: 21})
	replayUntil(e, "coordinatorActor", "c", coord, "waiting for a second task", waits("orchestrator-loop/~0/record-result"))
	e.send("coordinatorActor", "c", "task", seed.TaskMessage{TaskID: "t2", WorkerID: "w2", Value: 2})
	replayUntil(e, "coordinatorActor", "c", coord, "waiting for a third task", waits("orchestrator-loop/~1/record-result"))

	// Poll with backoff: it loops by itself, asleep between polls.
	poll := seed.PollBackoffActor.Run
	e.create("pollBackoffActor", "p")
	replayUntil(e, "pollBackoffActor", "p", poll, "asleep after its fourth poll", waits("poll-loop/~3/retry-delay"))

	// Races: a bid against the auction's end, and the primary service
	// against a timer (exported while both run).
	auction := seed.AuctionActor.Run
	for _, key := range []string{"open", "sold"} {
		e.create("auctionActor", key)
		replayUntil(e, "auctionActor", key, auction, "racing", func(hist []workflow.Entry, _ *workflow.HistoryExport) bool {
			s := at(hist, "bid-or-expire/expire/auction-timeout")
			return s != nil && s.Status == workflow.StatusPending
		})
	}
	e.send("auctionActor", "sold", "bids", seed.Bid{Amount: 100})
	replayUntil(e, "auctionActor", "sold", auction, "completed", func(_ []workflow.Entry, x *workflow.HistoryExport) bool {
		return x.WorkflowStatus == "completed"
	})

	fallback := seed.TimeoutFallbackActor.Run
	e.create("timeoutFallbackActor", "tf")
	replayUntil(e, "timeoutFallbackActor", "tf", fallback, "exported", once)
	e.send("timeoutFallbackActor", "tf", "request", map[string]any{})
	replayUntil(e, "timeoutFallbackActor", "tf", fallback, "waiting for a second request", waits("timeout-loop/~0/record-choice"))

	// A try block that caught a failure, and a workflow that failed.
	try := tryActor.Run
	for _, job := range []string{"ok", "bad", "ok"} {
		e.send("tryActor", "t1", "jobs", job)
	}
	replayUntil(e, "tryActor", "t1", try, "waiting for a fourth job", waits("jobs/~2/finish"))
	for _, job := range []string{"ok", "bad", "fatal"} {
		e.send("tryActor", "dead", "jobs", job)
	}
	replayUntil(e, "tryActor", "dead", try, "failed", func(_ []workflow.Entry, x *workflow.HistoryExport) bool {
		return x.WorkflowStatus == "failed"
	})
	// A cancelled workflow replays to nil: a retry of it runs on.
	e.send("tryActor", "gone", "jobs", "ok")
	replayUntil(e, "tryActor", "gone", try, "past a job", waits("jobs/~0/finish"))
	if _, err := e.c.Actor("tryActor", "gone").CancelWorkflow(ctx, "replay test"); err != nil {
		t.Fatal(err)
	}
	replayUntil(e, "tryActor", "gone", try, "cancelled", func(_ []workflow.Entry, x *workflow.HistoryExport) bool {
		return x.WorkflowStatus == "cancelled"
	})
	t.Logf("%d exports replayed", e.replays)

	// Changed code, against the histories of runs that wait for what
	// comes next (the node's are the same when it restarts). The step
	// renamed in the join branch is in joins that settled.
	reminderV2 := func(ctx *workflow.Ctx[seed.ReminderState]) error {
		return ctx.Loop("reminder-loop", func(loopCtx *workflow.Ctx[seed.ReminderState]) error {
			message, err := workflow.Next[seed.Reminder](loopCtx, "wait-next-reminder")
			if err != nil {
				return err
			}
			if err := loopCtx.SleepUntil("wait-until-reminder", time.UnixMilli(max(loopCtx.Now().UnixMilli(), message.Body.At))); err != nil {
				return err
			}
			return loopCtx.Step("record-reminder", func(step *workflow.StepCtx[seed.ReminderState]) error {
				step.State.Fired = append(step.State.Fired, message.Body.Text)
				return nil
			})
		})
	}
	scatterV2 := func(ctx *workflow.Ctx[seed.ScatterGatherState]) error {
		return ctx.Loop("scatter-gather-loop", func(loopCtx *workflow.Ctx[seed.ScatterGatherState]) error {
			messages, err := workflow.NextBatch[seed.ScatterMessage](loopCtx, "wait-scatter", workflow.NextOptions{Timeout: 30 * time.Second})
			if err != nil || len(messages) == 0 {
				return err
			}
			shard := func(name string) func(*workflow.Ctx[seed.ScatterGatherState]) (int, error) {
				return func(joinCtx *workflow.Ctx[seed.ScatterGatherState]) (int, error) {
					return workflow.Do(joinCtx, name, func(*workflow.DoCtx) (int, error) { return 0, nil })
				}
			}
			if _, err := workflow.Join(loopCtx, "gather", workflow.Branches[seed.ScatterGatherState, int]{
				"shardA": shard("call-shard-a"), "shardB": shard("call-shard-b-v2"), "shardC": shard("call-shard-c"),
			}); err != nil {
				return err
			}
			return loopCtx.Step("aggregate", func(*workflow.StepCtx[seed.ScatterGatherState]) error { return nil })
		})
	}
	coordV2 := func(ctx *workflow.Ctx[seed.CoordinatorState]) error {
		return ctx.Loop("orchestrator-loop", func(loopCtx *workflow.Ctx[seed.CoordinatorState]) error {
			messages, err := workflow.NextBatch[seed.TaskMessage](loopCtx, "wait-task", workflow.NextOptions{Timeout: 30 * time.Second})
			if err != nil || len(messages) == 0 {
				return err
			}
			if err := loopCtx.Step("record-result", func(*workflow.StepCtx[seed.CoordinatorState]) error { return nil }); err != nil {
				return err
			}
			_, err = workflow.Step(loopCtx, "dispatch-rpc", func(*workflow.StepCtx[seed.CoordinatorState]) (int, error) { return 0, nil })
			return err
		})
	}
	auctionV2 := func(ctx *workflow.Ctx[seed.AuctionState]) error {
		if err := ctx.Step("list-item", func(*workflow.StepCtx[seed.AuctionState]) error { return nil }); err != nil {
			return err
		}
		_, _, err := workflow.Race(ctx, "bid-or-expire", []workflow.RaceBranch[seed.AuctionState, int]{
			{Name: "bid", Run: func(branchCtx *workflow.Ctx[seed.AuctionState]) (int, error) {
				bid, err := workflow.Next[seed.Bid](branchCtx, "wait-bid")
				return bid.Body.Amount, err
			}},
			{Name: "expire", Run: func(branchCtx *workflow.Ctx[seed.AuctionState]) (int, error) {
				return 0, branchCtx.Sleep("auction-deadline", seed.AuctionTimeout)
			}},
		})
		return err
	}
	pollV2 := func(ctx *workflow.Ctx[seed.PollBackoffState]) error {
		return ctx.Loop("poll-loop", func(loopCtx *workflow.Ctx[seed.PollBackoffState]) error {
			success, err := workflow.Step(loopCtx, "poll-target", func(*workflow.StepCtx[seed.PollBackoffState]) (bool, error) { return false, nil })
			if err != nil {
				return err
			}
			if success {
				if err := loopCtx.Step("reset-backoff", func(*workflow.StepCtx[seed.PollBackoffState]) error { return nil }); err != nil {
					return err
				}
				return loopCtx.Sleep("healthy-interval", time.Second)
			}
			delay, err := workflow.Step(loopCtx, "double-backoff", func(*workflow.StepCtx[seed.PollBackoffState]) (int, error) { return 100, nil })
			if err != nil {
				return err
			}
			return loopCtx.Sleep("retry-delay", time.Duration(delay)*time.Millisecond)
		})
	}
	dashboardV2 := func(ctx *workflow.Ctx[seed.DashboardState]) error {
		return ctx.Loop("dashboard-loop", func(loopCtx *workflow.Ctx[seed.DashboardState]) error {
			if _, err := workflow.Next[seed.Refresh](loopCtx, "wait-refresh"); err != nil {
				return err
			}
			v, err := loopCtx.GetVersion("rename-save", 2)
			if err != nil {
				return err
			}
			fetch := func(name string) func(*workflow.Ctx[seed.DashboardState]) (float64, error) {
				return func(branchCtx *workflow.Ctx[seed.DashboardState]) (float64, error) {
					return workflow.Do(branchCtx, name, func(*workflow.DoCtx) (float64, error) { return 1, nil })
				}
			}
			if _, err := workflow.Join(loopCtx, "fetch-summary", workflow.Branches[seed.DashboardState, float64]{
				"users": fetch("fetch-users"), "orders": fetch("fetch-orders"), "revenue": fetch("fetch-revenue"),
			}); err != nil {
				return err
			}
			name := "store-summary"
			if v == 1 {
				name = "save-summary"
			}
			return loopCtx.Step(name, func(*workflow.StepCtx[seed.DashboardState]) error { return nil })
		})
	}
	tryV2 := tryRun("work-v2")

	// What a replay does not run is not checked, on a node either: a
	// settled join returns its recorded results, and a sealed iteration
	// takes the old path of a gate.

	x, _ := e.exportOf("scatterGatherActor", "s")
	if err, ended := replayWithin(ctx, x, scatterV2); err != nil || !ended {
		t.Fatalf("a step renamed in a settled join replays with %v (ended %v), want nil", err, ended)
	}
	x, _ = e.exportOf("dashboardActor", "d")
	if err, ended := replayWithin(ctx, x, dashboardV2); err != nil || !ended {
		t.Fatalf("a rename gated with GetVersion replays with %v (ended %v), want nil", err, ended)
	}
	want := []changed{
		divergedAt(e, "reminderActor", "r", reminderV2),
		divergedAt(e, "pollBackoffActor", "p", pollV2),
		divergedAt(e, "coordinatorActor", "c", coordV2),
		divergedAt(e, "auctionActor", "open", auctionV2),
		divergedAt(e, "tryActor", "t1", tryV2),
	}

	// Deploy the changed code: the node's replay of each run fails it
	// where the replayer said, and the export of the failed run replays
	// to that failure; the runs the replayer passed go on.
	stop()
	r2, p2, s2, d2, c2, a2, t2 := seed.ReminderActor, seed.PollBackoffActor, seed.ScatterGatherActor, seed.DashboardActor, seed.CoordinatorActor, seed.AuctionActor, tryActor
	r2.Run, p2.Run, s2.Run, d2.Run, c2.Run, a2.Run, t2.Run = reminderV2, pollV2, scatterV2, dashboardV2, coordV2, auctionV2, tryV2
	e.c, _ = nodetest.Start(t, dir, seedDefs(t, r2, p2, s2, d2, c2, a2, t2)...)
	for _, w := range want {
		e.create(w.actor, w.key) // wakes it: its workflow replays
	}
	e.send("scatterGatherActor", "s", "scatter", seed.ScatterMessage{Input: 4})
	replayUntil(e, "scatterGatherActor", "s", scatterV2, "past a scatter with the changed code", waits("scatter-gather-loop/~2/aggregate"))
	e.send("dashboardActor", "d", "refresh", seed.Refresh{})
	replayUntil(e, "dashboardActor", "d", dashboardV2, "past a refresh on the new path", waits("dashboard-loop/~1/store-summary"))
	for _, w := range want {
		w.check()
	}
}

// changed is a run in flight that changed code diverges: de is what the
// replayer said, and check compares it with what the node says once that
// code is deployed.
type changed struct {
	actor, key string
	de         *workflow.DivergenceError
	check      func()
}

func divergedAt[S any](e *replayEnv, actor, key string, run func(*workflow.Ctx[S]) error) changed {
	e.t.Helper()
	x, _ := e.exportOf(actor, key)
	de := divergence(e.t, e.ctx, x, run)
	return changed{actor: actor, key: key, de: de, check: func() {
		e.t.Helper()
		// Until the node commits the failure, an export still says
		// running; the changed code's replay of it must already end in
		// the divergence the replayer named.
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			x, _ := e.exportOf(actor, key)
			if x.WorkflowStatus == "failed" {
				break
			}
			if err, ended := replayWithin(e.ctx, x, run); !ended || err == nil || err.Error() != de.Error() {
				e.t.Fatalf("%s %s: deployed, not yet failed, the changed code replays with %v (ended %v), want\n  %s", actor, key, err, ended, de.Error())
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("%s %s: not failed by the deploy within 15 s:\n%s", actor, key, dump(x))
			}
		}
		x := replayUntil(e, actor, key, run, "failed by the deploy", func(_ []workflow.Entry, x *workflow.HistoryExport) bool {
			return x.WorkflowStatus == "failed"
		})
		if x.WorkflowError != de.Error() {
			e.t.Errorf("%s %s: the node failed the changed code's run with\n  %s\nthe replayer said\n  %s", actor, key, x.WorkflowError, de.Error())
		}
	}}
}

type holdState struct{}

// holdRun joins a branch that runs step fast and one that sleeps an hour
// first, then runs step flaky, which fails and is retried an hour later.
func holdRun(fast, flaky string) func(*workflow.Ctx[holdState]) error {
	return func(c *workflow.Ctx[holdState]) error {
		if _, err := workflow.Join(c, "par", workflow.Branches[holdState, int]{
			"fast": func(c *workflow.Ctx[holdState]) (int, error) {
				return workflow.Step(c, fast, func(*workflow.StepCtx[holdState]) (int, error) { return 1, nil })
			},
			"slow": func(c *workflow.Ctx[holdState]) (int, error) {
				return 2, c.Sleep("nap", time.Hour)
			},
		}); err != nil {
			return err
		}
		return c.Step(flaky, func(*workflow.StepCtx[holdState]) error { return nil })
	}
}

func retryRun(flaky string) func(*workflow.Ctx[holdState]) error {
	return func(c *workflow.Ctx[holdState]) error {
		if err := c.Step("pre", func(*workflow.StepCtx[holdState]) error { return nil }); err != nil {
			return err
		}
		return c.StepWith(workflow.StepOptions{Name: flaky, MaxRetries: 5, RetryBackoffBase: time.Hour, RetryBackoffMax: time.Hour},
			func(*workflow.StepCtx[holdState]) error { return errors.New("down") })
	}
}

// Histories exported while a join waits on one branch and the other's
// step is recorded, and while a failed step waits to be retried, replay
// with their code to nil, and a rename of that step to the divergence the
// node fails the run with once the rename is deployed.
func TestReplayAgreesWithTheNodeMidJoinAndMidRetry(t *testing.T) {
	hold := rivet.Actor[holdState]{Name: "hold", Run: holdRun("f1", "after"),
		Actions: rivet.Actions[holdState]{"getState": rivet.Query(func(c *rivet.ActionCtx[holdState]) (holdState, error) { return *c.State, nil })}}
	retry := rivet.Actor[holdState]{Name: "retry", Run: retryRun("flaky"),
		Actions: rivet.Actions[holdState]{"getState": rivet.Query(func(c *rivet.ActionCtx[holdState]) (holdState, error) { return *c.State, nil })}}
	dir := t.TempDir()
	c, stop := nodetest.Start(t, dir, hold, retry)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := &replayEnv{t: t, ctx: ctx, c: c}
	e.create("hold", "h")
	replayUntil(e, "hold", "h", hold.Run, "mid-join", waits("par/fast/f1"))
	e.create("retry", "r")
	replayUntil(e, "retry", "r", retry.Run, "waiting to retry", func(hist []workflow.Entry, _ *workflow.HistoryExport) bool {
		f := at(hist, "flaky")
		return f != nil && f.Status == workflow.StatusFailed
	})
	want := []changed{
		divergedAt(e, "hold", "h", holdRun("f1-renamed", "after")),
		divergedAt(e, "retry", "r", retryRun("flaky-renamed")),
	}
	stop()
	hold.Run, retry.Run = holdRun("f1-renamed", "after"), retryRun("flaky-renamed")
	e.c, _ = nodetest.Start(t, dir, hold, retry)
	for _, w := range want {
		e.create(w.actor, w.key)
		w.check()
	}
}

// A workflow that reads Ctx.Now before any entry that records a time (a
// deadline computed as it starts) reads when it started, on the node's
// first run, on its replay after a restart, and in a replay of the
// exported history: not the clock of whichever run replays it.
func TestNowAtAWorkflowsStartIsTheSameOnEveryReplay(t *testing.T) {
	var mu sync.Mutex
	var seen []time.Time // by the node's runs and the last replay, not replayUntil's
	runNoting := func(note bool) func(c *workflow.Ctx[holdState]) error {
		return func(c *workflow.Ctx[holdState]) error {
			if note {
				mu.Lock()
				seen = append(seen, c.Now())
				mu.Unlock()
			}
			if _, err := c.GetVersion("v", 1); err != nil {
				return err
			}
			// Recorded at once with its deadline, and the start with it.
			_, err := workflow.Next[int](c, "wait", workflow.NextOptions{Names: []string{"never"}, Timeout: time.Hour})
			return err
		}
	}
	run := runNoting(true)
	seenNow := func(n int) []time.Time {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			got := append([]time.Time(nil), seen...)
			mu.Unlock()
			if len(got) >= n {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("the workflow started %d times, want %d", len(got), n)
			}
		}
	}
	actor := rivet.Actor[holdState]{Name: "clocked", Run: run,
		Queues:  rivet.Queues{"never": rivet.QueueOf[int]()},
		Actions: rivet.Actions[holdState]{"getState": rivet.Query(func(c *rivet.ActionCtx[holdState]) (holdState, error) { return *c.State, nil })}}
	dir := t.TempDir()
	c, stop := nodetest.Start(t, dir, actor)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := &replayEnv{t: t, ctx: ctx, c: c}
	e.create("clocked", "k")
	replayUntil(e, "clocked", "k", runNoting(false), "waiting", waits("wait"))
	first := seenNow(1)[0]
	// The restart's replay runs at least this much later than the first
	// run, so that its clock cannot read the same.
	for time.Since(first) < 50*time.Millisecond {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	before := len(seenNow(1))
	e.c, _ = nodetest.Start(t, dir, actor)
	e.create("clocked", "k")
	seenNow(before + 1) // the restarted node's run
	x, _ := e.exportOf("clocked", "k")
	if err, ended := replayWithin(ctx, x, run); err != nil || !ended {
		t.Fatalf("the export replays with %v (ended %v)", err, ended)
	}
	for i, at := range seenNow(1) {
		if !at.Equal(first) {
			t.Errorf("Ctx.Now at the start of run %d (the node's first, replays by the node and of the export) is %v after the first run's, want 0s", i+1, at.Sub(first))
		}
	}
}
