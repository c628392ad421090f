package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/typesets"
	"github.com/rivet-go/rivet/workflow"
)

// Output: --output json prints one JSON value (compact) for scripts and jq;
// text prints indented JSON for payloads and aligned tables for lists.

// printJSON prints a JSON payload from the node.
func (a *app) printJSON(raw json.RawMessage) error {
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	var buf bytes.Buffer
	var err error
	if a.output == "json" {
		err = json.Compact(&buf, raw)
	} else {
		err = json.Indent(&buf, raw, "", "  ")
	}
	// json.Indent keeps the whitespace that ends raw: a '\t' or a '\r'
	// there, escaped as in a string, would leave the text no longer JSON.
	out := printableJSON(bytes.TrimRight(buf.Bytes(), " \t\r\n"))
	if err != nil {
		// Not JSON after all: print it rather than nothing.
		out = []byte(printable(string(raw)))
	}
	_, err = a.stdout.Write(append(out, '\n'))
	return err
}

// note tells the user something beside a command's output, on stderr so
// that stdout stays what scripts read: a line "rivetctl: note: ..." or, with
// --output json, a JSON object {"note": "..."} (stderr then holds JSON only).
func (a *app) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if a.output == "json" {
		b, _ := json.Marshal(map[string]string{"note": msg})
		fmt.Fprintln(a.stderr, string(printableJSON(b)))
		return
	}
	fmt.Fprintln(a.stderr, "rivetctl: note: "+printable(msg))
}

// printExport prints a history export as one compact JSON document,
// whatever --output says: its entries as the node encoded them (HTML
// characters not escaped, nothing reindented), for a file a test reads
// back, not for reading.
func (a *app) printExport(x *workflow.HistoryExport) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(x); err != nil {
		return err
	}
	_, err := a.stdout.Write(printableJSON(buf.Bytes()))
	return err
}

// printValue prints v as JSON: compact with --output json, else indented.
func (a *app) printValue(v any) error {
	var b []byte
	var err error
	if a.output == "json" {
		b, err = json.Marshal(v)
	} else {
		b, err = json.MarshalIndent(v, "", "  ")
	}
	if err != nil {
		return err
	}
	_, err = a.stdout.Write(append(printableJSON(b), '\n'))
	return err
}

// dupOrigin says who may have sent a duplicate's first message: a user
// who sent once, and whose send the client sent again after its
// connection broke (a node killed mid-send), was told "sent before ...;
// nothing was queued" and took the order for lost (a user trial).
const dupOrigin = "by an earlier send, or by this one's first attempt if a broken connection cut it off and the client sent it again"

func (a *app) printSendResult(res client.SendResult, wait, requireRunning bool, idemKey string) error {
	// A wait that ran out is a failure of the command (exit 1), as a
	// drain that outlasts its --wait is: a script must be able to tell.
	// So is one the node gave up: the message is queued, its completion
	// unknown. The node answers so both when the actor moved and when it
	// stops itself (SIGTERM ends its waits before its gRPC server, which
	// then sends the answer) and does not say which: the error names both.
	var notDone error
	switch {
	case wait && res.Status == client.SendTimedOut:
		switch res.MessageState {
		case client.MessageTaken:
			notDone = &runError{err: fmt.Errorf("not completed within the wait: the workflow took message %d and has not completed it (only a workflow's Message.Complete answers a waiting sender)", res.MessageID), code: "DEADLINE_EXCEEDED"}
		case client.MessageQueued:
			notDone = &runError{err: fmt.Errorf("not completed within the wait: message %d is still queued", res.MessageID), code: "DEADLINE_EXCEEDED"}
		default: // a node that does not say
			notDone = &runError{err: fmt.Errorf("not completed within the wait (message %d: still queued, or taken by a workflow that has not completed it)", res.MessageID), code: "DEADLINE_EXCEEDED"}
		}
	case (wait || requireRunning) && res.Status == client.SendEnqueued && res.Duplicate && res.WorkflowStatus != "":
		// With --require-running too: the node answers the duplicate
		// (its message is queued), but the workflow the sender required
		// has ended since.
		notDone = &runError{err: fmt.Errorf("a duplicate: message %d was sent before with this idempotency key ("+dupOrigin+"), and the actor's workflow %s: nothing takes it %s; nothing more was queued", res.MessageID, workflowEnded(res.WorkflowStatus), untilRetried(res.WorkflowStatus)), code: "FAILED_PRECONDITION"}
	case wait && res.Status == client.SendEnqueued && res.Duplicate:
		notDone = &runError{err: fmt.Errorf("a duplicate: message %d was sent before with this idempotency key ("+dupOrigin+"), and this send cannot wait for it (the node stopped waiting, or the workflow took it and its completion cannot come here: the workflow ended, or the completion was too large to keep, or came before the node kept completions); nothing more was queued", res.MessageID), code: "ALREADY_EXISTS"}
	case wait && res.Status == client.SendEnqueued && idemKey != "":
		// Keyed, the same send again queues nothing and waits for the
		// completion (the node keeps it for a retry): the one way left
		// to the response.
		notDone = &runError{err: fmt.Errorf("enqueued, not waited for: the node stopped waiting before the workflow completed message %d (the actor moved to another node, or its node is stopping); the message stays queued and its workflow takes it where it runs next: send it again with the same --idempotency-key to wait for its completion (it is not queued twice)", res.MessageID), code: "UNAVAILABLE"}
	case wait && res.Status == client.SendEnqueued:
		notDone = &runError{err: fmt.Errorf("enqueued, not waited for: the node stopped waiting before the workflow completed message %d (the actor moved to another node, or its node is stopping); the message stays queued and its workflow takes it where it runs next: do not send it again", res.MessageID), code: "UNAVAILABLE"}
	}
	if a.output == "json" {
		if err := a.printValue(res); err != nil {
			return err
		}
		return notDone
	}
	if notDone != nil {
		return notDone
	}
	if res.WorkflowStatus != "" {
		// Queued all the same (a retry of the workflow takes it), but
		// whoever sent it should know that nothing reads it now. On
		// stderr, so that the output stays what scripts expect.
		a.note("the actor's workflow %s: nothing takes message %d %s", workflowEnded(res.WorkflowStatus), res.MessageID, untilRetried(res.WorkflowStatus))
	}
	// A duplicate says so on stdout, where a script reads the outcome:
	// "enqueued" would have it take the send for a new message.
	var err error
	switch {
	case !wait && res.Duplicate:
		_, err = fmt.Fprintf(a.stdout, "duplicate of message %d: sent before with this idempotency key ("+dupOrigin+"); nothing more was queued\n", res.MessageID)
	case !wait:
		_, err = fmt.Fprintln(a.stdout, "enqueued")
	case res.Status == client.SendCompleted && res.Duplicate:
		_, err = fmt.Fprintf(a.stdout, "completed (message %d, a duplicate: sent before with this idempotency key, "+dupOrigin+"; nothing more was queued)\n", res.MessageID)
		if err == nil && len(res.Response) > 0 {
			err = a.printJSON(res.Response)
		}
	case res.Status == client.SendCompleted:
		_, err = fmt.Fprintf(a.stdout, "completed (message %d)\n", res.MessageID)
		if err == nil && len(res.Response) > 0 {
			err = a.printJSON(res.Response)
		}
	default:
		_, err = fmt.Fprintf(a.stdout, "%s (message %d)\n", printable(string(res.Status)), res.MessageID)
	}
	return err
}

// workflowEnded says how a workflow of status ended: "has completed",
// "was cancelled".
func workflowEnded(status string) string {
	if status == "cancelled" {
		return "was cancelled"
	}
	return "has " + status
}

// untilRetried says what makes a workflow of status, which has ended, take
// a queued message. A retry resumes a failed or cancelled run where it
// stopped, so a receive it reaches takes the message; a completed run has
// nothing left to run, and a retry without --from replays it to the same
// end: only one from an entry before that end takes it.
func untilRetried(status string) string {
	if status == "completed" {
		return "unless the workflow runs again from an entry before its end (rivetctl workflow retry --from ENTRY; a retry without --from replays it to the same end)"
	}
	return "until it is retried (rivetctl workflow retry)"
}

// printInspection prints in; registeredOn are the other nodes that
// register the actor's type, if its owner does not.
func (a *app) printInspection(in client.Inspection, registeredOn []string) error {
	if a.output == "json" {
		return a.printValue(in)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	// Every value is the node's: row escapes what does not print (keys are
	// escaped already, and printable leaves them as they are).
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, printable(v)) }
	row("actor", in.Info.Name+" "+formatKey(in.Info.Key))
	switch {
	case in.Unregistered && len(registeredOn) > 0:
		row("type", fmt.Sprintf("not registered on its owner, but on %s: the nodes register different actor types, and nothing runs this actor until its partition's owner registers %s (docs/deploy.md, \"Adding or removing an actor type\"); not one to destroy for that", strings.Join(registeredOn, ", "), in.Info.Name))
	case in.Unregistered:
		row("type", "not registered on its owner: nothing runs this actor; rivetctl destroy removes it")
	}
	row("partition", fmt.Sprint(in.Info.Partition))
	row("owner", orDash(in.Info.Owner))
	row("created", formatTime(in.Info.CreatedAt))
	row("active", fmt.Sprint(in.Active))
	if in.WorkflowStatus != "" {
		row("workflow", in.WorkflowStatus+describeWake(in.WorkflowWakeAt, in.WorkflowWakeQueues, in.WorkflowWakeAnyQueue))
	}
	if in.WorkflowError != "" {
		row("workflow error", errorLine(in.WorkflowError))
	}
	const shown = 10
	for i, s := range in.PendingSteps {
		k := ""
		if i == 0 {
			k = "pending step"
		}
		if i == shown {
			more := "(-o json shows all)"
			if in.PendingStepsOmitted > 0 {
				more = fmt.Sprintf("(-o json shows %d)", len(in.PendingSteps))
			}
			row("", fmt.Sprintf("... and %d more %s", len(in.PendingSteps)+in.PendingStepsOmitted-shown, more))
			break
		}
		row(k, describePendingStep(s))
	}
	qs := make([]string, len(in.Queues))
	for i, q := range in.Queues {
		qs[i] = fmt.Sprintf("%s=%d", q.Queue, q.Depth)
	}
	if len(qs) > 0 {
		row("queues", strings.Join(qs, " "))
	}
	if len(in.Events) > 0 {
		row("events", fmt.Sprintf("%s  (%d subscribed; rivetctl watch)", strings.Join(in.Events, " "), in.Subscribers))
	}
	for i, c := range in.Schedules {
		k := ""
		if i == 0 {
			k = "scheduled"
		}
		if i == shown {
			row("", fmt.Sprintf("... and %d more (rivetctl schedule list shows all)", len(in.Schedules)-shown))
			break
		}
		every := ""
		if c.Every > 0 {
			every = "  every " + c.Every.String()
		}
		if c.Cron != "" {
			every = "  cron " + c.Cron
		}
		if !c.LastRun.IsZero() {
			every += "  last run " + formatTime(c.LastRun) + " " + lastOutcome(c.LastError)
		}
		row(k, formatTime(c.At)+"  "+c.Action+" "+formatArgs(c.Args)+"  ("+c.ID+")"+every)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(a.stdout, "state"); err != nil {
		return err
	}
	return a.printJSON(in.State)
}

// describePendingStep is a step in flight on one line: "PATH  attempt N
// running since T" while its body runs, "PATH  attempt N at T (retry
// backoff)" while it waits out its backoff, and then the error of its
// previous attempt, on one line and cut at 120 characters (-o json has it
// whole).
func describePendingStep(s client.PendingStep) string {
	d := fmt.Sprintf("%s  attempt %d", s.Path, s.Attempt)
	if s.MaxAttempts > 0 {
		d += fmt.Sprintf(" of %d", s.MaxAttempts)
	}
	switch {
	case !s.NextAttemptAt.IsZero():
		d += " at " + formatTime(s.NextAttemptAt) + " (retry backoff)"
	case !s.StartedAt.IsZero():
		d += " running since " + formatTime(s.StartedAt)
	}
	if s.LastError != "" {
		msg := errorLine(s.LastError)
		if r := []rune(msg); len(r) > 120 {
			msg = string(r[:119]) + "…"
		}
		d += "  last error: " + msg
	}
	return d
}

// describeWake says what would wake a sleeping workflow, as far as the
// owner knows: " (wakes at T or on a message in q1, q2)".
func describeWake(at time.Time, queues []string, anyQueue bool) string {
	if !at.IsZero() && at.Before(time.Now()) {
		// Its time has come: it runs as soon as its owner gets to it.
		return " (due since " + formatTime(at) + ")"
	}
	var ways []string
	if !at.IsZero() {
		ways = append(ways, "at "+formatTime(at))
	}
	switch {
	case anyQueue:
		ways = append(ways, "on any message")
	case len(queues) > 0:
		ways = append(ways, "on a message in "+strings.Join(queues, ", "))
	}
	if len(ways) == 0 {
		return ""
	}
	return " (wakes " + strings.Join(ways, " or ") + ")"
}

// actorPrinter prints an actor listing a page at a time as it comes
// (rivetctl actors). Text aligns its columns as tabwriter would, to the
// widest cell so far: a listing of one page (up to 1,000 actors) is
// printed as before, and a column of a later page widens from where its
// wider cell comes, never narrows. -o json is one array written element
// by element, the same bytes as the array marshalled whole. A listing
// that fails midway has printed the pages before it (and, in JSON, an
// array left open).
type actorPrinter struct {
	a       *app
	failed  bool // printFailed's columns
	started bool
	widths  []int
}

// page prints one page's actors, which are not empty.
func (p *actorPrinter) page(actors []client.ActorInfo) error {
	a := p.a
	if a.output == "json" {
		var b []byte
		for _, x := range actors {
			sep := byte(',')
			if !p.started {
				sep = '['
				p.started = true
			}
			e, err := json.Marshal(x)
			if err != nil {
				return err
			}
			b = append(append(b, sep), printableJSON(e)...)
		}
		_, err := a.stdout.Write(b)
		return err
	}
	rows := make([][]string, 0, len(actors)+1)
	if !p.started {
		if p.failed {
			rows = append(rows, []string{"NAME", "KEY", "OWNER", "FAILED", "ERROR"})
		} else {
			rows = append(rows, []string{"NAME", "KEY", "PARTITION", "OWNER", "CREATED"})
		}
		p.started = true
	}
	for _, x := range actors {
		if !p.failed {
			rows = append(rows, []string{printable(x.Name), formatKey(x.Key), strconv.FormatUint(uint64(x.Partition), 10), printable(orDash(x.Owner)), formatTime(x.CreatedAt)})
			continue
		}
		msg := errorLine(x.WorkflowError)
		if r := []rune(msg); len(r) > 120 {
			msg = string(r[:119]) + "…"
		}
		rows = append(rows, []string{printable(x.Name), formatKey(x.Key), printable(orDash(x.Owner)), formatTime(x.WorkflowFailedAt), printable(msg)})
	}
	// tabwriter's layout (padding 2, the last column as it is), but with
	// widths kept from one page to the next.
	for _, r := range rows {
		for i, c := range r[:len(r)-1] {
			if i == len(p.widths) {
				p.widths = append(p.widths, 0)
			}
			p.widths[i] = max(p.widths[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		for i, c := range r[:len(r)-1] {
			b.WriteString(c)
			b.WriteString(strings.Repeat(" ", p.widths[i]-utf8.RuneCountInString(c)+2))
		}
		b.WriteString(r[len(r)-1])
		b.WriteByte('\n')
	}
	_, err := io.WriteString(a.stdout, b.String())
	return err
}

// end closes the listing: in JSON, the array ("[]" if it had no actors);
// in text, nothing (the caller prints its line for an empty listing).
func (p *actorPrinter) end() error {
	if p.a.output != "json" {
		return nil
	}
	end := "]\n"
	if !p.started {
		end = "[]\n"
	}
	_, err := io.WriteString(p.a.stdout, end)
	return err
}

// errorLine is an error of several lines (errors.Join's, as a failed
// rollback's after the workflow's own error) on one line, for text
// output: its lines, trimmed, non-empty, joined by "; ". (printable would
// show each newline as a literal \n.)
func errorLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}

// printFailed prints actors whose workflows failed, with each error on one
// line, its lines joined by "; ", cut at 120 characters (-o json has the
// error as the index keeps it, up to 1 KiB; inspect has all of it): a
// saga's rollback that failed is the second line of its error, which an
// operator must see (the first step's effect was not undone).
func (a *app) printFailed(actors []client.ActorInfo) error {
	p := &actorPrinter{a: a, failed: true}
	if len(actors) > 0 {
		if err := p.page(actors); err != nil {
			return err
		}
	}
	return p.end()
}

// printMembers prints the members, and in text the storage formats the
// cluster has recorded on a line below them (-o json prints the members
// alone, the array it always printed).
func (a *app) printMembers(ml client.MemberList) error {
	ms := ml.Members
	if a.output == "json" {
		if ms == nil {
			ms = []client.Member{}
		}
		return a.printValue(ms)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tGOSSIP\tSTATE\tPARTITIONS\tSTARTED\tFORMAT\tBUILD")
	for _, m := range ms {
		state := m.State
		if m.Draining {
			state += ",draining"
		}
		if m.Unreachable {
			state += ",unreachable"
		}
		format := "-" // unknown, not a format
		if m.StorageFormat > 0 {
			format = strconv.Itoa(m.StorageFormat)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", printable(m.NodeID), printable(orDash(m.GRPCAddr)), printable(orDash(m.GossipAddr)), printable(state), m.PartitionsOwned, formatTime(m.StartedAt), format, printable(orDash(shortBuild(m.Build))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(a.stdout, recordedFormatsLine(ml.RecordedFormats))
	return err
}

// recordedFormatsLine says which storage formats the cluster has
// recorded, and so which builds do not start in it: with FORMAT, whether
// a node could be rolled back to an older build (docs/deploy.md,
// "Downgrades"). nil is unknown.
func recordedFormatsLine(fs []int) string {
	switch {
	case fs == nil:
		return "storage formats recorded: unknown (the node that answered could not read them from etcd, or is of an older build)"
	case len(fs) == 0:
		return "storage formats recorded: none (no build refuses to start in this cluster)"
	}
	words := make([]string, len(fs))
	for i, f := range fs {
		words[i] = strconv.Itoa(f)
	}
	// Only builds from the record on check it (checkStorageFormats):
	// every build of format 1, and the first of format 2, start and
	// misread the data.
	older, why := "1", "it predates the record, so it starts, and misreads the data"
	if newest := slices.Max(fs); newest > 2 {
		older, why = fmt.Sprintf("%d or older", newest-1), "it refuses to start, or, if it predates the record, starts and misreads the data"
	}
	return fmt.Sprintf("storage formats recorded: %s; a build of storage format %s must not run in this cluster: %s (docs/deploy.md, \"Downgrades\")", strings.Join(words, ", "), older, why)
}

// typeDifferences says which actor types some registered nodes of ms
// register and others do not ("" if none), among the nodes that say which
// they register.
func typeDifferences(ms []client.Member) string {
	known := map[string][]string{}
	for _, m := range ms {
		if m.TypesKnown() && !m.StartedAt.IsZero() {
			known[m.NodeID] = m.ActorTypes
		}
	}
	return typesets.Format(typesets.Differences(known))
}

// shortBuild is a node's build without the words every build has: its
// version and commit, e.g. "(devel) 4cea5441f3c2+dirty" of "rivet (devel)
// 4cea5441f3c2+dirty 2026-12-05T18:57:56Z go1.26.8" (JSON has it whole);
// for a user's binary, its module, version and commit, then rivet's
// version, e.g. "example.com/shop v1.2.0 abcdef012345 rivet v0.9.0" of
// "example.com/shop v1.2.0 abcdef012345 2026-12-06T10:00:00Z rivet v0.9.0
// go1.26.8": what differs between the nodes of a rolling deploy of the
// user's code, or of rivet under it (a build without stamps says its
// module alone).
func shortBuild(b string) string {
	if f := strings.Fields(b); len(f) > 0 && f[0] != "rivet" {
		var kept []string
		for i, w := range f {
			if _, err := time.Parse(time.RFC3339, w); err == nil {
				continue
			}
			if i == len(f)-1 && strings.HasPrefix(w, "go") {
				continue // the Go version
			}
			kept = append(kept, w)
		}
		return strings.Join(kept, " ")
	}
	f := strings.Fields(strings.TrimPrefix(b, "rivet "))
	if len(f) > 2 {
		f = f[:2]
	}
	return strings.Join(f, " ")
}

func (a *app) printPartitions(pt client.PartitionTable) error {
	if a.output == "json" {
		if pt.Owners == nil {
			pt.Owners = []client.PartitionOwner{}
		}
		return a.printValue(pt)
	}
	owners := map[string]bool{}
	for _, o := range pt.Owners {
		if o.Owner != "" {
			owners[o.Owner] = true
		}
	}
	noun := "owners"
	if len(owners) == 1 {
		noun = "owner"
	}
	if _, err := fmt.Fprintf(a.stdout, "%d partitions, %d with an owner, %d %s\n", pt.Count, len(pt.Owners), len(owners), noun); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tOWNER\tTOKEN")
	for _, o := range pt.Owners {
		fmt.Fprintf(tw, "%d\t%s\t%d\n", o.Partition, printable(orDash(o.Owner)), o.Token)
	}
	return tw.Flush()
}

func (a *app) printStats(st client.Stats) error {
	if a.output == "json" {
		return a.printValue(st)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "node\t%s\n", printable(st.NodeID))
	fmt.Fprintf(tw, "active actors\t%d\n", st.ActiveActors)
	fmt.Fprintf(tw, "calls\t%d\n", st.Calls)
	fmt.Fprintf(tw, "commits\t%d\n", st.Commits)
	fmt.Fprintf(tw, "commit batches\t%d\n", st.CommitBatches)
	fmt.Fprintf(tw, "partitions owned\t%d\n", st.PartitionsOwned)
	return tw.Flush()
}

// formatKey prints a key the way KEY is given on the command line, so that
// it can be pasted back: a plain string when that is unambiguous, else a
// JSON array (also for a key that starts with '-', which the command line
// would take for a flag).
//
// A key with a character that does not print (a control character, a
// space other than ' ', a zero-width one) is a JSON array with that
// character escaped: printed as it is, an escape sequence in a key that
// any client may have named reached the operator's terminal, and a '\r'
// or a zero-width space showed another key than the one stored.
func formatKey(key []string) string {
	if len(key) == 1 && !strings.HasPrefix(key[0], "[") && !strings.HasPrefix(key[0], "-") && key[0] != "" &&
		strings.IndexFunc(key[0], func(r rune) bool { return r == ' ' || !unicode.IsPrint(r) }) < 0 {
		return key[0]
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(key)
	return string(printableJSON(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))))
}

// printableJSON is JSON text b, the same value, with every character that
// does not print escaped (\uXXXX). encoding/json escapes the C0 controls in
// what it encodes, and leaves DEL, the C1 controls (U+009B starts an escape
// sequence in a terminal as ESC [ does), bidi overrides and other
// characters that do not print as they are; json.Compact and json.Indent,
// and a json.RawMessage it encodes, leave all of a node's payload as it
// came. Such characters can only be in strings, where an escape means the
// same. What is not UTF-8 becomes U+FFFD, as encoding/json makes it; the
// '\n' of indented JSON stays.
func printableJSON(b []byte) []byte {
	if printableAt(string(b), true) < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for _, r := range string(b) {
		switch {
		case r == '\n' || r == ' ' || shows(r):
			// A byte that is not UTF-8 came as utf8.RuneError: U+FFFD.
			out = utf8.AppendRune(out, r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, "\\u%04x\\u%04x", r1, r2)
		default:
			out = fmt.Appendf(out, "\\u%04x", r)
		}
	}
	return out
}

// printable is text from the node or a user (a workflow's error, a history
// entry's path, a member's name, an error message) made safe to print in a
// table or a message: each character that does not print is escaped as in
// JSON (\n, \t, \r, \u001b; \U0001xxxx above U+FFFF; \xNN for a byte
// that is not UTF-8), as keys are (formatKey). Printed as it came, an
// escape sequence reached the operator's terminal, which acted on it
// (cleared the screen, set its title, rewrote a line with '\r'), and a
// '\n' or '\t' broke the table it is in.
func printable(s string) string {
	at := printableAt(s, false)
	if at < 0 {
		return s
	}
	var out strings.Builder
	out.Grow(len(s) + 16)
	out.WriteString(s[:at])
	for i, r := range s[at:] {
		switch {
		case r == ' ' || r != utf8.RuneError && shows(r):
			out.WriteRune(r)
		case r == '\n':
			out.WriteString(`\n`)
		case r == '\t':
			out.WriteString(`\t`)
		case r == '\r':
			out.WriteString(`\r`)
		case r == utf8.RuneError:
			if _, n := utf8.DecodeRuneInString(s[at+i:]); n == 1 {
				fmt.Fprintf(&out, "\\x%02x", s[at+i])
			} else {
				out.WriteRune(r) // U+FFFD itself prints
			}
		case r > 0xffff:
			fmt.Fprintf(&out, "\\U%08x", r)
		default:
			fmt.Fprintf(&out, "\\u%04x", r)
		}
	}
	return out.String()
}

// printableAt is the index of the first byte of s that printable (or, with
// newlines, printableJSON) escapes, -1 if none.
func printableAt(s string, newlines bool) int {
	for i, r := range s {
		if r == ' ' || newlines && r == '\n' {
			continue
		}
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return i
			}
			continue
		}
		if !shows(r) {
			return i
		}
	}
	return -1
}

// shows reports whether r prints as itself: unicode.IsPrint, and the zero
// width (non-)joiner, format characters that emoji sequences and Persian,
// Arabic and Indic text need and that move nothing in a terminal (the
// other format characters, bidi overrides among them, are escaped).
func shows(r rune) bool { return unicode.IsPrint(r) || r == '\u200c' || r == '\u200d' }

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plural is one for n == 1 and many otherwise.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
