package server

import (
	"context"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/internal/rpcerr"
)

// wireError is the error every handler returns: the status the client gets,
// plus whether the real error was logged already, with its cause: masked
// here, or marked rpcerr.Logged where it was made. grpc finds the status
// through GRPCStatus.
type wireError struct {
	st     *status.Status
	masked bool
}

func (e *wireError) Error() string              { return e.st.Err().Error() }
func (e *wireError) GRPCStatus() *status.Status { return e.st }

// toStatus is where the server turns an error into what the client sees.
// Every error a handler returns goes through it, so that every status has
// the right code and an ActorError detail (the table is in rpcerr). An error
// that is not a rivet error is masked as "internal error" (its text may name
// files, addresses or keys of other actors) and logged here in full, as the
// only place that still has it.
func (s *Server) toStatus(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	st, masked := rpcerr.ToStatus(err)
	if masked {
		method, _ := grpc.Method(ctx)
		s.log.Error("internal error (masked for the client)", zap.String("method", method), zap.Error(err))
	}
	return &wireError{st: st, masked: masked || rpcerr.IsLogged(err)}
}

// boundErrors and boundStreamErrors bound the status of every error a call
// ends with (rpcerr.Bound), whichever part of the node made it: handlers
// build theirs with rpcerr.ToStatus, which bounds it already, but a status
// passed on from another node, or gRPC's own for an error that is no
// status, may be any size, and one over a client's header-list bound
// reaches it as a bare RST_STREAM. ServerOptions installs them first, so
// that they see what the client would (a node puts only its logging and its
// token check before them, whose statuses are small). They also refuse the
// requests the node's codec could not decode (decode.go), before anything
// else sees them but the token check: here, rather than in interceptors of their own, which would cost
// an allocation per call.
func boundErrors(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := undecodable(req); err != nil {
		return nil, err
	}
	resp, err := handler(ctx, req)
	return resp, boundError(err)
}

func boundStreamErrors(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return boundError(handler(srv, decodeStream{ss}))
}

func boundError(err error) error {
	if err == nil {
		return nil
	}
	st := status.Convert(err)
	if b := rpcerr.Bound(st); b != st {
		return b.Err()
	}
	return err
}
