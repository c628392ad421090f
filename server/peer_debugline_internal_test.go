package server

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
)

// The owner keeps a forwarded request for its debug line's actor and key
// only when debug is on: with it off, answering one allocates nothing
// for that line. The variable the decoder's wrapper assigned moved to the
// heap on every call, debug or not, against the promise that a forwarded
// call's allocations are unchanged (docs/deploy.md, "Tracing": cost).
func TestAnsweringAForwardedRequestKeepsItOnlyForADebugLine(t *testing.T) {
	ctx := context.Background()
	req := &rivetv1.ForwardRequest{Method: rivetv1.ActorService_Call_FullMethodName}
	resp := &rivetv1.CallResponse{}
	var failed any
	h := func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		return resp, dec(nil)
	}
	dec := func(any) error { return nil }
	out := &rivetv1.ForwardResponse{Response: make([]byte, 0, 64)}
	answer := func(p *PeerServer) func() {
		return func() {
			out.Response = out.Response[:0]
			if err := p.answer(ctx, req, h, dec, out); err != nil {
				failed = err
			}
		}
	}
	if allocs := testing.AllocsPerRun(100, answer(&PeerServer{log: zap.NewNop()})); allocs != 0 {
		t.Errorf("answering a forwarded request with debug off: %v allocations, want 0", allocs)
	}
	if failed != nil {
		t.Fatal(failed)
	}
}
