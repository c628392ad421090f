package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/workflow"
)

type chargeState struct {
	Charged int `json:"charged"`
}

// The workflow commands against a real node (embedded etcd): a workflow
// whose step exhausts its retries is failed, listed by `actors --failed`
// with its error, shown by `history`, and `workflow retry` replays it once
// the step can succeed, which takes it off the list.
func TestWorkflowCommandsOnARealNode(t *testing.T) {
	var cardUp atomic.Bool
	reg, err := rivet.Setup(rivet.Actor[chargeState]{
		Name: "charger",
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			_, err := workflow.StepOpts(ctx, workflow.StepOptions{Name: "charge-card", MaxRetries: 1, RetryBackoffBase: time.Millisecond},
				func(s *workflow.StepCtx[chargeState]) (int, error) {
					if !cardUp.Load() {
						return 0, rivet.UserError("card.down", "card service down", nil)
					}
					s.State.Charged++
					return s.State.Charged, nil
				})
			return err
		},
	}, rivet.Actor[chargeState]{
		Name:   "napper",
		Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			_, err := workflow.Next[struct{}](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}, Timeout: time.Hour})
			return err
		},
	}, rivet.Actor[chargeState]{
		// Takes one job and sleeps without completing it.
		Name:   "taker",
		Queues: rivet.Queues{"jobs": rivet.QueueOf[struct{}]()},
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			if _, err := workflow.Next[struct{}](ctx, "take", workflow.NextOptions{Names: []string{"jobs"}}); err != nil {
				return err
			}
			return ctx.Sleep("nap", time.Hour)
		},
	}, rivet.Actor[chargeState]{
		// Steps whose names sort apart from the order they ran in, then a
		// race that one branch wins.
		Name:   "racer",
		Queues: rivet.Queues{"later": rivet.QueueOf[struct{}]()},
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			for i := 1; i <= 11; i++ {
				if _, err := workflow.Step(ctx, fmt.Sprintf("step-%d", i), func(*workflow.StepCtx[chargeState]) (int, error) { return i, nil }); err != nil {
					return err
				}
			}
			// A try block records no entry of its own, only those in it.
			if _, err := ctx.Try("guarded", func(c *workflow.Ctx[chargeState]) error {
				_, err := workflow.Step(c, "inside", func(*workflow.StepCtx[chargeState]) (int, error) { return 0, nil })
				return err
			}); err != nil {
				return err
			}
			if _, err := workflow.Step(ctx, "after-try", func(*workflow.StepCtx[chargeState]) (int, error) { return 0, nil }); err != nil {
				return err
			}
			_, _, err := workflow.Race(ctx, "fast-or-slow", []workflow.RaceBranch[chargeState, string]{
				{Name: "slow", Run: func(c *workflow.Ctx[chargeState]) (string, error) { return "slow", c.Sleep("nap", time.Hour) }},
				{Name: "fast", Run: func(c *workflow.Ctx[chargeState]) (string, error) {
					return workflow.Step(c, "answer", func(*workflow.StepCtx[chargeState]) (string, error) { return "quick", nil })
				}},
			})
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)

	// A type with no actors yet is listed as such, not as a table header.
	rivetctl(t, addr, "actors", "charger").want(t, 0, "no actors named charger\n")
	rivetctl(t, addr, "actors").want(t, 0, "no actors\n")
	rivetctl(t, addr, "actors", "charger", "-o", "json").want(t, 0, "[]\n")

	if r := rivetctl(t, addr, "create", "charger", "order-1"); r.code != 0 || !strings.HasPrefix(r.stdout, "created charger order-1 ") {
		t.Fatalf("create: %+v", r)
	}
	deadline := time.Now().Add(30 * time.Second)
	var failed []client.ActorInfo
	for {
		r := rivetctl(t, addr, "actors", "--failed", "-o", "json")
		if r.code != 0 {
			t.Fatalf("actors --failed: %+v", r)
		}
		if err := json.Unmarshal([]byte(r.stdout), &failed); err != nil {
			t.Fatal(err)
		}
		if len(failed) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(failed) != 1 || failed[0].Name != "charger" || failed[0].Key[0] != "order-1" ||
		!strings.Contains(failed[0].WorkflowError, "card service down") || failed[0].WorkflowFailedAt.IsZero() {
		t.Fatalf("actors --failed = %+v, want charger order-1 with its error", failed)
	}
	r := rivetctl(t, addr, "actors", "--failed")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.code != 0 || len(lines) != 2 ||
		!strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "ERROR") ||
		!strings.HasPrefix(lines[1], "charger  order-1") || !strings.Contains(lines[1], "card service down") {
		t.Fatalf("actors --failed:\n%s (%+v)", r.stdout, r)
	}
	r = rivetctl(t, addr, "history", "charger", "order-1")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "workflow  failed\n") ||
		!strings.Contains(r.stdout, "charge-card") || !strings.Contains(r.stdout, "exhausted") || !strings.Contains(r.stdout, "error (card.down): card service down") {
		t.Fatalf("history:\n%s (%+v)", r.stdout, r)
	}
	cardUp.Store(true)
	rivetctl(t, addr, "workflow", "retry", "charger", "order-1").want(t, 0, "workflow restarted: 1 history entry removed\n")
	rivetctl(t, addr, "actors", "charger", "--failed", "-o", "json").want(t, 0, "[]\n")
	deadline = time.Now().Add(30 * time.Second)
	for !strings.HasPrefix(rivetctl(t, addr, "history", "charger", "order-1").stdout, "workflow  completed\n") {
		if time.Now().After(deadline) {
			t.Fatalf("the retried workflow did not complete: %+v", rivetctl(t, addr, "history", "charger", "order-1"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	rivetctl(t, addr, "state", "charger", "order-1").want(t, 0, "{\n  \"charged\": 1\n}\n")
	rivetctl(t, addr, "workflow", "retry", "charger", "nope").
		wantErr(t, 1, `rivetctl: not found: actor charger ["nope"] does not exist (NOT_FOUND actor.not_found)`)

	// inspect says what a sleeping workflow waits for.
	rivetctl(t, addr, "create", "napper", "k")
	deadline = time.Now().Add(30 * time.Second)
	var in client.Inspection
	for in.WorkflowStatus != "sleeping" {
		if time.Now().After(deadline) {
			t.Fatalf("napper never slept: %+v", in)
		}
		time.Sleep(20 * time.Millisecond)
		r := rivetctl(t, addr, "inspect", "napper", "k", "-o", "json")
		if err := json.Unmarshal([]byte(r.stdout), &in); err != nil {
			t.Fatalf("inspect -o json: %v (%+v)", err, r)
		}
	}
	if d := time.Until(in.WorkflowWakeAt); d < 59*time.Minute || d > time.Hour || len(in.WorkflowWakeQueues) != 1 || in.WorkflowWakeQueues[0] != "go" {
		t.Fatalf("inspect -o json: wakes at %v (in %v) on %v, want in an hour or on go", in.WorkflowWakeAt, d, in.WorkflowWakeQueues)
	}
	want := "workflow   sleeping (wakes at " + in.WorkflowWakeAt.UTC().Format(time.RFC3339) + " or on a message in go)\n"
	if r := rivetctl(t, addr, "inspect", "napper", "k"); r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Fatalf("inspect:\n%s\nwant a line %q", r.stdout, want)
	}
	want = "workflow  sleeping (wakes at " + in.WorkflowWakeAt.UTC().Format(time.RFC3339) + " or on a message in go)\n"
	if r := rivetctl(t, addr, "history", "napper", "k"); r.code != 0 || !strings.HasPrefix(r.stdout, want) {
		t.Fatalf("history:\n%s\nwant a first line %q", r.stdout, want)
	}

	// history lists entries in the order the workflow made them (step-10
	// after step-9, where their keys sort it after step-1), and says which
	// branch won a race.
	rivetctl(t, addr, "create", "racer", "r")
	deadline = time.Now().Add(30 * time.Second)
	for !strings.HasPrefix(rivetctl(t, addr, "history", "racer", "r").stdout, "workflow  completed\n") {
		if time.Now().After(deadline) {
			t.Fatalf("racer did not complete: %+v", rivetctl(t, addr, "history", "racer", "r"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	r = rivetctl(t, addr, "history", "racer", "r")
	var paths []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n")[2:] {
		paths = append(paths, strings.Fields(line)[0])
	}
	wantPaths := []string{"step-1", "step-2", "step-3", "step-4", "step-5", "step-6", "step-7", "step-8", "step-9", "step-10", "step-11", "guarded/inside", "after-try", "fast-or-slow", "fast-or-slow/fast/answer"}
	if !slices.Equal(paths, wantPaths) {
		t.Fatalf("history paths %v, want %v:\n%s", paths, wantPaths, r.stdout)
	}
	if !strings.Contains(r.stdout, `won by fast: "quick"`) {
		t.Fatalf("history does not say which branch won the race:\n%s", r.stdout)
	}
	var h client.History
	if r := rivetctl(t, addr, "history", "racer", "r", "-o", "json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &h) != nil || h.Entries[13].Winner != "fast" {
		t.Fatalf("history -o json: %+v (%+v)", h, r)
	}

	// A message for an actor whose workflow has ended is queued, and the
	// sender is told what takes it: for a completed workflow, a retry from
	// an entry before its end (one without --from replays it to the same
	// end, and the message stays).
	r = rivetctl(t, addr, "send", "racer", "r", "later", "{}")
	if r.code != 0 || r.stdout != "enqueued\n" ||
		r.stderr != "rivetctl: note: the actor's workflow has completed: nothing takes message 1 unless the workflow runs again from an entry before its end (rivetctl workflow retry --from ENTRY; a retry without --from replays it to the same end)\n" {
		t.Fatalf("send to an ended workflow: %+v", r)
	}
	var sent client.SendResult
	if r := rivetctl(t, addr, "send", "racer", "r", "later", "{}", "-o", "json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &sent) != nil || sent.WorkflowStatus != "completed" || r.stderr != "" {
		t.Fatalf("send -o json to an ended workflow: %+v (%+v)", sent, r)
	}
	// While it runs, nothing is said.
	rivetctl(t, addr, "send", "napper", "k", "go", "{}").want(t, 0, "enqueued\n")

	// A wait that runs out says whether the workflow took the message.
	rivetctl(t, addr, "create", "taker", "t")
	rivetctl(t, addr, "send", "taker", "t", "jobs", "{}", "--wait", "--wait-timeout", "2s").
		wantErr(t, 1, "rivetctl: not completed within the wait: the workflow took message 1 and has not completed it (only a workflow's Message.Complete answers a waiting sender)")
	rivetctl(t, addr, "send", "taker", "t", "jobs", "{}", "--wait", "--wait-timeout", "200ms").
		wantErr(t, 1, "rivetctl: not completed within the wait: message 2 is still queued")

	// workflow cancel stops a workflow for good; retry resumes it.
	rivetctl(t, addr, "create", "napper", "c")
	deadline = time.Now().Add(30 * time.Second)
	for !strings.HasPrefix(rivetctl(t, addr, "history", "napper", "c").stdout, "workflow  sleeping") {
		if time.Now().After(deadline) {
			t.Fatalf("napper never slept: %+v", rivetctl(t, addr, "history", "napper", "c"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	rivetctl(t, addr, "workflow", "retry", "napper", "c").
		wantErr(t, 1, `rivetctl: failed precondition: the workflow of napper ["c"] is sleeping: only a failed, completed or cancelled workflow can be retried (a running one can be cancelled first) (FAILED_PRECONDITION workflow.not_ended)`)
	rivetctl(t, addr, "workflow", "cancel", "napper", "c", "--reason", "no longer needed").want(t, 0, "workflow cancelled (it was sleeping)\n")
	r = rivetctl(t, addr, "history", "napper", "c")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "workflow  cancelled\nerror     cancelled: no longer needed\n") {
		t.Fatalf("history of a cancelled workflow:\n%s (%+v)", r.stdout, r)
	}
	rivetctl(t, addr, "workflow", "cancel", "napper", "c", "-o", "json").want(t, 0, `{"previous_status":"cancelled"}`+"\n")
	rivetctl(t, addr, "workflow", "cancel", "napper", "c").want(t, 0, "workflow already cancelled\n")
	r = rivetctl(t, addr, "send", "napper", "c", "go", "{}")
	if r.code != 0 || r.stdout != "enqueued\n" ||
		r.stderr != "rivetctl: note: the actor's workflow was cancelled: nothing takes message 1 until it is retried (rivetctl workflow retry)\n" {
		t.Fatalf("send to a cancelled workflow: %+v", r)
	}
	rivetctl(t, addr, "workflow", "cancel", "racer", "r").
		wantErr(t, 1, `rivetctl: failed precondition: the workflow of racer ["r"] has completed: only a running or sleeping workflow can be cancelled (FAILED_PRECONDITION workflow.ended)`)
	r = rivetctl(t, addr, "workflow", "retry", "napper", "c")
	// Its note says it resumes, not that it replays its history to the
	// same end as a failed or completed one would.
	if r.code != 0 || r.stdout != "workflow restarted: 0 history entries removed\n" ||
		r.stderr != "rivetctl: note: the workflow was cancelled: it resumes where it stopped, with the code deployed now; --from ENTRY runs it again from an entry\n" {
		t.Fatalf("retry of a cancelled workflow: %+v", r)
	}
	// --from an entry the history does not hold is refused, and nothing
	// is retried.
	rivetctl(t, addr, "workflow", "retry", "racer", "r", "--from", "fast-or-slow/slow/nap").
		wantErr(t, 1, `rivetctl: invalid argument: no such history entry: "fast-or-slow/slow/nap" (INVALID_ARGUMENT request.invalid_argument)`)
	// A try block records no entry of its own: the refusal names the
	// entry to retry from instead.
	rivetctl(t, addr, "workflow", "retry", "racer", "r", "--from", "guarded").
		wantErr(t, 1, `rivetctl: invalid argument: no such history entry: "guarded", which holds entries but records none of its own (a try block, a branch or a loop iteration): retry from its first entry, "guarded/inside" (INVALID_ARGUMENT request.invalid_argument)`)
	// With -o json the note comes too, as JSON on stderr.
	r = rivetctl(t, addr, "-o", "json", "workflow", "retry", "racer", "r")
	if r.code != 0 || r.stdout != `{"removed":0}`+"\n" || !strings.HasPrefix(r.stderr, `{"note":"no entry was deleted`) {
		t.Fatalf("retry -o json of a completed workflow: %+v", r)
	}

	deadline = time.Now().Add(30 * time.Second)
	for !strings.HasPrefix(rivetctl(t, addr, "history", "napper", "c").stdout, "workflow  completed\n") {
		if time.Now().After(deadline) {
			t.Fatalf("the resumed workflow did not take its message: %+v", rivetctl(t, addr, "history", "napper", "c"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// history cuts a long output or error on a character: a cut inside one
// printed invalid UTF-8, which a terminal shows as garbage and a script
// reading the table chokes on.
func TestHistoryCutsALongOutputOnACharacter(t *testing.T) {
	long := "a" + strings.Repeat("ш", 60) // its JSON is 124 bytes; a byte cut at 77 splits an ш
	reg, err := rivet.Setup(rivet.Actor[chargeState]{
		Name: "writer",
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			_, err := workflow.Step(ctx, "write", func(*workflow.StepCtx[chargeState]) (string, error) { return long, nil })
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)
	rivetctl(t, addr, "create", "writer", "w")
	r := historyOnce(t, addr, "writer", "w", "the workflow to complete", func(out string) bool {
		return strings.HasPrefix(out, "workflow  completed\n")
	})
	if !utf8.ValidString(r.stdout) {
		t.Fatalf("history printed invalid UTF-8:\n%q", r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "write ") || !strings.HasSuffix(last, `"aшш`+"...") && !strings.HasSuffix(last, "ш...") {
		t.Fatalf("history's row of the step: %q; want its output cut, ending in ...", last)
	}
	if _, out, _ := strings.Cut(last, `"a`); len(out) > 80 {
		t.Errorf("history's output column is %d bytes, want at most 80: %q", len(out), last)
	}
}

// startNodeOf starts a node of reg, alone, stopped when t ends, and
// returns its gRPC address.
func startNodeOf(t *testing.T, reg *rivet.Registry) string {
	t.Helper()
	return startLocalNode(t, reg).GRPCAddr()
}

// startLocalNode starts a node of reg, alone, stopped when t ends; with
// changes to its configuration, if any.
func startLocalNode(t *testing.T, reg *rivet.Registry, with ...func(*node.Config)) *node.Node {
	t.Helper()
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.HTTPAddr = "-"
	cfg.Partitions = 8
	cfg.Logger = zap.NewNop()
	for _, f := range with {
		f(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.Start(ctx, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return n
}

// A step whose name is not UTF-8 (made from bytes) fails the run at once,
// saying so: stored as JSON, its name came back with U+FFFD for its bad
// bytes, so that the workflow diverged at it on the next replay from
// storage (a retry from a later entry did), and no --from could name it
// as the code does.
func TestAStepNamedNotInUTF8FailsTheRunAtOnce(t *testing.T) {
	reg, err := rivet.Setup(rivet.Actor[chargeState]{
		Name: "bytenamer",
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			if _, err := workflow.Step(ctx, "job-\xff", func(*workflow.StepCtx[chargeState]) (int, error) { return 1, nil }); err != nil {
				return err
			}
			_, err := workflow.Step(ctx, "after", func(*workflow.StepCtx[chargeState]) (int, error) { return 2, nil })
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)
	rivetctl(t, addr, "create", "bytenamer", "b")
	r := historyOnce(t, addr, "bytenamer", "b", "the workflow to end", func(out string) bool {
		return strings.HasPrefix(out, "workflow  failed\n") || strings.HasPrefix(out, "workflow  completed\n")
	})
	if !strings.HasPrefix(r.stdout, "workflow  failed\nerror     workflow: invalid use: name \"job-\\xff\" is not valid UTF-8\n") {
		t.Fatalf("history:\n%s\nwant the run failed at the step, its name not valid UTF-8", r.stdout)
	}
}

// history shows what each receive took (queue and body, as a history of
// signals shows their payloads, and "none" for one that timed out) and
// when a waiting sleep ends; -o json carries the messages and the
// deadline.
func TestHistoryShowsWhatReceivesTookAndWhenASleepEnds(t *testing.T) {
	type job struct {
		N int `json:"n"`
	}
	reg, err := rivet.Setup(rivet.Actor[chargeState]{
		Name:   "inbox",
		Queues: rivet.Queues{"jobs": rivet.QueueOf[job](), "late": rivet.QueueOf[job](), "go": rivet.QueueOf[job]()},
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			// Both jobs are queued before "go" is: one batch takes both.
			if _, err := workflow.Next[job](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}}); err != nil {
				return err
			}
			if _, err := workflow.NextBatch[job](ctx, "take-two", workflow.NextOptions{Names: []string{"jobs"}, Count: 2, Timeout: time.Minute}); err != nil {
				return err
			}
			if _, err := workflow.NextBatch[job](ctx, "take-none", workflow.NextOptions{Names: []string{"late"}, Count: 1, Timeout: time.Millisecond}); err != nil {
				return err
			}
			return ctx.Sleep("nap", time.Hour)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)
	rivetctl(t, addr, "create", "inbox", "i")
	rivetctl(t, addr, "send", "inbox", "i", "jobs", `{"n":1}`)
	rivetctl(t, addr, "send", "inbox", "i", "jobs", `{"n":2}`)
	rivetctl(t, addr, "send", "inbox", "i", "go", `{"n":0}`)
	r := historyOnce(t, addr, "inbox", "i", "the workflow to reach its sleep", func(out string) bool {
		return strings.Contains(out, "nap ")
	})
	rows := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n")[2:] {
		f := strings.Fields(l)
		rows[f[0]] = strings.Join(f[4:], " ")
	}
	if got, want := rows["take-two"], `jobs: {"n":1}; jobs: {"n":2}`; got != want {
		t.Errorf("take-two shows %q, want %q\n%s", got, want, r.stdout)
	}
	if got, want := rows["wait-go"], `go: {"n":0}`; got != want {
		t.Errorf("wait-go shows %q, want %q\n%s", got, want, r.stdout)
	}
	if got, want := rows["take-none"], "none (timed out)"; got != want {
		t.Errorf("take-none shows %q, want %q\n%s", got, want, r.stdout)
	}
	until, ok := strings.CutPrefix(rows["nap"], "until ")
	if !ok {
		t.Fatalf("nap shows %q, want until its end\n%s", rows["nap"], r.stdout)
	}
	end, err := time.Parse(time.RFC3339, until)
	if err != nil || end.Before(time.Now().Add(50*time.Minute)) || end.After(time.Now().Add(61*time.Minute)) {
		t.Errorf("nap until %q (%v), want about an hour from now", until, err)
	}

	var h client.History
	if err := json.Unmarshal([]byte(rivetctl(t, addr, "-o", "json", "history", "inbox", "i").stdout), &h); err != nil {
		t.Fatal(err)
	}
	for _, e := range h.Entries {
		switch e.Path {
		case "take-two":
			var ms []workflow.RecordedMessage
			if err := json.Unmarshal(e.Output, &ms); err != nil || len(ms) != 2 || ms[0].Queue != "jobs" || string(ms[1].Body) != `{"n":2}` || ms[0].ID >= ms[1].ID {
				t.Errorf("take-two's output %s (%v), want both jobs in order", e.Output, err)
			}
			if e.Deadline.IsZero() {
				t.Error("take-two, a receive with a timeout, has no deadline")
			}
		case "nap":
			if !e.Deadline.Equal(end.Truncate(time.Second)) && e.Deadline.Truncate(time.Second) != end {
				t.Errorf("nap's deadline %v, text said %v", e.Deadline, end)
			}
		}
	}
}

// historyOnce runs `history ACTOR KEY` until its output satisfies ok, for
// up to 30 s, and returns that run; what names the wait in the failure.
func historyOnce(t *testing.T, addr, actor, key, what string, ok func(stdout string) bool) result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	r := rivetctl(t, addr, "history", actor, key)
	for !ok(r.stdout) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s: %+v", what, r)
		}
		time.Sleep(20 * time.Millisecond)
		r = rivetctl(t, addr, "history", actor, key)
	}
	return r
}
