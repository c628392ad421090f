package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
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
	// The first retry's wait (1 to 2 s) would end past the 700 ms
	// deadline: the client must give up after the first refused attempt,
	// long before the deadline. (With the default policy a wait could end
	// a hair before the deadline, and the attempt after it end just past
	// it: the test failed about 1 run in 150 under -race.)
	c := newClient(t, servertest.Start(t, f, servertest.Config{GRPCOptions: []grpc.ServerOption{refuse}}), client.WithRetry(2*time.Second, 10*time.Second))
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

// A subscription the node does not answer within the caller's deadline
// (an actor slow to load) fails as a call does then: with the deadline,
// not an error that matches context.Canceled (the cancel that ended the
// stream, which must outlive the deadline once subscribed).
func TestSubscribeUnansweredFailsWithTheDeadline(t *testing.T) {
	f := servertest.NewFake()
	f.SubscribeFunc = func(ctx context.Context, _ runtime.Ref, _ []string) (server.EventStream, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	f.CallFunc = func(ctx context.Context, _ runtime.CallRequest) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := newClient(t, servertest.Start(t, f, servertest.Config{}))
	cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, callErr := c.Actor("counter", "main").NoCreate().Call(cctx, "increment")
	sctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.Actor("counter", "main").NoCreate().Subscribe(sctx)
	if !errors.Is(callErr, context.DeadlineExceeded) || errors.Is(callErr, context.Canceled) {
		t.Fatalf("call: %v; want the deadline", callErr)
	}
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || !errors.Is(err, rivet.ErrTimeout) != !errors.Is(callErr, rivet.ErrTimeout) {
		t.Errorf("Subscribe: %v (canceled %v, timeout %v); want the deadline as a call's (%v), not context.Canceled",
			err, errors.Is(err, context.Canceled), errors.Is(err, rivet.ErrTimeout), callErr)
	}
}
