package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/tap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/auth"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// openMethods are the methods a node serves without the token: the gRPC
// health service's Check and List, as container health checks and load
// balancers probe it without credentials, and it tells them only whether
// the node serves. Not its Watch: a stream open for as long as its caller
// keeps it, each a goroutine and a stream's state on the node (about 15
// KiB), which anyone could otherwise open by the hundred thousand over a
// few connections (50,000 took 760 MB in 8 s). gRPC's client-side health
// checking, which watches, sends the connection's token like any stream.
var openMethods = map[string]bool{
	grpc_health_v1.Health_Check_FullMethodName: true,
	grpc_health_v1.Health_List_FullMethodName:  true,
}

// AuthServerOptions returns the options that make a server require token:
// AuthTapHandle, which refuses a call before its request is read, and the
// interceptors, the same check for a server that gRPC does not tap (one
// served through ServeHTTP). The tap handle also bounds the time a call's
// request may take to arrive (requestReadTimeout; disarmed by the
// interceptors of ServerOptions, which a server must have too), and as a
// server has only one tap handle, that bound is all the options hold for
// an empty token: install them with or without one. opts set the bound
// and what sees the calls it drops.
func AuthServerOptions(token string, opts ...AuthOption) []grpc.ServerOption {
	if token == "" {
		return []grpc.ServerOption{grpc.InTapHandle(readDeadlineTap(newAuthOptions(opts)))}
	}
	return []grpc.ServerOption{
		grpc.InTapHandle(AuthTapHandle(token, opts...)),
		grpc.ChainUnaryInterceptor(AuthUnaryInterceptor(token)),
		grpc.ChainStreamInterceptor(AuthStreamInterceptor(token)),
	}
}

// AuthTapHandle refuses, as AuthUnaryInterceptor does, a call without
// token, but from its headers, before gRPC reads its request: an
// interceptor runs only once the whole request is read and decompressed,
// so a caller without the token could make the node take in up to the
// transport's bound (twice the largest limit plus 1 MiB) per call. The
// refused stream is reset, so the caller sends no more of it than the
// stream's flow-control window. An empty token lets every call through.
// A call let through has its request read within requestReadTimeout (see
// there), or opts' RequestReadTimeout, and a call dropped for it is told
// to opts' OnRequestReadTimeout. Only one tap handle can be installed on
// a grpc.Server.
func AuthTapHandle(token string, opts ...AuthOption) tap.ServerInHandle {
	o := newAuthOptions(opts)
	sw := newSweeper(o.readTimeout, o.onReadTimeout)
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if err := authenticateMD(info.Header, token, info.FullMethodName); err != nil {
			return ctx, err
		}
		return sw.withReadDeadline(ctx), nil
	}
}

// AuthUnaryInterceptor refuses, with UNAUTHENTICATED, every unary call
// that does not carry token as "authorization: Bearer <token>" metadata,
// except the health service's Check and List (openMethods). An empty
// token lets every call through. Chain it before ForwardingInterceptor,
// so that nothing is forwarded for a caller that was not authenticated
// here.
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
	md, _ := metadata.FromIncomingContext(ctx)
	return authenticateMD(md, token, method)
}

func authenticateMD(md metadata.MD, token, method string) error {
	if token == "" || openMethods[method] {
		return nil
	}
	if err := auth.Check(md, token); err != nil {
		st, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnauthenticated, "%v", err))
		return st.Err()
	}
	return nil
}
