package server

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/textcut"
	"github.com/rivet-go/rivet/runtime"
)

func refProto(r runtime.Ref) *rivetv1.ActorRef {
	return &rivetv1.ActorRef{Name: r.Name, Key: r.Key}
}

// infoProto, inspectionProto and History pass the text an actor's code
// made (an error's, a workflow entry's name) through textcut.Valid: it
// may hold bytes that are not UTF-8, which storage gives back as U+FFFD
// (JSON) but the owner's memory holds as they are, and a proto string
// must be UTF-8, or the whole response fails to marshal.
func infoProto(i runtime.ActorInfo) *rivetv1.ActorInfo {
	return &rivetv1.ActorInfo{
		Actor:     refProto(i.Ref),
		CreatedAt: timeProto(i.CreatedAt),
		Partition: i.Partition,
		Owner:     i.Owner,

		WorkflowError:    textcut.Valid(i.WorkflowError),
		WorkflowFailedAt: timeProto(i.WorkflowFailedAt),
	}
}

// timeProto leaves an unknown time unset rather than sending year 1.
func timeProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func inspectionProto(in runtime.Inspection) *rivetv1.InspectResponse {
	qs := make([]*rivetv1.QueueDepth, len(in.Queues))
	for i, q := range in.Queues {
		qs[i] = &rivetv1.QueueDepth{Queue: q.Queue, Depth: q.Depth}
	}
	scs := make([]*rivetv1.ScheduledCall, len(in.Schedules))
	for i, c := range in.Schedules {
		scs[i] = &rivetv1.ScheduledCall{Id: c.ID, Action: c.Action, Args: c.Args, At: timeProto(c.At), CreatedAt: timeProto(c.CreatedAt), Name: c.Name, Cron: c.Cron, LastError: textcut.Valid(c.LastError)}
		if !c.LastRun.IsZero() {
			scs[i].LastRun = timeProto(c.LastRun)
		}
		if c.Every > 0 {
			scs[i].Every = durationpb.New(c.Every)
		}
	}
	var pending []*rivetv1.PendingStep
	for _, p := range in.PendingSteps {
		pending = append(pending, &rivetv1.PendingStep{
			Path:          textcut.Valid(p.Path),
			Attempt:       uint32(p.Attempt),
			MaxAttempts:   uint32(p.MaxAttempts),
			StartedAt:     timeProto(p.StartedAt),
			LastError:     textcut.Valid(p.LastError),
			NextAttemptAt: timeProto(p.NextAttemptAt),
		})
	}
	return &rivetv1.InspectResponse{
		Info:                 infoProto(in.Info),
		Schedules:            scs,
		State:                in.State,
		Active:               in.Active,
		Queues:               qs,
		WorkflowStatus:       in.WorkflowStatus,
		WorkflowError:        textcut.Valid(in.WorkflowError),
		WorkflowWakeAt:       timeProto(in.WorkflowWake.At),
		WorkflowWakeQueues:   in.WorkflowWake.Queues,
		WorkflowWakeAnyQueue: in.WorkflowWake.AnyQueue,
		Unregistered:         in.Unregistered,
		Events:               in.Events,
		Subscribers:          uint32(in.Subscribers),
		PendingSteps:         pending,
		PendingStepsOmitted:  uint32(in.PendingStepsOmitted),
	}
}

func memberProto(m runtime.Member) *rivetv1.Member {
	return &rivetv1.Member{
		NodeId:          m.NodeID,
		GrpcAddr:        m.GRPCAddr,
		State:           m.State,
		PartitionsOwned: m.PartitionsOwned,
		StartedAt:       timeProto(m.StartedAt),
		GossipAddr:      m.GossipAddr,
		HttpAddr:        m.HTTPAddr,
		Draining:        m.Draining,
		Unreachable:     m.Unreachable,
		Build:           m.Build,
		ActorTypes:      m.ActorTypes,
		ActorTypesKnown: m.ActorTypesKnown,
		StorageFormat:   uint32(max(m.StorageFormat, 0)),
	}
}
