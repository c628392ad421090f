package client_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
)

// badAnswer is a node whose History answer does not encode: a workflow's
// error text that is not UTF-8 (a step's error made of raw bytes).
type badAnswer struct {
	rivetv1.UnimplementedActorServiceServer
}

func (badAnswer) History(context.Context, *rivetv1.HistoryRequest) (*rivetv1.HistoryResponse, error) {
	return &rivetv1.HistoryResponse{WorkflowError: "\xff"}, nil
}

// A node's answer that gRPC could not encode is the node's failure
// (INTERNAL), not a request of the caller's that did not encode.
func TestAnAnswerThatDoesNotEncodeIsNotTheCallersFault(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rivetv1.RegisterActorServiceServer(srv, badAnswer{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(l) })
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	c := newClient(t, l.Addr().String())
	_, err = c.Actor("counter", "k").History(ctx(t))
	if err == nil || errors.Is(err, rivet.ErrInvalidArgument) || !errors.Is(err, rivet.ErrInternal) {
		t.Errorf("history a node could not encode: %v, want INTERNAL, not INVALID_ARGUMENT", err)
	}
}
