package server

import (
	"context"
	"errors"

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

// ChainKey is the outgoing-metadata key through which a caller hands a
// PeerConn the call chain of a cross-actor call, so that A -> B -> A
// across nodes re-enters A's turn. PeerConn sends it in the stream
// request; it never travels as gRPC metadata.
const ChainKey = "rivet-chain"

// Router says where an actor is served.
type Router interface {
	// Route returns nil if this node serves the actor's partition (or the
	// request should be tried here), else a connection to the node that
	// does.
	Route(ctx context.Context, ref runtime.Ref) (grpc.ClientConnInterface, error)
}

// ForwardObserver is what a Router may also be, to hear of each request
// it routed elsewhere that failed on the way to its owner or back, rather
// than with the owner's answer: one that counts such failures, which no
// node counts otherwise (the owner counts the calls it runs, and it ran
// none of these, or never answered). st is the failure's status, ref its
// actor.
type ForwardObserver interface {
	ForwardFailed(ref runtime.Ref, st *status.Status)
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
	rivetv1.ActorService_CheckRetryWorkflow_FullMethodName: func() proto.Message {
		return new(rivetv1.CheckRetryWorkflowResponse)
	},
	rivetv1.ActorService_CancelWorkflow_FullMethodName: func() proto.Message { return new(rivetv1.CancelWorkflowResponse) },
	rivetv1.ActorService_CancelScheduledCall_FullMethodName: func() proto.Message {
		return new(rivetv1.CancelScheduledCallResponse)
	},
}

// ForwardingInterceptor sends each actor request that another node serves
// to that node, unchanged (over a PeerConn): the reply, or the status with
// its details, passes through as it is. Requests this node serves go to
// handler. A forwarded request arrives on the owner's PeerServer, which
// serves it without routing it again, so a stale table costs a retry,
// never a loop.
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
		if !ok {
			return handler(ctx, req)
		}
		ar, ok := req.(actorRequest)
		if !ok || ar.GetActor() == nil {
			return handler(ctx, req)
		}
		ref := runtime.Ref{Name: ar.GetActor().GetName(), Key: ar.GetActor().GetKey()}
		conn, err := r.Route(ctx, ref)
		if err != nil || conn == nil {
			return handler(ctx, req)
		}
		resp := newResp()
		if err := conn.Invoke(ctx, info.FullMethod, req, resp); err != nil {
			if errors.As(err, new(tooLargeToForward)) {
				// Over the peer's bound only because of a payload over
				// its limit (the transport's bound is twice the largest
				// limit): say which, as the owner (or this node, had it
				// been the owner) would have, not that the request is
				// too large for a hop the caller knows nothing of.
				if s, ok := info.Server.(*Server); ok {
					if cerr := s.checkRequest(ctx, req); cerr != nil {
						return nil, s.toStatus(ctx, cerr)
					}
				}
				return nil, err
			}
			st, isStatus := status.FromError(err)
			if !isStatus {
				st = status.New(codes.Unavailable, err.Error())
			}
			if obs, ok := r.(ForwardObserver); ok && HopFailed(st) {
				obs.ForwardFailed(ref, st)
			}
			if !isStatus {
				return nil, st.Err()
			}
			if rpcerr.NotSent(st) {
				// The owner was never reached (it is down and its
				// partitions are about to move): say so the way a node
				// refusing a request does, so that clients retry even
				// calls with side effects.
				ust, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnavailable, "the owner of this actor is unreachable (%s); retry", st.Message()))
				return nil, ust.Err()
			}
			return nil, forwardedError{st}
		}
		return resp, nil
	}
}

// HopFailed reports whether st, the status of a request sent to another
// node, is a failure of the hop rather than that node's answer: one never
// sent (rpcerr.NotSent), or a bare UNAVAILABLE of a connection or stream
// that broke once it may have been sent (no ActorError, no mark of the
// owner's saying its outcome is unknown).
func HopFailed(st *status.Status) bool {
	return st.Code() == codes.Unavailable && !rpcerr.HasActorError(st) && !rpcerr.MarkedOutcomeUnknown(st)
}

// checkRequest returns the error req's handler would answer before it ran
// anything (a malformed or oversized field), nil if none.
func (s *Server) checkRequest(ctx context.Context, req any) error {
	var err error
	switch r := req.(type) {
	case *rivetv1.CallRequest:
		_, err = s.callRequest(ctx, r)
	case *rivetv1.SendRequest:
		_, err = s.sendRequest(ctx, r)
	case *rivetv1.CreateRequest:
		err = s.refAndInput(r.GetActor(), r.GetInput())
	case *rivetv1.GetOrCreateRequest:
		err = s.refAndInput(r.GetActor(), r.GetInput())
	}
	return err
}

func (s *Server) refAndInput(a *rivetv1.ActorRef, input []byte) error {
	if _, err := ref(a); err != nil {
		return err
	}
	_, err := s.input(input)
	return err
}

// tooLargeToForward is PeerConn's refusal of a request larger than its
// bound (LimitRequests), which it never sent.
type tooLargeToForward struct{ st *status.Status }

func (e tooLargeToForward) Error() string              { return e.st.Err().Error() }
func (e tooLargeToForward) GRPCStatus() *status.Status { return e.st }

// forwardedError is a status the owner answered a forwarded request with,
// passed on as it is: the owner logged what it had to, so this node's
// UnaryInterceptor does not log it again as an error.
type forwardedError struct{ st *status.Status }

func (e forwardedError) Error() string              { return e.st.Err().Error() }
func (e forwardedError) GRPCStatus() *status.Status { return e.st }

// peerKey marks the context of a request that arrived on a PeerService
// stream; its value is the request's call chain.
type peerKey struct{}

// WithChain returns ctx for a call over a PeerConn carrying the call
// chain of a cross-actor call ("" for none). Incoming metadata is not
// carried over. A request that arrives on a peer stream is the only kind
// whose chain (and one hop) the owner honours: client metadata cannot
// forge either, or a client could skip routing or, with a guessed chain,
// slip into another caller's turn.
func WithChain(ctx context.Context, chain string) context.Context {
	md := metadata.MD{}
	if chain != "" {
		md.Set(ChainKey, chain)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// chainOf returns the call chain of a forwarded request (zero otherwise).
func chainOf(ctx context.Context) runtime.Chain {
	chain, ok := ctx.Value(peerKey{}).(string)
	if !ok {
		return runtime.Chain{}
	}
	return runtime.Chain{ID: chain}
}
