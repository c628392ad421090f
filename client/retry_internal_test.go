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
	"github.com/rivet-go/rivet/internal/rpcerr"
)

// A call whose deadline ends an attempt after one that could not reach the
// node is still a deadline (the last attempt may have run), and keeps why
// the earlier one failed (EarlierFailure), which rivetctl turns into a
// hint: the node is down, or wants TLS. A node's own UNAVAILABLE (it was
// reached) is no such reason.
func TestADeadlineAfterAnUnreachedAttemptKeepsItsReason(t *testing.T) {
	policy := retryPolicy{initial: time.Millisecond, budget: time.Minute}
	for _, c := range []struct {
		name   string
		class  retryClass
		first  error
		reason string // EarlierFailure's message; "": none
	}{
		{"transport", idempotent, status.Error(codes.Unavailable, "error reading server preface: EOF"), "error reading server preface: EOF"},
		{"node", sideEffects, nodeUnavailable(t), ""},
	} {
		attempts := 0
		rpc := func(ctx context.Context, _ struct{}, _ ...grpc.CallOption) (struct{}, error) {
			attempts++
			if attempts == 1 {
				return struct{}{}, c.first
			}
			<-ctx.Done()
			return struct{}{}, status.Error(codes.DeadlineExceeded, "context deadline exceeded")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := invokeWith(ctx, policy, c.class, rpc, struct{}{})
		cancel()
		if !errors.Is(err, rivet.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, rivet.ErrUnavailable) {
			t.Fatalf("%s: after %d attempts: %v; want a deadline, not UNAVAILABLE", c.name, attempts, err)
		}
		before := EarlierFailure(err)
		switch {
		case c.reason == "" && before != nil:
			t.Fatalf("%s: EarlierFailure = %v, want none (the node was reached)", c.name, before)
		case c.reason != "" && (before == nil || !errors.Is(before, rivet.ErrUnavailable) || before.(*rivet.Error).Message != c.reason):
			t.Fatalf("%s: EarlierFailure = %v, want UNAVAILABLE %q", c.name, before, c.reason)
		}
	}
	// The deadline alone, with no failure before it.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := invokeWith(ctx, policy, idempotent, func(ctx context.Context, _ struct{}, _ ...grpc.CallOption) (struct{}, error) {
		<-ctx.Done()
		return struct{}{}, status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	}, struct{}{})
	if !errors.Is(err, context.DeadlineExceeded) || EarlierFailure(err) != nil {
		t.Fatalf("deadline alone: %v (earlier %v)", err, EarlierFailure(err))
	}
}

func nodeUnavailable(t *testing.T) error {
	st, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnavailable, "partition 3 is moving"))
	if len(st.Details()) == 0 {
		t.Fatal("a node's UNAVAILABLE carries no detail")
	}
	return st.Err()
}
