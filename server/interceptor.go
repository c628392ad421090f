package server

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// UnaryInterceptor logs every unary call: at debug level normally, at error
// level when it ends INTERNAL, because that is a bug or an unexpected
// failure someone should look at. A masked internal error was already logged
// with its cause where it was masked, as was one marked rpcerr.Logged (an
// action's own error, by the runtime), and one a forwarded request's owner
// answered with was logged there (PeerServer logs the requests it serves
// as this does), so neither is logged twice at error level.
func UnaryInterceptor(log *zap.Logger) grpc.UnaryServerInterceptor {
	if log == nil {
		log = zap.NewNop()
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		logCall(log, info.FullMethod, req, false, start, err)
		return resp, err
	}
}

// logCall logs a call of method with request req (nil if unknown) that
// began at start and ended with err, as UnaryInterceptor says. A request
// about one actor adds its `actor` and `key` (and a call its `action`), as
// every line about one actor has them: an operator who turned debug on to
// follow one key greps the log for it. forwarded marks the owner's line of
// a request another node forwarded (which logged it too), so that
// counting lines does not count such a call twice.
func logCall(log *zap.Logger, method string, req any, forwarded bool, start time.Time, err error) {
	code := status.Code(err)
	level := zapcore.DebugLevel
	if code == codes.Internal && !loggedElsewhere(err) {
		level = zapcore.ErrorLevel
	}
	if ce := log.Check(level, "grpc call"); ce != nil {
		fields := []zap.Field{
			zap.String("method", method),
			zap.String("code", rpcerr.CodeName(code)),
			zap.Duration("duration", time.Since(start)),
		}
		if ar, ok := req.(actorRequest); ok && ar.GetActor() != nil {
			fields = append(fields, zap.String("actor", ar.GetActor().GetName()), zap.Strings("key", ar.GetActor().GetKey()))
		}
		if cr, ok := req.(*rivetv1.CallRequest); ok {
			fields = append(fields, zap.String("action", cr.GetAction()))
		}
		if forwarded {
			fields = append(fields, zap.Bool("forwarded", true))
		}
		if err != nil {
			fields = append(fields, zap.String("error", status.Convert(err).Message()))
		}
		ce.Write(fields...)
	}
}

// loggedElsewhere reports whether err, an INTERNAL error, was logged with
// its cause where it was made or masked, or on the node that answered a
// forwarded request. Apart from logCall because its targets escape to the
// heap: declared there, they cost every call two allocations.
func loggedElsewhere(err error) bool {
	var we *wireError
	var fe forwardedError
	return errors.As(err, &we) && we.masked || errors.As(err, &fe)
}
