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
	outcomeWouldRetry = "would_retry" // --dry-run
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
			rep.Results[i].Outcome, rep.Results[i].WorkflowError, rep.Results[i].WorkflowFailedAt = outcomeWouldRetry, f.WorkflowError, f.WorkflowFailedAt
		}
		rep.WouldRetry = len(failed)
		if a.output == "json" {
			return a.printValue(rep)
		}
		if len(failed) == 0 {
			_, err := fmt.Fprintln(a.stdout, noActors(name, true, errorContains))
			return err
		}
		if err := a.printFailed(failed); err != nil {
			return err
		}
		_, err := fmt.Fprintf(a.stdout, "would retry %d (--dry-run: nothing was retried)\n", len(failed))
		return err
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
	if plain {
		fmt.Fprintf(a.stderr, "retrying %d failed workflows of %s, %d at a time\n", len(failed), printable(name), concurrency)
	}
	bar := progressbar.NewOptions(len(failed),
		progressbar.OptionSetWriter(barOut),
		progressbar.OptionSetDescription("retrying "+printable(name)),
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
				a.retryOne(ctx, c, &rep.Results[i])
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
			fmt.Fprintf(a.stderr, "retrying %s: %d of %d done\n", printable(name), finished, len(failed))
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
	} else if err := a.printRetryAll(rep, skips); err != nil {
		return err
	}
	switch {
	case rep.NotRetried > 0:
		return &runError{err: fmt.Errorf("interrupted: %d of %d failed workflows not retried (run it again for them)", rep.NotRetried, len(failed))}
	case rep.Failed > 0:
		return &runError{err: fmt.Errorf("%d of %d retries failed", rep.Failed, len(failed))}
	}
	return nil
}

// retryOne retries r's workflow with the single retry's RPC, bounded by
// --timeout, and records the outcome. An interrupt does not cut it short:
// its outcome would be unknown.
func (a *app) retryOne(ctx context.Context, c *client.Client, r *retryResult) {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	// Only if failed still: the listing is a while old, and a workflow
	// someone else's retry completed, or an operator cancelled, since
	// must stay as it is (a node from before only_failed retries it).
	res, err := c.Actor(r.Name, r.Key...).NoCreate().RetryWorkflowWith(callCtx, client.RetryOptions{OnlyFailed: true})
	if err == nil {
		r.Outcome, r.Removed = outcomeRetried, &res.Removed
		return
	}
	// The error too: the node sees the deadline (it travels with the
	// call) and may reset the stream before the local timer fires.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(callCtx.Err(), context.DeadlineExceeded) {
		// It may have run all the same: run again, it is skipped if so.
		err = a.deadlineError(err, a.timeout, "")
		r.Outcome, r.Code, r.Message, r.text = outcomeFailed, "DEADLINE_EXCEEDED", err.Error(), err.Error()
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
// the counts.
func (a *app) printRetryAll(rep retryAllReport, skips map[string]int) error {
	for _, r := range rep.Results {
		switch r.Outcome {
		case outcomeSkipped:
			fmt.Fprintf(a.stdout, "skipped %s %s: %s\n", printable(r.Name), formatKey(r.Key), skipLines[r.Reason])
		case outcomeFailed:
			fmt.Fprintf(a.stdout, "failed %s %s: %s\n", printable(r.Name), formatKey(r.Key), printable(oneLine(r.text)))
		}
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
