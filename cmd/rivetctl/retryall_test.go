package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
	"github.com/rivet-go/rivet/workflow"
)

// failedFleet is a node whose actors named charger with keys have failed
// workflows, listed in pages of two, and whose retry of each answers as
// retry says.
type failedFleet struct {
	*servertest.Fake
	retry func(ctx context.Context, key string) (int, error)

	mu      sync.Mutex
	retried []string
	checked []string // dry runs
	// notOnlyFailed counts the retries sent without only_failed.
	notOnlyFailed int
}

func newFailedFleet(keys []string, retry func(ctx context.Context, key string) (int, error)) *failedFleet {
	f := &failedFleet{Fake: servertest.NewFake(), retry: retry}
	f.ListFunc = func(_ context.Context, opts runtime.ListOptions) (runtime.ListResult, error) {
		if !opts.FailedWorkflows || opts.Name != "charger" {
			return runtime.ListResult{}, nil
		}
		start := 0
		if opts.PageToken != "" {
			start, _ = strconv.Atoi(opts.PageToken)
		}
		end := min(start+2, len(keys))
		var res runtime.ListResult
		for _, k := range keys[start:end] {
			res.Actors = append(res.Actors, runtime.ActorInfo{Ref: runtime.Ref{Name: "charger", Key: []string{k}}, Owner: "node-1",
				WorkflowError: "card service down", WorkflowFailedAt: servertest.Created})
		}
		if end < len(keys) {
			res.NextPageToken = strconv.Itoa(end)
		}
		return res, nil
	}
	return f
}

func (f *failedFleet) RetryWorkflowWith(ctx context.Context, ref runtime.Ref, opts runtime.RetryOptions) (runtime.RetryResult, error) {
	f.mu.Lock()
	k := ref.Key[0] + opts.From
	if opts.DropMessages {
		k += " dropping"
	}
	if opts.DryRun {
		f.checked = append(f.checked, k)
	} else {
		f.retried = append(f.retried, k)
	}
	if !opts.OnlyFailed {
		f.notOnlyFailed++
	}
	f.mu.Unlock()
	n, err := f.retry(ctx, ref.Key[0])
	res := runtime.RetryResult{Removed: n}
	if opts.DropMessages && err == nil {
		res.Dropped = 1
	}
	return res, err
}

func (f *failedFleet) retriedKeys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.retried)
	slices.Sort(out)
	return out
}

// A workflow retried by someone else meanwhile (it runs again: the node
// answers workflow.not_ended) or whose actor was destroyed meanwhile is
// skipped, not failed; any other error fails that retry, which the others
// do not wait on, and the command exits 1. Every page of the listing is
// retried, each workflow once.
func TestRetryAllFailedSkipsWhatWasRetriedOrDestroyedMeanwhile(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e"}
	f := newFailedFleet(keys, func(_ context.Context, key string) (int, error) {
		switch key {
		case "b":
			return 0, rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "not_ended", `the workflow of charger ["b"] is running: only a failed, completed or cancelled workflow can be retried`)
		case "c":
			return 0, rivet.Errorf(rivet.ErrNotFound, `actor charger ["c"] does not exist`)
		case "d":
			return 0, rivet.Errorf(rivet.ErrInternal, "disk on fire")
		case "e":
			return 0, nil
		}
		return 1, nil
	})
	addr := servertest.Start(t, f, servertest.Config{})

	r := rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed", "--concurrency", "3")
	wantOut := `skipped charger b: no longer failed (it runs again: retried meanwhile)
skipped charger c: destroyed meanwhile
failed charger d: internal: disk on fire (INTERNAL rivet.internal_error)
retried 2, skipped 2 (1 no longer failed, 1 destroyed), failed 1
`
	wantErr := "retrying 5 failed workflows of charger, 3 at a time\nrivetctl: 1 of 5 retries failed\n"
	if r.code != 1 || r.stdout != wantOut || r.stderr != wantErr {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 1, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr, wantOut, wantErr)
	}
	if got := f.retriedKeys(); !slices.Equal(got, keys) {
		t.Errorf("retried %v, want each of %v once", got, keys)
	}

	// -o json: one document on stdout, the error alone on stderr.
	r = rivetctl(t, addr, "-o", "json", "workflow", "retry", "charger", "--all-failed")
	var rep retryAllReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("-o json: %v (%+v)", err, r)
	}
	if rep.Actor != "charger" || rep.DryRun || rep.Retried != 2 || rep.Skipped != 2 || rep.Failed != 1 || rep.NotRetried != 0 || len(rep.Results) != 5 {
		t.Errorf("-o json counts: %+v", rep)
	}
	var outcomes []string
	for _, x := range rep.Results {
		removed := "-"
		if x.Removed != nil {
			removed = strconv.Itoa(*x.Removed)
		}
		outcomes = append(outcomes, fmt.Sprintf("%s:%s:%s:%s:%s", x.Key[0], x.Outcome, removed, x.Code, x.Reason))
	}
	wantOutcomes := []string{"a:retried:1::", "b:skipped:-:FAILED_PRECONDITION:workflow.not_ended", "c:skipped:-:NOT_FOUND:actor.not_found",
		"d:failed:-:INTERNAL:rivet.internal_error", "e:retried:0::"}
	if !slices.Equal(outcomes, wantOutcomes) {
		t.Errorf("-o json results %v, want %v", outcomes, wantOutcomes)
	}
	if rep.Results[3].Message != "disk on fire" {
		t.Errorf("-o json: a failure's message %q, want the node's", rep.Results[3].Message)
	}
	if r.stderr != `{"error":{"code":"UNKNOWN","message":"1 of 5 retries failed"},"exit":1}`+"\n" {
		t.Errorf("-o json stderr: %s", r.stderr)
	}

	// --dry-run retries nothing: it lists the failed workflows and asks
	// each one's node what a retry would do (a trial's "would retry 5"
	// were all refused, the code deployed still diverging from them).
	before := len(f.retriedKeys())
	r = rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed", "--dry-run")
	// d's check fails (INTERNAL): not a refusal, which would read as the
	// code still diverging, but a check that did not answer (exit 1).
	if lines := strings.Split(r.stdout, "\n"); r.code != 1 || r.stderr != "checking 5 failed workflows of charger, 8 at a time\nrivetctl: 1 of 5 checks failed: what their retries would do is not known\n" || len(lines) != 11 ||
		!strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[5], "charger  e") || !strings.Contains(lines[5], "card service down") ||
		!strings.HasPrefix(lines[6], "would be skipped charger b: ") || !strings.HasPrefix(lines[8], "could not check charger d: internal: disk on fire") ||
		lines[9] != "would retry 2, skip 2, refuse 0, 1 not checked (the check failed) (--dry-run: nothing was retried)" {
		t.Errorf("--dry-run: %+v", r)
	}
	r = rivetctl(t, addr, "-o", "json", "workflow", "retry", "charger", "--all-failed", "--dry-run")
	rep = retryAllReport{}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || !rep.DryRun || rep.WouldRetry != 2 || rep.Skipped != 2 || rep.NotChecked != 1 || rep.Retried != 0 ||
		len(rep.Results) != 5 || rep.Results[0].Outcome != "would_retry" || rep.Results[0].WorkflowError != "card service down" || rep.Results[3].Outcome != "not_checked" {
		t.Errorf("-o json --dry-run: %v, %+v (%+v)", err, rep, r)
	}
	if after := len(f.retriedKeys()); after != before {
		t.Errorf("--dry-run retried %d workflows", after-before)
	}

	// None failed: nothing to retry, said so.
	rivetctl(t, addr, "workflow", "retry", "napper", "--all-failed").want(t, 0, "no failed workflows among the actors named napper\n")
	rivetctl(t, addr, "-o", "json", "workflow", "retry", "napper", "--all-failed").
		want(t, 0, `{"actor":"napper","dry_run":false,"retried":0,"skipped":0,"failed":0,"not_retried":0,"results":[]}`+"\n")
}

// A workflow that someone else's retry completed, or an operator
// cancelled, after the listing is not retried again: each retry asks the
// node for a failed workflow only, and its answer (workflow.not_failed)
// counts as skipped, with what the node said.
func TestRetryAllFailedSkipsWhatCompletedOrWasCancelledMeanwhile(t *testing.T) {
	f := newFailedFleet([]string{"a", "b", "c", "d"}, func(_ context.Context, key string) (int, error) {
		switch key {
		case "b":
			return 0, rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "not_failed", `the workflow of charger ["b"] is completed, not failed`)
		case "c":
			return 0, rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "not_failed", `the workflow of charger ["c"] is cancelled, not failed`)
		case "d":
			return 0, rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "not_ended", `the workflow of charger ["d"] is running`)
		}
		return 1, nil
	})
	addr := servertest.Start(t, f, servertest.Config{})
	r := rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed", "--concurrency", "1")
	wantOut := `skipped charger b: no longer failed (completed or cancelled meanwhile)
skipped charger c: no longer failed (completed or cancelled meanwhile)
skipped charger d: no longer failed (it runs again: retried meanwhile)
retried 1, skipped 3 (3 no longer failed), failed 0
`
	if r.code != 0 || r.stdout != wantOut {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 0, stdout:\n%s", r.code, r.stdout, r.stderr, wantOut)
	}
	f.mu.Lock()
	sent, without := len(f.retried), f.notOnlyFailed
	f.mu.Unlock()
	if sent != 4 || without != 0 {
		t.Errorf("%d retries sent, %d of them without only_failed; want 4, each with it", sent, without)
	}

	r = rivetctl(t, addr, "-o", "json", "workflow", "retry", "charger", "--all-failed")
	var rep retryAllReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 {
		t.Fatalf("-o json: %v (%+v)", err, r)
	}
	if rep.Retried != 1 || rep.Skipped != 3 || rep.Failed != 0 || len(rep.Results) != 4 ||
		rep.Results[1].Outcome != "skipped" || rep.Results[1].Code != "FAILED_PRECONDITION" || rep.Results[1].Reason != "workflow.not_failed" ||
		rep.Results[2].Message != `the workflow of charger ["c"] is cancelled, not failed` {
		t.Errorf("-o json: %+v", rep)
	}
}

// --timeout bounds each retry, not the whole: retries that get no answer
// fail one by one, and the others go on.
func TestRetryAllFailedBoundsEachRetryByTheTimeout(t *testing.T) {
	f := newFailedFleet([]string{"a", "b", "c"}, func(ctx context.Context, key string) (int, error) {
		if key == "c" {
			return 1, nil
		}
		<-ctx.Done() // no answer
		return 0, ctx.Err()
	})
	addr := servertest.Start(t, f, servertest.Config{})
	r := rivetctl(t, addr, "--timeout", "400ms", "workflow", "retry", "charger", "--all-failed", "--concurrency", "1")
	want := fmt.Sprintf(`failed charger a: deadline exceeded: no answer from %[1]s within 400ms (--timeout) (DEADLINE_EXCEEDED)
failed charger b: deadline exceeded: no answer from %[1]s within 400ms (--timeout) (DEADLINE_EXCEEDED)
retried 1, skipped 0, failed 2
`, addr)
	if r.code != 1 || r.stdout != want || !strings.HasSuffix(r.stderr, "rivetctl: 2 of 3 retries failed\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %s\nwant exit 1, stdout:\n%s", r.code, r.stdout, r.stderr, want)
	}
}

// An interrupt (Ctrl-C) starts no more retries: the one in flight
// finishes, the rest are counted as not retried, and the command exits 1.
func TestAnInterruptedRetryAllFailedStartsNoMoreRetries(t *testing.T) {
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	f := newFailedFleet([]string{"a", "b", "c", "d"}, func(context.Context, string) (int, error) {
		interrupt()
		return 1, nil
	})
	addr := servertest.Start(t, f, servertest.Config{})
	var out, errb bytes.Buffer
	code := run(ctx, []string{"--addr", addr, "workflow", "retry", "charger", "--all-failed", "--concurrency", "1"}, strings.NewReader(""), &out, &errb, func(string) string { return "" })
	if code != 1 || out.String() != "retried 1, skipped 0, failed 0, not retried 3 (interrupted)\n" ||
		!strings.HasSuffix(errb.String(), "rivetctl: interrupted: 3 of 4 failed workflows not retried (run it again for them)\n") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	if got := f.retriedKeys(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("retried %v after the interrupt, want only a", got)
	}
}

// KEY, --from and an empty ACTOR are refused with --all-failed, and its
// flags without it, before anything is sent.
func TestRetryAllFailedUsageErrors(t *testing.T) {
	f := newFailedFleet([]string{"a"}, func(context.Context, string) (int, error) { return 1, nil })
	addr := servertest.Start(t, f, servertest.Config{})
	rivetctl(t, addr, "workflow", "retry", "charger", "a", "--all-failed").
		wantErr(t, 2, "rivetctl: KEY and --all-failed go apart: --all-failed retries every failed workflow of charger (rivetctl actors charger --failed lists them)")
	rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed", "--from", "charge-card").
		wantErr(t, 2, "rivetctl: --from and --all-failed go apart: --from names an entry of one workflow's history")
	rivetctl(t, addr, "workflow", "retry", "", "--all-failed").
		wantErr(t, 2, "rivetctl: ACTOR is empty (--all-failed retries the failed workflows of the actors of one name)")
	rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed", "--concurrency", "0").
		wantErr(t, 2, "rivetctl: --concurrency must be at least 1, not 0")
	rivetctl(t, addr, "workflow", "retry", "charger", "a", "--dry-run").
		wantErr(t, 2, "rivetctl: --concurrency, --dry-run and --error-contains need --all-failed")
	rivetctl(t, addr, "workflow", "retry", "charger", "a", "--concurrency", "4").
		wantErr(t, 2, "rivetctl: --concurrency, --dry-run and --error-contains need --all-failed")
	rivetctl(t, addr, "workflow", "retry", "charger", "a", "--error-contains", "x").
		wantErr(t, 2, "rivetctl: --concurrency, --dry-run and --error-contains need --all-failed")
	rivetctl(t, addr, "actors", "charger", "--error-contains", "x").
		wantErr(t, 2, "rivetctl: --error-contains needs --failed or --status retrying (it filters workflows by their error)")
	rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed", "--error-contains", "").
		wantErr(t, 2, "rivetctl: --error-contains is empty (it would match every failed workflow: leave it out for all)")
	rivetctl(t, addr, "actors", "charger", "--failed", "--error-contains", "").
		wantErr(t, 2, "rivetctl: --error-contains is empty (it would match every failed workflow: leave it out for all)")
	rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed", "--drop-messages").
		wantErr(t, 2, "rivetctl: --drop-messages and --all-failed go apart: it drops what one workflow's receives took")
	rivetctl(t, addr, "workflow", "retry", "--all-failed").
		wantErrPrefix(t, 2, "rivetctl: usage: rivetctl workflow retry ACTOR {KEY | --all-failed} [flags] (got 0 arguments)")
	rivetctl(t, addr, "-o", "json", "workflow", "retry", "charger", "a", "--all-failed").
		wantErrPrefix(t, 2, `{"error":{"code":"USAGE","message":"KEY and --all-failed go apart`)
	if got := f.retriedKeys(); len(got) != 0 {
		t.Errorf("a usage error retried %v", got)
	}
	// A single retry takes it to the node.
	rivetctl(t, addr, "workflow", "retry", "charger", "a", "--from", "wait", "--drop-messages").want(t, 0, "workflow restarted: 1 history entry removed, 1 message dropped\n")
	if got := f.retriedKeys(); len(got) != 1 || got[0] != "await dropping" {
		t.Errorf("retry --drop-messages sent %v, want a retry from wait dropping its messages", got)
	}
}

// After a deploy that diverged some runs, --error-contains retries those
// and not the workflows that failed by their own errors (a trial retried
// 131 to fix 24), and actors --failed lists them alike; across pages.
func TestRetryAllFailedWithAnErrorContainingText(t *testing.T) {
	keys := []string{"a", "d1", "b", "d2", "c"}
	f := newFailedFleet(keys, func(context.Context, string) (int, error) { return 1, nil })
	list := f.ListFunc
	f.ListFunc = func(ctx context.Context, opts runtime.ListOptions) (runtime.ListResult, error) {
		res, err := list(ctx, opts)
		for i, a := range res.Actors {
			if strings.HasPrefix(a.Ref.Key[0], "d") {
				res.Actors[i].WorkflowError = `workflow: history diverged at "charge": code did new step "fraud-check"`
			}
		}
		return res, err
	}
	addr := servertest.Start(t, f, servertest.Config{})
	r := rivetctl(t, addr, "-o", "json", "actors", "charger", "--failed", "--error-contains", "history diverged")
	var listed []struct{ Key []string }
	if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil || r.code != 0 || len(listed) != 2 || listed[0].Key[0] != "d1" || listed[1].Key[0] != "d2" {
		t.Fatalf("actors --failed --error-contains: exit %d, %s (%v); want d1 and d2", r.code, r.stdout, err)
	}
	rivetctl(t, addr, "actors", "charger", "--failed", "--error-contains", "no such text").
		want(t, 0, "no failed workflows with an error containing \"no such text\" among the actors named charger\n")
	r = rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed", "--error-contains", "history diverged", "--dry-run")
	if r.code != 0 || strings.Count(r.stdout, "history diverged") != 2 || !strings.HasSuffix(r.stdout, "would retry 2 (--dry-run: nothing was retried)\n") {
		t.Fatalf("--dry-run: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	if got := f.retriedKeys(); len(got) != 0 {
		t.Fatalf("--dry-run retried %v", got)
	}
	r = rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed", "--error-contains", "history diverged")
	if got := f.retriedKeys(); r.code != 0 || !slices.Equal(got, []string{"d1", "d2"}) {
		t.Fatalf("retry --all-failed --error-contains: exit %d (%s), retried %v; want d1 and d2", r.code, r.stderr, got)
	}
}

// On a real node: after a fix, workflow retry --all-failed takes every
// failed workflow of the actor off the list, and each runs its failed
// step again once.
func TestRetryAllFailedOnARealNode(t *testing.T) {
	var cardUp atomic.Bool
	var charges sync.Map // key: *atomic.Int32, the step's successful runs
	reg, err := rivet.Setup(rivet.Actor[chargeState]{
		Name: "charger",
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			_, err := workflow.StepOpts(ctx, workflow.StepOptions{Name: "charge-card", MaxRetries: 1, RetryBackoffBase: time.Millisecond},
				func(s *workflow.StepCtx[chargeState]) (int, error) {
					if !cardUp.Load() {
						return 0, rivet.UserError("card.down", "card service down", nil)
					}
					n, _ := charges.LoadOrStore(s.Key()[0], new(atomic.Int32))
					n.(*atomic.Int32).Add(1)
					s.State.Charged++
					return s.State.Charged, nil
				})
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)
	rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed").want(t, 0, "no failed workflows among the actors named charger\n")

	const n = 6
	var keys []string
	for i := range n {
		key := fmt.Sprintf("order-%d", i)
		keys = append(keys, key)
		if r := rivetctl(t, addr, "create", "charger", key); r.code != 0 {
			t.Fatalf("create: %+v", r)
		}
	}
	failedCount := func() int {
		r := rivetctl(t, addr, "-o", "json", "actors", "charger", "--failed")
		var failed []json.RawMessage
		if err := json.Unmarshal([]byte(r.stdout), &failed); err != nil {
			t.Fatalf("actors --failed: %v (%+v)", err, r)
		}
		return len(failed)
	}
	deadline := time.Now().Add(30 * time.Second)
	for failedCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d workflows failed within 30 s", failedCount(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}

	r := rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed", "--dry-run")
	if r.code != 0 || !strings.HasSuffix(r.stdout, fmt.Sprintf("would retry %d (--dry-run: nothing was retried)\n", n)) || failedCount() != n {
		t.Fatalf("--dry-run: %+v; %d failed after it, want %d", r, failedCount(), n)
	}

	cardUp.Store(true)
	r = rivetctl(t, addr, "-o", "json", "workflow", "retry", "charger", "--all-failed", "--concurrency", "4")
	var rep retryAllReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 0 || r.stderr != "" || rep.Retried != n || rep.Skipped+rep.Failed+rep.NotRetried != 0 {
		t.Fatalf("--all-failed -o json: %v, %+v (%+v)", err, rep, r)
	}
	for _, x := range rep.Results {
		if x.Outcome != "retried" || x.Removed == nil || *x.Removed != 1 {
			t.Errorf("%v: %s, removed %v; want retried, its failed step removed", x.Key, x.Outcome, x.Removed)
		}
	}
	if got := failedCount(); got != 0 {
		t.Errorf("%d workflows still failed after --all-failed", got)
	}
	for _, key := range keys {
		historyOnce(t, addr, "charger", key, key+"'s retried workflow to complete", func(out string) bool {
			return strings.HasPrefix(out, "workflow  completed\n")
		})
		rivetctl(t, addr, "state", "charger", key).want(t, 0, "{\n  \"charged\": 1\n}\n")
		if c, ok := charges.Load(key); !ok || c.(*atomic.Int32).Load() != 1 {
			t.Errorf("%s's step ran %v times after the fix, want once", key, c)
		}
	}

	// A second run finds nothing left to retry.
	rivetctl(t, addr, "workflow", "retry", "charger", "--all-failed").want(t, 0, "no failed workflows among the actors named charger\n")
}

// actors --failed shows every line of an error, on one: a saga whose
// compensation failed has the rollback's failure on its error's second
// line, and an operator must see it (an effect was not undone).
func TestActorsFailedShowsEveryLineOfAnError(t *testing.T) {
	f := servertest.NewFake()
	f.ListFunc = func(context.Context, runtime.ListOptions) (runtime.ListResult, error) {
		return runtime.ListResult{Actors: []runtime.ActorInfo{{Ref: runtime.Ref{Name: "saga", Key: []string{"s1"}}, Owner: "node-1",
			WorkflowError: "step \"pay\" failed: refused\n\nworkflow: rollback of step \"hotel\" failed: down\n", WorkflowFailedAt: servertest.Created}}}, nil
	}
	r := rivetctl(t, servertest.Start(t, f, servertest.Config{}), "actors", "--failed")
	if want := `step "pay" failed: refused; workflow: rollback of step "hotel" failed: down` + "\n"; r.code != 0 || !strings.HasSuffix(r.stdout, want) {
		t.Fatalf("exit %d, stdout:\n%s\nwant the error's lines on one:\n%s", r.code, r.stdout, want)
	}
}
