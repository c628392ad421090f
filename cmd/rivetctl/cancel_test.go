package main

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// cancelOnce is a node whose workflow and scheduled call x can each be
// cancelled once.
type cancelOnce struct {
	*servertest.Fake
	wfCancelled atomic.Bool
}

func (c *cancelOnce) CancelWorkflow(context.Context, runtime.Ref, string) (string, error) {
	if c.wfCancelled.Swap(true) {
		return "cancelled", nil
	}
	return "running", nil
}

// A cancel whose answer a broken connection lost, retried by the client,
// reports the cancel it made, not "already cancelled" or "no pending
// call"; a cancel of what was cancelled before still says so.
func TestARetriedCancelReportsItsOwnCancel(t *testing.T) {
	var breakNext atomic.Bool
	broken := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if breakNext.Swap(false) {
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return resp, err
	})
	b := &cancelOnce{Fake: servertest.NewFake()}
	var callCancelled atomic.Bool
	b.CancelScheduledCallFunc = func(_ runtime.Ref, id string) (bool, error) {
		return id == "x" && !callCancelled.Swap(true), nil
	}
	addr := servertest.Start(t, b, servertest.Config{GRPCOptions: []grpc.ServerOption{broken}})

	breakNext.Store(true)
	rivetctl(t, addr, "workflow", "cancel", "charger", "main").
		want(t, 0, "workflow cancelled (its status before is not known: the connection broke after the cancel was sent, and the retry found it cancelled)\n")
	rivetctl(t, addr, "workflow", "cancel", "charger", "main").want(t, 0, "workflow already cancelled\n")

	breakNext.Store(true)
	rivetctl(t, addr, "schedule", "cancel", "charger", "main", "x").want(t, 0, "cancelled x\n")
	rivetctl(t, addr, "schedule", "cancel", "charger", "main", "x").want(t, 0, "no pending call x (it ran, or was cancelled)\n")
}
