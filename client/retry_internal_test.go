package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
)

// A read whose deadline ends an attempt after an earlier attempt failed
// says why that one failed (UNAVAILABLE, in the transport's words), not
// only that the deadline passed: rivetctl turns it into a hint (the node
// is down, or wants TLS). The second attempt here waits, as one does for a
// connection that never answers, until the deadline.
func TestADeadlineAfterAFailedAttemptKeepsItsReason(t *testing.T) {
	attempts := 0
	rpc := func(ctx context.Context, _ struct{}, _ ...grpc.CallOption) (struct{}, error) {
		attempts++
		if attempts == 1 {
			return struct{}{}, status.Error(codes.Unavailable, "error reading server preface: EOF")
		}
		<-ctx.Done()
		return struct{}{}, status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := invokeWith(ctx, retryPolicy{initial: time.Millisecond, budget: time.Minute}, idempotent, rpc, struct{}{})
	var e *rivet.Error
	if !errors.As(err, &e) || !errors.Is(err, rivet.ErrUnavailable) || e.Message != "error reading server preface: EOF" || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after %d attempts: %v; want the first attempt's UNAVAILABLE, also matching the deadline", attempts, err)
	}
	// The deadline alone, with no failure before it, stays the deadline.
	attempts = 1
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := invokeWith(ctx2, retryPolicy{initial: time.Millisecond, budget: time.Minute}, idempotent, rpc, struct{}{}); errors.Is(err, rivet.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline alone: %v", err)
	}
}
