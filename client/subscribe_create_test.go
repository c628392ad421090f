package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// A getOrCreate handle's Subscribe creates the actor (GetOrCreate) when the
// subscription finds none: that call's retries too stop before the
// caller's deadline, and fail with the UNAVAILABLE that stopped them, not
// an error that matches context.Canceled once the deadline cancelled them.
func TestSubscribeCreatingStopsRetryingBeforeTheDeadline(t *testing.T) {
	f := servertest.NewFake()
	f.SubscribeFunc = func(context.Context, runtime.Ref, []string) (server.EventStream, error) {
		return nil, rivet.Errorf(rivet.ErrNotFound, "no such actor")
	}
	moving, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnavailable, "partition 3 is moving"))
	refuse := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if strings.HasSuffix(info.FullMethod, "/GetOrCreate") {
			return nil, moving.Err() // the node's own answer: retried
		}
		return h(ctx, req)
	})
	c := newClient(t, servertest.Start(t, f, servertest.Config{GRPCOptions: []grpc.ServerOption{refuse}}))
	sctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Actor("counter", "main").Subscribe(sctx)
	took := time.Since(start)
	if !errors.Is(err, rivet.ErrUnavailable) || errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe: %v; want the UNAVAILABLE that stopped its retries, not context.Canceled", err)
	}
	if took >= 700*time.Millisecond {
		t.Errorf("Subscribe took %s: it waited out its deadline", took)
	}
}
