package server

import (
	"context"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
)

// Metadata keys of node-to-node calls.
const (
	// HopsKey counts the forwards a request went through. A node serves a
	// request with hops >= 1 itself, whatever its table says, so a stale
	// table costs a retry, never a loop.
	HopsKey = "rivet-hops"
	// ChainKey carries the call chain of a cross-actor call, so that
	// A -> B -> A across nodes re-enters A's turn. It is honoured only on
	// forwarded requests (hops >= 1): a client that could name a running
	// chain could slip into another caller's turn.
	ChainKey = "rivet-chain"
)

// Router says where an actor is served.
type Router interface {
	// Route returns nil if this node serves the actor's partition (or the
	// request should be tried here), else a connection to the node that
	// does.
	Route(ctx context.Context, ref runtime.Ref) (grpc.ClientConnInterface, error)
}

// actorRequest is every ActorService request that names one actor.
type actorRequest interface {
	proto.Message
	GetActor() *rivetv1.ActorRef
}

// forwardedResponses makes the response of each forwardable method.
var forwardedResponses = map[string]func() proto.Message{
	rivetv1.ActorService_Call_FullMethodName:          func() proto.Message { return new(rivetv1.CallResponse) },
	rivetv1.ActorService_Send_FullMethodName:          func() proto.Message { return new(rivetv1.SendResponse) },
	rivetv1.ActorService_Create_FullMethodName:        func() proto.Message { return new(rivetv1.CreateResponse) },
	rivetv1.ActorService_GetOrCreate_FullMethodName:   func() proto.Message { return new(rivetv1.GetOrCreateResponse) },
	rivetv1.ActorService_Get_FullMethodName:           func() proto.Message { return new(rivetv1.GetResponse) },
	rivetv1.ActorService_Destroy_FullMethodName:       func() proto.Message { return new(rivetv1.DestroyResponse) },
	rivetv1.ActorService_Inspect_FullMethodName:       func() proto.Message { return new(rivetv1.InspectResponse) },
	rivetv1.ActorService_History_FullMethodName:       func() proto.Message { return new(rivetv1.HistoryResponse) },
	rivetv1.ActorService_RetryWorkflow_FullMethodName: func() proto.Message { return new(rivetv1.RetryWorkflowResponse) },
}

// ForwardingInterceptor sends each actor request that another node serves
// to that node, unchanged, with HopsKey set: the request bytes and the
// reply (or status, with its details) pass through as they are. Requests
// this node serves, and requests already forwarded once, go to handler.
// A request whose actor ref is malformed is served locally, which refuses
// it with the usual error.
//
// Forwarding failures keep their meaning for the client's retries: a
// status the owner sent passes through; a broken connection to the owner
// is UNAVAILABLE without an ActorError, which the Go client retries only
// for requests without side effects (the owner may have run it).
func ForwardingInterceptor(r Router) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		newResp, ok := forwardedResponses[info.FullMethod]
		if !ok || Hops(ctx) > 0 {
			return handler(ctx, req)
		}
		ar, ok := req.(actorRequest)
		if !ok || ar.GetActor() == nil {
			return handler(ctx, req)
		}
		conn, err := r.Route(ctx, runtime.Ref{Name: ar.GetActor().GetName(), Key: ar.GetActor().GetKey()})
		if err != nil || conn == nil {
			return handler(ctx, req)
		}
		resp := newResp()
		if err := conn.Invoke(OutgoingHop(ctx, ""), info.FullMethod, req, resp); err != nil {
			st, ok := status.FromError(err)
			if !ok {
				return nil, status.Error(codes.Unavailable, err.Error())
			}
			if st.Code() == codes.Unavailable && notSent(st) {
				// The owner was never reached (it is down and its
				// partitions are about to move): say so the way a node
				// refusing a request does, so that clients retry even
				// calls with side effects.
				ust, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnavailable, "the owner of this actor is unreachable (%s); retry", st.Message()))
				return nil, ust.Err()
			}
			return nil, err
		}
		return resp, nil
	}
}

// notSent reports whether a failed call never reached its server: gRPC
// failed to dial (it sends nothing on a connection it has not made).
func notSent(st *status.Status) bool {
	m := st.Message()
	return strings.Contains(m, notSentMark) || strings.Contains(m, "Error while dialing") || strings.Contains(m, "connection refused")
}

// Hops returns the forward count of an incoming request.
func Hops(ctx context.Context) int {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(HopsKey); len(v) > 0 {
		n, _ := strconv.Atoi(v[0])
		return n
	}
	return 0
}

// OutgoingHop returns ctx for a node-to-node call: one hop, and the call
// chain if there is one. Incoming metadata is not carried over.
func OutgoingHop(ctx context.Context, chain string) context.Context {
	kv := []string{HopsKey, "1"}
	if chain != "" {
		kv = append(kv, ChainKey, chain)
	}
	return metadata.NewOutgoingContext(ctx, metadata.Pairs(kv...))
}

// chainOf returns the call chain of a forwarded request ("" otherwise).
func chainOf(ctx context.Context) runtime.Chain {
	if Hops(ctx) == 0 {
		return runtime.Chain{}
	}
	md, _ := metadata.FromIncomingContext(ctx)
	c := runtime.Chain{Hops: uint32(Hops(ctx))}
	if v := md.Get(ChainKey); len(v) > 0 {
		c.ID = v[0]
	}
	return c
}
