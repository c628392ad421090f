package runtime

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

// settle waits until every write of the actor's activation (if it is in
// memory) is durable, so that a read of storage sees what callers saw.
func (h *Host) settle(ctx context.Context, ref Ref, enc string) error {
	h.mu.Lock()
	a := h.actors[ref.Name+"/"+enc]
	h.mu.Unlock()
	if a == nil {
		return nil
	}
	select {
	case <-a.ready:
	case <-ctx.Done():
		return ctxError(ctx)
	}
	if a.loadErr != nil {
		return nil
	}
	err := a.waitCommitted(ctx, a.currentVersion())
	if err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// History returns the actor's whole workflow history.
func (h *Host) History(ctx context.Context, ref Ref) (History, error) {
	return h.HistoryPage(ctx, ref, HistoryOptions{})
}

// maxHistoryPage is the largest page HistoryPage serves, as List's.
const maxHistoryPage = 1000

// HistoryPage returns a page of the actor's workflow history: up to
// opts.Limit entries (0: all) after opts.PageToken's, in the history's
// order, and the workflow's status now. A token that does not decode, or
// that continues another actor's history, is rivet.ErrInvalidArgument.
func (h *Host) HistoryPage(ctx context.Context, ref Ref, opts HistoryOptions) (History, error) {
	if err := h.begin(); err != nil {
		return History{}, err
	}
	defer h.end()
	sp, err := h.spec(ref)
	if err != nil {
		return History{}, err
	}
	enc, part, prefix, err := h.locate(ref)
	if err != nil {
		return History{}, err
	}
	tag := historyTag(ref.Name, enc)
	var after historyPos
	if opts.PageToken != "" {
		if after, err = decodeHistoryToken(opts.PageToken, tag); err != nil {
			return History{}, err
		}
	}
	limit := opts.Limit
	if limit > 0 {
		limit = min(limit, maxHistoryPage)
	}
	if _, owned := h.own.Token(part); !owned {
		return History{}, h.notOwned(part, "")
	}
	if err := h.settle(ctx, ref, enc); err != nil {
		return History{}, err
	}
	if _, err := h.store.Get(ctx, prefix+storage.MetaSuffix); err != nil {
		if isNotFound(err) {
			return History{}, rivet.Errorf(rivet.ErrNotFound, "actor %s %s does not exist", ref.Name, keyString(ref.Key))
		}
		return History{}, rivet.Errorf(rivet.ErrUnavailable, "read actor: %v", err)
	}
	if sp.Run == nil {
		return History{}, nil
	}
	st, entries, places, err := h.pagedWorkflow(ctx, prefix, after != nil, limit)
	if err != nil {
		return History{}, rivet.Errorf(rivet.ErrUnavailable, "read history: %v", err)
	}
	out := History{WorkflowStatus: st.Status, WorkflowError: st.Error}
	h.mu.Lock()
	a := h.actors[ref.Name+"/"+enc]
	h.mu.Unlock()
	loaded := false
	if a != nil {
		select {
		case <-a.ready:
			loaded = a.loadErr == nil
		default: // still loading: what storage says is the truth
		}
	}
	if loaded {
		st, wk := a.workflowStatusAndWake()
		if st.Status != "" {
			// Its error with it: the storage read above may predate
			// the commit of the end that memory has (a failed status
			// with no error, which a replay of the export took for a
			// run that failed with none).
			out.WorkflowStatus, out.WorkflowError = st.Status, st.Error
		}
		out.WorkflowWake = wk
	}
	if out.WorkflowStatus == "" {
		// Not running in memory (not loaded, or between its load and its
		// start, or a retry's reset and its restart): waiting to run.
		out.WorkflowStatus = WorkflowSleeping
	}
	if out.WorkflowStatus != WorkflowSleeping {
		out.WorkflowWake = workflow.Wake{}
	} else if !loaded {
		if out.WorkflowWake, err = h.storedWake(ctx, part, ref.Name, enc); err != nil {
			return History{}, err
		}
	}
	entries, out.PageTokens, out.NextPageToken = pageSorted(entries, places, tag, after, limit)
	for _, e := range entries {
		he := HistoryEntry{Path: e.Path, Kind: string(e.Kind), Status: string(e.Status), Attempts: e.Attempts, Output: e.Output, UpdatedAt: e.Time, Winner: e.Winner, Deadline: e.Deadline,
			HasRollback: e.HasRollback, RollbackDone: e.RollbackDone, RollbackSettled: e.RollbackSettled, RollbackAttempts: e.RollbackAttempts, Version: e.Version, Latest: e.Latest, RemovedKind: string(e.RemovedKind),
			Failure: string(e.Failure)}
		if e.Error != nil {
			he.Error, he.ErrorCode, he.ErrorRivetKind = e.Error.Message, e.Error.Code, e.Error.RivetKind
		}
		if e.RollbackError != nil {
			he.RollbackError, he.RollbackErrorCode = e.RollbackError.Message, e.RollbackError.Code
		}
		if e.RollbackRetryError != nil {
			he.RollbackRetryError, he.RollbackRetryErrorCode = e.RollbackRetryError.Message, e.RollbackRetryError.Code
		}
		if opts.Raw {
			// What a replay of the history reads: the entry as the
			// workflow was given it, not the stored value (which may
			// carry the actor's state beside it).
			if he.Entry, err = workflow.MarshalEntry(&e); err != nil {
				return History{}, rivet.Errorf(rivet.ErrInternal, "history entry %q does not encode: %v", e.Path, err)
			}
			he.Output = nil
			out.Entries = append(out.Entries, he)
			continue
		}
		if e.Kind == workflow.KindHeldBranch {
			// Its own status is completed (a retry must not take it
			// for a failure to delete); what it records is a branch's
			// failure, which a reader looks for.
			for _, b := range e.Branches {
				he.Status = string(b.Status)
				if b.Error != nil {
					he.Error, he.ErrorCode, he.ErrorRivetKind = b.Error.Message, b.Error.Code, b.Error.RivetKind
				}
			}
		}
		if he.Output == nil && e.Kind == workflow.KindLoop && e.State != nil {
			he.Output = e.State
		}
		if he.Output == nil && e.Kind == workflow.KindMessage && e.Status == workflow.StatusCompleted {
			he.Output = receivedJSON(e.Messages)
		}
		out.Entries = append(out.Entries, he)
	}
	return out, nil
}

// pageSorted returns, of entries in the history's order (sortHistory) with
// their places, the page of up to limit of them (0: all) after the place
// after (nil: from the first), with, if limit > 0, the token that resumes
// after each and the page's next token ("" on the last page). It changes
// nothing in entries, which a node may be serving other pages of.
func pageSorted(entries []workflow.Entry, places map[string]int, tag string, after historyPos, limit int) (page []workflow.Entry, tokens []string, next string) {
	start := 0
	if after != nil {
		// The first entry after the token's, wherever the entries the
		// workflow recorded (or a retry deleted) since then are: the
		// order is a total order on paths, whether or not the token's
		// entry is still there.
		start = sort.Search(len(entries), func(i int) bool { return after.less(entryPos(places, entries[i].Path)) })
	}
	end := len(entries)
	if limit > 0 && end-start > limit {
		end = start + limit
	}
	page = entries[start:end]
	if limit > 0 {
		tokens = make([]string, len(page))
		for i, e := range page {
			tokens[i] = encodeHistoryToken(tag, entryPos(places, e.Path))
		}
		if end < len(entries) {
			next = tokens[len(page)-1]
		}
	}
	return page, tokens, next
}

// receivedJSON is what a receive took, as History shows it: the recorded
// messages (an empty array for a receive that timed out). Bodies were
// valid JSON when sent; one that is not any more is left out with its
// entry's messages rather than failing the whole history.
func receivedJSON(ms []workflow.RecordedMessage) json.RawMessage {
	if ms == nil {
		ms = []workflow.RecordedMessage{}
	}
	b, err := json.Marshal(ms)
	if err != nil {
		return nil
	}
	return b
}

// firstUnder returns the path of the first entry under scope in the order
// the workflow made them, or "" if none is under it.
func firstUnder(entries []workflow.Entry, scope string) string {
	var under []workflow.Entry
	for _, e := range entries {
		if e.Path != scope && workflow.Under(e.Path, scope) {
			under = append(under, e)
		}
	}
	if len(under) == 0 {
		return ""
	}
	sortHistory(under)
	return under[0].Path
}

// sortHistory puts entries in the order the workflow made them, as a
// reader expects, not as their keys sort: each entry followed by the
// entries under it, the entries of a scope by their place in it (Seq:
// "step-2" before "step-10", a step before the loop the code reached after
// it), a loop's iterations by number (~2 before ~10), and join and race
// branches, which run at once, by name.
func sortHistory(entries []workflow.Entry) map[string]int {
	places := historyPlaces(entries)
	sort.SliceStable(entries, func(i, j int) bool { return historyLess(places, entries[i].Path, entries[j].Path) })
	return places
}

// historyPos is an entry's place in the history's order: the rank of each
// segment of its path among its siblings (segmentRank) and the segment.
// Compared as historyLess compares paths, it orders entries the same, and
// still places an entry that is gone (a retry deleted it) among the rest:
// a page token holds the last entry's.
type historyPos []posSeg

type posSeg struct {
	Class int    `json:"c"`
	N     uint64 `json:"n,omitempty"`
	Seg   string `json:"s"`
}

// entryPos returns the place of path in the order places rank it in.
func entryPos(places map[string]int, path string) historyPos {
	var pos historyPos
	for i := 0; ; {
		seg, _, more := strings.Cut(path[i:], "/")
		c, n := segmentRank(places, path[:i+len(seg)], seg)
		pos = append(pos, posSeg{Class: c, N: n, Seg: seg})
		if !more {
			return pos
		}
		i += len(seg) + 1
	}
}

// less says whether p comes before q, as historyLess: at the first
// segment in which they differ, by its rank, then its name; else the
// shorter (a scope before the entries under it).
func (p historyPos) less(q historyPos) bool {
	for i := 0; i < len(p) && i < len(q); i++ {
		a, b := p[i], q[i]
		if a.Seg == b.Seg {
			continue
		}
		switch {
		case a.Class != b.Class:
			return a.Class < b.Class
		case a.N != b.N:
			return a.N < b.N
		}
		return a.Seg < b.Seg
	}
	return len(p) < len(q)
}

// historyToken is what a history page token holds: the actor's tag and
// the place of the page's last entry.
type historyToken struct {
	Actor string     `json:"a"`
	After historyPos `json:"p"`
}

// historyTag names an actor in its history's page tokens, so that a token
// of another actor's history is refused rather than resuming at a place
// that means nothing there.
func historyTag(name, enc string) string {
	f := fnv.New64a()
	f.Write([]byte(name + "/" + enc))
	return strconv.FormatUint(f.Sum64(), 36)
}

func encodeHistoryToken(tag string, after historyPos) string {
	b, _ := json.Marshal(historyToken{Actor: tag, After: after})
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeHistoryToken returns the place a page token of the actor tagged
// tag resumes after; rivet.ErrInvalidArgument if it is not one.
func decodeHistoryToken(token, tag string) (historyPos, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	var t historyToken
	if err != nil || json.Unmarshal(b, &t) != nil || len(t.After) == 0 {
		return nil, rivet.Errorf(rivet.ErrInvalidArgument, "bad page token")
	}
	for _, s := range t.After {
		if s.Seg == "" || s.Class < 0 || s.Class > 2 {
			return nil, rivet.Errorf(rivet.ErrInvalidArgument, "bad page token")
		}
	}
	if t.Actor != tag {
		return nil, rivet.Errorf(rivet.ErrInvalidArgument, "bad page token: it continues another actor's history")
	}
	return t.After, nil
}

// historyPlaces returns the place in its scope of every entry, and of
// every try block: a try block takes a place in its scope like an entry,
// but records none of its own, only the entries in it, which record it
// (Entry.TryPlaces). A block whose entries a build before that recorded
// gets one of the places no entry of its scope holds, the try blocks of a
// scope in the order of the first entry recorded in each.
func historyPlaces(entries []workflow.Entry) map[string]int {
	places := make(map[string]int, len(entries))
	kinds := make(map[string]workflow.Kind, len(entries))
	taken := map[string]map[int]bool{} // scope -> the places its entries hold
	for _, e := range entries {
		kinds[e.Path] = e.Kind
		if e.Seq > 0 {
			places[e.Path] = e.Seq
			scope := parentPath(e.Path)
			if taken[scope] == nil {
				taken[scope] = map[int]bool{}
			}
			taken[scope][e.Seq] = true
		}
	}
	recorded := map[string]bool{} // try blocks whose entries record their place
	for _, e := range entries {
		b := e.Path
		for _, place := range e.TryPlaces {
			b = parentPath(b)
			if _, ok := kinds[b]; ok || b == "" || place <= 0 || workflow.IsIteration(b) {
				break // not a try block (one retired with Removed has an entry)
			}
			if q, ok := places[b]; !ok || place < q {
				places[b] = place
			}
			recorded[b] = true
			scope := parentPath(b)
			if taken[scope] == nil {
				taken[scope] = map[int]bool{}
			}
			taken[scope][place] = true
		}
	}
	// A try block is a scope with entries under it and none of its own
	// that is neither a loop iteration nor a branch of a join or race.
	first := map[string]time.Time{} // try block -> its first entry's time
	for _, e := range entries {
		for p := parentPath(e.Path); p != ""; p = parentPath(p) {
			if _, ok := kinds[p]; ok || workflow.IsIteration(p) || recorded[p] {
				continue
			}
			if k := kinds[parentPath(p)]; k == workflow.KindJoin || k == workflow.KindRace {
				continue
			}
			if t, ok := first[p]; !ok || e.Time.Before(t) {
				first[p] = e.Time
			}
		}
	}
	blocks := map[string][]string{} // scope -> its try blocks
	for p := range first {
		blocks[parentPath(p)] = append(blocks[parentPath(p)], p)
	}
	for scope, bs := range blocks {
		sort.Slice(bs, func(i, j int) bool {
			if !first[bs[i]].Equal(first[bs[j]]) {
				return first[bs[i]].Before(first[bs[j]])
			}
			return bs[i] < bs[j]
		})
		next := 1
		for _, b := range bs {
			for taken[scope][next] {
				next++
			}
			places[b] = next
			next++
		}
	}
	return places
}

// parentPath returns the scope path holds an entry in ("" for the root).
func parentPath(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i]
	}
	return ""
}

// historyLess orders history paths segment by segment. At the first
// segment in which they differ (under the same parent), each segment is
// ranked by a key of its own: loop iterations (~N) first, by number; then
// entries and try blocks with a place in their scope, by it; then the rest
// (branches, entries recorded without a place) by name; ties by name. A
// key per segment makes it a strict weak order, as sorting needs, whatever
// the segments and places.
func historyLess(places map[string]int, a, b string) bool {
	prefix := 0 // bytes of a (and b) before the current segments
	for a[prefix:] != "" && b[prefix:] != "" {
		sa, _, _ := strings.Cut(a[prefix:], "/")
		sb, _, _ := strings.Cut(b[prefix:], "/")
		if sa != sb {
			ca, na := segmentRank(places, a[:prefix+len(sa)], sa)
			cb, nb := segmentRank(places, b[:prefix+len(sb)], sb)
			switch {
			case ca != cb:
				return ca < cb
			case na != nb:
				return na < nb
			}
			return sa < sb
		}
		prefix += len(sa) + 1
		if prefix > len(a) || prefix > len(b) {
			break
		}
	}
	return len(a) < len(b)
}

// segmentRank ranks the last segment seg of path among its siblings: its
// class (0 an iteration, 1 a place in its scope, 2 anything else) and its
// number in that class.
func segmentRank(places map[string]int, path, seg string) (class int, n uint64) {
	if it, ok := iteration(seg); ok {
		return 0, it
	}
	if p := places[path]; p > 0 {
		return 1, uint64(p)
	}
	return 2, 0
}

// iteration returns the number of a loop iteration's path segment ("~N").
func iteration(seg string) (uint64, bool) {
	rest, ok := strings.CutPrefix(seg, "~")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

// RetryWorkflow clears a failed (or finished, or cancelled) workflow's end
// and runs it again: from the entry from (deleting it, everything under it,
// and every entry recorded after it outside its enclosing scopes), or, with
// from empty, from the entries that failed (a cancelled workflow resumes
// where it stopped; one that rolled back runs again from its first
// compensated step, see rollbackRetry). A step it keeps whose rollback
// handler failed has that outcome cleared, so that the next rollback runs
// the handler again (freshRollbacks). It returns how many entries it
// deleted. A running workflow cannot be retried (rivet.ErrWorkflowFailed,
// FAILED_PRECONDITION on the wire).
func (h *Host) RetryWorkflow(ctx context.Context, ref Ref, from string) (int, error) {
	res, err := h.RetryWorkflowWith(ctx, ref, RetryOptions{From: from})
	return res.Removed, err
}

// checkReplays refuses a plain retry of a completed or cancelled workflow
// (status) whose history the code deployed now does not replay. Such a
// retry replays the workflow, to run what was added after its end or to
// resume it where it was cancelled; with code that no longer matches (a
// change not gated by GetVersion), the run would fail at once, and the
// workflow would be listed failed for a retry that changed nothing. The
// check is a replay-only run (workflow.CheckHistory): no step body runs,
// and it stops where the history ends.
func (h *Host) checkReplays(ctx context.Context, a *activation, sp *rivet.Spec, entries []workflow.Entry, status string) error {
	cctx, cancel := context.WithTimeout(ctx, replayCheckTimeout)
	defer cancel()
	err := workflow.CheckHistory(cctx, workflow.SystemClock{}, a.ref.Name, a.ref.Key, entries, sp.Run)
	var div *workflow.DivergenceError
	var dec *workflow.DecodeError
	switch {
	case err == nil:
		return nil
	case status == WorkflowCancelled && ctx.Err() == nil && cctx.Err() == nil && !errors.As(err, &div) && !errors.As(err, &dec):
		// The run failed where it was cancelled, its history replayed
		// whole: cancelled while it rolled back, which the retry resumes
		// (a replay-only run does not replay a rollback). A panic is
		// let through too: the workflow's own, or one of changed code,
		// which the retry then reports as before.
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case cctx.Err() != nil:
		return rivet.Errorf(rivet.ErrTimeout, "the replay of the workflow of %s, which a retry of a %s workflow checks first, did not end within %s", a.describe(), status, replayCheckTimeout)
	}
	return rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "diverged", "the workflow of %s is %s, and the code deployed now does not replay its history: %v; a retry would fail it at once, so it stays %s (retry --from an entry before the change to run the new code from there)", a.describe(), status, err, status)
}

// checkRetryReplays refuses a plain retry of a failed workflow whose
// history, as the retry leaves it (entries), the code deployed now does
// not replay: the retry would fail it again at once with the same
// divergence (or a value that does not decode), and a `retry
// --all-failed` after a deploy that still does not match would count it
// retried (a user trial). Any other failure of the replay is left to the
// run, as before.
//
// One cause is not a change of the code: the workflow handled the failure
// and recorded entries after it (a step that sets a "payment failed"
// status, then fails the run), which the plain retry keeps, while its
// code, run again from the failure, comes to them out of order. If a retry
// --from the failed entry (which deletes them too) replays, the refusal
// says so instead of blaming the code (a tutorial's order did this).
func (h *Host) checkRetryReplays(ctx context.Context, a *activation, sp *rivet.Spec, all, entries []workflow.Entry, failedAt string) error {
	cctx, cancel := context.WithTimeout(ctx, replayCheckTimeout)
	defer cancel()
	err := workflow.CheckHistory(cctx, workflow.SystemClock{}, a.ref.Name, a.ref.Key, entries, sp.Run)
	var div *workflow.DivergenceError
	var dec *workflow.DecodeError
	if err == nil || ctx.Err() != nil || cctx.Err() != nil || !errors.As(err, &div) && !errors.As(err, &dec) {
		return nil
	}
	if failedAt != "" && failedAt != noEntry && firstCompensated(all) == nil {
		// Not after a rollback: a plain retry restarts from its first
		// compensated step, where --from would go on past steps whose
		// effects were undone.
		if trees, resets, ferr := retryTrees(all, failedAt, failedAt); ferr == nil {
			if workflow.CheckHistory(cctx, workflow.SystemClock{}, a.ref.Name, a.ref.Key, afterRetry(all, trees, resets), sp.Run) == nil {
				return rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "diverged", "the workflow of %s failed at %q and recorded entries after it (its own handling of the failure, or code changed after it); a plain retry keeps those, and its code, run again from %q, does not come to them in order (%v): retry --from %s, which deletes them too and runs the workflow from there (--dry-run shows what it deletes)", a.describe(), failedAt, failedAt, err, failedAt)
			}
		}
	}
	return rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "diverged", "the workflow of %s failed, and the code deployed now still does not replay its history: %v; a retry would fail it again at once, so it stays failed (deploy code that replays it, or retry --from an entry before the change to run the new code from there)", a.describe(), err)
}

// afterRetry returns entries as a retry that deletes trees and puts resets
// leaves them.
func afterRetry(entries []workflow.Entry, trees []string, resets []workflow.Entry) []workflow.Entry {
	deleted := newTreeSet(trees)
	put := make(map[string]*workflow.Entry, len(resets))
	for i := range resets {
		put[resets[i].Path] = &resets[i]
	}
	out := make([]workflow.Entry, 0, len(entries))
	for _, e := range entries {
		switch r := put[e.Path]; {
		case deleted.holds(e.Path):
		case r != nil:
			out = append(out, *r)
		default:
			out = append(out, e)
		}
	}
	return out
}

// replayCheckTimeout bounds checkReplays: the replay runs the workflow's
// code outside its steps, which only a bug makes slow.
const replayCheckTimeout = 10 * time.Second

// RetryWorkflowWith is RetryWorkflow with options: with OnlyFailed, a
// completed or cancelled workflow is refused as a running one is.
func (h *Host) RetryWorkflowWith(ctx context.Context, ref Ref, opts RetryOptions) (RetryResult, error) {
	from := opts.From
	if opts.DropMessages {
		// Sent again after its outcome was unknown, a retry that ran would
		// find the workflow past the poison message, maybe completed on
		// the next one, and drop that.
		opts.OnlyFailed = true
	}
	if err := h.begin(); err != nil {
		return RetryResult{}, err
	}
	defer h.end()
	sp, err := h.spec(ref)
	if err != nil {
		return RetryResult{}, err
	}
	if sp.Run == nil {
		return RetryResult{}, rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "none", "actor %s has no workflow", ref.Name)
	}
	var res RetryResult
	_, _, err = h.turn(ctx, TurnAdmin, ref, sp, false, nil, h.newChain(), func(a *activation) error {
		st := a.workflowStatus()
		if !workflowEnded(st.Status) {
			return rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "not_ended", "the workflow of %s is %s: only a failed, completed or cancelled workflow can be retried (a running one can be cancelled first)", a.describe(), a.shownWorkflowStatus())
		}
		if opts.OnlyFailed && st.Status != WorkflowFailed {
			// Checked here, in the turn that retries: a caller that saw
			// it failed may find it completed by someone else's retry,
			// or cancelled by an operator, and must not undo either.
			return rivet.Reasonf(rivet.ErrWorkflowFailed, "workflow", "not_failed", "the workflow of %s is %s, not failed: the retry was asked for a failed workflow only", a.describe(), a.shownWorkflowStatus())
		}
		// The ended run may still be tidying up: wait for it, or the new
		// run would not start.
		a.stopWorkflow()
		if err := a.waitCommitted(ctx, a.currentVersion()); err != nil {
			return err
		}
		sw, err := h.readWorkflow(ctx, a.prefix)
		if err != nil {
			return rivet.Errorf(rivet.ErrUnavailable, "read history: %v", err)
		}
		// The loops in slots as storage has them: a retry refused before
		// (too large) forgot those under the trees it would delete, and
		// this one would delete entries at their paths, not their slots.
		a.slotMu.Lock()
		entries := sw.history
		a.slots, a.slotKeys = loopSlots(entries), sw.slotKeys
		a.slotMu.Unlock()
		failedAt := st.FailedAt
		if st.Status == WorkflowCompleted {
			failedAt = noEntry // no failure ended it: the caught ones stay
		}
		if from == "" && (st.Status == WorkflowCompleted || st.Status == WorkflowCancelled) {
			if err := h.checkReplays(ctx, a, sp, entries, st.Status); err != nil {
				return err
			}
		}
		trees, resets, err := retryTrees(entries, from, failedAt)
		if err != nil {
			return err
		}
		if from == "" && st.Status == WorkflowFailed {
			if err := h.checkRetryReplays(ctx, a, sp, entries, afterRetry(entries, trees, resets), failedAt); err != nil {
				return err
			}
		}
		var writes []workflow.HistoryWrite
		for i := range resets {
			writes = append(writes, workflow.HistoryWrite{Put: &resets[i]})
		}
		for _, t := range trees {
			writes = append(writes, workflow.HistoryWrite{DeleteTree: t})
		}
		// The messages a deleted receive took go back to their queues in
		// the same commit: the receive took them from there, and its entry
		// is their only copy. Replayed, it takes them again.
		var back []workflow.RawMessage
		var pending []uint64 // of back, those the workflow had not completed
		deleted := newTreeSet(trees)
		for _, e := range entries {
			if e.Kind != workflow.KindMessage || !deleted.holds(e.Path) {
				continue
			}
			for _, m := range e.Messages {
				back = append(back, m.RawMessage)
				if !m.Completed {
					pending = append(pending, m.ID)
				}
			}
		}
		if opts.DropMessages && len(back) == 0 {
			return rivet.Errorf(rivet.ErrInvalidArgument, "the retry of %s deletes no receive that took a message, so it has none to drop: retry from the receive that took it", a.describe())
		}
		// What the retry does, once it is done (a dry run's answer now).
		var would RetryResult
		for _, e := range entries {
			// Not a join's held failure: no entry the workflow made,
			// its failure goes to the record if it stays held.
			if deleted.holds(e.Path) && e.Kind != workflow.KindHeldBranch {
				would.Removed++
			}
		}
		if opts.DropMessages {
			would.Dropped = len(back)
		}
		if opts.DryRun {
			// Every check but the transaction's size passed: nothing is
			// written, logged or changed in memory (historyOps would move
			// the loops' slots).
			res = would
			return nil
		}
		// dropMarks marks, for the senders of dropped messages sent with an
		// idempotency key, that the message was dropped: a send of it again
		// that waits for its completion is told so rather than wait (it
		// was taken and will never be completed).
		var dropMarks []storage.Op
		switch {
		case opts.DropMessages:
			// The operator's choice: the receive's entry, deleted now, was
			// their only copy.
			if err := a.loadSendKeys(ctx); err != nil {
				return err
			}
			// Not over a completed message's kept completion: it was
			// completed, and its sender may still ask for it.
			a.keysMu.Lock()
			for _, id := range pending {
				if _, keyed := a.keySeqs[id]; keyed {
					dropMarks = append(dropMarks, storage.Put(sendResponseKey(a.prefix, id), []byte(droppedMark)))
				}
			}
			a.keysMu.Unlock()
			h.log.Warn("workflow retry drops the messages its deleted receives took", actorField(a), zap.Int("messages", len(back)), zap.String("from", from))
		case len(back) > 0:
			writes = append(writes, workflow.HistoryWrite{Requeue: back})
		}
		ops, restored, _, err := a.historyOps(writes)
		if err != nil {
			return err
		}
		ops = append(ops, dropMarks...)
		// The attempt markers of the ended run (attempts.go) would count
		// against the steps the retry runs again.
		ops = a.dropMarksOps(ops)
		now := time.Now().UnixMilli()
		wb, _ := json.Marshal(wakeupRecord{At: now})
		ops = append(ops,
			storage.Delete(a.key(storage.WorkflowStatusSuffix)),
			storage.Delete(storage.FailedKey(a.ref.Name, a.enc)),
			storage.Put(storage.WakeupKey(a.part, a.ref.Name, a.enc), wb))
		if len(restored) > 0 {
			if err := checkLimits(a, ops); err != nil {
				// Split over several commits, a crash between them would
				// leave a message both queued and recorded as taken.
				return rivet.Errorf(rivet.ErrTooLarge, "the retry of %s would put %d messages back in their queues, more than one transaction holds: retry from a later entry (%v)", a.describe(), len(restored), err)
			}
		}
		if opts.DropMessages {
			if err := checkLimits(a, ops); err != nil {
				return rivet.Errorf(rivet.ErrTooLarge, "the retry of %s would drop %d messages in more writes than one transaction holds: retry from a later entry (%v)", a.describe(), len(back), err)
			}
		}
		v, err := a.enqueue(ops...)
		if err != nil {
			return err
		}
		if err := a.waitCommitted(ctx, v); err != nil {
			// The commit may land after its caller left: this memory
			// (failed, no run) would then be behind storage (no status,
			// the failures gone, a wakeup record) with nothing to start
			// the workflow. Dropped, the actor loads what storage holds
			// once its writes settle, and its workflow runs from there.
			h.evictAndRerun(a)
			return err
		}
		res = would
		// An operator's rewrite of the history, logged as a cancel is.
		h.log.Info("workflow retried", actorField(a), zap.String("was", st.Status), zap.String("from", from),
			zap.Int("entries_removed", res.Removed), zap.Bool("drop_messages", opts.DropMessages), zap.Int("messages_dropped", res.Dropped), zap.Bool("only_failed", opts.OnlyFailed))
		after, err := h.readWorkflow(ctx, a.prefix)
		if err != nil {
			// The retry is done in storage (an error would say it was not,
			// and a client's retry of it would delete failures of the run
			// that follows); only this memory cannot start it: as above,
			// the actor loads again and its workflow runs from storage.
			h.evictAndRerun(a)
			return nil
		}
		a.putBack(restored)
		if opts.DropMessages {
			a.wf.notifyMu.Lock()
			for _, id := range pending {
				delete(a.wf.taken, id)
			}
			a.wf.notifyMu.Unlock()
		}
		// Storage took the retry: the workflow starts now, whatever
		// backoff its earlier runs left.
		h.timers.forgetWorkflowFailures(a.id)
		a.mu.Lock()
		a.wf.status = workflowStatus{}
		a.wf.wakeAt = now
		a.mu.Unlock()
		// The ended run refused waiting senders from its end on; the new
		// one completes messages again.
		a.wf.notifyMu.Lock()
		a.wf.closed = false
		a.wf.notifyMu.Unlock()
		a.startWorkflow(after.history)
		return nil
	})
	return res, err
}

// retryTrees picks the history trees to delete for a retry: from from on,
// or, without from, the failed entries at or under failedAt (the entry
// whose failure ended the workflow; "" for every failed entry, as a status
// written before it was recorded has none). Failures elsewhere were caught
// (by Try or TryStep) and the workflow went on: retrying them would run
// their steps again and take another path than the recorded one. It also
// returns the failed joins and races to put back to pending instead of
// deleting them (pending, they run their branches again, which replay what
// completed): one at or under failedAt, or one that holds from; and the
// steps it keeps to put back with their rollback handler's outcome cleared
// (freshRollbacks).
func retryTrees(entries []workflow.Entry, from, failedAt string) ([]string, []workflow.Entry, error) {
	trees, resets, err := planRetry(entries, from, failedAt, true)
	if err != nil {
		return nil, nil, err
	}
	resets = append(resets, unholdBranches(entries, trees)...)
	trees, resets = unholdApart(entries, trees, resets)
	return trees, append(resets, freshRollbacks(entries, trees)...), nil
}

// freshRollbacks returns the steps a retry keeps (outside trees) whose
// rollback handler failed, for good or in attempts to be retried, with
// that outcome and count cleared, and those it keeps compensated, marked
// settled. Kept, the failure stopped the next rollback at once at that
// step with the old error, without running the handler the operator may
// have retried for (after fixing what it calls), and a handler cut off in
// its backoff (by a cancel) resumed its count and backoff in a run that
// had not failed it. A handler that succeeded
// stays done: its step is not run again, so its effect stays undone, and
// a second run would undo it twice. (A retry without --from runs again
// from the first step whose handler succeeded, keeping the earlier ones,
// the failed handler's among them: the same fresh start.)
func freshRollbacks(entries []workflow.Entry, trees []string) []workflow.Entry {
	var out []workflow.Entry
	deleted := newTreeSet(trees)
	for _, e := range entries {
		switch {
		case e.RollbackDone && !e.RollbackSettled:
			// Kept compensated: settled (firstCompensated).
			e.RollbackSettled = true
		case e.RollbackDone || e.RollbackError == nil && e.RollbackRetryError == nil && e.RollbackAttempts == 0:
			continue
		default:
			e.RollbackError, e.RollbackRetryError, e.RollbackAttempts, e.RollbackAttemptAt = nil, nil, 0, time.Time{}
		}
		if deleted.holds(e.Path) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// unholdBranches returns the pending joins and races to put back with some
// failed branches pending: those the retry deletes entries of. A join or
// race records a branch's failure while its other branches go on, and a
// replay holds it failed without running its code again, so it would not
// run what the retry deleted.
func unholdBranches(entries []workflow.Entry, trees []string) []workflow.Entry {
	// deleted: the retry deletes the entry at path; deletesIn: it deletes
	// entries in the scope.
	deleted := newTreeSet(trees).holds
	deletesIn := func(scope string) bool {
		return slices.ContainsFunc(trees, func(t string) bool { return workflow.Under(t, scope) })
	}
	var out []workflow.Entry
	for _, e := range entries {
		if e.Kind != workflow.KindJoin && e.Kind != workflow.KindRace || e.Status != workflow.StatusPending || deleted(e.Path) {
			continue
		}
		var p *workflow.Entry
		for n, b := range e.Branches {
			if b.Status != workflow.StatusFailed || !deletesIn(e.Path+"/"+n) {
				continue
			}
			if p == nil {
				p = &e
				p.Branches = maps.Clone(e.Branches)
			}
			p.Branches[n] = workflow.Branch{Status: workflow.StatusPending}
		}
		if p != nil {
			out = append(out, *p)
		}
	}
	return out
}

// unholdApart deletes the failures held apart from a pending join's record
// (workflow.KindHeldBranch, at `<join>/~held/<branch>`) of the branches
// the retry deletes entries in, as unholdBranches puts a failure its
// record holds back to pending (resets, which has that record if so). It
// deletes all of a join's held entries at once, in one prefix delete of
// `<join>/~held`, and folds the failures that stay held into the join's
// record (where every build reads them): a delete of each would be two
// store ops, and the retry is one transaction, which etcd bounds (128 ops
// on an external cluster), whatever the join's size. Which held entries
// go is decided here, per join: those planRetry took for made after from
// are dropped from trees first.
func unholdApart(entries []workflow.Entry, trees []string, resets []workflow.Entry) ([]string, []workflow.Entry) {
	held := map[string]map[string]workflow.Branch{} // by join
	var joins []string
	for _, e := range entries {
		if e.Kind != workflow.KindHeldBranch {
			continue
		}
		join := workflow.ParentOf(workflow.ParentOf(e.Path))
		if held[join] == nil {
			held[join] = map[string]workflow.Branch{}
			joins = append(joins, join)
		}
		for n, b := range e.Branches {
			held[join][n] = b
		}
	}
	if len(joins) == 0 {
		return trees, resets
	}
	inHeld := func(t string) bool { return strings.Contains("/"+t+"/", "/"+workflow.HeldScope+"/") }
	trees = slices.DeleteFunc(slices.Clone(trees), inHeld)
	deleted := newTreeSet(trees).holds
	deletesIn := func(scope string) bool {
		return slices.ContainsFunc(trees, func(t string) bool { return workflow.Under(t, scope) })
	}
	records := map[string]*workflow.Entry{}
	for i := range entries {
		if e := &entries[i]; held[e.Path] != nil && e.Kind == workflow.KindJoin {
			records[e.Path] = e
		}
	}
	slices.Sort(joins)
	for _, join := range joins {
		rec := records[join]
		if deleted(join) || rec == nil || rec.Status != workflow.StatusPending {
			continue // its held entries go with it, or it has none to hold
		}
		var stay []string
		for n := range held[join] {
			if !deletesIn(join + "/" + n) {
				stay = append(stay, n)
			}
		}
		if len(stay) == len(held[join]) {
			continue // it unholds none
		}
		trees = append(trees, join+"/"+workflow.HeldScope)
		if len(stay) == 0 {
			continue
		}
		i := slices.IndexFunc(resets, func(r workflow.Entry) bool { return r.Path == join })
		if i < 0 {
			r := *rec
			r.Branches = maps.Clone(rec.Branches)
			resets = append(resets, r)
			i = len(resets) - 1
		}
		for _, n := range stay {
			if b, ok := resets[i].Branches[n]; ok && b.Status == workflow.StatusPending {
				resets[i].Branches[n] = held[join][n]
			}
		}
	}
	return trees, resets
}

// planRetry is retryTrees; with rewind false, from is taken even where
// checkRewind would refuse it (to see what a retry from it would delete).
func planRetry(entries []workflow.Entry, from, failedAt string, rewind bool) ([]string, []workflow.Entry, error) {
	var trees []string
	// covered says that a tree holds p: by p's scopes, not by each tree,
	// as a retry from an early entry deletes as many trees as entries.
	treeSet := treeSet{}
	covered := func(p string) bool { return treeSet.holds(p) }
	addTree := func(p string) {
		trees = append(trees, p)
		treeSet[p] = true
	}
	sortEntries(entries)
	if from == "" && failedAt == noEntry && firstCompensated(entries) == nil {
		// Nothing recorded failed the workflow (its own error, a
		// divergence, a panic): it replays as it is, with the code
		// deployed now. Unless it rolled back (its own error, or a
		// panic, runs the rollback as a step's failure does): then it
		// runs again from its first compensated step, below, as after
		// a step's failure; replayed as completed, the compensated
		// steps would not run again.
		return nil, nil, nil
	}
	byPath := make(map[string]*workflow.Entry, len(entries))
	for i := range entries {
		byPath[entries[i].Path] = &entries[i]
	}
	var resets []workflow.Entry
	reset := map[string]bool{}
	settledFailed := func(e *workflow.Entry) bool {
		return e != nil && (e.Kind == workflow.KindJoin || e.Kind == workflow.KindRace) && e.Status == workflow.StatusFailed
	}
	// hidden says that p lies under a failed join or race at or under
	// root: that join's or race's retry decides what of it goes.
	hidden := func(p, root string) bool {
		for s := workflow.ParentOf(p); s != "" && (root == "" || workflow.Under(s, root)); s = workflow.ParentOf(s) {
			if settledFailed(byPath[s]) {
				return true
			}
		}
		return false
	}
	var retryAt func(root string)
	// retryEntry retries the failed entry e. A failed step is deleted. A
	// failed join or race goes back to pending, keeping its branches'
	// entries: the steps that completed replay from them instead of
	// running again (rivet-semantics.md 1.7; a race fails only when every
	// branch failed, and each branch continues from where it failed), and
	// in a failed branch only the failure that failed it goes (its record
	// names it; every failure in it for a branch recorded before it did),
	// not those a Try caught on the way.
	keptEffect := false
	retryEntry := func(e *workflow.Entry) {
		switch {
		case settledFailed(e):
			if reset[e.Path] {
				return
			}
			reset[e.Path] = true
			p := *e
			p.Status, p.Time = workflow.StatusPending, time.Time{}
			p.Branches = make(map[string]workflow.Branch, len(e.Branches))
			names := make([]string, 0, len(e.Branches))
			for n := range e.Branches {
				p.Branches[n] = workflow.Branch{Status: workflow.StatusPending}
				names = append(names, n)
			}
			resets = append(resets, p)
			slices.Sort(names)
			for _, n := range names {
				b, scope := e.Branches[n], e.Path+"/"+n
				switch {
				case b.Status != workflow.StatusFailed:
				case b.FailedAt == "":
					retryAt(scope)
				case workflow.Under(b.FailedAt, scope):
					retryAt(b.FailedAt)
				}
				// Otherwise its own error (or one naming an entry
				// outside it) failed it: it replays with the code
				// deployed now.
			}
		case e.Kind == workflow.KindStep && e.HasRollback && !e.RollbackDone:
			// A step whose body succeeded and whose state the node
			// refused (workflow.StepEnv.Check): its effect stands, not
			// undone by a compensation (it failed, or never ran). Run
			// again, it would take effect twice. Kept, it replays to its
			// failure, and the rollback that follows runs its handler
			// afresh (freshRollbacks); a retry after that rollback runs
			// the step again, from the first compensated step.
			keptEffect = true
		case !covered(e.Path):
			addTree(e.Path)
		}
	}
	// retryAt retries the failed entries at or under root that no failed
	// join or race under root holds.
	retryAt = func(root string) {
		for i := range entries {
			e := &entries[i]
			if (e.Status == workflow.StatusExhausted || e.Status == workflow.StatusFailed) &&
				(root == "" || workflow.Under(e.Path, root)) && !hidden(e.Path, root) {
				retryEntry(e)
			}
		}
	}
	if from == "" {
		if first := firstCompensated(entries); first != nil {
			return rollbackRetry(entries, byPath, first.Path, failedAt)
		}
		retryAt(failedAt)
		if len(trees) == 0 && len(resets) == 0 && !keptEffect {
			return nil, nil, rivet.Errorf(rivet.ErrInvalidArgument, "no failed entry in the history: name the entry to retry from (rivetctl: --from)")
		}
		trees, resets = prunePlan(trees, resets)
		return trees, resets, nil
	}
	if err := checkFromMade(entries, byPath, from); err != nil {
		return nil, nil, err
	}
	target := byPath[from]
	if target == nil {
		if first := firstUnder(entries, from); first != "" {
			// A try block, a join or race branch, or a loop iteration
			// records no entry of its own: its first entry is the one
			// to name.
			return nil, nil, rivet.Errorf(rivet.ErrInvalidArgument, "%v: %q, which holds entries but records none of its own (a try block, a branch or a loop iteration): retry from its first entry, %q", errUnknownEntry, from, first)
		}
		return nil, nil, rivet.Errorf(rivet.ErrInvalidArgument, "%v: %q", errUnknownEntry, from)
	}
	if _, err := checkRewind(byPath, from); err != nil && rewind {
		return nil, nil, err
	}
	// A failed join or race that holds from goes back to pending, its
	// failures retried as without --from: from's branch runs again from
	// it, and a branch that failed elsewhere would fail the join again (or
	// be left with no way to win the race).
	for s := workflow.ParentOf(from); s != ""; s = workflow.ParentOf(s) {
		if e := byPath[s]; settledFailed(e) {
			retryEntry(e)
		}
	}
	// What the code made after from in its thread goes, and nothing it
	// made before: the places the history records (an entry's, a try
	// block's, a loop iteration's number) tell that order, whether or
	// not the entries record a time (a version gate, a removed marker, a
	// rollback checkpoint record none, and first in a loop iteration or
	// a branch they have none before them in their scope either). An
	// entry of another branch of a join or race that holds from ran
	// concurrently: it goes if it was made at or after the time from
	// was. So does one whose place is not recorded (a build before
	// places), as an entry's time is the order the run made it in.
	places := historyPlaces(entries)
	times := newEntryTimes(byPath, places)
	targetAt := times.at(target)
	if !covered(from) {
		addTree(from)
	}
	for _, e := range entries {
		if covered(e.Path) || workflow.Under(from, e.Path) {
			continue // already deleted, or a scope that encloses from
		}
		if before, known := madeBefore(byPath, places, e.Path, from); known {
			if !before {
				addTree(e.Path)
			}
			continue
		}
		if !times.at(&e).Before(targetAt) {
			addTree(e.Path)
		}
	}
	trees, resets = prunePlan(trees, resets)
	return trees, resets, nil
}

// checkFromMade refuses a from in a scope a join keeps for itself: a
// segment starting with '~' that is no loop iteration (a pending join's
// failures held apart, "~held", or a settled join's values, "~outputs").
// No code of the workflow made those entries: retried from, one would
// take the join's entries made after it, in its other branches among
// them, for what came after it, deleting them, and their completed steps
// would run again. A held failure points at the retry that runs its
// branch again: from its failed entry, or, failed with its own error, its
// first entry, or, the branch having made none, the join.
func checkFromMade(entries []workflow.Entry, byPath map[string]*workflow.Entry, from string) error {
	segs := strings.Split(from, "/")
	for i, seg := range segs {
		if !strings.HasPrefix(seg, "~") {
			continue
		}
		if _, ok := iteration(seg); ok {
			continue
		}
		join := strings.Join(segs[:i], "/")
		if seg == workflow.HeldScope && i+1 < len(segs) {
			branch := join + "/" + segs[i+1]
			var to string
			if e := byPath[strings.Join(segs[:i+2], "/")]; e != nil {
				if b := e.Branches[segs[i+1]]; workflow.Under(b.FailedAt, branch) {
					to = fmt.Sprintf("the branch's failed entry, %q", b.FailedAt)
				}
			}
			if to == "" {
				if first := firstUnder(entries, branch); first != "" {
					to = fmt.Sprintf("its first entry %q, which runs the branch again", first)
				} else {
					to = fmt.Sprintf("the join %q, which runs all its branches again", join)
				}
			}
			return rivet.Errorf(rivet.ErrInvalidArgument, "cannot retry from %q: it records that branch %q of join %q failed while the others went on, not an entry the workflow made; retry from %s", from, segs[i+1], join, to)
		}
		return rivet.Errorf(rivet.ErrInvalidArgument, "cannot retry from %q: join %q keeps the entries under %q for itself, not entries the workflow made; retry from the join, or from an entry in one of its branches", from, join, join+"/"+seg)
	}
	return nil
}

// rollbackRetry plans the retry (without --from) of a workflow that rolled
// back, first being its first compensated entry. The compensated steps'
// effects are undone, and replayed as completed they would not run again:
// it runs again from first. Where no retry can start there (first lies in
// a loop iteration before the loop's last checkpoint, or in a completed
// loop, join or race: no state was kept to go back to), it starts the
// outermost such scope again instead, which also runs again what that
// scope ran before first. That is taken only if none of it still has an
// effect the rollback did not undo (a step, the iterations a loop pruned,
// a race's losers, none recorded): otherwise the retry is refused, naming
// them, and --from says which way to go.
func rollbackRetry(entries []workflow.Entry, byPath map[string]*workflow.Entry, first, failedAt string) ([]string, []workflow.Entry, error) {
	scope, err := checkRewind(byPath, first)
	if err == nil {
		return planRetry(entries, first, failedAt, true)
	}
	why := err
	trees, resets, err := planRetry(entries, scope, failedAt, true)
	if err != nil {
		return nil, nil, rivet.Errorf(rivet.ErrInvalidArgument, "the workflow rolled back from %q on, so a retry must run that step again, but: %v; and from %q: %v", first, why, scope, err)
	}
	// What a retry from first would delete goes too (entries of
	// concurrent branches recorded since), so every compensated step
	// runs again.
	fromFirst, firstResets, err := planRetry(entries, first, failedAt, false)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range firstResets {
		if !slices.ContainsFunc(resets, func(o workflow.Entry) bool { return o.Path == r.Path }) {
			resets = append(resets, r)
		}
	}
	trees, resets = prunePlan(append(trees, fromFirst...), resets)
	// By the entries' scopes (treeSet), as planRetry's: the trees of
	// either plan number about as many as the entries after first.
	restarted, fromFirstSet := newTreeSet(trees), newTreeSet(fromFirst)
	var again []string
	for _, e := range entries {
		if !restarted.holds(e.Path) || fromFirstSet.holds(e.Path) || e.RollbackDone {
			continue
		}
		switch {
		case e.Kind == workflow.KindStep:
			again = append(again, strconv.Quote(e.Path))
		case e.Kind == workflow.KindLoop && e.PrunedBefore > 0:
			again = append(again, fmt.Sprintf("the iterations of loop %q before %d (pruned, their steps unknown)", e.Path, e.PrunedBefore))
		case e.Kind == workflow.KindRace && e.Status == workflow.StatusCompleted && len(e.Branches) > 1:
			again = append(again, fmt.Sprintf("the losing branches of race %q (not recorded)", e.Path))
		}
	}
	if len(again) > 0 {
		if len(again) > 5 {
			again = append(again[:5], fmt.Sprintf("%d more", len(again)-5))
		}
		return nil, nil, rivet.Errorf(rivet.ErrInvalidArgument, "the workflow rolled back from %q on, where no retry can start (%s %q kept no state to go back to); starting %q again would also run again %s, which the rollback did not undo: retry --from %q to run them again too, or --from a later entry (the compensated steps before it then stay undone)", first, byPath[scope].Kind, scope, scope, strings.Join(again, ", "), scope)
	}
	return trees, resets, nil
}

// prunePlan drops the trees another tree holds, and the joins and races to
// put back to pending that a tree deletes.
func prunePlan(trees []string, resets []workflow.Entry) ([]string, []workflow.Entry) {
	all, kept := newTreeSet(trees), treeSet{}
	var keep []string
	for _, t := range trees {
		if !kept[t] && !all.holds(workflow.ParentOf(t)) {
			keep = append(keep, t)
			kept[t] = true
		}
	}
	var put []workflow.Entry
	for _, e := range resets {
		if !kept.holds(e.Path) {
			put = append(put, e)
		}
	}
	return keep, put
}

// treeSet is a set of history trees (retryTrees's).
type treeSet map[string]bool

func newTreeSet(trees []string) treeSet {
	s := make(treeSet, len(trees))
	for _, t := range trees {
		s[t] = true
	}
	return s
}

// holds says that a tree of s holds path (is path or one of its scopes):
// by path's scopes, as many as its depth, not by the trees, which a retry
// from an early entry of a long history counts by the thousand.
func (s treeSet) holds(path string) bool {
	for p := path; p != ""; p = workflow.ParentOf(p) {
		if s[p] {
			return true
		}
	}
	return false
}

// firstCompensated is the earliest entry whose rollback handler ran to
// its end, nil if none did: the steps whose effects the rollback undid,
// which must run again. Not those an earlier retry kept (settled: the
// workflow went on past them), or a plain retry after a later failure
// that rolled nothing back (a cancel, a divergence) would run them again,
// and what the workflow did after them, instead of resuming it. A step
// whose handler failed (for good, or in an attempt a cancel cut off) still
// has its effect: the retry keeps it, its handler's outcome cleared
// (freshRollbacks), as it would any step the rollback did not reach; run
// again, it would take effect twice.
func firstCompensated(entries []workflow.Entry) *workflow.Entry {
	byPath := make(map[string]*workflow.Entry, len(entries))
	for i := range entries {
		byPath[entries[i].Path] = &entries[i]
	}
	var first *workflow.Entry
	var firstAt time.Time
	for i := range entries {
		e := &entries[i]
		if !e.RollbackDone || e.RollbackSettled {
			continue
		}
		if at := entryTime(byPath, nil, e); first == nil || at.Before(firstAt) {
			first, firstAt = e, at
		}
	}
	return first
}

// entryTime is when e was recorded, as far as the history tells: its time,
// or for the entries that record none (rollback checkpoints, version
// checks, removed markers, and entries still pending) the time of the
// latest entry its thread made before it (madeBefore), which for one at
// the start of a loop iteration is the end of the iterations before it,
// and at the start of a join or race branch the time the join or race
// started; zero at the start of the workflow.
func entryTime(byPath map[string]*workflow.Entry, places map[string]int, e *workflow.Entry) time.Time {
	if !e.Time.IsZero() {
		return e.Time
	}
	var at time.Time
	for _, o := range byPath {
		if o.Time.After(at) && !workflow.Under(e.Path, o.Path) {
			if before, known := madeBefore(byPath, places, o.Path, e.Path); before && known {
				at = o.Time
			}
		}
	}
	return at
}

// entryTimes answers entryTime for the entries of one history, each by a
// search in each of its scopes rather than a pass over the whole history:
// a retry asks it of every entry whose order the places do not tell (the
// entries of other join or race branches), and those that record no time
// (a gate first in each loop iteration) each took a pass, so that a retry
// from an early entry of a join of long loops grew with the square.
type entryTimes struct {
	byPath map[string]*workflow.Entry
	places map[string]int
	// scopes holds, for each scope, the latest time recorded in each of
	// its children's trees, ordered as madeBefore orders the children.
	scopes map[string]*childTimes
}

// childTimes are the children of one scope that madeBefore can place,
// with the latest time recorded in each one's tree: loop iterations by
// number, and entries and try blocks by place, each list sorted with the
// latest time up to each child (a running maximum); and, by place, the
// latest of those a replay put before a recorded entry (madeBefore's
// inserted), made before the entry whose place they share.
type childTimes struct {
	iters, placed []childAt
	inserted      map[int]time.Time
}

type childAt struct {
	n  uint64
	at time.Time
}

func newEntryTimes(byPath map[string]*workflow.Entry, places map[string]int) *entryTimes {
	latest := map[string]time.Time{} // a scope's child -> the latest time in its tree
	for p, o := range byPath {
		if o.Time.IsZero() {
			continue
		}
		for i := 0; ; {
			j := strings.IndexByte(p[i:], '/')
			child := p
			if j >= 0 {
				child = p[:i+j]
			}
			if o.Time.After(latest[child]) {
				latest[child] = o.Time
			}
			if j < 0 {
				break
			}
			i += j + 1
		}
	}
	t := &entryTimes{byPath: byPath, places: places, scopes: map[string]*childTimes{}}
	for child, at := range latest {
		scope, seg := parentPath(child), child
		if scope != "" {
			seg = child[len(scope)+1:]
		}
		ct := t.scopes[scope]
		if ct == nil {
			ct = &childTimes{inserted: map[int]time.Time{}}
			t.scopes[scope] = ct
		}
		if n, ok := iteration(seg); ok {
			ct.iters = append(ct.iters, childAt{n, at})
			continue
		}
		q := places[child]
		if q <= 0 {
			continue // no place: madeBefore does not know its order
		}
		ct.placed = append(ct.placed, childAt{uint64(q), at})
		if t.inserted(child) && at.After(ct.inserted[q]) {
			ct.inserted[q] = at
		}
	}
	for _, ct := range t.scopes {
		for _, l := range [][]childAt{ct.iters, ct.placed} {
			slices.SortFunc(l, func(a, b childAt) int { return cmp.Compare(a.n, b.n) })
			for i := 1; i < len(l); i++ {
				if l[i-1].at.After(l[i].at) {
					l[i].at = l[i-1].at
				}
			}
		}
	}
	return t
}

// inserted is madeBefore's: an entry that shares the place of a recorded
// one was put before it by a replay.
func (t *entryTimes) inserted(p string) bool {
	e := t.byPath[p]
	return e == nil || e.Kind == workflow.KindVersionCheck || e.Kind == workflow.KindRemoved
}

// at is entryTime(byPath, places, e).
func (t *entryTimes) at(e *workflow.Entry) time.Time {
	if !e.Time.IsZero() {
		return e.Time
	}
	var at time.Time
	later := func(l []childAt, n uint64) {
		// The running maximum of the children before n.
		if i := sort.Search(len(l), func(i int) bool { return l[i].n >= n }); i > 0 && l[i-1].at.After(at) {
			at = l[i-1].at
		}
	}
	p := e.Path
	for i := 0; ; {
		j := strings.IndexByte(p[i:], '/')
		child := p
		if j >= 0 {
			child = p[:i+j]
		}
		scope := ""
		if i > 0 {
			scope = p[:i-1]
		}
		k := t.byPath[scope]
		concurrent := scope != "" && k != nil && (k.Kind == workflow.KindJoin || k.Kind == workflow.KindRace)
		if ct := t.scopes[scope]; ct != nil && !concurrent {
			if n, ok := iteration(child[i:]); ok {
				later(ct.iters, n)
			} else if q := t.places[child]; q > 0 {
				later(ct.placed, uint64(q))
				if in := ct.inserted[q]; !t.inserted(child) && in.After(at) {
					at = in
				}
			}
		}
		if j < 0 {
			return at
		}
		i += j + 1
	}
}

// madeBefore says whether the run made the entry at a before the one at b
// (neither holding the other), where their places tell (known): where
// their paths part, the two scopes or entries are loop iterations (by
// number) or hold a place in the scope that holds them (Entry.Seq, a try
// block's historyPlaces). A version gate, a removed marker or a try block
// that a replay put before a recorded entry shares its place
// (History.PlaceBefore), and was made before it. Not known where a join
// or race parts them (its branches ran concurrently), nor for entries
// recorded without a place.
func madeBefore(byPath map[string]*workflow.Entry, places map[string]int, a, b string) (before, known bool) {
	prefix := 0 // bytes of a (and b) before the current segments
	for prefix < len(a) && prefix < len(b) {
		sa, _, _ := strings.Cut(a[prefix:], "/")
		sb, _, _ := strings.Cut(b[prefix:], "/")
		if sa == sb {
			prefix += len(sa) + 1
			continue
		}
		if prefix > 0 {
			if k := byPath[a[:prefix-1]]; k != nil && (k.Kind == workflow.KindJoin || k.Kind == workflow.KindRace) {
				return false, false
			}
		}
		if ia, ok := iteration(sa); ok {
			ib, ok := iteration(sb)
			return ia < ib, ok
		}
		pa, pb := a[:prefix+len(sa)], b[:prefix+len(sb)]
		qa, qb := places[pa], places[pb]
		switch {
		case qa <= 0 || qb <= 0:
			return false, false
		case qa != qb:
			return qa < qb, true
		}
		// inserted: put before a recorded entry, sharing its place.
		inserted := func(p string) bool {
			e := byPath[p]
			return e == nil || e.Kind == workflow.KindVersionCheck || e.Kind == workflow.KindRemoved
		}
		if ea, eb := inserted(pa), inserted(pb); ea != eb {
			return ea, true
		}
		return false, false
	}
	return false, false
}

// checkRewind refuses a retry from an entry inside a scope that would not
// run it again. A settled join or race keeps its recorded result: a replay
// does not re-run its branches (but a failed join or race goes back to
// pending, see retryTrees). A loop keeps its state at its checkpoints
// only (every prune interval, and its end): it resumes at the last one and
// replays the iterations after it from their entries, so retrying from an
// iteration before that checkpoint would delete that iteration's entries
// and never run it again, the loop going on from a state built on the
// results just deleted.
//
// It also returns the outermost scope that refuses from, which a retry may
// take instead: that scope's ancestors hold from and it alike.
func checkRewind(byPath map[string]*workflow.Entry, from string) (string, error) {
	segs := strings.Split(from, "/")
	for i := 1; i < len(segs); i++ {
		scope := strings.Join(segs[:i], "/")
		e := byPath[scope]
		if e == nil {
			continue // a loop iteration or a branch: no entry of its own
		}
		switch {
		case (e.Kind == workflow.KindJoin || e.Kind == workflow.KindRace) && e.Status == workflow.StatusFailed:
			// Put back to pending by the retry: its branches run again.
		case (e.Kind == workflow.KindJoin || e.Kind == workflow.KindRace) && e.Status != workflow.StatusPending:
			return scope, rivet.Errorf(rivet.ErrInvalidArgument, "cannot retry from %q: %s %q has settled and keeps its recorded result; retry from %q itself", from, e.Kind, scope, scope)
		case e.Kind != workflow.KindLoop || !strings.HasPrefix(segs[i], "~"):
		case e.Status == workflow.StatusCompleted:
			return scope, rivet.Errorf(rivet.ErrInvalidArgument, "cannot retry from %q: loop %q has completed and kept no state to go back to; retry from %q itself or from an entry after it", from, scope, scope)
		default:
			if k, err := strconv.Atoi(segs[i][1:]); err == nil && e.Iteration > k {
				return scope, rivet.Errorf(rivet.ErrInvalidArgument, "cannot retry from %q: loop %q resumes at iteration %d, its last checkpoint, and kept no state for iteration %d; retry from an entry of iteration %d or later, or from %q itself", from, scope, e.Iteration, k, e.Iteration, scope)
			}
		}
	}
	return "", nil
}
