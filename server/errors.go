package server

import (
	"context"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/internal/rpcerr"
)

// wireError is the error every handler returns: the status the client gets,
// plus whether the real error was masked (and so already logged here).
// grpc finds the status through GRPCStatus.
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
	return &wireError{st: st, masked: masked}
}
