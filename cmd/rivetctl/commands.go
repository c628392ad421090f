package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/ijson"
	"github.com/rivet-go/rivet/internal/textcut"
)

// handleFlags are the flags of commands that may create the actor.
type handleFlags struct {
	app      *app
	noCreate bool
	input    string
}

func (hf *handleFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&hf.noCreate, "no-create", false, "fail with NOT_FOUND if the actor does not exist, instead of creating it")
	cmd.Flags().StringVar(&hf.input, "input", "", "create input (JSON, or @FILE, or @- for stdin), used if this call creates the actor")
}

// handle returns the actor's handle as the flags ask.
func (hf *handleFlags) handle(c *client.Client, name string, key []string) (*client.ActorHandle, error) {
	h := c.Actor(name, key...)
	if hf.noCreate {
		if hf.input != "" {
			return nil, usagef("--input makes no sense with --no-create")
		}
		return h.NoCreate(), nil
	}
	if hf.input != "" {
		in, err := hf.app.jsonArg("--input", hf.input)
		if err != nil {
			return nil, err
		}
		h = h.WithInput(in)
	}
	return h, nil
}

func (a *app) callCommand() *cobra.Command {
	hf := handleFlags{app: a}
	var readOnly bool
	var idemKey string
	cmd := &cobra.Command{
		Use:   "call ACTOR KEY ACTION [ARG_JSON...]",
		Short: "Run an action and print its JSON result",
		Long: `Run an action and print its JSON result. Each ARG_JSON is one argument; @FILE reads
it from a file and @- from stdin (for payloads too big for a command line).

With --idempotency-key the call runs once: sent again with the same key (after
an error that left its outcome unknown, say), it prints the first call's result
and runs nothing. The actor keeps its last 1024 keys, each for 24 hours; the
same key with another action or arguments is refused.`,
		Example: `  rivetctl call counter main increment 5
  rivetctl call counter '["eu","alice"]' getCount
  rivetctl call --read-only counter main getCount
  rivetctl call counter main increment 5 --idempotency-key topup-17
  rivetctl call counter main increment @by.json`,
		Annotations: map[string]string{jsonArgsAnnotation: "3-", sideEffectsAnnotation: "true"},
		Args:        args(3, -1),
	}
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, args []string) error {
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		callArgs := make([]any, 0, len(args)-3)
		for i, s := range args[3:] {
			raw, err := a.jsonArg(fmt.Sprintf("argument %d", i+1), s)
			if err != nil {
				return err
			}
			callArgs = append(callArgs, raw)
		}
		impliedNoCreate := readOnly && hf.input == "" && !hf.noCreate
		if impliedNoCreate {
			// A read of an actor that does not exist is NOT_FOUND, not a
			// new actor whose workflow starts (a trial's status query of
			// an order ID that did not exist started its payment).
			hf.noCreate = true
		}
		h, err := hf.handle(c, args[0], key)
		if err != nil {
			return err
		}
		call := h.Call
		switch {
		case readOnly && idemKey != "":
			return usagef("--read-only and --idempotency-key go apart: a read-only action changes nothing, and needs no key")
		case readOnly:
			call = h.Query
		case cmd.Flags().Changed("idempotency-key") && idemKey == "":
			return usagef("--idempotency-key is empty")
		case idemKey != "":
			call = func(ctx context.Context, action string, args ...any) (json.RawMessage, error) {
				return h.CallWith(ctx, action, client.CallOptions{IdempotencyKey: idemKey}, args...)
			}
		}
		res, err := call(ctx, args[2], callArgs...)
		if err != nil {
			if impliedNoCreate && errors.Is(err, rivet.ErrNotFound) {
				// The flag, not the actor, may be what is wrong: the same
				// call without it would have created the actor.
				return &runError{err: err, note: "; --read-only creates no actor: give --input, or call without --read-only, to create it"}
			}
			return err
		}
		return a.printJSON(res)
	})
	hf.add(cmd)
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "run only a read-only action (refused otherwise, before it runs; a node older than this flag runs any action); retried, as a read is, if a connection breaks during it; creates no actor (NOT_FOUND if it does not exist) unless --input is given")
	cmd.Flags().StringVar(&idemKey, "idempotency-key", "", "run the call once: a call with the same key prints the first one's result and runs nothing (the actor keeps its last 1024 keys, 24h each); retried, as a read is, if a connection breaks during it")
	return cmd
}

func (a *app) sendCommand() *cobra.Command {
	hf := handleFlags{app: a}
	var (
		wait        bool
		waitTimeout time.Duration
		idemKey     string
		requireRun  bool
	)
	cmd := &cobra.Command{
		Use:   "send ACTOR KEY QUEUE BODY_JSON",
		Short: "Append a message to an actor's queue",
		Long: `Append a message to an actor's queue. Without --wait it returns once the message is
durable; with --wait, once the actor's workflow completed it (or --wait-timeout passed:
the message stays, queued or taken by the workflow, and rivetctl exits 1). Only a workflow
that completes the messages it receives (Message.Complete) answers a waiting sender. The
command's deadline is --timeout plus --wait-timeout. BODY_JSON may be @FILE or @- (stdin).
With --idempotency-key the message is queued once: sent again with the same key (after
an error that leaves its outcome unknown), it queues nothing and says so; with --wait it
then waits for the first message's completion, or prints it at once if it came already
(kept with the key). Without --wait, a message sent to an actor whose workflow has ended
is queued all the same (a note on stderr says so: a retry of the workflow takes it); with
--require-running the node refuses it instead (FAILED_PRECONDITION, reason
workflow.ended, workflow.failed or workflow.none), queuing nothing, as --wait does.`,
		Example: `  rivetctl send reminderActor main reminders '{"text":"hi","at":0}'
  rivetctl send scatterGatherActor main scatter '{"input":2}'
  rivetctl send timeoutActor main charge '{"orderId":"o17"}' --idempotency-key order-o17
  jq -c . charge.json | rivetctl send timeoutActor main charge @-`,
		Annotations: map[string]string{jsonArgsAnnotation: "3", sideEffectsAnnotation: "true"},
		Args:        args(4, 4),
	}
	cmd.RunE = a.runE(func() time.Duration {
		switch {
		case !wait:
			return 0
		case waitTimeout == 0:
			return nodeSendWait // what the node waits for a timeout of 0
		}
		return waitTimeout
	}, func(ctx context.Context, c *client.Client, args []string) error {
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		body, err := a.jsonArg("BODY_JSON", args[3])
		if err != nil {
			return err
		}
		if waitTimeout < 0 {
			return usagef("--wait-timeout must not be negative, not %s", waitTimeout)
		}
		if !wait && cmd.Flags().Changed("wait-timeout") {
			// Alone it changed nothing: the send did not wait, as whoever
			// wrote it expected.
			return usagef("--wait-timeout needs --wait (without it, send returns once the message is queued)")
		}
		h, err := hf.handle(c, args[0], key)
		if err != nil {
			return err
		}
		res, err := h.SendWith(ctx, args[2], body, client.SendOptions{Wait: wait, Timeout: waitTimeout, IdempotencyKey: idemKey, RequireRunning: requireRun})
		if err != nil {
			return err
		}
		return a.printSendResult(res, wait, requireRun, idemKey)
	})
	hf.add(cmd)
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the actor's workflow completes the message")
	cmd.Flags().DurationVar(&waitTimeout, "wait-timeout", nodeSendWait, "how long --wait waits (0: the node's default, 30s)")
	cmd.Flags().StringVar(&idemKey, "idempotency-key", "", "queue the message once: a send with the same key queues nothing (the actor keeps its last 1024 keys, 24h each)")
	cmd.Flags().BoolVar(&requireRun, "require-running", false, "refuse the send, queuing nothing, if the actor's workflow has ended (or it has none), as --wait does; a node older than this flag queues it")
	return cmd
}

// nodeSendWait is how long a node waits for a send's completion when the
// request gives no timeout (SendRequest.timeout_ms 0).
const nodeSendWait = 30 * time.Second

func (a *app) stateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state ACTOR KEY",
		Short: "Print an actor's committed state (JSON)",
		Args:  args(2, 2),
	}
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, args []string) error {
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		st, err := c.Actor(args[0], key...).NoCreate().State(ctx)
		if err != nil {
			return err
		}
		return a.printJSON(st)
	})
	return cmd
}

func (a *app) inspectCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect ACTOR KEY",
		Short: "Show an actor's state, owner, queues and workflow status",
		Args:  args(2, 2),
	}
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, args []string) error {
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		in, err := c.Actor(args[0], key...).NoCreate().Inspect(ctx)
		if err != nil {
			return err
		}
		var registeredOn []string
		if in.Unregistered && a.output != "json" {
			// Other nodes may register the type (the nodes' types
			// differ): then the actor is not one to destroy, but one
			// that waits for an owner that runs it.
			if ms, err := c.Members(ctx); err == nil {
				for _, m := range ms {
					if m.NodeID != in.Info.Owner && slices.Contains(m.ActorTypes, in.Info.Name) {
						registeredOn = append(registeredOn, m.NodeID)
					}
				}
			}
		}
		return a.printInspection(in, registeredOn)
	})
	return cmd
}

func (a *app) actorsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "actors [ACTOR]",
		Short: "List actors, of one name or all",
		Long: `List actors, of one name or all. With --failed (--status failed), only those whose workflow failed
(a step exhausted its retries, the code no longer matches the history...), each with
when it failed and its error; ` + "`rivetctl workflow retry ACTOR KEY`" + ` takes one off the list,
` + "`rivetctl workflow retry ACTOR --all-failed`" + ` all of them: from the cluster's index of
failures, every actor whether in memory or not.
With --status retrying, the actors whose workflow retries a step now: one of its steps failed at
least once in its current run of attempts and runs again, or waits out its backoff (one row per
such step, with its attempt and last error, as inspect's pending steps). Every registered node is
asked for its actors in memory: only those are known. A workflow whose backoff outlasts its actor's
idle timeout (--idle-timeout, 30 s; the default backoffs stay under it) leaves memory until its next
attempt and is not listed meanwhile (--status sleeping lists it, for a step retry), and a step is
not in flight for the moment its failed attempt is recorded. Each node filters by ACTOR and
--error-contains (which keeps only the steps whose last error contains TEXT) before it cuts its list
to 1000 actors, and sends each actor's first 5 retrying steps (saying how many more), each error's
first 256 bytes, and about 1 MiB of actors: a note on stderr says how many it left out.
With --status sleeping, the actors whose workflow runs again by itself at a time, in memory or not,
the earliest first: each with its wake time, how far off it is (or how long overdue: it runs as soon
as its node gets to it) and what the time is for: a sleep, a receive's timeout (a message on its
queues wakes it before), a step's retry, or "run again" (a workflow just created, stopped in the
middle of a run, or sent a message, which runs at once; or a record of an older node, which does not
say). --due-before keeps those that wake before a time (10m: within 10 minutes; -1h: overdue by
more than an hour). With --status waiting, the actors whose workflow waits for a message with no
time that would wake it, with the queues it waits on. A workflow running now is in neither list;
scheduled calls (rivetctl schedule) are not workflows and are in neither. Each node lists the
partitions it serves, from their wakeup records (every actor with a workflow has one until the
workflow ends) and, for actors in memory, their running workflows; --limit (at most 1000) bounds the
list, and a note on stderr says how many were left out (--limit bounds a plain listing and --failed too,
which stop reading pages once they have N, and note that more were left out). A node that does not answer, or partitions no
answering node served (changing hands), are noted, and fail the command once the rest is printed.
An empty list prints a line saying so ("no actors named ACTOR"); -o json prints [].
The plain and --failed listings are printed a page (1000 actors) at a time as the pages come: a
column keeps the widths of the pages before it and widens from the row of a wider cell on (rows
printed earlier stay as they were). A listing that fails midway has printed its pages before the
failure and exits 1; with -o json its array is left open, so that it does not parse as a whole.`,
		Example: `  rivetctl actors counter
  rivetctl actors --limit 20
  rivetctl actors --failed
  rivetctl actors order --failed --error-contains "history diverged"
  rivetctl actors --status retrying
  rivetctl actors payment --status retrying --error-contains "connection refused"
  rivetctl actors --status sleeping --due-before 1h
  rivetctl actors order --status waiting`,
		Args: args(0, 1),
	}
	var (
		failed        bool
		status        string
		errorContains string
		dueBefore     string
		limit         int
	)
	cmd.Flags().BoolVar(&failed, "failed", false, "list only the actors whose workflow failed, with their errors")
	cmd.Flags().StringVar(&status, "status", "", "list only the actors whose workflow is `STATUS`: failed (as --failed), retrying (a step, for actors in memory), sleeping (runs again at a time) or waiting (for a message only)")
	cmd.Flags().StringVar(&errorContains, "error-contains", "", "with --failed: only those whose error contains TEXT (as listed: its first 1 KiB); with --status retrying, only the retrying steps whose last error contains TEXT")
	cmd.Flags().StringVar(&dueBefore, "due-before", "", "with --status sleeping: only those that wake before `WHEN`, a duration from now (10m; -1h: overdue by more than an hour) or an RFC 3339 time")
	cmd.Flags().IntVar(&limit, "limit", client.MaxWaiting, "list at most `N` (1 to 1000): sleeping ones the earliest to wake first, the others by name and key; the default applies to --status sleeping and waiting, and a plain listing or --failed without --limit lists all")
	// Each page has its own --timeout (listActors): the whole may take long.
	cmd.RunE = a.runE(func() time.Duration { return watchForever }, func(ctx context.Context, c *client.Client, args []string) error {
		name := ""
		if len(args) == 1 {
			name = args[0]
		}
		switch status {
		case "":
		case statusFailed:
			failed = true
		case statusRetrying, statusSleeping, statusWaiting:
			if failed {
				return usagef("--failed and --status %s go apart", status)
			}
		default:
			return usagef("--status %q: want failed, retrying, sleeping or waiting", status)
		}
		if cmd.Flags().Changed("due-before") && status != statusSleeping {
			return usagef("--due-before needs --status sleeping (only a sleeping workflow has a time to wake)")
		}
		if cmd.Flags().Changed("limit") && status == statusRetrying {
			return usagef("--limit does not go with --status retrying (each node cuts its list to 1000 actors, and says how many it left out)")
		}
		if limit < 1 || limit > client.MaxWaiting {
			return usagef("--limit %d: want 1 to %d", limit, client.MaxWaiting)
		}
		if status == statusSleeping || status == statusWaiting {
			if cmd.Flags().Changed("error-contains") {
				return usagef("--error-contains needs --failed or --status retrying (it filters workflows by their error)")
			}
			q := client.WaitQuery{Waiting: status == statusWaiting, Name: name, Limit: limit}
			if dueBefore != "" {
				var err error
				if q.DueBefore, err = parseDueBefore(dueBefore, time.Now()); err != nil {
					return err
				}
			}
			ws, partial, err := a.listWaiting(ctx, c, q)
			if err != nil {
				return err
			}
			if err := a.printWaiting(ws, q); err != nil {
				return err
			}
			return partial
		}
		if cmd.Flags().Changed("error-contains") && !failed && status != statusRetrying {
			return usagef("--error-contains needs --failed or --status retrying (it filters workflows by their error)")
		}
		if err := emptyErrorContains(cmd, errorContains); err != nil {
			return err
		}
		if status == statusRetrying {
			rs, partial, err := a.listRetrying(ctx, c, name, errorContains)
			if err != nil {
				return err
			}
			if err := a.printRetrying(rs, name, errorContains); err != nil {
				return err
			}
			return partial
		}
		// Printed a page at a time, not gathered first: a node with
		// 100,000 actors had rivetctl hold them all (80 MB) and print
		// nothing for 7 s (a user trial), and the memory grew with the
		// cluster.
		upTo := 0 // all
		if cmd.Flags().Changed("limit") {
			upTo = limit
		}
		p := &actorPrinter{a: a, failed: failed}
		n, more, err := a.walkActors(ctx, c, name, failed, errorContains, upTo, p.page)
		if err != nil {
			return err
		}
		if n == 0 && a.output != "json" {
			// A header alone reads as a listing that went wrong.
			_, err := fmt.Fprintln(a.stdout, noActors(name, failed, errorContains))
			return err
		}
		if err := p.end(); err != nil {
			return err
		}
		if more != moreNone {
			// After the rows, as sleeping's note: on a terminal it is
			// the last line read.
			a.note("%s after the %d listed (--limit): narrow the list with ACTOR, or raise --limit (at most %d)", more, n, client.MaxWaiting)
		}
		return nil
	})
	return cmd
}

// listActors lists the actors named name ("" for all), only those whose
// workflow failed if failed (and whose error, as listed, contains
// errorContains: after a deploy whose code does not match its runs'
// histories, those that diverged and not those that failed by their own
// errors, a trial's need), a page (1,000) at a time, each page bounded
// by --timeout rather than the whole listing: a node with 150,000 actors
// took about 10 s to list them all, the default --timeout, and the
// listing failed or not by the machine's load (a user trial).
func (a *app) listActors(ctx context.Context, c *client.Client, name string, failed bool, errorContains string) ([]client.ActorInfo, error) {
	var all []client.ActorInfo
	_, _, err := a.walkActors(ctx, c, name, failed, errorContains, 0, func(page []client.ActorInfo) error {
		all = append(all, page...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return all, nil
}

// walkActors is listActors handing each page's actors to each as it
// comes (none when a page has none left by errorContains, and no more
// than upTo in all), holding no more than a page; it returns how many it
// handed. With upTo > 0 it lists the first upTo actors (by name and key)
// and fetches no page after the one that holds the last of them; the
// leftOut it returns says whether others were left out.
func (a *app) walkActors(ctx context.Context, c *client.Client, name string, failed bool, errorContains string, upTo int, each func([]client.ActorInfo) error) (int, leftOut, error) {
	n := 0
	var kept []client.ActorInfo
	opts := client.ListOptions{Limit: 1000, FailedWorkflows: failed}
	for {
		if upTo > 0 && errorContains == "" {
			// No bigger page than what is missing: the node says by its
			// next page token whether more follow (it reads one more).
			opts.Limit = min(1000, upTo-n)
		}
		pageCtx, cancel := context.WithTimeout(ctx, a.timeout)
		page, err := c.List(pageCtx, name, opts)
		timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(pageCtx.Err(), context.DeadlineExceeded)
		cancel()
		switch {
		case err != nil && timedOut && ctx.Err() == nil:
			return n, moreNone, a.deadlineError(err, a.timeout, fmt.Sprintf("; for one page of the listing, after %d actors (each page has its own --timeout)", n))
		case err != nil:
			return n, moreNone, err
		}
		kept = kept[:0]
		for _, actor := range page.Actors {
			if strings.Contains(actor.WorkflowError, errorContains) {
				kept = append(kept, actor)
			}
		}
		cut := upTo > 0 && n+len(kept) > upTo
		if cut {
			kept = kept[:upTo-n]
		}
		if len(kept) > 0 {
			if err := each(kept); err != nil {
				return n, moreNone, err
			}
			n += len(kept)
		}
		if upTo > 0 && n >= upTo {
			switch {
			case cut:
				return n, moreSome, nil
			case page.NextPageToken == "":
				return n, moreNone, nil
			case errorContains != "":
				// The next page holds more failed workflows, not
				// necessarily more whose error matches.
				return n, moreMaybe, nil
			}
			return n, moreSome, nil
		}
		if page.NextPageToken == "" {
			return n, moreNone, nil
		}
		if page.NextPageToken == opts.PageToken {
			// A node's bug (client.ListAll says the same): followed,
			// the same page would come back for ever.
			return n, moreNone, fmt.Errorf("the node answered an actor list page that does not advance (the next page token %.40q again): a bug of the node's", opts.PageToken)
		}
		opts.PageToken = page.NextPageToken
	}
}

// leftOut says what an actor listing cut to --limit left out.
type leftOut int

const (
	moreNone  leftOut = iota // nothing: the listing is whole
	moreSome                 // at least one more actor
	moreMaybe                // more failed workflows, whose errors were not read
)

func (m leftOut) String() string {
	switch m {
	case moreSome:
		return "more actors left out"
	case moreMaybe:
		return "more failed workflows not read (some may match --error-contains)"
	}
	return "nothing left out"
}

// emptyErrorContains refuses an --error-contains given empty: an unset
// shell variable, which would match every failed workflow.
func emptyErrorContains(cmd *cobra.Command, errorContains string) error {
	if cmd.Flags().Changed("error-contains") && errorContains == "" {
		return usagef("--error-contains is empty (it would match every failed workflow: leave it out for all)")
	}
	return nil
}

// noActors is what actors prints for an empty listing.
func noActors(name string, failed bool, errorContains string) string {
	with := ""
	if errorContains != "" {
		with = fmt.Sprintf(" with an error containing %q", errorContains)
	}
	switch {
	case failed && name != "":
		return "no failed workflows" + with + " among the actors named " + printable(name)
	case failed:
		return "no failed workflows" + with
	case name != "":
		return "no actors named " + printable(name)
	}
	return "no actors"
}

func (a *app) createCommand() *cobra.Command {
	var input, idemKey string
	cmd := &cobra.Command{
		Use:   "create ACTOR KEY",
		Short: "Create an actor (ALREADY_EXISTS if it exists)",
		Long: `Create an actor (ALREADY_EXISTS if it exists). With --idempotency-key the key is stored
with the actor it creates: the same create sent again (same key and --input, after an
error that leaves its outcome unknown) succeeds again and says it was a duplicate, without
making the actor's state again; an actor created otherwise is still ALREADY_EXISTS.`,
		Annotations: map[string]string{sideEffectsAnnotation: "true"},
		Args:        args(2, 2),
	}
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, args []string) error {
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		var in any
		if input != "" {
			if in, err = a.jsonArg("--input", input); err != nil {
				return err
			}
		}
		res, err := c.CreateWith(ctx, args[0], key, in, client.CreateOptions{IdempotencyKey: idemKey})
		if err != nil {
			return err
		}
		if a.output == "json" {
			return a.printValue(res)
		}
		info := res.ActorInfo
		if res.Duplicate {
			_, err = fmt.Fprintf(a.stdout, "duplicate: %s %s was created before with this idempotency key and input (by an earlier create, or by this one's first attempt if a broken connection cut it off and the client sent it again); nothing more was created (partition %d, owner %s)\n", printable(info.Name), formatKey(info.Key), info.Partition, printable(orDash(info.Owner)))
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "created %s %s (partition %d, owner %s)\n", printable(info.Name), formatKey(info.Key), info.Partition, printable(orDash(info.Owner)))
		return err
	})
	cmd.Flags().StringVar(&input, "input", "", "create input (JSON, or @FILE, or @- for stdin)")
	cmd.Flags().StringVar(&idemKey, "idempotency-key", "", "create once: the same create with the same key and input succeeds again as a duplicate (the actor keeps the key of the create that made it); retried, as a read is, if a connection breaks during it")
	return cmd
}

func (a *app) destroyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:         "destroy ACTOR KEY",
		Short:       "Destroy an actor and everything stored for it",
		Annotations: map[string]string{sideEffectsAnnotation: "true"},
		Args:        args(2, 2),
	}
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, args []string) error {
		key, err := parseKey(args[1])
		if err != nil {
			return err
		}
		if err := c.Actor(args[0], key...).Destroy(ctx); err != nil {
			return err
		}
		if a.output == "json" {
			return a.printValue(struct {
				Name      string   `json:"name"`
				Key       []string `json:"key"`
				Destroyed bool     `json:"destroyed"`
			}{args[0], key, true})
		}
		_, err = fmt.Fprintf(a.stdout, "destroyed %s %s\n", args[0], formatKey(key))
		return err
	})
	return cmd
}

func (a *app) membersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "members",
		Short: "List the nodes of the cluster",
		Long: `List the nodes of the cluster: those registered in etcd (a node's
registration lasts while its lease does), and the ones gossip knows
without a registration. STATE is what gossip says of each: alive; unknown
(registered, not yet heard in gossip); unregistered (alive in gossip, no
lease in etcd: starting, cut off from etcd, or crashed and not yet
declared dead); left (it stopped cleanly, as on SIGTERM); dead (it stopped
answering). ",draining" marks a drained node (rivetctl drain); ",unreachable"
one whose gRPC the answering node has not reached for 3 s though it is
registered (a network fault between the two: the requests the answering
node forwards to it fail; clients given several addresses go through the
others). A node that
crashed is alive (gossip has no suspect state) until gossip declares it
dead, and unregistered meanwhile once its lease has expired (--lease-ttl,
3s by default); dead, it is listed until gossip forgets it. FORMAT is the newest storage
format the node's build reads and writes (-o json's storage_format; "-"
when unknown: no registration, or an older node answering), and the line
below the table the formats the cluster has recorded: a build of an older
format than the newest of them must not run (it refuses to start; one
from before the record starts and misreads the data), so a rollback to it
is ruled out (docs/deploy.md, "Downgrades"). If the registered nodes register
different actor types, a note on stderr says which (-o json lists each
node's actor_types; none for a build that does not say).`,
		Args: args(0, 0),
	}
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, _ []string) error {
		ml, err := c.MemberList(ctx)
		if err != nil {
			return err
		}
		if ml.Note != "" {
			a.note("%s", ml.Note)
		}
		if err := a.printMembers(ml); err != nil {
			return err
		}
		// After the table, on stderr: the table stays as scripts read it.
		if said := typeDifferences(ml.Members); said != "" {
			a.note("the nodes register different actor types: %s; a call of one whose partition's owner does not register it fails, and its workflows do not run there: every node must register the same actor types (docs/deploy.md, \"Adding or removing an actor type\")", said)
		}
		return nil
	})
	return cmd
}

func (a *app) partitionsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "partitions",
		Short: "Print the partition table: partition, owner, fencing token",
		Args:  args(0, 0),
	}
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, _ []string) error {
		pt, err := c.Partitions(ctx)
		if err != nil {
			return err
		}
		if pt.Note != "" {
			a.note("%s", pt.Note)
		}
		return a.printPartitions(pt)
	})
	return cmd
}

func (a *app) statsCommand() *cobra.Command {
	var node string
	var all bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Print a node's counters: the node at --addr's, another's (--node), or every node's and their sum (--all)",
		Example: `  rivetctl stats
  rivetctl stats --node node2
  rivetctl stats --all`,
		Args: args(0, 0),
	}
	cmd.Flags().StringVar(&node, "node", "", "the node `ID` whose counters to print (rivetctl members lists them); the node at --addr asks it")
	cmd.Flags().BoolVar(&all, "all", false, "print the counters of every registered node, and their sum")
	cmd.RunE = a.runE(nil, func(ctx context.Context, c *client.Client, _ []string) error {
		if all {
			if node != "" {
				return usagef("--node and --all go apart")
			}
			return a.statsAll(ctx, c)
		}
		if cmd.Flags().Changed("node") && node == "" {
			// An unset shell variable: "" would print the node at --addr.
			return usagef("--node is empty: give a node's ID (rivetctl members lists them)")
		}
		st, err := c.StatsOf(ctx, node)
		if err != nil {
			return err
		}
		if node != "" && st.NodeID != node {
			return fmt.Errorf("the node at --addr, %s, answered with its own counters: it is older than --node", printable(st.NodeID))
		}
		return a.printStats(st)
	})
	return cmd
}

// parseKey reads KEY: a JSON array of strings if it starts with '[', else
// the string itself as the only component.
func parseKey(s string) ([]string, error) {
	if s == "" {
		// Most often an unset shell variable: refused rather than
		// creating an actor whose key is one empty string.
		return nil, usagef(`KEY is empty (for a key of one empty string, write '[""]')`)
	}
	if !utf8.ValidString(s) {
		// encoding/json would make each bad byte of a JSON key U+FFFD:
		// another actor's key, without a word.
		return nil, usagef("KEY %q is not valid UTF-8", s)
	}
	if !strings.HasPrefix(s, "[") {
		return []string{s}, nil
	}
	// Decoded through pointers: encoding/json leaves a string as it is
	// for a null, so [null] would silently be the key [""].
	var parts []*string
	if err := json.Unmarshal([]byte(s), &parts); err != nil {
		return nil, usagef("KEY %q starts with '[' but is not a JSON array of strings: %v", s, err)
	}
	// As a bad byte, a lone surrogate would decode as U+FFFD.
	if at, esc := ijson.LoneSurrogate([]byte(s)); at >= 0 {
		return nil, usagef("KEY %q is %s", s, ijson.LoneSurrogateText(esc, at))
	}
	key := make([]string, len(parts))
	for i, p := range parts {
		if p == nil {
			return nil, usagef("KEY %q starts with '[' but is not a JSON array of strings: component %d is null", s, i)
		}
		key[i] = *p
	}
	if len(key) == 0 {
		// As an empty KEY: the node would refuse it (INVALID_ARGUMENT),
		// but it is a mistake on the command line, told as such.
		return nil, usagef(`KEY %q is empty: a key has at least one component (for a key of one empty string, write '[""]')`, s)
	}
	return key, nil
}

// maxJSONFile bounds what a JSON value given as @FILE or @- reads: more
// than any payload a node accepts.
const maxJSONFile = 64 << 20

// jsonArgsAnnotation names, on a command, its positional arguments that
// are JSON values: "N" the Nth (from 0), "N-" the Nth and those after.
// preloadJSON reads those given as @FILE or @- before the command's
// deadline starts (a pipe into stdin may take its time).
const jsonArgsAnnotation = "rivetctl/json-args"

// loadedValue is what an @FILE or @- value read.
type loadedValue struct {
	b   []byte
	err error
}

// preloadJSON reads the @FILE and @- values among cmd's JSON arguments
// and its --input, for jsonArg.
func (a *app) preloadJSON(cmd *cobra.Command, args []string) {
	var vals []string
	if spec, ok := cmd.Annotations[jsonArgsAnnotation]; ok {
		from, rest := strings.CutSuffix(spec, "-")
		if n, err := strconv.Atoi(from); err == nil && n < len(args) {
			if rest {
				vals = append(vals, args[n:]...)
			} else {
				vals = append(vals, args[n])
			}
		}
	}
	if f := cmd.Flags().Lookup("input"); f != nil {
		if nc := cmd.Flags().Lookup("no-create"); nc == nil || nc.Value.String() != "true" {
			vals = append(vals, f.Value.String()) // with --no-create, --input is a usage error, not read
		}
	}
	for _, v := range vals {
		if path, ok := strings.CutPrefix(v, "@"); ok && path != "" {
			if _, done := a.loaded[v]; !done {
				if a.loaded == nil {
					a.loaded = map[string]loadedValue{}
				}
				b, err := a.readAt(path)
				a.loaded[v] = loadedValue{b, err}
			}
		}
	}
}

// readAt reads a file, or stdin for "-".
func (a *app) readAt(path string) ([]byte, error) {
	if path == "-" {
		return io.ReadAll(io.LimitReader(a.stdin, maxJSONFile+1))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxJSONFile+1))
}

// jsonArg is parseJSON for a value that may also be read from a file
// (@FILE) or from stdin (@-): a JSON value cannot start with @, and a
// payload over 128 KiB cannot be one argument on Linux.
func (a *app) jsonArg(what, s string) (json.RawMessage, error) {
	path, ok := strings.CutPrefix(s, "@")
	if !ok {
		return parseJSON(what, s)
	}
	const quote = "a JSON string that starts with @ needs its quotes"
	if path == "" {
		return nil, usagef("%s: @ names no file (@FILE, or @- for stdin; %s: '\"@\"')", what, quote)
	}
	src := path
	if path == "-" {
		if a.stdinUsed {
			return nil, usagef("%s: stdin (@-) was read already, by another value", what)
		}
		a.stdinUsed = true
		src = "stdin"
	}
	lv, ok := a.loaded[s]
	if !ok {
		lv.b, lv.err = a.readAt(path)
	}
	if lv.err != nil {
		if errors.Is(lv.err, fs.ErrNotExist) {
			return nil, usagef("%s: %v (%s: '%s')", what, lv.err, quote, clip(quoteHint(s)))
		}
		return nil, usagef("%s: %v", what, lv.err)
	}
	if len(lv.b) > maxJSONFile {
		return nil, usagef("%s: %s holds more than %d MiB", what, src, maxJSONFile>>20)
	}
	// A byte order mark, which some editors and shells (Windows
	// PowerShell's Out-File, Notepad) write at the start of a UTF-8 file,
	// is not JSON: RFC 8259 lets a parser ignore it, as here. Left in, the
	// value was refused with advice to quote it all as a string.
	body := strings.TrimSpace(strings.TrimPrefix(string(lv.b), "\ufeff"))
	if body == "" {
		return nil, usagef("%s: %s is empty", what, src)
	}
	return parseJSON(what+" (from "+src+")", body)
}

// parseJSON takes a command-line payload literally as JSON.
func parseJSON(what, s string) (json.RawMessage, error) {
	if !json.Valid([]byte(s)) {
		var first json.RawMessage
		if dec := json.NewDecoder(strings.NewReader(s)); dec.Decode(&first) == nil {
			// A value and more after it (a file of several objects, one
			// a line): neither quotes nor quoting all would help.
			at := int(dec.InputOffset())
			at += len(s[at:]) - len(strings.TrimLeft(s[at:], " \t\r\n"))
			return nil, usagef("%s is not valid JSON: %s (one JSON value, then more at byte %d: give a single value, such as an array of them)", what, clip(s), at)
		}
		if t := strings.TrimSpace(s); strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") {
			// Meant as an object or array: quoting it all would make it
			// a string.
			var v any
			err := json.Unmarshal([]byte(s), &v)
			return nil, usagef("%s is not valid JSON: %s (%v; names and strings need double quotes, as in '{\"sku\":\"a\"}')", what, clip(s), err)
		}
		return nil, usagef("%s is not valid JSON: %s (a string needs its quotes: '%s')", what, clip(s), clip(quoteHint(s)))
	}
	if !utf8.ValidString(s) {
		// A node refuses it (JSON text is UTF-8): say so before sending.
		return nil, usagef("%s is not valid UTF-8 (a file in another encoding? convert it to UTF-8)", what)
	}
	if at, esc := ijson.LoneSurrogate([]byte(s)); at >= 0 {
		// A node refuses it too.
		return nil, usagef("%s is %s", what, ijson.LoneSurrogateText(esc, at))
	}
	return json.RawMessage(s), nil
}

func quoteHint(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// clip shortens what an error message quotes of a payload, which may be
// megabytes.
func clip(s string) string { return cutText(s, 40) }

// cutText is s if at most n bytes long, else its start up to n bytes, cut
// on a character, and "...".
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return textcut.Prefix(s, n) + "..."
}
