package client

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// MaxWaiting is the most workflows one node lists for WaitingWorkflows.
const MaxWaiting = 1000

// What a sleeping workflow's WakeAt is the deadline of
// (WaitingWorkflow.Reason).
const (
	WakeSleep   = "sleep"   // a sleep's end
	WakeReceive = "receive" // a receive's timeout: a message on Queues wakes it before
	WakeRetry   = "retry"   // a step's next attempt, after a failed one
)

// WaitQuery says which of a node's sleeping or waiting workflows
// Client.WaitingWorkflows asks for.
type WaitQuery struct {
	// Waiting asks for the workflows that wait for a message with no time
	// that would wake them; false, for those that sleep (wake at a time).
	Waiting bool
	// Name keeps only the actors of that name; "" keeps all.
	Name string
	// DueBefore, if set, keeps only the sleeping workflows that wake
	// before it.
	DueBefore time.Time
	// Limit is the most returned, 1 to MaxWaiting.
	Limit int
}

// WaitingWorkflow is an actor whose workflow sleeps or waits for a
// message.
type WaitingWorkflow struct {
	Name      string   `json:"name"`
	Key       []string `json:"key"`
	Node      string   `json:"node"`
	Partition uint32   `json:"partition"`
	// WakeAt is when the workflow runs again by itself (past: overdue, it
	// runs as soon as its node gets to it); zero for a waiting one.
	WakeAt time.Time `json:"wake_at,omitzero"`
	// Reason is what WakeAt is the deadline of: WakeSleep, WakeReceive or
	// WakeRetry; "" if the workflow is to run again at once (just created,
	// stopped in the middle of a run, a message came) or its record, of an
	// older build, does not say.
	Reason string `json:"reason,omitempty"`
	// Queues are the queues a message on which wakes it, AnyQueue that any
	// message would; neither: not known.
	Queues   []string `json:"queues,omitempty"`
	AnyQueue bool     `json:"any_queue,omitempty"`
	// InMemory says the actor is in memory on its owner, whose running
	// workflow said what it waits for; otherwise its wakeup record did.
	InMemory bool `json:"in_memory"`
}

// WaitList is one node's answer to WaitingWorkflows.
type WaitList struct {
	NodeID    string
	Workflows []WaitingWorkflow
	// Omitted counts the workflows that matched after the last listed.
	Omitted int
	// Partitions are the partitions the node listed (those it serves), of
	// PartitionCount in the cluster.
	Partitions     []uint32
	PartitionCount uint32
}

// WaitingWorkflows returns up to q.Limit of the actors of the partitions
// the node of that ID serves ("" for the node the client is connected to)
// whose workflow sleeps (the earliest to wake first) or, with q.Waiting,
// waits for a message only (by name and key), whether in memory or not:
// from their wakeup records, and for actors in memory from their running
// workflows. A node from before it fails it with
// rivet.ErrFailedPrecondition (reason node.unsupported), as does an older
// node asked through another.
func (c *Client) WaitingWorkflows(ctx context.Context, node string, q WaitQuery) (WaitList, error) {
	if q.Limit < 1 || q.Limit > MaxWaiting {
		return WaitList{}, rivet.Errorf(rivet.ErrInvalidArgument, "waiting workflows: ask for 1 to %d, not %d", MaxWaiting, q.Limit)
	}
	req := &rivetv1.WaitingWorkflowsRequest{NodeId: node, Waiting: q.Waiting, Name: q.Name, Limit: uint32(q.Limit)}
	if !q.DueBefore.IsZero() {
		req.DueBefore = timestamppb.New(q.DueBefore)
	}
	resp, err := invoke(ctx, c, idempotent, func(ctx context.Context, req *rivetv1.WaitingWorkflowsRequest, opts ...grpc.CallOption) (*rivetv1.WaitingWorkflowsResponse, error) {
		var p peer.Peer
		resp, err := c.admin.WaitingWorkflows(ctx, req, append(opts, grpc.Peer(&p))...)
		if status.Code(err) == codes.Unimplemented {
			// The node connected to is older (a node it asks on the
			// caller's behalf says so itself): gRPC's "unknown method"
			// would read as a bug.
			at := "the node connected to"
			if p.Addr != nil {
				at = "the node at " + p.Addr.String()
			}
			st, _ := rpcerr.ToStatus(rivet.Reasonf(rivet.ErrFailedPrecondition, "node", "unsupported", "%s does not list sleeping or waiting workflows (its build predates this RPC); upgrade it", at))
			return nil, st.Err()
		}
		return resp, err
	}, req)
	if err != nil {
		return WaitList{}, err
	}
	l := WaitList{NodeID: resp.GetNodeId(), Omitted: int(resp.GetOmitted()), Partitions: resp.GetPartitions(), PartitionCount: resp.GetPartitionCount()}
	for _, w := range resp.GetWorkflows() {
		l.Workflows = append(l.Workflows, WaitingWorkflow{
			Name: w.GetName(), Key: w.GetKey(), Node: resp.GetNodeId(), Partition: w.GetPartition(),
			WakeAt: timeFrom(w.GetWakeAt()), Reason: w.GetReason(), Queues: w.GetQueues(), AnyQueue: w.GetAnyQueue(), InMemory: w.GetInMemory(),
		})
	}
	return l, nil
}
