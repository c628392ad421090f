package server

import (
	"context"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/textcut"
	"github.com/rivet-go/rivet/runtime"
)

// TablesNoter is a Backend that says when its copy of the cluster's
// tables (members, partition owners) may be out of date.
type TablesNoter interface {
	// TablesNote says why the tables may be out of date; "" if they are
	// not known to be.
	TablesNote() string
}

// tablesNote is the backend's TablesNote, or "".
func (s *Server) tablesNote() string {
	if n, ok := s.backend.(TablesNoter); ok {
		return n.TablesNote()
	}
	return ""
}

// RecordedFormatser is a Backend that says which storage formats its
// cluster has recorded: those a node's build must read to start
// (docs/deploy.md, "Downgrades").
type RecordedFormatser interface {
	// RecordedFormats returns the recorded storage formats, ascending;
	// an error if it cannot read them.
	RecordedFormats(ctx context.Context) ([]int, error)
}

// Members lists the nodes of the cluster, and the storage formats the
// cluster has recorded: with each node's format, whether a build can
// start in the cluster, before a deploy that would rule a rollback out
// (an SRE's trial compared them with an etcdctl the node image lacks).
func (s *Server) Members(ctx context.Context, req *rivetv1.MembersRequest) (*rivetv1.MembersResponse, error) {
	ms, err := s.backend.Members(ctx)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	out := &rivetv1.MembersResponse{Members: make([]*rivetv1.Member, len(ms)), Note: s.tablesNote()}
	for i, m := range ms {
		out.Members[i] = memberProto(m)
	}
	// Only when asked: a node reads them from etcd, and a client's
	// routing asks for the members every interval, within a timeout of
	// its own, from the node's copies.
	if rf, ok := s.backend.(RecordedFormatser); ok && req.GetRecordedFormats() {
		// Unknown rather than the whole list failing: the members are
		// answered from the node's copy even when etcd does not answer.
		if fs, err := rf.RecordedFormats(ctx); err == nil {
			out.RecordedFormatsKnown = true
			for _, f := range fs {
				out.RecordedFormats = append(out.RecordedFormats, uint32(f))
			}
		}
	}
	return out, nil
}

// Partitions lists the partition table.
func (s *Server) Partitions(ctx context.Context, _ *rivetv1.PartitionsRequest) (*rivetv1.PartitionsResponse, error) {
	n, owners, err := s.backend.Partitions(ctx)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	out := &rivetv1.PartitionsResponse{PartitionCount: n, Partitions: make([]*rivetv1.PartitionOwner, len(owners)), Note: s.tablesNote()}
	for i, o := range owners {
		out.Partitions[i] = &rivetv1.PartitionOwner{Partition: o.Partition, Owner: o.Owner, Token: o.Token}
	}
	return out, nil
}

// NodeStatser is a Backend that asks the other nodes of its cluster for
// their counters.
type NodeStatser interface {
	// NodeStats returns the counters of the node of that ID, up to hot
	// of its busiest actors (Stats.Hot) and the actors whose workflow
	// retries a step that retrying asks for (Stats.Retrying).
	NodeStats(ctx context.Context, node string, hot int, retrying runtime.RetryingQuery) (runtime.Stats, error)
}

// RetryingWorkflowser is a Backend that says which of its actors in
// memory have a workflow retrying a step (runtime.Host.RetryingWorkflows).
type RetryingWorkflowser interface {
	RetryingWorkflows(q runtime.RetryingQuery) []runtime.RetryingWorkflow
}

// A Stats answer's retrying workflows are bounded in size: a thousand
// workflows each with up to a thousand steps and a 1 KiB error each went
// over the transport's bound, and the whole answer failed (RESOURCE_EXHAUSTED,
// a review's find). Each keeps its first maxRetryingSteps steps, each
// error its first maxRetryingError bytes, and the workflows fill about
// maxRetryingBytes; what is left out is counted.
const (
	maxRetryingSteps = 5
	maxRetryingError = 256
	maxRetryingBytes = 1 << 20
)

// retryingProto encodes rs within the bounds above, and counts the
// workflows left out.
func retryingProto(rs []runtime.RetryingWorkflow) (out []*rivetv1.RetryingWorkflow, omitted int) {
	size := 0
	for i, r := range rs {
		n := min(len(r.Steps), maxRetryingSteps)
		steps := make([]*rivetv1.PendingStep, n)
		for j, p := range r.Steps[:n] {
			steps[j] = &rivetv1.PendingStep{
				Path: textcut.Valid(p.Path), Attempt: uint32(p.Attempt), MaxAttempts: uint32(p.MaxAttempts),
				StartedAt: timeProto(p.StartedAt), LastError: textcut.Valid(textcut.Prefix(p.LastError, maxRetryingError)),
				NextAttemptAt: timeProto(p.NextAttemptAt),
			}
		}
		w := &rivetv1.RetryingWorkflow{
			Name: r.Ref.Name, Key: r.Ref.Key, Partition: r.Partition, Steps: steps,
			StepsOmitted: uint32(r.StepsOmitted + len(r.Steps) - n),
		}
		if size += proto.Size(w); size > maxRetryingBytes && i > 0 {
			return out, len(rs) - i
		}
		out = append(out, w)
	}
	return out, 0
}

// HotActorser is a Backend that says which of its actors are busiest
// (runtime.Host.HotActors).
type HotActorser interface {
	HotActors(limit int) []runtime.HotActor
}

// maxHot bounds the hot actors a Stats request may ask for.
const maxHot = 1000

// Stats returns the counters of this node, or of the node it names, and
// its hottest actors if asked.
func (s *Server) Stats(ctx context.Context, req *rivetv1.StatsRequest) (*rivetv1.StatsResponse, error) {
	st := s.backend.Stats()
	hot := min(int(req.GetHot()), maxHot)
	retrying := runtime.RetryingQuery{
		Limit: min(int(req.GetRetrying()), maxHot), Name: req.GetRetryingName(), ErrorContains: req.GetRetryingErrorContains(),
		MaxSteps: maxRetryingSteps,
	}
	if node := req.GetNodeId(); node != "" && node != st.NodeID {
		ns, ok := s.backend.(NodeStatser)
		if !ok {
			return nil, s.toStatus(ctx, rivet.Reasonf(rivet.ErrNotFound, "node", "not_found", "no node %q: this node, %s, is alone", node, st.NodeID))
		}
		var err error
		if st, err = ns.NodeStats(ctx, node, hot, retrying); err != nil {
			return nil, s.toStatus(ctx, err)
		}
	} else {
		if ha, ok := s.backend.(HotActorser); ok && hot > 0 {
			st.Hot, st.HotCounted = ha.HotActors(hot), true
		}
		if rw, ok := s.backend.(RetryingWorkflowser); ok && retrying.Limit > 0 {
			st.Retrying, st.RetryingCounted = rw.RetryingWorkflows(retrying), true
		}
	}
	out := make([]*rivetv1.HotActor, len(st.Hot))
	for i, h := range st.Hot {
		out[i] = &rivetv1.HotActor{
			Name: h.Ref.Name, Key: h.Ref.Key, Partition: h.Partition, TurnsPerSecond: h.TurnsPerSecond,
			Turns: h.Turns, WaitedSeconds: h.Waited.Seconds(), Since: timeProto(h.Since), Waiting: uint32(h.Waiting),
		}
	}
	retryingOut, omitted := retryingProto(st.Retrying)
	return &rivetv1.StatsResponse{
		NodeId:            st.NodeID,
		ActiveActors:      st.ActiveActors,
		Calls:             st.Calls,
		Commits:           st.Commits,
		CommitBatches:     st.CommitBatches,
		PartitionsOwned:   st.PartitionsOwned,
		HotActors:         out,
		HotCounted:        st.HotCounted,
		RetryingWorkflows: retryingOut,
		RetryingCounted:   st.RetryingCounted,
		RetryingOmitted:   uint32(st.RetryingOmitted + omitted),
	}, nil
}

// Drain starts or ends a node's drain.
func (s *Server) Drain(ctx context.Context, req *rivetv1.DrainRequest) (*rivetv1.DrainResponse, error) {
	// The backend takes "" for the node it runs on; from a client it is a
	// field left out, and would drain whichever node answered (any one of
	// several endpoints), with "" for its id in the reply.
	if req.GetNodeId() == "" {
		return nil, s.toStatus(ctx, rivet.Errorf(rivet.ErrInvalidArgument, "node_id is empty: name the node to drain (rivetctl members lists them)"))
	}
	n, err := s.backend.Drain(ctx, req.GetNodeId(), req.GetUndo())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.DrainResponse{NodeId: req.GetNodeId(), PartitionsOwned: n}, nil
}

// Backuper is a Backend that can stream a snapshot of the etcd it stores
// everything in.
type Backuper interface {
	// Backup starts a snapshot of etcd (Maintenance.Snapshot): the
	// database's size as etcd reported it, the member it comes from, and
	// the file's bytes, which the caller closes.
	Backup(ctx context.Context) (size int64, member string, r io.ReadCloser, err error)
}

// backupChunk is the most file bytes one BackupResponse carries.
const backupChunk = 1 << 20

// Backup streams a snapshot of etcd: a first message with its size and
// member, then the file's bytes.
func (s *Server) Backup(_ *rivetv1.BackupRequest, stream grpc.ServerStreamingServer[rivetv1.BackupResponse]) error {
	ctx := stream.Context()
	b, ok := s.backend.(Backuper)
	if !ok {
		return s.toStatus(ctx, rivet.Errorf(rivet.ErrFailedPrecondition, "this node cannot back up its storage"))
	}
	// Counted as a stream, which the node's stop ends (Shutdown) rather
	// than wait for: a backup takes as long as its file does (one held a
	// node's stop for its whole timeout).
	s.streams.Add(1)
	defer s.streams.Add(-1)
	select {
	case <-s.stopping:
		return s.toStatus(ctx, rivet.Errorf(rivet.ErrUnavailable, "this node is stopping: back up through another"))
	default:
	}
	size, member, r, err := b.Backup(ctx)
	if err != nil {
		return s.toStatus(ctx, err)
	}
	defer r.Close()
	if err := stream.Send(&rivetv1.BackupResponse{Size: size, Member: member}); err != nil {
		return err
	}
	buf := make([]byte, backupChunk)
	for {
		select {
		case <-s.stopping:
			return s.toStatus(ctx, rivet.Errorf(rivet.ErrUnavailable, "this node is stopping: the backup is cut short (no file was made of it); back up again, through another node"))
		default:
		}
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if err := stream.Send(&rivetv1.BackupResponse{Data: buf[:n]}); err != nil {
				return err
			}
		}
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return nil
		case err != nil && ctx.Err() != nil:
			return s.toStatus(ctx, ctx.Err())
		case err != nil:
			// The stream ends in an error, never in a short file a
			// client would take for the whole snapshot.
			return s.toStatus(ctx, rivet.Errorf(rivet.ErrUnavailable, "backup from etcd member %s: %v", member, err))
		}
	}
}

// LogLevel is a node's log level, as LogLeveler reads or sets it.
type LogLevel struct {
	NodeID string
	// Level is the level now; Previous, after a set, the level before it.
	Level, Previous string
	// RevertLevel and RevertAt are a pending revert's: the level the node
	// sets by itself at RevertAt. Zero if none is pending.
	RevertLevel string
	RevertAt    time.Time
}

// LogLeveler is a Backend whose log level an operator may read and change
// while it runs.
type LogLeveler interface {
	// LogLevel reads the log level of the node of that ID ("" for this
	// one), or, with level, sets it (for revertAfter, if not 0), asking
	// the node named if it is another. An unknown level is
	// rivet.ErrInvalidArgument; a node whose level cannot change,
	// rivet.ErrFailedPrecondition.
	LogLevel(ctx context.Context, node, level string, revertAfter time.Duration) (LogLevel, error)
}

// LogLevel reads or sets a node's log level.
func (s *Server) LogLevel(ctx context.Context, req *rivetv1.LogLevelRequest) (*rivetv1.LogLevelResponse, error) {
	ll, ok := s.backend.(LogLeveler)
	if !ok {
		return nil, s.toStatus(ctx, rivet.Errorf(rivet.ErrFailedPrecondition, "this node's log level cannot change while it runs"))
	}
	var after time.Duration
	if d := req.GetRevertAfter(); d != nil {
		if err := d.CheckValid(); err != nil {
			return nil, s.toStatus(ctx, rivet.Errorf(rivet.ErrInvalidArgument, "revert_after: %v", err))
		}
		if after = d.AsDuration(); after <= 0 {
			return nil, s.toStatus(ctx, rivet.Errorf(rivet.ErrInvalidArgument, "revert_after %v: want a positive duration", after))
		}
	}
	st, err := ll.LogLevel(ctx, req.GetNodeId(), req.GetLevel(), after)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &rivetv1.LogLevelResponse{
		NodeId: st.NodeID, Level: st.Level, PreviousLevel: st.Previous,
		RevertAt: timeProto(st.RevertAt), RevertLevel: st.RevertLevel,
	}, nil
}

// WaitingWorkflowser is a Backend that lists the sleeping or waiting
// workflows of the partitions a node serves (runtime.Host.WaitingWorkflows).
type WaitingWorkflowser interface {
	// WaitingWorkflows lists those of the node of that ID ("" for this
	// one), asking it if it is another, and returns the ID of the node
	// that listed them and the cluster's partition count.
	WaitingWorkflows(ctx context.Context, node string, q runtime.WaitQuery) (nodeID string, l runtime.WaitList, partitions uint32, err error)
}

// A WaitingWorkflows answer holds at most maxWaiting workflows, as List's
// pages do, and about maxWaitingBytes of them: a thousand long keys and
// queue lists would pass gRPC's 4 MiB, on this hop and on a forwarding
// node's. What is left out is counted.
const (
	maxWaiting      = 1000
	maxWaitingBytes = 1 << 20
)

// WaitingWorkflows lists a node's sleeping or waiting workflows.
func (s *Server) WaitingWorkflows(ctx context.Context, req *rivetv1.WaitingWorkflowsRequest) (*rivetv1.WaitingWorkflowsResponse, error) {
	ww, ok := s.backend.(WaitingWorkflowser)
	if !ok {
		return nil, s.toStatus(ctx, rivet.Reasonf(rivet.ErrFailedPrecondition, "node", "unsupported", "this node does not list sleeping or waiting workflows"))
	}
	q := runtime.WaitQuery{Waiting: req.GetWaiting(), Name: req.GetName(), Limit: int(req.GetLimit())}
	if q.Limit == 0 || q.Limit > maxWaiting {
		q.Limit = maxWaiting
	}
	if d := req.GetDueBefore(); d != nil {
		if err := d.CheckValid(); err != nil {
			return nil, s.toStatus(ctx, rivet.Errorf(rivet.ErrInvalidArgument, "due_before: %v", err))
		}
		if q.Waiting {
			return nil, s.toStatus(ctx, rivet.Errorf(rivet.ErrInvalidArgument, "due_before with waiting: a waiting workflow has no time to be due at"))
		}
		q.DueBefore = d.AsTime()
	}
	node, l, count, err := ww.WaitingWorkflows(ctx, req.GetNodeId(), q)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	ws, omitted := waitingProto(l.Workflows)
	return &rivetv1.WaitingWorkflowsResponse{
		NodeId: node, Workflows: ws, Omitted: uint32(l.Omitted + omitted), Partitions: l.Partitions, PartitionCount: count,
	}, nil
}

// waitingProto encodes ws up to about maxWaitingBytes (the first one
// whatever its size), and counts those left out.
func waitingProto(ws []runtime.WaitingWorkflow) (out []*rivetv1.WaitingWorkflow, omitted int) {
	size := 0
	for i, w := range ws {
		p := &rivetv1.WaitingWorkflow{
			Name: w.Ref.Name, Key: w.Ref.Key, Partition: w.Partition, WakeAt: timeProto(w.WakeAt),
			Reason: w.Reason, Queues: w.Queues, AnyQueue: w.AnyQueue, InMemory: w.InMemory,
		}
		if size += proto.Size(p); size > maxWaitingBytes && i > 0 {
			return out, len(ws) - i
		}
		out = append(out, p)
	}
	return out, 0
}
