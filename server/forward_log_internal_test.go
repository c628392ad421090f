package server

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
)

// failingOwner is a connection to an owner that answers every request
// with err.
type failingOwner struct{ err error }

func (o failingOwner) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	return o.err
}

func (o failingOwner) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, errors.New("no streams")
}

type routeTo struct{ conn grpc.ClientConnInterface }

func (r routeTo) Route(context.Context, runtime.Ref) (grpc.ClientConnInterface, error) {
	return r.conn, nil
}

// An INTERNAL error the owner answered a forwarded request with was logged
// by the owner, where it happened: the forwarding node passes it on and
// logs it at debug level, not as a second error. Its own INTERNAL errors
// are still errors.
func TestAnInternalErrorTheOwnerSentIsLoggedOnce(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	logCalls := UnaryInterceptor(zap.New(core))
	info := &grpc.UnaryServerInfo{FullMethod: rivetv1.ActorService_Call_FullMethodName}
	req := &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "a", Key: []string{"k"}}, Action: "x"}
	local := func(context.Context, any) (any, error) { return nil, status.Error(codes.Internal, "local failure") }

	fwd := ForwardingInterceptor(routeTo{failingOwner{status.Error(codes.Internal, "internal error")}})
	_, err := logCalls(context.Background(), req, info, func(ctx context.Context, req any) (any, error) {
		return fwd(ctx, req, info, local)
	})
	if st := status.Convert(err); st.Code() != codes.Internal || st.Message() != "internal error" {
		t.Fatalf("forwarded: %v, want the owner's INTERNAL as it sent it", err)
	}
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 0 {
		t.Errorf("the owner's INTERNAL logged %d time(s) at error level on the forwarding node, want 0", n)
	}

	_, err = logCalls(context.Background(), req, info, func(ctx context.Context, req any) (any, error) {
		return ForwardingInterceptor(routeTo{nil})(ctx, req, info, local)
	})
	if status.Code(err) != codes.Internal || logs.FilterLevelExact(zapcore.ErrorLevel).Len() != 1 {
		t.Errorf("served here: %v, %d error-level logs; want INTERNAL logged once as an error", err, logs.FilterLevelExact(zapcore.ErrorLevel).Len())
	}
}
