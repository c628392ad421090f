package server

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/textcut"
	"github.com/rivet-go/rivet/runtime"
)

// maxListLimit is the largest page List serves. A larger request is served
// at this size rather than refused, as paging APIs usually do: the caller
// follows next_page_token either way.
const maxListLimit = 1000

// Call runs one action.
func (s *Server) Call(ctx context.Context, req *rivetv1.CallRequest) (*rivetv1.CallResponse, error) {
	creq, err := s.callRequest(ctx, req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	res, err := s.backend.Call(ctx, creq)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := checkSize("result of action "+req.GetAction(), len(res), s.limits.MaxResultBytes); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.CallResponse{Result: res}, nil
}

// callRequest checks req as Call does before it runs it, and converts it.
func (s *Server) callRequest(ctx context.Context, req *rivetv1.CallRequest) (runtime.CallRequest, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return runtime.CallRequest{}, err
	}
	if err := rivet.ValidateName("action name", req.GetAction()); err != nil {
		return runtime.CallRequest{}, err
	}
	args, err := s.args(req.GetArgs())
	if err != nil {
		return runtime.CallRequest{}, err
	}
	input, err := s.input(req.GetInput())
	if err != nil {
		return runtime.CallRequest{}, err
	}
	return runtime.CallRequest{
		Ref:             r,
		Action:          req.GetAction(),
		Args:            args,
		CreateIfMissing: req.GetCreateIfMissing(),
		Input:           input,
		Chain:           chainOf(ctx),
		ReadOnly:        req.GetReadOnly(),
		IdempotencyKey:  req.GetIdempotencyKey(),
	}, nil
}

// Send appends a message to a queue.
func (s *Server) Send(ctx context.Context, req *rivetv1.SendRequest) (*rivetv1.SendResponse, error) {
	sreq, err := s.sendRequest(ctx, req)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	res, err := s.backend.Send(ctx, sreq)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.SendResponse{MessageId: res.MessageID, Status: res.Status, Response: res.Response, WorkflowStatus: res.WorkflowStatus, MessageState: res.MessageState, Duplicate: res.Duplicate}, nil
}

// sendRequest checks req as Send does before it runs it, and converts it.
func (s *Server) sendRequest(ctx context.Context, req *rivetv1.SendRequest) (runtime.SendRequest, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return runtime.SendRequest{}, err
	}
	if err := rivet.ValidateName("queue name", req.GetQueue()); err != nil {
		return runtime.SendRequest{}, err
	}
	body, err := s.body(req.GetBody())
	if err != nil {
		return runtime.SendRequest{}, err
	}
	input, err := s.input(req.GetInput())
	if err != nil {
		return runtime.SendRequest{}, err
	}
	if req.GetTimeoutMs() < 0 {
		return runtime.SendRequest{}, rivet.Errorf(rivet.ErrInvalidArgument, "timeout_ms is negative (%d)", req.GetTimeoutMs())
	}
	// A wait past time.Duration's range (INT64_MAX ms: "as long as my
	// deadline allows") is the longest one: multiplied, it would wrap to a
	// negative (the default 30 s) or to under a millisecond.
	wait := time.Duration(math.MaxInt64)
	if ms := req.GetTimeoutMs(); ms <= math.MaxInt64/int64(time.Millisecond) {
		wait = time.Duration(ms) * time.Millisecond
	}
	return runtime.SendRequest{
		Ref:             r,
		Queue:           req.GetQueue(),
		Body:            body,
		CreateIfMissing: req.GetCreateIfMissing(),
		Input:           input,
		Wait:            req.GetWait(),
		Timeout:         wait,
		Chain:           chainOf(ctx),
		IdempotencyKey:  req.GetIdempotencyKey(),
		RequireRunning:  req.GetRequireRunning(),
	}, nil
}

// Create creates an actor.
func (s *Server) Create(ctx context.Context, req *rivetv1.CreateRequest) (*rivetv1.CreateResponse, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	input, err := s.input(req.GetInput())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	// chainOf: an actor's create forwarded by its node carries its chain.
	info, dup, err := s.backend.CreateWith(ctx, r, input, runtime.CreateOptions{IdempotencyKey: req.GetIdempotencyKey(), Chain: chainOf(ctx)})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.CreateResponse{Actor: infoProto(info), Duplicate: dup}, nil
}

// GetOrCreate returns an actor, creating it if needed.
func (s *Server) GetOrCreate(ctx context.Context, req *rivetv1.GetOrCreateRequest) (*rivetv1.GetOrCreateResponse, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	input, err := s.input(req.GetInput())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	info, created, err := s.backend.GetOrCreate(ctx, r, input)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.GetOrCreateResponse{Actor: infoProto(info), Created: created}, nil
}

// Get returns an actor without creating it.
func (s *Server) Get(ctx context.Context, req *rivetv1.GetRequest) (*rivetv1.GetResponse, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	info, err := s.backend.Get(ctx, r)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.GetResponse{Actor: infoProto(info)}, nil
}

// Destroy removes an actor.
func (s *Server) Destroy(ctx context.Context, req *rivetv1.DestroyRequest) (*rivetv1.DestroyResponse, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if err := s.backend.Destroy(ctx, r); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.DestroyResponse{}, nil
}

// Inspect returns an actor's state and runtime facts.
func (s *Server) Inspect(ctx context.Context, req *rivetv1.InspectRequest) (*rivetv1.InspectResponse, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	in, err := s.backend.Inspect(ctx, r)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	out := inspectionProto(in)
	if err := fitInspection(out, s.limits.MaxForwardedResponseBytes()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return out, nil
}

// fitInspection leaves out the arguments of out's scheduled calls, and
// cuts the last errors of its pending steps, largest first, until out
// fits in limit bytes marshalled: an actor may hold rivet.MaxSchedules
// calls with arguments up to a queue message each (tens of MiB), a join
// run as many steps at once each with an error of up to 16 KiB, and a
// response over the transport's bound fails whole, so that the actor
// could not be inspected at all. The bound is a peer stream's, the
// smaller, so that a node answers the same as its owner would. Left out
// is empty, which arguments (a JSON array) never are.
func fitInspection(out *rivetv1.InspectResponse, limit int) error {
	items := make([]payload, 0, len(out.Schedules))
	for _, sc := range out.Schedules {
		items = append(items, payload{size: len(sc.Args), shrink: func() int { sc.Args = nil; return 0 }})
	}
	for _, ps := range out.PendingSteps {
		if len(ps.LastError) > 2*maxCutErrorBytes {
			items = append(items, payload{size: len(ps.LastError), shrink: func() int { ps.LastError = cutError(ps.LastError); return len(ps.LastError) }})
		}
	}
	return fit("inspection", out, limit, items)
}

// payload is a part of a response that fit may shrink: shrink cuts it (or
// leaves it out) and returns its new size.
type payload struct {
	size   int
	shrink func() int
}

// fit shrinks the payloads of resp, largest first, until resp fits in
// limit bytes marshalled; ErrTooLarge if it still does not.
func fit(what string, resp proto.Message, limit int, items []payload) error {
	n := proto.Size(resp)
	if n <= limit {
		return nil
	}
	largest := slices.Clone(items)
	slices.SortFunc(largest, func(a, b payload) int { return b.size - a.size })
	for _, it := range largest {
		if n <= limit || it.size == 0 {
			break
		}
		// The item shrinks by a little more: its tag and length.
		n -= it.size - it.shrink()
	}
	return checkSize(what, proto.Size(resp), limit)
}

// maxCutErrorBytes is about what an error left in a history too large to
// carry whole keeps of its text (see cutError).
const maxCutErrorBytes = 1 << 10

// cutError is msg cut on a character to about maxCutErrorBytes, saying so.
func cutError(msg string) string {
	return textcut.Prefix(msg, maxCutErrorBytes) + fmt.Sprintf("... (cut: %d bytes in all)", len(msg))
}

// historyPayloads are what fit may shrink in a history: its entries'
// outputs (left out, and marked so) and errors (cut, saying so), and the
// workflow's error (cut): each is recorded whole, up to a transaction's
// size.
func historyPayloads(out *rivetv1.HistoryResponse) []payload {
	var items []payload
	cuttable := func(p *string) {
		if len(*p) > 2*maxCutErrorBytes {
			items = append(items, payload{size: len(*p), shrink: func() int { *p = cutError(*p); return len(*p) }})
		}
	}
	for _, e := range out.Entries {
		if len(e.Output) > 0 {
			items = append(items, payload{size: len(e.Output), shrink: func() int { e.Output, e.OutputOmitted = nil, true; return 0 }})
		}
		cuttable(&e.Error)
		cuttable(&e.RollbackError)
		cuttable(&e.RollbackRetryError)
	}
	cuttable(&out.WorkflowError)
	return items
}

// List pages through actors.
func (s *Server) List(ctx context.Context, req *rivetv1.ListRequest) (*rivetv1.ListResponse, error) {
	if req.GetName() != "" {
		if err := rivet.ValidateName("actor name", req.GetName()); err != nil {
			return nil, s.toStatus(ctx, err)
		}
	}
	res, err := s.backend.List(ctx, runtime.ListOptions{
		Name:      req.GetName(),
		Limit:     int(min(req.GetLimit(), maxListLimit)),
		PageToken: req.GetPageToken(),

		FailedWorkflows: req.GetFailedWorkflows(),
	})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	out := &rivetv1.ListResponse{Actors: make([]*rivetv1.ActorInfo, len(res.Actors)), NextPageToken: res.NextPageToken}
	for i, a := range res.Actors {
		out.Actors[i] = infoProto(a)
	}
	return out, nil
}

// History returns an actor's workflow history, or a page of it.
func (s *Server) History(ctx context.Context, req *rivetv1.HistoryRequest) (*rivetv1.HistoryResponse, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	h, err := s.backend.HistoryPage(ctx, r, runtime.HistoryOptions{
		Limit:     int(min(req.GetLimit(), maxListLimit)),
		PageToken: req.GetPageToken(),
		Raw:       req.GetRaw(),
	})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	out := &rivetv1.HistoryResponse{
		WorkflowStatus: h.WorkflowStatus, WorkflowError: textcut.Valid(h.WorkflowError),
		WorkflowWakeAt: timeProto(h.WorkflowWake.At), WorkflowWakeQueues: h.WorkflowWake.Queues, WorkflowWakeAnyQueue: h.WorkflowWake.AnyQueue,
		NextPageToken: h.NextPageToken, Paged: true, Raw: req.GetRaw(),
	}
	for _, e := range h.Entries {
		pe := &rivetv1.HistoryEntry{
			Path: textcut.Valid(e.Path), Kind: e.Kind, Status: e.Status, Attempts: uint32(e.Attempts),
			Output: e.Output, Error: textcut.Valid(e.Error), ErrorCode: textcut.Valid(e.ErrorCode), Winner: textcut.Valid(e.Winner),
			HasRollback: e.HasRollback, RollbackDone: e.RollbackDone, RollbackSettled: e.RollbackSettled, RollbackAttempts: uint32(e.RollbackAttempts),
			RollbackError: textcut.Valid(e.RollbackError), RollbackErrorCode: textcut.Valid(e.RollbackErrorCode),
			RollbackRetryError: textcut.Valid(e.RollbackRetryError), RollbackRetryErrorCode: textcut.Valid(e.RollbackRetryErrorCode),
			Version: uint32(e.Version), Latest: uint32(e.Latest), RemovedKind: e.RemovedKind,
			Failure: e.Failure, Entry: e.Entry, ErrorRivetKind: textcut.Valid(e.ErrorRivetKind),
		}
		if !e.UpdatedAt.IsZero() {
			pe.UpdatedAt = timestamppb.New(e.UpdatedAt)
		}
		if !e.Deadline.IsZero() {
			pe.Deadline = timestamppb.New(e.Deadline)
		}
		out.Entries = append(out.Entries, pe)
	}
	bound := s.limits.MaxForwardedResponseBytes()
	if req.GetLimit() > 0 && len(h.PageTokens) == len(out.Entries) {
		// A page ends early rather than leave out outputs: with the
		// entries that fit whole (one at least), and the token after
		// its last. Never a whole history: a client from before History
		// paged would take the page for all of it.
		cutPage(out, h.PageTokens, bound)
	}
	// A history holds entries up to a transaction's size each, without
	// bound in all: as Inspect's calls, its largest outputs are left out
	// (and errors cut) rather than the response failing whole; asked for
	// whole, it can still be too large.
	err = fit("history", out, bound, historyPayloads(out))
	if err != nil {
		if re, ok := err.(*rivet.Error); ok && req.GetLimit() == 0 {
			re.Message += "; ask for it in pages (limit), as rivetctl history does"
		}
		return nil, s.toStatus(ctx, err)
	}
	return out, nil
}

// cutPage ends the page out at the last entry that fits in bound bytes
// marshalled, with tokens[i] the token that resumes after its entry i. The
// first entry stays whatever its size: fit leaves out its output.
func cutPage(out *rivetv1.HistoryResponse, tokens []string, bound int) {
	if proto.Size(out) <= bound {
		return
	}
	entries := out.Entries
	out.Entries = nil
	n := proto.Size(out) + 2*protowire.SizeBytes(len(out.NextPageToken)) // room for a longer token
	keep := 0
	for _, e := range entries {
		m := protowire.SizeTag(3) + protowire.SizeBytes(proto.Size(e))
		if keep > 0 && n+m > bound {
			break
		}
		n += m
		keep++
	}
	out.Entries = entries[:keep]
	if keep < len(entries) {
		out.NextPageToken = tokens[keep-1]
		for keep > 1 && proto.Size(out) > bound {
			keep--
			out.Entries, out.NextPageToken = entries[:keep], tokens[keep-1]
		}
	}
}

// RetryWorkflow replays a failed workflow from an entry.
func (s *Server) RetryWorkflow(ctx context.Context, req *rivetv1.RetryWorkflowRequest) (*rivetv1.RetryWorkflowResponse, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	res, err := s.backend.RetryWorkflowWith(ctx, r, runtime.RetryOptions{From: req.GetFrom(), OnlyFailed: req.GetOnlyFailed(), DropMessages: req.GetDropMessages()})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.RetryWorkflowResponse{Removed: uint32(res.Removed), Dropped: uint32(res.Dropped)}, nil
}

// CheckRetryWorkflow makes RetryWorkflow's checks and changes nothing.
func (s *Server) CheckRetryWorkflow(ctx context.Context, req *rivetv1.CheckRetryWorkflowRequest) (*rivetv1.CheckRetryWorkflowResponse, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	res, err := s.backend.RetryWorkflowWith(ctx, r, runtime.RetryOptions{From: req.GetFrom(), OnlyFailed: req.GetOnlyFailed(), DropMessages: req.GetDropMessages(), DryRun: true})
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.CheckRetryWorkflowResponse{Removed: uint32(res.Removed), Dropped: uint32(res.Dropped)}, nil
}

// CancelWorkflow stops an actor's workflow for good.
func (s *Server) CancelWorkflow(ctx context.Context, req *rivetv1.CancelWorkflowRequest) (*rivetv1.CancelWorkflowResponse, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	prev, err := s.backend.CancelWorkflow(ctx, r, req.GetReason())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.CancelWorkflowResponse{PreviousStatus: prev}, nil
}

// CancelScheduledCall removes one of an actor's scheduled calls.
func (s *Server) CancelScheduledCall(ctx context.Context, req *rivetv1.CancelScheduledCallRequest) (*rivetv1.CancelScheduledCallResponse, error) {
	r, err := ref(req.GetActor())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	ok, err := s.backend.CancelScheduledCall(ctx, r, req.GetId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.CancelScheduledCallResponse{Cancelled: ok}, nil
}
