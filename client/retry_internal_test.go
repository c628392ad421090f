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

func nodeStopping(t *testing.T) error {
	st, _ := rpcerr.ToStatus(rivet.Reasonf(rivet.ErrUnavailable, "node", "stopping", "node n1 is stopping"))
	if !rpcerr.RefusedStopping(st) {
		t.Fatal("a stopping node's refusal does not say so")
	}
	return st.Err()
}

// A stopping node's refusal (node.stopping) is retried at once by a client
// of several addresses, at most as many times as it has addresses, then
// with the backoff; with one address, and for any other UNAVAILABLE, the
// backoff comes first. The policy's first backoff is past its budget, so
// that a retry after a backoff is none: the call fails at the attempt
// that would have waited.
func TestAStoppingNodesRefusalIsRetriedAtOnceWithAnotherAddress(t *testing.T) {
	for _, c := range []struct {
		name     string
		nodes    int
		budget   time.Duration
		class    retryClass
		fail     func(*testing.T) error
		failures int // attempts that fail before one that succeeds
		attempts int // the attempts made
		ok       bool
	}{
		{"two addresses, one stopping", 2, time.Minute, sideEffects, nodeStopping, 1, 2, true},
		{"two addresses, both stopping", 2, time.Minute, sideEffects, nodeStopping, 10, 3, false},
		{"one address", 1, time.Minute, sideEffects, nodeStopping, 1, 1, false},
		{"no address count", 0, time.Minute, idempotent, nodeStopping, 1, 1, false},
		{"no retries (a budget of 0)", 2, 0, sideEffects, nodeStopping, 1, 1, false},
		{"another refusal", 2, time.Minute, sideEffects, nodeUnavailable, 1, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			policy := retryPolicy{initial: time.Hour, budget: c.budget, nodes: c.nodes}
			fail := c.fail(t)
			attempts := 0
			rpc := func(ctx context.Context, _ struct{}, _ ...grpc.CallOption) (struct{}, error) {
				attempts++
				if attempts <= c.failures {
					return struct{}{}, fail
				}
				return struct{}{}, nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := invokeWith(ctx, policy, c.class, rpc, struct{}{})
			if (err == nil) != c.ok || attempts != c.attempts {
				t.Fatalf("%d attempts, %v; want %d attempts, success %v", attempts, err, c.attempts, c.ok)
			}
			if err != nil && !errors.Is(err, rivet.ErrUnavailable) {
				t.Fatalf("%v; want UNAVAILABLE", err)
			}
		})
	}
}
