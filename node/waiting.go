package node

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
)

// WaitingWorkflows lists the sleeping or waiting workflows of the
// partitions node serves: this one's, or another's that it asks through
// its AdminService.
func (b backend) WaitingWorkflows(ctx context.Context, node string, q runtime.WaitQuery) (string, runtime.WaitList, uint32, error) {
	if node == "" || node == b.n.cfg.NodeID {
		l, err := b.Host.WaitingWorkflows(ctx, q)
		return b.n.cfg.NodeID, l, b.n.cfg.Partitions, err
	}
	peer, hctx, rec, err := b.adminPeer(ctx, node, "it serves no partitions")
	if err != nil {
		return "", runtime.WaitList{}, 0, err
	}
	req := &rivetv1.WaitingWorkflowsRequest{NodeId: node, Waiting: q.Waiting, Name: q.Name, Limit: uint32(max(q.Limit, 0))}
	if !q.DueBefore.IsZero() {
		req.DueBefore = timestamppb.New(q.DueBefore)
	}
	resp, err := peer.WaitingWorkflows(hctx, req)
	if status.Code(err) == codes.Unimplemented {
		build := "an older build"
		if rec.Build != "" {
			build = "it runs " + rec.Build
		}
		return "", runtime.WaitList{}, 0, rivet.Reasonf(rivet.ErrFailedPrecondition, "node", "unsupported", "node %s does not list sleeping or waiting workflows (%s); upgrade it", node, build)
	}
	if err != nil {
		return "", runtime.WaitList{}, 0, adminPeerError(err, "ask node %s at %s for its sleeping or waiting workflows", node, rec.GRPCAddr)
	}
	if resp.GetNodeId() != node {
		return "", runtime.WaitList{}, 0, rivet.Errorf(rivet.ErrFailedPrecondition, "node %s's registered address %s answered as node %q", node, rec.GRPCAddr, resp.GetNodeId())
	}
	l := runtime.WaitList{Omitted: int(resp.GetOmitted()), Partitions: resp.GetPartitions()}
	for _, w := range resp.GetWorkflows() {
		ww := runtime.WaitingWorkflow{
			Ref: runtime.Ref{Name: w.GetName(), Key: w.GetKey()}, Partition: w.GetPartition(),
			Reason: w.GetReason(), Queues: w.GetQueues(), AnyQueue: w.GetAnyQueue(), InMemory: w.GetInMemory(),
		}
		if w.GetWakeAt() != nil {
			ww.WakeAt = w.GetWakeAt().AsTime()
		}
		l.Workflows = append(l.Workflows, ww)
	}
	return resp.GetNodeId(), l, resp.GetPartitionCount(), nil
}
