package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// The outcomes of one actor's retry in `workflow retry --all-failed`.
const (
	outcomeRetried    = "retried"
	outcomeSkipped    = "skipped"
	outcomeFailed     = "failed"
	outcomeNotRetried = "not_retried" // interrupted before its turn came
	outcomeWouldRetry = "would_retry" // --dry-run: the node's check passed
	outcomeUnchecked  = "unchecked"   // --dry-run: the node is older than the check
	outcomeNotChecked = "not_checked" // --dry-run: the check itself failed (unavailable, a deadline)
)

// retryResult is one actor's line in `workflow retry --all-failed -o json`.
type retryResult struct {
	Name    string   `json:"name"`
	Key     []string `json:"key"`
	Outcome string   `json:"outcome"`
	// Removed is how many history entries a retry deleted.
	Removed *int `json:"removed,omitempty"`
	// For a skipped or failed retry: the error's gRPC code, its rivet
	// reason (workflow.not_ended, workflow.not_failed, actor.not_found for
	// a skip) and message.
	Code    string `json:"code,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// For --dry-run: the listing's error and time of each failure.
	WorkflowError    string    `json:"workflow_error,omitempty"`
	WorkflowFailedAt time.Time `json:"workflow_failed_at,omitzero"`
	// text is the error as rivetctl prints one.
	text string
}

// retryAllReport is `workflow retry --all-failed -o json`'s document.
type retryAllReport struct {
	Actor      string        `json:"actor"`
	DryRun     bool          `json:"dry_run"`
	WouldRetry int           `json:"would_retry,omitempty"`
	Unchecked  int           `json:"unchecked,omitempty"`
	NotChecked int           `json:"not_checked,omitempty"`
	Retried    int           `json:"retried"`
	Skipped    int           `json:"skipped"`
	Failed     int           `json:"failed"`
	NotRetried int           `json:"not_retried"`
	Results    []retryResult `json:"results"`
}

// retryAllFailed retries every failed workflow of the actors named name,
// concurrency at a time, each retry bounded by --timeout; ctx's end (an
// interrupt) stops launching retries, and those in flight finish.
func (a *app) retryAllFailed(ctx context.Context, c *client.Client, name string, concurrency int, dryRun bool, errorContains string) error {
	failed, err := a.listActors(ctx, c, name, true, errorContains)
	if err != nil {
		return err
	}
	rep := retryAllReport{Actor: name, DryRun: dryRun, Results: make([]retryResult, len(failed))}
	for i, f := range failed {
		rep.Results[i] = retryResult{Name: f.Name, Key: f.Key, Outcome: outcomeNotRetried}
	}
	if dryRun {
		for i, f := range failed {
			rep.Results[i].WorkflowError, rep.Results[i].WorkflowFailedAt = f.WorkflowError, f.WorkflowFailedAt
		}
	}
	if len(failed) == 0 {
		if a.output == "json" {
			return a.printValue(rep)
		}
		_, err := fmt.Fprintln(a.stdout, noActors(name, true, errorContains))
		return err
	}

	// The bar as drain's: for people at a terminal only; a log or a pipe
	// gets a line at the start and one per plainEvery.
	barOut := a.stderr
	plain := a.output != "json" && !isTerminal(a.stderr)
	if a.output == "json" || plain {
		barOut = io.Discard
	}
	doing := "retrying"
	if dryRun {
		doing = "checking"
	}
	if plain {
		fmt.Fprintf(a.stderr, "%s %d failed workflows of %s, %d at a time\n", doing, len(failed), printable(name), concurrency)
	}
	bar := progressbar.NewOptions(len(failed),
		progressbar.OptionSetWriter(barOut),
		progressbar.OptionSetDescription(doing+" "+printable(name)),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)

	todo := make(chan int)
	done := make(chan int)
	var wg sync.WaitGroup
	for range min(concurrency, len(failed)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range todo {
				if ctx.Err() != nil {
					continue // interrupted as it was handed over
				}
				a.retryOne(ctx, c, &rep.Results[i], dryRun)
				done <- i
			}
		}()
	}
	go func() {
		defer close(todo)
		for i := range failed {
			// An interrupt stops here: no new retry starts. The check
			// first, as select picks at random among ready cases.
			if ctx.Err() != nil {
				return
			}
			select {
			case todo <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(done)
	}()
	finished, lastLine := 0, time.Now()
	for range done {
		finished++
		_ = bar.Add(1)
		if plain && finished < len(failed) && time.Since(lastLine) >= plainEvery {
			fmt.Fprintf(a.stderr, "%s %s: %d of %d done\n", doing, printable(name), finished, len(failed))
			lastLine = time.Now()
		}
	}
	if finished == len(failed) {
		_ = bar.Finish()
	} else {
		_ = bar.Exit()
	}

	skips := map[string]int{}
	for _, r := range rep.Results {
		switch r.Outcome {
		case outcomeRetried:
			rep.Retried++
		case outcomeWouldRetry:
			rep.WouldRetry++
		case outcomeUnchecked:
			rep.Unchecked++
		case outcomeNotChecked:
			rep.NotChecked++
		case outcomeSkipped:
			rep.Skipped++
			skips[r.Reason]++
		case outcomeFailed:
			rep.Failed++
		case outcomeNotRetried:
			rep.NotRetried++
		}
	}
	if a.output == "json" {
		if err := a.printValue(rep); err != nil {
			return err
		}
	} else {
		if dryRun {
			if err := a.printFailed(failed); err != nil {
				return err
			}
		}
		if err := a.printRetryAll(rep, skips); err != nil {
			return err
		}
	}
	switch {
	case dryRun && rep.NotRetried > 0:
		return &runError{err: fmt.Errorf("interrupted: %d of %d failed workflows not checked", rep.NotRetried, len(failed))}
	case dryRun && rep.NotChecked > 0:
		return &runError{err: fmt.Errorf("%d of %d checks failed: what their retries would do is not known", rep.NotChecked, len(failed))}
	case dryRun:
		// What a retry would do, not a failure of the command.
		return nil
	case rep.NotRetried > 0:
		return &runError{err: fmt.Errorf("interrupted: %d of %d failed workflows not retried (run it again for them)", rep.NotRetried, len(failed))}
	case rep.Failed > 0:
		return &runError{err: fmt.Errorf("%d of %d retries failed", rep.Failed, len(failed))}
	}
	return nil
}

// retryOne retries r's workflow with the single retry's RPC (with dryRun,
// asks the node's check of it), bounded by --timeout, and records the
// outcome. An interrupt does not cut it short: its outcome would be
// unknown.
func (a *app) retryOne(ctx context.Context, c *client.Client, r *retryResult, dryRun bool) {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	// Only if failed still: the listing is a while old, and a workflow
	// someone else's retry completed, or an operator cancelled, since
	// must stay as it is (a node from before only_failed retries it).
	h := c.Actor(r.Name, r.Key...).NoCreate()
	opts := client.RetryOptions{OnlyFailed: true}
	var res client.RetryResult
	var err error
	if dryRun {
		// The node replays what the retry would leave against the code
		// deployed now: a workflow it still diverges from would fail
		// again at once (the listing alone said "would retry" of it).
		if res, err = h.CheckRetryWorkflow(callCtx, opts); errors.Is(err, client.ErrCheckUnsupported) {
			r.Outcome, r.Message, r.text = outcomeUnchecked, err.Error(), err.Error()
			return
		}
	} else {
		res, err = h.RetryWorkflowWith(callCtx, opts)
	}
	if err == nil {
		r.Outcome, r.Removed = outcomeRetried, &res.Removed
		if dryRun {
			r.Outcome = outcomeWouldRetry
		}
		return
	}
	// The error too: the node sees the deadline (it travels with the
	// call) and may reset the stream before the local timer fires.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(callCtx.Err(), context.DeadlineExceeded) {
		// It may have run all the same: run again, it is skipped if so.
		err = a.deadlineError(err, a.timeout, "")
		r.Outcome, r.Code, r.Message, r.text = outcomeFailed, "DEADLINE_EXCEEDED", err.Error(), err.Error()
		if dryRun {
			r.Outcome = outcomeNotChecked // not a refusal: the check did not answer in time
		}
		return
	}
	r.Outcome, r.Code, r.Message, r.text = outcomeFailed, "UNKNOWN", err.Error(), describe(err)+a.connectionHint(err)
	var e *rivet.Error
	if errors.As(err, &e) {
		r.Code, r.Message = rpcerr.CodeName(rpcerr.Code(e)), e.Message
		if e.Group != "" || e.Code != "" {
			r.Reason = e.Group + "." + e.Code
		}
		// Not failures of the retry: the workflow was retried by someone
		// else meanwhile (it runs, or completed), or cancelled, or the
		// actor was destroyed.
		if errors.Is(e, rivet.ErrWorkflowFailed) && (r.Reason == "workflow.not_ended" || r.Reason == "workflow.not_failed") ||
			errors.Is(e, rivet.ErrNotFound) && r.Reason == "actor.not_found" {
			r.Outcome = outcomeSkipped
		}
	}
	if dryRun && r.Outcome == outcomeFailed && !refusal(err) {
		// The check did not answer (the node unavailable, a deadline, a
		// bug): not "would be refused", which a script would take for
		// the code still diverging.
		r.Outcome = outcomeNotChecked
	}
}

// refusal says whether a retry's error is its refusal (the workflow's
// state or history, the request), as opposed to a failure to answer.
func refusal(err error) bool {
	for _, kind := range []error{rivet.ErrWorkflowFailed, rivet.ErrTooLarge, rivet.ErrInvalidArgument, rivet.ErrFailedPrecondition, rivet.ErrNotFound} {
		if errors.Is(err, kind) {
			return true
		}
	}
	return false
}

// skipReasons says in words why retries were skipped, by the reasons
// counted together.
var skipReasons = []struct {
	reasons []string
	words   string
}{
	{[]string{"workflow.not_ended", "workflow.not_failed"}, "no longer failed"},
	{[]string{"actor.not_found"}, "destroyed"},
}

// skipLines says more of each, for its actor's line.
var skipLines = map[string]string{
	"workflow.not_ended":  "no longer failed (it runs again: retried meanwhile)",
	"workflow.not_failed": "no longer failed (completed or cancelled meanwhile)",
	"actor.not_found":     "destroyed meanwhile",
}

// printRetryAll prints the skipped and failed retries, one a line, then
// the counts (for a dry run, what the node's checks said).
func (a *app) printRetryAll(rep retryAllReport, skips map[string]int) error {
	skipped, failed := "skipped", "failed"
	if rep.DryRun {
		skipped, failed = "would be skipped", "would be refused"
	}
	for _, r := range rep.Results {
		switch r.Outcome {
		case outcomeSkipped:
			fmt.Fprintf(a.stdout, "%s %s %s: %s\n", skipped, printable(r.Name), formatKey(r.Key), skipLines[r.Reason])
		case outcomeFailed:
			fmt.Fprintf(a.stdout, "%s %s %s: %s\n", failed, printable(r.Name), formatKey(r.Key), printable(oneLine(r.text)))
		case outcomeNotChecked:
			fmt.Fprintf(a.stdout, "could not check %s %s: %s\n", printable(r.Name), formatKey(r.Key), printable(oneLine(r.text)))
		}
	}
	if rep.DryRun {
		line := fmt.Sprintf("would retry %d", rep.WouldRetry)
		if rep.Skipped+rep.Failed+rep.Unchecked+rep.NotChecked > 0 {
			line += fmt.Sprintf(", skip %d, refuse %d", rep.Skipped, rep.Failed)
		}
		if rep.NotChecked > 0 {
			line += fmt.Sprintf(", %d not checked (the check failed)", rep.NotChecked)
		}
		if rep.Unchecked > 0 {
			line += fmt.Sprintf(", %d unchecked (their nodes are older than the check: a retry may fail)", rep.Unchecked)
		}
		if rep.NotRetried > 0 {
			line += fmt.Sprintf(", %d not checked (interrupted)", rep.NotRetried)
		}
		_, err := fmt.Fprintln(a.stdout, line+" (--dry-run: nothing was retried)")
		return err
	}
	line := fmt.Sprintf("retried %d, skipped %d", rep.Retried, rep.Skipped)
	if rep.Skipped > 0 {
		var why []string
		for _, sr := range skipReasons {
			n := 0
			for _, reason := range sr.reasons {
				n += skips[reason]
			}
			if n > 0 {
				why = append(why, fmt.Sprintf("%d %s", n, sr.words))
			}
		}
		line += " (" + strings.Join(why, ", ") + ")"
	}
	line += fmt.Sprintf(", failed %d", rep.Failed)
	if rep.NotRetried > 0 {
		line += fmt.Sprintf(", not retried %d (interrupted)", rep.NotRetried)
	}
	_, err := fmt.Fprintln(a.stdout, line)
	return err
}
