package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/optjson"
	"github.com/rivet-go/rivet/workflow"
)

// ActorHandle calls one actor. It holds only the address (name, key) and
// how to treat a missing actor, so it is cheap, safe for concurrent use,
// and never stale: the actor is found again on every call, wherever its
// partition lives now. The With... methods return a new handle.
type ActorHandle struct {
	c    *Client
	name string
	key  []string
	// create gives getOrCreate semantics to Call, Send and Info.
	create bool
	// input is the create input, marshalled on each call that may create.
	input any
}

var (
	_ caller.Handle     = (*ActorHandle)(nil)
	_ caller.Sender     = (*ActorHandle)(nil)
	_ caller.OnceSender = (*ActorHandle)(nil)
)

// Name is the actor's name.
func (h *ActorHandle) Name() string { return h.name }

// Key is the actor's key. The caller must not modify it.
func (h *ActorHandle) Key() []string { return h.key }

// NoCreate returns a handle whose calls fail with rivet.ErrNotFound if the
// actor does not exist, instead of creating it.
func (h *ActorHandle) NoCreate() *ActorHandle {
	h2 := *h
	h2.create = false
	return &h2
}

// WithInput returns a handle that creates the actor, when a call creates
// it, with input (marshalled to JSON; a json.RawMessage is sent as it is).
// An actor that exists keeps the input it was created with.
func (h *ActorHandle) WithInput(input any) *ActorHandle {
	h2 := *h
	h2.input = input
	return &h2
}

func (h *ActorHandle) ref() *rivetv1.ActorRef {
	return &rivetv1.ActorRef{Name: h.name, Key: h.key}
}

// createInput is the input to send: only on calls that may create.
func (h *ActorHandle) createInput() ([]byte, error) {
	if !h.create {
		return nil, nil
	}
	return optjson.Marshal("create input", h.input)
}

// Call runs an action with args (each marshalled to JSON; a json.RawMessage
// is sent as it is) and returns its JSON result. Use rivet.Call for a
// typed result.
func (h *ActorHandle) Call(ctx context.Context, action string, args ...any) (json.RawMessage, error) {
	return h.call(ctx, action, false, "", args)
}

// CallWith is Call with options: with an idempotency key
// (CallOptions.IdempotencyKey) the call runs once, and is retried as a
// read is, also when a connection broke during it, which leaves a plain
// Call's outcome unknown. Nodes older than keyed calls ignore the key: a
// call retried through one could run twice.
func (h *ActorHandle) CallWith(ctx context.Context, action string, opts CallOptions, args ...any) (json.RawMessage, error) {
	return h.call(ctx, action, false, opts.IdempotencyKey, args)
}

// Query runs a read-only action (made with rivet.Query or rivet.QueryArg)
// and returns its JSON result; the node refuses any other action
// (rivet.ErrFailedPrecondition, reason actor.not_read_only) before it
// runs it. It is retried as a read is: also when a connection broke
// during the call, or a direct-routed call's owner was cut off, where a
// Call's error says its outcome is unknown; rivet.CallQuery (for a typed
// result) says what such a retry does again. Nodes older than this call
// ignore its read-only mark and run any action it names: an action that is
// not read-only could then run twice.
//
// A query is a turn of the actor, as any action is, with one exception:
// while its workflow's Step body runs, a query runs beside the body on the
// state as committed before the step (the body's changes are not yet), as
// a Temporal query answers while an activity runs. On a handle from Actor or
// GetOrCreate it creates the actor if it does not exist, and so starts its
// workflow: a read of an actor that may not exist (a GET of an ID a user
// typed) goes through a NoCreate handle, and fails with rivet.ErrNotFound.
func (h *ActorHandle) Query(ctx context.Context, action string, args ...any) (json.RawMessage, error) {
	return h.call(ctx, action, true, "", args)
}

func (h *ActorHandle) call(ctx context.Context, action string, readOnly bool, key string, args []any) (json.RawMessage, error) {
	a, err := marshalArgs(args)
	if err != nil {
		return nil, err
	}
	in, err := h.createInput()
	if err != nil {
		return nil, err
	}
	req := &rivetv1.CallRequest{Actor: h.ref(), Action: action, Args: a, CreateIfMissing: h.create, Input: in, ReadOnly: readOnly, IdempotencyKey: key}
	class := sideEffects
	if readOnly || key != "" {
		// A keyed call sent again runs nothing the first did not: it is
		// retried as a query is (not after an answer marked outcome
		// unknown: the action failed, recording nothing, and what it did
		// to other actors stands).
		class = readOnlyCall
	}
	resp, err := invoke(ctx, h.c, class, h.c.actors.Call, req)
	if err != nil {
		return nil, err
	}
	return resp.GetResult(), nil
}

// Send appends body (marshalled to JSON) to one of the actor's queues and
// returns once the message is durable: at once, also while the actor's
// workflow is inside a Step (its state-changing actions wait for the
// step; messages and queries do not). A body is at most 64 KiB of JSON by default (the node's limit;
// rivet.ErrTooLarge beyond).
//
// Send returns nil also when the actor's workflow has ended: the message
// is queued, and nothing takes it unless the workflow is retried (rivetctl
// workflow retry). Enqueue does the same as Send and says more: the
// message's ID, and in WorkflowStatus whether the workflow had ended;
// SendWait refuses to queue a message no running workflow will take.
func (h *ActorHandle) Send(ctx context.Context, queue string, body any) error {
	_, err := h.Enqueue(ctx, queue, body)
	return err
}

// Enqueue is Send that returns what the node said of the message: its ID,
// and in WorkflowStatus whether the actor's workflow had already ended
// (then nothing takes the message until the workflow is retried).
func (h *ActorHandle) Enqueue(ctx context.Context, queue string, body any) (SendResult, error) {
	return h.SendWith(ctx, queue, body, SendOptions{})
}

// SendWait appends body to a queue and waits, for at most timeout (0: the
// node's default, 30 s), until the actor's workflow completes the message.
// A wait that runs out is not an error: the result's Status says
// SendTimedOut, and the message stays, queued or (MessageState) taken by
// a workflow that has not completed it: only Message.Complete answers a
// waiting sender. Nor is a wait cut short
// because the actor moved to another node (or its node, or the node that
// forwarded the send, stopped): Status
// says SendEnqueued, and the workflow completes the message all the same,
// but this send has no way left to its response: a sender that needs it
// sends with an idempotency key (SendWith, Wait set), and sends again with
// the same key and body to wait for that completion.
//
// timeout counts from when the message is queued: the node queues it
// first, once it has the actor's turn (at once while the workflow is
// inside a Step; after an action that runs), so a call can take longer
// than timeout; bound the whole call with ctx. A ctx whose deadline comes
// first shortens the wait to end just before it (a tenth of the time left,
// at most 250 ms): the call then returns SendTimedOut with the message's
// state, not ctx's error.
//
// A workflow that has ended when the message comes refuses it, and
// nothing is queued: rivet.ErrWorkflowFailed, reason workflow.failed (it
// failed) or workflow.ended (completed or cancelled). One that ends while
// the sender waits leaves the message queued, and the error says "without
// completing message N": reason workflow.failed if it failed,
// workflow.ended_without_completing if not.
func (h *ActorHandle) SendWait(ctx context.Context, queue string, body any, timeout time.Duration) (SendResult, error) {
	return h.SendWith(ctx, queue, body, SendOptions{Wait: true, Timeout: timeout})
}

// SendOptions are the options of SendWith (caller.SendOptions): an
// idempotency key makes a send happen once, and the client then retries
// it as it does a read, also when its connection broke mid-call.
type SendOptions = caller.SendOptions

// CallOptions are the options of CallWith (caller.CallOptions).
type CallOptions = caller.CallOptions

// SendWith is Enqueue, or SendWait with Wait set, with options. A waiting
// send with an idempotency key that is sent again with the same key and
// body (its wait broke: ctx ended, the connection or the actor's node
// died) gets its message's completion: it waits for it, or gets it at
// once if it came already (Duplicate set; SendOptions says when not).
func (h *ActorHandle) SendWith(ctx context.Context, queue string, body any, opts SendOptions) (SendResult, error) {
	wait, timeout := opts.Wait, opts.Timeout
	switch {
	case !wait:
		// As an actor's own SendWith: a send that does not wait has no
		// timeout (a negative one the node would refuse).
		timeout = 0
	case timeout < 0:
		// Refused before anything is sent, as an actor's own SendWith
		// does: under a millisecond it went as 0, the node's default of
		// 30 s, and beyond that the node named its wire field.
		return SendResult{}, rivet.Errorf(rivet.ErrInvalidArgument, "timeout must not be negative, not %s", timeout)
	}
	b, err := optjson.Encode("message body", body)
	if err != nil {
		return SendResult{}, err
	}
	in, err := h.createInput()
	if err != nil {
		return SendResult{}, err
	}
	ms := timeout.Milliseconds()
	if timeout > 0 && ms == 0 {
		ms = 1 // 0 is the node's default, 30 s: not what a wait under 1 ms asks
	}
	req := &rivetv1.SendRequest{
		Actor: h.ref(), Queue: queue, Body: b,
		CreateIfMissing: h.create, Input: in,
		Wait: wait, TimeoutMs: ms,
		IdempotencyKey: opts.IdempotencyKey,
		RequireRunning: opts.RequireRunning,
	}
	class := sideEffects
	if opts.IdempotencyKey != "" {
		class = idempotent
	}
	resp, err := invoke(ctx, h.c, class, h.c.actors.Send, req)
	if err != nil {
		return SendResult{}, err
	}
	return SendResult{MessageID: resp.GetMessageId(), Status: resp.GetStatus(), Response: resp.GetResponse(), WorkflowStatus: resp.GetWorkflowStatus(), MessageState: resp.GetMessageState(), Duplicate: resp.GetDuplicate()}, nil
}

// Info returns what the node knows of the actor without activating it. A
// getOrCreate handle creates the actor if needed (resolving it, as the
// original engine's handle.resolve does); a NoCreate handle fails with
// rivet.ErrNotFound.
func (h *ActorHandle) Info(ctx context.Context) (ActorInfo, error) {
	return h.info(ctx, h.c.retry)
}

// info is Info retrying as policy allows.
func (h *ActorHandle) info(ctx context.Context, policy retryPolicy) (ActorInfo, error) {
	if !h.create {
		resp, err := invokeWith(ctx, policy, idempotent, h.c.actors.Get, &rivetv1.GetRequest{Actor: h.ref()})
		if err != nil {
			return ActorInfo{}, err
		}
		return infoFrom(resp.GetActor()), nil
	}
	in, err := h.createInput()
	if err != nil {
		return ActorInfo{}, err
	}
	resp, err := invokeWith(ctx, policy, idempotent, h.c.actors.GetOrCreate, &rivetv1.GetOrCreateRequest{Actor: h.ref(), Input: in})
	if err != nil {
		return ActorInfo{}, err
	}
	return infoFrom(resp.GetActor()), nil
}

// Inspect returns the actor's committed state and runtime facts. It never
// creates the actor: a missing one is rivet.ErrNotFound.
func (h *ActorHandle) Inspect(ctx context.Context) (Inspection, error) {
	resp, err := invoke(ctx, h.c, idempotent, h.c.actors.Inspect, &rivetv1.InspectRequest{Actor: h.ref()})
	if err != nil {
		return Inspection{}, err
	}
	return inspectionFrom(resp), nil
}

// State returns the actor's committed state as JSON (Inspect's State).
func (h *ActorHandle) State(ctx context.Context) (json.RawMessage, error) {
	in, err := h.Inspect(ctx)
	if err != nil {
		return nil, err
	}
	return in.State, nil
}

// Destroy removes the actor and everything stored for it. A missing actor
// is rivet.ErrNotFound.
func (h *ActorHandle) Destroy(ctx context.Context) error {
	_, err := invoke(ctx, h.c, sideEffects, h.c.actors.Destroy, &rivetv1.DestroyRequest{Actor: h.ref()})
	return err
}

// History returns the actor's workflow status and history, its entries in
// the order the workflow made them (each followed by the entries under it).
// It asks for pages of 1000 entries and follows them to the last (a long
// history does not fit in one answer), so the status is the last page's
// and the entries are those recorded when each page was read: an entry
// the workflow records while it reads is listed if it comes after the
// pages read. A node from before History paged answers the whole history
// at once (see HistoryPage). A page that does not advance (no entry, or
// the token it was asked with, again) is rivet.ErrInternal, not followed.
func (h *ActorHandle) History(ctx context.Context) (History, error) {
	out, _, err := h.allHistory(ctx, false)
	return out, err
}

// allHistory is History, and with raw each entry as the engine records it
// (HistoryEntry.entry on the wire), in the order of the entries. A node
// that does not say it served raw entries (one from before raw histories,
// whatever page it answers) is rivet.ErrFailedPrecondition.
func (h *ActorHandle) allHistory(ctx context.Context, raw bool) (History, []json.RawMessage, error) {
	opts := HistoryOptions{Limit: maxHistoryPage}
	var out History
	var records []json.RawMessage
	for {
		page, ans, err := h.historyPage(ctx, opts, raw)
		if err != nil {
			return History{}, nil, err
		}
		if raw && !ans.raw {
			return History{}, nil, rivet.Errorf(rivet.ErrFailedPrecondition, "the node that answered for actor %s %q exports no raw history (a node from before history export): export it once every node runs a release that does", h.name, h.key)
		}
		if !ans.paged {
			// A node from before History paged: its answer is the whole
			// history, whatever page was asked for.
			return page, nil, nil
		}
		if page.NextPageToken != "" && (len(page.Entries) == 0 || page.NextPageToken == opts.PageToken) {
			// A node's bug: followed, the same page would come back
			// until ctx ends (for ever without a deadline), its
			// entries added again each time.
			return History{}, nil, rivet.Errorf(rivet.ErrInternal, "the node answered a history page that does not advance (%d entries, the next page token %.40q after %.40q): a bug of the node's", len(page.Entries), page.NextPageToken, opts.PageToken)
		}
		page.Entries = append(out.Entries, page.Entries...)
		records = append(records, ans.records...)
		out = page
		if out.NextPageToken == "" {
			return out, records, nil
		}
		opts.PageToken, out.NextPageToken = out.NextPageToken, ""
	}
}

// ExportHistory exports the actor's workflow history as its node recorded
// it, to check changed workflow code against it before deploying
// (workflowtest.Replay; rivetctl history --raw writes it): each entry as
// the engine records and replays it, in History's order, following pages
// as History does, with the actor's name and key, the workflow's status
// (the last page's) and when it was read. A node from before history
// export, which ignores the request for raw entries, is
// rivet.ErrFailedPrecondition, never an empty export; an actor whose type
// has no workflow, rivet.ErrInvalidArgument.
func (h *ActorHandle) ExportHistory(ctx context.Context) (*workflow.HistoryExport, error) {
	hist, records, err := h.allHistory(ctx, true)
	if err != nil {
		return nil, err
	}
	// Read after the history, so that no entry is later than the export
	// (as a node's clock allows): the replay's clock stands still here.
	at := time.Now().UTC().Round(0)
	if hist.WorkflowStatus == "" {
		return nil, rivet.Errorf(rivet.ErrInvalidArgument, "actor %s %q has no workflow: no history to export", h.name, h.key)
	}
	if records == nil {
		records = []json.RawMessage{}
	}
	return &workflow.HistoryExport{
		Format: workflow.HistoryExportFormat, Actor: h.name, Key: append([]string{}, h.key...),
		WorkflowStatus: hist.WorkflowStatus, WorkflowError: hist.WorkflowError, ExportedAt: at, Entries: records,
	}, nil
}

// maxHistoryPage is the largest page a node serves.
const maxHistoryPage = 1000

// HistoryPage returns one page of the actor's workflow history: up to
// opts.Limit entries after opts.PageToken's, in History's order, and the
// workflow's status now; NextPageToken continues it. A node from before
// History paged ignores opts and answers the whole history, without a
// NextPageToken. A token that is not one of this actor's history's is
// rivet.ErrInvalidArgument.
func (h *ActorHandle) HistoryPage(ctx context.Context, opts HistoryOptions) (History, error) {
	page, _, err := h.historyPage(ctx, opts, false)
	return page, err
}

// pageAnswer is what a node's history page says beside History.
type pageAnswer struct {
	// paged is false for an older node's whole history.
	paged bool
	// raw says the node served raw entries: records holds each entry's.
	raw     bool
	records []json.RawMessage
}

// historyPage is HistoryPage, asking for raw entries if raw, and what the
// node said of its answer.
func (h *ActorHandle) historyPage(ctx context.Context, opts HistoryOptions, raw bool) (History, pageAnswer, error) {
	limit := uint32(0)
	if opts.Limit > 0 {
		limit = uint32(min(opts.Limit, 1<<31))
	}
	resp, err := invoke(ctx, h.c, idempotent, h.c.actors.History, &rivetv1.HistoryRequest{Actor: h.ref(), Limit: limit, PageToken: opts.PageToken, Raw: raw})
	if err != nil {
		return History{}, pageAnswer{}, err
	}
	ans := pageAnswer{paged: resp.GetPaged(), raw: raw && resp.GetRaw()}
	if ans.raw {
		for _, e := range resp.GetEntries() {
			if len(e.GetEntry()) == 0 {
				return History{}, pageAnswer{}, rivet.Errorf(rivet.ErrInternal, "the node answered a raw history whose entry %q has no record: a bug of the node's", e.GetPath())
			}
			ans.records = append(ans.records, e.GetEntry())
		}
	}
	out := History{
		WorkflowStatus: resp.GetWorkflowStatus(), WorkflowError: resp.GetWorkflowError(),
		WorkflowWakeAt: timeFrom(resp.GetWorkflowWakeAt()), WorkflowWakeQueues: resp.GetWorkflowWakeQueues(), WorkflowWakeAnyQueue: resp.GetWorkflowWakeAnyQueue(),
		NextPageToken: resp.GetNextPageToken(),
	}
	for _, e := range resp.GetEntries() {
		he := HistoryEntry{Path: e.GetPath(), Kind: e.GetKind(), Status: e.GetStatus(), Attempts: int(e.GetAttempts()), Output: e.GetOutput(), Error: e.GetError(), ErrorCode: e.GetErrorCode(), Winner: e.GetWinner(), OutputOmitted: e.GetOutputOmitted(),
			HasRollback: e.GetHasRollback(), RollbackDone: e.GetRollbackDone(), RollbackSettled: e.GetRollbackSettled(), RollbackError: e.GetRollbackError(), RollbackErrorCode: e.GetRollbackErrorCode(),
			RollbackAttempts: int(e.GetRollbackAttempts()), RollbackRetryError: e.GetRollbackRetryError(), RollbackRetryErrorCode: e.GetRollbackRetryErrorCode(),
			Version: int(e.GetVersion()), Latest: int(e.GetLatest()), RemovedKind: e.GetRemovedKind(), Failure: e.GetFailure(),
			ErrorRivetKind: e.GetErrorRivetKind()}
		if e.GetUpdatedAt() != nil {
			he.UpdatedAt = e.GetUpdatedAt().AsTime()
		}
		he.Deadline = timeFrom(e.GetDeadline())
		out.Entries = append(out.Entries, he)
	}
	return out, ans, nil
}

// RetryWorkflow replays a failed workflow: from the entry from (and
// everything recorded after it), or, with from empty, from the entries that
// failed (after a rollback, from the first compensated step, or the loop,
// join or race holding it where the history kept no state to go back to
// that step: docs/architecture.md). It returns how many history entries
// were deleted.
func (h *ActorHandle) RetryWorkflow(ctx context.Context, from string) (int, error) {
	res, err := h.RetryWorkflowWith(ctx, RetryOptions{From: from})
	return res.Removed, err
}

// RetryOptions are the options of RetryWorkflowWith.
type RetryOptions struct {
	// From is the entry to replay from, as RetryWorkflow's from; "" for
	// the entries that failed.
	From string
	// OnlyFailed retries the workflow only if it is failed when the node
	// retries it: a completed or cancelled one (someone else's retry
	// completed it, an operator cancelled it, since the caller saw it
	// fail) is left as it is, and the retry fails with ErrWorkflowFailed
	// and the reason workflow.not_failed (a running one is
	// workflow.not_ended, as always). A node from before OnlyFailed
	// ignores it and retries those too.
	OnlyFailed bool
	// DropMessages drops the messages that the receives the retry deletes
	// took, instead of putting them back in their queues: to get past a
	// message the workflow cannot handle, retry From the receive that took
	// it. rivet.ErrInvalidArgument if the retry deletes no receive that
	// took one. The messages are gone: read them first (History). It
	// implies OnlyFailed. A send of a dropped message again with its
	// idempotency key, waiting for its completion, is
	// rivet.ErrFailedPrecondition. A node from before DropMessages puts
	// them back.
	DropMessages bool
}

// RetryResult is what a RetryWorkflowWith did.
type RetryResult struct {
	// Removed counts the history entries deleted for the replay.
	Removed int
	// Dropped counts the messages a DropMessages retry dropped: at least
	// one (a drop of none is refused); 0 from an older node, which does
	// not count them (or, older still, put them back).
	Dropped int
}

// RetryWorkflowWith is RetryWorkflow with options.
func (h *ActorHandle) RetryWorkflowWith(ctx context.Context, opts RetryOptions) (RetryResult, error) {
	resp, err := invoke(ctx, h.c, sideEffects, h.c.actors.RetryWorkflow, &rivetv1.RetryWorkflowRequest{Actor: h.ref(), From: opts.From, OnlyFailed: opts.OnlyFailed, DropMessages: opts.DropMessages})
	if err != nil {
		return RetryResult{}, err
	}
	return RetryResult{Removed: int(resp.GetRemoved()), Dropped: int(resp.GetDropped())}, nil
}

// CheckRetryWorkflow makes the checks RetryWorkflowWith would make with
// opts (the workflow's status, a replay of the history the retry would
// leave against the code deployed now; not the size of its transaction)
// and returns what it would remove and drop, or the error it would fail
// with, writing nothing. From a node older than the check (the one asked,
// or the owner of the actor it forwards to) the error is
// ErrCheckUnsupported.
func (h *ActorHandle) CheckRetryWorkflow(ctx context.Context, opts RetryOptions) (RetryResult, error) {
	resp, err := invoke(ctx, h.c, idempotent, h.c.actors.CheckRetryWorkflow, &rivetv1.CheckRetryWorkflowRequest{Actor: h.ref(), From: opts.From, OnlyFailed: opts.OnlyFailed, DropMessages: opts.DropMessages})
	if err != nil {
		// UNIMPLEMENTED, which reaches here only as its text: gRPC's
		// "unknown method", a forwarding node's "no forwardable method".
		if msg := err.Error(); strings.Contains(msg, "CheckRetryWorkflow") && (strings.Contains(msg, "unknown method") || strings.Contains(msg, "no forwardable method")) {
			return RetryResult{}, fmt.Errorf("%w: %v", ErrCheckUnsupported, err)
		}
		return RetryResult{}, err
	}
	return RetryResult{Removed: int(resp.GetRemoved()), Dropped: int(resp.GetDropped())}, nil
}

// ErrCheckUnsupported is CheckRetryWorkflow's error from a node older than
// the check (it answers UNIMPLEMENTED).
var ErrCheckUnsupported = errors.New("the node is older than the retry check")

// CancelWorkflow stops the actor's workflow for good, as an operator's
// decision, with reason kept in its error: no node runs it again until
// RetryWorkflow resumes it where it stopped. A step in flight has its
// context cancelled and its attempt is not recorded; the state, the
// history and the queued messages stay, and actions still work. It returns
// the status the workflow had ("running", "sleeping", or "cancelled":
// cancelling again changes nothing, so the client retries the call as it
// needs). A completed or failed workflow cannot be cancelled
// (ErrWorkflowFailed). It returns "" when a retry found the workflow
// cancelled after an attempt whose connection broke: that attempt most
// likely cancelled it, and the status before is not known.
// A cancel that fails (its deadline ran out while a step that does not heed
// its context held on) has still stopped the run: the workflow runs on
// from storage once that step has ended.
func (h *ActorHandle) CancelWorkflow(ctx context.Context, reason string) (string, error) {
	resp, ranBefore, err := invokeRetried(ctx, h.c.retry, idempotent, h.c.actors.CancelWorkflow, &rivetv1.CancelWorkflowRequest{Actor: h.ref(), Reason: reason})
	if err != nil {
		return "", err
	}
	prev := resp.GetPreviousStatus()
	if ranBefore && prev == "cancelled" {
		// Not "already cancelled": the attempt that broke is the likely
		// canceller, and the status it saw went with its answer.
		return "", nil
	}
	return prev, nil
}

// CancelScheduledCall removes one of the actor's pending scheduled calls
// (Inspect lists them; a recurring call's id is "every:<name>"), as an
// operator's decision, and says whether there was one. The actor's code
// is not consulted: use it for a call the actor has no action to cancel.
// A retry that finds no call after an attempt whose connection broke says
// true: that attempt most likely removed it (the call is not pending
// either way).
func (h *ActorHandle) CancelScheduledCall(ctx context.Context, id string) (bool, error) {
	resp, ranBefore, err := invokeRetried(ctx, h.c.retry, idempotent, h.c.actors.CancelScheduledCall, &rivetv1.CancelScheduledCallRequest{Actor: h.ref(), Id: id})
	if err != nil {
		return false, err
	}
	// "No pending call" would blame a cancel this client made itself
	// for having found nothing to cancel.
	return resp.GetCancelled() || ranBefore, nil
}
