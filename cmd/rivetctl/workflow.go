package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/textcut"
)

func (a *app) historyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history ACTOR KEY",
		Short: "Show an actor's workflow history: path, kind, status, attempts, output or error",
		Long: `Show an actor's workflow history: path, kind, status, attempts, output or error.
Each entry takes one line: an error of several lines (a join's) has them
joined by "; ", as inspect and actors --failed show one. An error is shown
whole up to 400 characters; a longer one keeps its first 150 and its last
249, where a wrapped Go error has its cause ("connect: connection refused"),
with "…" between. An output is cut at 80 characters. -o json has all of both.
Before a step's or branch's error, in parentheses, come its code, if it had
one, and the rivet kind it matched when it was recorded, which the
workflow's code tests it against (errors.Is(err, rivet.ErrNotFound)):
"error (not_found, rivet kind actor.not_found): ...". A rivet.UserError's
kind ("user") is left out beside its code: "error (card_declined): ...".
-o json has both as error_code and error_rivet_kind. An entry recorded
before nodes kept the kind, or whose error matched none, shows none.

After a rollback, the status of a step with a rollback handler says whether
its compensation ran: "completed, rolled back", "completed, rollback failed"
(the handler's error in the last column; it stopped the rollback once its
retries were used up) or, in a failed workflow, "completed, not rolled
back". A handler that failed and waits to be retried reads "completed,
rollback retrying", its last attempt's error in the last column; in a
workflow cancelled during that wait, "completed, rollback stopped
(cancelled) after N attempts" (a cancel runs no handler; a retry runs the
workflow again). Each says how many attempts the handler took, if more
than one: "completed, rolled back (3 attempts)". -o json has them as
has_rollback, rollback_done, rollback_error, rollback_error_code,
rollback_attempts, rollback_retry_error and rollback_retry_error_code.

A step that failed for good reads "exhausted" if its retries were used up,
and if no retry was made for its failure "critical error, not retried" (a
workflow.Critical error), "too large, not retried" (what it wrote was over
the node's limits: its state or output), "timed out, not retried" (a
timeout, without RetryOnTimeout) or "Rollback error, not retried"
(workflow.Rollback); -o
json has it as status "exhausted" and failure (exhausted, critical, timeout
or rollback). One whose last attempt failed and that will run again after
its backoff reads "failed, retrying" (-o json: status "failed").

A version gate (version_check) says which way it went: version 1 is the old
path, taken by a run that had recorded entries past the gate before it was
deployed; a removed entry says what it stands in for. -o json has them as
version, latest and removed_kind.

With --raw, it exports the history instead: a JSON document (one line,
whatever -o says) of the actor, the workflow's status and each entry as the
engine records it, which a Go test replays changed workflow code against
before it is deployed (workflowtest.Replay, package
github.com/rivet-go/rivet/workflow/workflowtest, after
workflow.DecodeHistoryExport):

  rivetctl history job a --raw > testdata/job-a.json

A node from before history export cannot answer it: the command fails
rather than write an empty export.`,
		Args: args(2, 2),
	}
	var raw bool
	cmd.Flags().BoolVar(&raw, "raw", false, "export the recorded entries as a JSON document for workflowtest.Replay")
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, args []string) error {
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		if raw {
			x, err := c.Actor(args[0], key...).NoCreate().ExportHistory(ctx)
			if err != nil {
				return err
			}
			return a.printExport(x)
		}
		h, err := c.Actor(args[0], key...).NoCreate().History(ctx)
		if err != nil {
			return err
		}
		return a.printHistory(h)
	})
	return cmd
}

func (a *app) workflowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Operate on an actor's workflow",
		RunE:  group,
	}
	var from string
	retry := &cobra.Command{
		Use:   "retry ACTOR {KEY | --all-failed}",
		Short: "Replay a failed workflow from the entries whose failure ended it (failures a Try caught stay), resume a cancelled one, or replay any from --from ENTRY and all after it (a completed one needs --from to run its steps again); --all-failed retries every failed workflow of ACTOR",
		Long: `Replay an ended workflow. Without --from, a failed workflow runs again from the
entries whose failure ended it (failures a Try caught stay), and a cancelled one
resumes where it stopped. A workflow that rolled back (or was cancelled while
it did) runs again from its first compensated step, the earliest whose
rollback handler succeeded, whose effect the rollback undid. After a rollback
that stopped (a handler failed, or the cancel cut it off) that handler's step
still has its effect: it stays, with the steps before it, and its handler
runs again if the run rolls back again.
Where the history kept no state to go back to the first compensated step (a
loop iteration before the loop's last checkpoint, or a completed loop, join or
race), the loop, join or race holding it starts again instead. That is
refused, naming them, if it would run again steps whose effects the rollback
did not undo: --from that scope runs them again anyway, --from a later entry
leaves the compensated steps before it undone.

With --from ENTRY (a path from rivetctl history), the workflow runs again from
that entry: it, everything under it and everything recorded after it are
deleted. The actor's state is not rewound (it is the actor's, which actions
change too, not the workflow's alone): the steps from ENTRY on run again on
the state as it is now, so a step that appends or adds applies its change
again. Make such steps set rather than add, or undo their changes first. A completed workflow needs --from to run its steps again: without,
it deletes nothing and replays, running only what code deployed since adds
after its end ("0 history entries removed"); if that code no longer replays
the history (a change no GetVersion gate covers), the retry is refused,
naming the divergence (workflow.diverged), and the workflow stays completed.
A plain retry of a cancelled workflow, which resumes it where it stopped,
is checked the same way: refused, the workflow stays cancelled (one
cancelled while it rolled back replays to its failure, and resumes the
rollback). So is a plain retry of a failed workflow, on the history the
retry would leave: if the code deployed still diverges from it (or a
recorded value no longer decodes), the retry is refused and the workflow
stays failed (--all-failed counts it failed).
A step kept from
before ENTRY whose compensation failed (or was cut off while it waited to be
retried) loses that failure: if the run rolls back again, its rollback handler
runs again, from its first attempt. A compensation that succeeded stays done
(its step does not run again, not even by a later retry without --from after
another failure: history shows it "rolled back", and as JSON rollback_settled).

With --all-failed, every failed workflow of the actors named ACTOR (those
rivetctl actors ACTOR --failed lists) is retried as without --from,
--concurrency at a time, each retry bounded by --timeout; on a terminal a bar
shows the progress. Each retry applies only if the workflow is still failed (a
node from before that check retries it anyway). It ends with a line of counts:
retried (it runs again; one that fails again is back in the --failed list),
skipped (no longer failed: retried by someone else meanwhile, so running or
completed, or cancelled; or the actor destroyed meanwhile) and failed, each
skipped or failed one on a line before it; -o json prints one document with
each workflow's outcome. An interrupt (Ctrl-C) starts no more retries; those
in flight finish (a second interrupt stops rivetctl at once, their outcome
then unknown: run it again). It exits 1 if a retry failed or an interrupt left
some not retried. --dry-run lists what would be retried.`,
		Example: `  rivetctl workflow retry charger order-1
  rivetctl workflow retry charger order-1 --from charge-card
  rivetctl workflow retry reminderActor r1 --from reminder-loop/~3/wait-reminder --drop-messages
  rivetctl workflow retry charger --all-failed --dry-run
  rivetctl workflow retry charger --all-failed --error-contains "history diverged"
  rivetctl workflow retry charger --all-failed --concurrency 16`,
		Annotations: map[string]string{sideEffectsAnnotation: "true"},
	}
	var (
		allFailed, dryRun bool
		concurrency       int
		errorContains     string
		dropMessages      bool
	)
	oneKey, noKey := args(2, 2), args(1, 1)
	retry.Args = func(cmd *cobra.Command, argv []string) error {
		if !allFailed {
			return oneKey(cmd, argv)
		}
		if len(argv) == 2 {
			return usagef("KEY and --all-failed go apart: --all-failed retries every failed workflow of %s (rivetctl actors %s --failed lists them)", printable(argv[0]), printable(argv[0]))
		}
		return noKey(cmd, argv)
	}
	retry.Flags().StringVar(&from, "from", "", "history path to replay from (default: the entries that failed; after a rollback, its first compensated step)")
	retry.Flags().BoolVar(&allFailed, "all-failed", false, "retry every failed workflow of the actors named ACTOR")
	retry.Flags().IntVar(&concurrency, "concurrency", 8, "with --all-failed: how many retries run at once")
	retry.Flags().BoolVar(&dryRun, "dry-run", false, "with --all-failed: list the failed workflows and ask each one's node whether a retry would go (it replays what the retry would leave against the code deployed now), retry nothing; exits 1 if a check failed to answer")
	retry.Flags().BoolVar(&dropMessages, "drop-messages", false, "drop the messages that the receives the retry deletes took, instead of putting them back in their queues: a poison message's way out (--from its receive); they are gone, so read them first (rivetctl history)")
	retry.Flags().StringVar(&errorContains, "error-contains", "", "with --all-failed: only the workflows whose error contains TEXT (as rivetctl actors --failed lists it)")
	retry.RunE = a.runE(func() time.Duration {
		if allFailed {
			// Each call has its own --timeout: the whole may take long.
			return watchForever
		}
		return 0
	}, func(ctx context.Context, c *client.Client, args []string) error {
		if err := emptyErrorContains(retry, errorContains); err != nil {
			return err
		}
		switch {
		case allFailed && from != "":
			// Each workflow's history has its own paths.
			return usagef("--from and --all-failed go apart: --from names an entry of one workflow's history")
		case allFailed && dropMessages:
			return usagef("--drop-messages and --all-failed go apart: it drops what one workflow's receives took")
		case allFailed && concurrency < 1:
			return usagef("--concurrency must be at least 1, not %d", concurrency)
		case !allFailed && (retry.Flags().Changed("concurrency") || dryRun || retry.Flags().Changed("error-contains")):
			// Alone they changed nothing: the retry ran, as whoever
			// wrote --dry-run did not expect.
			return usagef("--concurrency, --dry-run and --error-contains need --all-failed")
		case allFailed:
			if args[0] == "" {
				// An unset shell variable: listed, "" is every name.
				return usagef("ACTOR is empty (--all-failed retries the failed workflows of the actors of one name)")
			}
			return a.retryAllFailed(ctx, c, args[0], concurrency, dryRun, errorContains)
		}
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		h := c.Actor(args[0], key...).NoCreate()
		status := ""
		if from == "" {
			// For the note below, which depends on it: the retry's answer
			// says only how many entries it deleted. An error here is the
			// retry's to report.
			if in, err := h.Inspect(ctx); err == nil {
				status = in.WorkflowStatus
			}
		}
		res, err := h.RetryWorkflowWith(ctx, client.RetryOptions{From: from, DropMessages: dropMessages})
		if err != nil {
			return err
		}
		n := res.Removed
		if n == 0 && from == "" {
			// (With -o json too, as {"note": ...} on stderr.)
			if status == "cancelled" {
				// Not a replay to the same end: it goes on.
				a.note("the workflow was cancelled: it resumes where it stopped, with the code deployed now; --from ENTRY runs it again from an entry")
			} else {
				// A workflow that failed by its own error or a
				// divergence: the same code fails the same way again;
				// a completed one replays to the same end.
				a.note("no entry was deleted, so the workflow replays its history as recorded, with the code deployed now; --from ENTRY runs it again from an entry")
			}
		}
		if a.output == "json" {
			out := map[string]int{"removed": n}
			if dropMessages {
				out["dropped"] = res.Dropped
			}
			return a.printValue(out)
		}
		dropped := ""
		switch {
		case dropMessages && res.Dropped == 0:
			// A node that drops answers how many, at least one (it
			// refuses a drop of none); one from before the count does
			// not say, and one from before --drop-messages puts them
			// back.
			dropped = " (the node did not say how many messages it dropped: it is older than this rivetctl; rivetctl history shows what the workflow takes next)"
		case dropMessages:
			dropped = fmt.Sprintf(", %d %s dropped", res.Dropped, plural(res.Dropped, "message", "messages"))
		}
		_, err = fmt.Fprintf(a.stdout, "workflow restarted: %d history %s removed%s\n", n, plural(n, "entry", "entries"), dropped)
		return err
	})
	var reason string
	cancel := &cobra.Command{
		Use:   "cancel ACTOR KEY",
		Short: "Stop a workflow for good (state, history and queued messages stay; actions still work); workflow retry resumes it",
		Long: `Stop an actor's workflow for good, for a workflow that loops for ever or waits
on what will never come. A step in flight has its context cancelled and its attempt
is not recorded. The workflow's status becomes cancelled, on every node, until
` + "`rivetctl workflow retry ACTOR KEY`" + ` resumes it where it stopped. The actor's state,
history and queued messages stay, and its actions still work. Cancelling a
cancelled workflow changes nothing; a completed or failed one cannot be cancelled.
No rollback handler runs: this is Temporal's terminate, not its cancel. A
workflow that must compensate when asked to stop takes the request as a message
of a queue of its own (raced against what it waits for) and rolls back itself.`,
		Example: `  rivetctl workflow cancel pollBackoffActor main --reason "the job is gone"`,
		Args:    args(2, 2),
	}
	cancel.Flags().StringVar(&reason, "reason", "", "why, kept in the workflow's error (at most 1 KiB)")
	cancel.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, args []string) error {
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		prev, err := c.Actor(args[0], key...).NoCreate().CancelWorkflow(ctx, reason)
		if err != nil {
			return err
		}
		if a.output == "json" {
			return a.printValue(map[string]string{"previous_status": prev})
		}
		switch prev {
		case "cancelled":
			_, err = fmt.Fprintln(a.stdout, "workflow already cancelled")
			return err
		case "":
			// The client retried an attempt that most likely cancelled
			// it, and whose answer (the status before) was lost.
			_, err = fmt.Fprintln(a.stdout, "workflow cancelled (its status before is not known: the connection broke after the cancel was sent, and the retry found it cancelled)")
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "workflow cancelled (it was %s)\n", printable(prev))
		return err
	})
	cmd.AddCommand(retry, cancel)
	return cmd
}

func (a *app) printHistory(h client.History) error {
	if a.output == "json" {
		if h.Entries == nil {
			h.Entries = []client.HistoryEntry{}
		}
		return a.printValue(h)
	}
	if h.WorkflowStatus == "" {
		// An actor without a Run has no history to show.
		_, err := fmt.Fprintln(a.stdout, "workflow  none (this actor has no workflow)")
		return err
	}
	fmt.Fprintf(a.stdout, "workflow  %s\n", printable(h.WorkflowStatus+describeWake(h.WorkflowWakeAt, h.WorkflowWakeQueues, h.WorkflowWakeAnyQueue)))
	if h.WorkflowError != "" {
		fmt.Fprintf(a.stdout, "error     %s\n", printable(errorLine(h.WorkflowError)))
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tKIND\tSTATUS\tATTEMPTS\tOUTPUT / ERROR")
	// A workflow cancelled while it rolled back: some handler ran (or was
	// tried); the compensations it had not reached never will unless a
	// retry runs the workflow again, as a failed one's.
	cancelledRollingBack := h.WorkflowStatus == "cancelled" && slices.ContainsFunc(h.Entries, func(e client.HistoryEntry) bool {
		// Not a compensation an earlier retry went on past (settled):
		// the rollback of an earlier failure.
		return !e.RollbackSettled && (e.RollbackDone || e.RollbackAttempts > 0 || e.RollbackError != "")
	})
	for _, e := range h.Entries {
		detail := string(e.Output)
		switch {
		case e.Kind == "message" && e.Output != nil:
			detail = describeReceived(e.Output)
		case detail == "" && !e.Deadline.IsZero() && e.Status == "pending":
			// A sleep, or a receive with a timeout, still waiting.
			detail = "until " + formatTime(e.Deadline)
		}
		switch {
		case e.Kind == "version_check" && e.Version > 0:
			// Which way the gate went is what an operator retiring it
			// looks for: no run in flight may still hold version 1.
			switch {
			case e.Version == 1 && e.Latest > 1:
				detail = fmt.Sprintf("version 1 (the old path; latest %d)", e.Latest)
			case e.Version == e.Latest:
				detail = fmt.Sprintf("version %d (latest)", e.Version)
			default:
				detail = fmt.Sprintf("version %d (latest %d)", e.Version, e.Latest)
			}
		case e.Kind == "removed" && e.RemovedKind != "":
			detail = "stands in for a " + e.RemovedKind
		}
		if e.OutputOmitted {
			detail = "(recorded; left out of a history too large to send whole)"
		}
		if e.Winner != "" {
			detail = "won by " + e.Winner + ": " + orDash(detail)
		}
		isErr := false // detail is an error: kept whole, or its end kept
		if e.Error != "" {
			isErr = true
			detail = "error: " + errorLine(e.Error)
			// The rivet kind is what the workflow's code tests the error
			// against (errors.Is(err, rivet.ErrNotFound)): the code alone
			// does not say it (a bare sentinel has no code, and a code
			// names no group). A UserError's kind is left out beside its
			// code, which says it already: "rivet kind user" on every
			// such row was noise (-o json keeps it).
			kind := e.ErrorRivetKind
			if kind == userKind && e.ErrorCode != "" {
				kind = ""
			}
			switch {
			case e.ErrorCode != "" && kind != "":
				detail = "error (" + e.ErrorCode + ", rivet kind " + kind + "): " + errorLine(e.Error)
			case e.ErrorCode != "":
				detail = "error (" + e.ErrorCode + "): " + errorLine(e.Error)
			case kind != "":
				detail = "error (rivet kind " + kind + "): " + errorLine(e.Error)
			}
		}
		status, attempts := failedFor(e, h.WorkflowStatus), e.RollbackAttempts > 1
		if e.RollbackRetryError != "" && e.RollbackError == "" && !e.RollbackDone {
			// A handler to be retried: its last error is why the
			// rollback waits (or waited, if the run ended meanwhile).
			isErr = true
			detail = "last rollback error: " + errorLine(e.RollbackRetryError)
			if e.RollbackRetryErrorCode != "" {
				detail = "last rollback error (" + e.RollbackRetryErrorCode + "): " + errorLine(e.RollbackRetryError)
			}
		}
		switch {
		case e.RollbackError != "":
			// The handler that stopped the rollback: its error is what
			// the operator acts on, the step's output is in -o json.
			status += ", rollback failed"
			isErr = true
			detail = "rollback error: " + errorLine(e.RollbackError)
			if e.RollbackErrorCode != "" {
				detail = "rollback error (" + e.RollbackErrorCode + "): " + errorLine(e.RollbackError)
			}
		case e.RollbackDone:
			status += ", rolled back"
		case e.HasRollback && h.WorkflowStatus == "failed":
			// A failed workflow's compensation that did not run: a
			// handler after it failed, or the failure ran none (its
			// code no longer matched the history).
			status += ", not rolled back"
		case e.RollbackAttempts > 0 && h.WorkflowStatus == "cancelled":
			// Cancelled during the backoff: no attempt comes (a cancel
			// runs no handler), unless a retry runs the workflow again.
			status += fmt.Sprintf(", rollback stopped (cancelled) after %d attempt", e.RollbackAttempts)
			if e.RollbackAttempts > 1 {
				status += "s"
			}
			attempts = false
		case e.HasRollback && cancelledRollingBack:
			// The cancel came before the rollback reached it.
			status += ", not rolled back"
		case e.RollbackAttempts > 0:
			// Failed, and waiting out its backoff to run again.
			status += ", rollback retrying"
		}
		if attempts {
			status += fmt.Sprintf(" (%d attempts)", e.RollbackAttempts)
		}
		// An error of several lines has them joined by "; " (errorLine),
		// as inspect and the error line above show it; what else has a
		// newline is JSON, where it is only space. Escaped before it is cut, so that the cut bounds what
		// prints.
		detail = printable(strings.ReplaceAll(detail, "\n", " "))
		switch {
		case isErr:
			// Not cut at 80, as it was: a wrapped error's cause is at
			// its end, and the cut fell just before "connection
			// refused" (a user trial).
			detail = cutMiddle(detail, maxErrorColumn)
		case len(detail) > 80:
			// On a character: a byte cut inside one printed invalid UTF-8.
			detail = textcut.Prefix(detail, 77) + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", printable(e.Path), printable(e.Kind), printable(status), e.Attempts, orDash(detail))
	}
	return tw.Flush()
}

// userKind is rivet.ErrUser's rivet kind in a history entry (its stable
// name, internal/errkind): history's table leaves it out beside a code.
const userKind = "user"

// maxErrorColumn bounds an error in history's last column: errors are
// stored up to a few KiB (a join's of many branches), which would make a
// row of pages.
const maxErrorColumn = 400

// cutMiddle is s if it has at most n characters, else its first and last
// characters with "…" between, n in all: the start says what failed, the
// end (a wrapped error's innermost) why.
func cutMiddle(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	head := min(150, (n-1)/2)
	tail := n - 1 - head
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// failedFor is the status of e as history prints it: for a step that
// failed for good with no retry (a critical error, a timeout not retried,
// a Rollback), what the failure was, not "exhausted", which next to its
// attempts read as retries used up (a user trial).
func failedFor(e client.HistoryEntry, workflow string) string {
	if e.Status == "failed" && e.Kind == "step" && (workflow == "running" || workflow == "sleeping") {
		// Its last attempt failed and it will run again after its
		// backoff: "failed" alone read as the step's end (a user trial).
		return "failed, retrying"
	}
	if e.Status != "exhausted" {
		return e.Status
	}
	switch {
	case e.Failure == "critical" && e.ErrorCode == "too_large":
		// The node refused what the step wrote (its state or output
		// over the limits): no workflow.Critical of the code's.
		return "too large, not retried"
	case e.Failure == "critical":
		return "critical error, not retried"
	case e.Failure == "timeout":
		return "timed out, not retried"
	case e.Failure == "rollback":
		return "Rollback error, not retried"
	}
	// Retries used up, or a node from before it said why.
	return e.Status
}

// describeReceived puts what a receive took as "queue: body" for each
// message, the way a reader scans a history for what came in; an empty
// list is a receive that timed out. Output it cannot read is shown as is.
func describeReceived(out json.RawMessage) string {
	var ms []struct {
		Queue string          `json:"queue"`
		Body  json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(out, &ms); err != nil {
		return string(out)
	}
	if len(ms) == 0 {
		return "none (timed out)"
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		// A body kept as it was sent, spread over lines, on one.
		var body bytes.Buffer
		if json.Compact(&body, m.Body) != nil {
			body.Reset()
			body.Write(m.Body)
		}
		parts[i] = m.Queue + ": " + body.String()
	}
	return strings.Join(parts, "; ")
}
