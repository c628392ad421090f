package server

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/auth"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// healthPrefix starts the methods of the gRPC health service, which stays
// open: container health checks and load balancers probe it without
// credentials, and it tells them only whether the node serves.
var healthPrefix = "/" + grpc_health_v1.Health_ServiceDesc.ServiceName + "/"

// AuthUnaryInterceptor refuses, with UNAUTHENTICATED, every unary call
// that does not carry token as "authorization: Bearer <token>" metadata,
// except the health service's. An empty token lets every call through.
// Chain it before ForwardingInterceptor, so that nothing is forwarded for
// a caller that was not authenticated here.
func AuthUnaryInterceptor(token string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := authenticate(ctx, token, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// AuthStreamInterceptor is AuthUnaryInterceptor for streams, checked when
// the stream opens: PeerService streams (one authenticated stream carries
// many forwarded requests, which is why a node forwarding to a peer must
// send the token too) and reflection.
func AuthStreamInterceptor(token string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := authenticate(ss.Context(), token, info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func authenticate(ctx context.Context, token, method string) error {
	if token == "" || strings.HasPrefix(method, healthPrefix) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if err := auth.Check(md, token); err != nil {
		st, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnauthenticated, "%v", err))
		return st.Err()
	}
	return nil
}
