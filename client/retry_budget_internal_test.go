package client

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
)

// A call made as a node dies rides out the failover with the default
// policy: its actor's partition answers UNAVAILABLE for a few seconds
// (3.3-5 s with default settings, longer on a loaded cluster) and then
// serves. With a 5 s budget such a call failed as the actor came back.
// synctest's clock runs the seconds of retries without waiting them out.
func TestTheDefaultPolicyRidesOutAFailover(t *testing.T) {
	c, err := New("127.0.0.1:1") // does not connect
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// The client's policy also carries what it knows of itself (its
	// Close, its number of addresses): the backoff and the budget are
	// what WithRetry would set.
	if d := defaultRetry(); c.retry.initial != d.initial || c.retry.budget != d.budget {
		t.Fatalf("a client without WithRetry retries as %+v, not as defaultRetry", c.retry)
	}
	synctest.Test(t, func(t *testing.T) {
		const outage = 8 * time.Second
		start := time.Now()
		attempts := 0
		rpc := func(context.Context, struct{}, ...grpc.CallOption) (string, error) {
			attempts++
			if time.Since(start) < outage {
				return "", nodeUnavailable(t)
			}
			return "ok", nil
		}
		// Calls with side effects retry only a node's own UNAVAILABLE:
		// what a surviving node answers for an actor whose owner is gone.
		resp, err := invokeWith(context.Background(), defaultRetry(), sideEffects, rpc, struct{}{})
		if err != nil || resp != "ok" {
			t.Fatalf("after %d attempts over %s: %q, %v; want the call to succeed once the actor is back after %s",
				attempts, time.Since(start), resp, err, outage)
		}
		// Waits are capped near a second: the call is served within
		// about a second of the actor's return.
		if took := time.Since(start); took > outage+1100*time.Millisecond {
			t.Errorf("served %s after the outage began; want within about a second of its end (%s)", took, outage)
		}
	})
}

// The caller's context deadline bounds the retries whatever the budget: the
// call ends with its error at or before the deadline, never after it (a
// wait that would end past the deadline, or too near it for an attempt
// to be answered, retryLeast, is not taken), and no earlier than a last
// wait before that.
func TestAContextDeadlineBoundsTheRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, deadline := range []time.Duration{300 * time.Millisecond, 3 * time.Second, 12 * time.Second} {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			start := time.Now()
			attempts := 0
			_, err := invokeWith(ctx, defaultRetry(), sideEffects, func(context.Context, struct{}, ...grpc.CallOption) (struct{}, error) {
				attempts++
				return struct{}{}, nodeUnavailable(t)
			}, struct{}{})
			took := time.Since(start)
			cancel()
			if !errors.Is(err, rivet.ErrUnavailable) || rivet.OutcomeUnknown(err) {
				t.Errorf("deadline %s: %v; want the node's UNAVAILABLE", deadline, err)
			}
			if took > deadline {
				t.Errorf("deadline %s: returned after %s, %d attempts", deadline, took, attempts)
			}
			if took < deadline-maxBackoff-retryLeast(deadline) {
				t.Errorf("deadline %s: gave up after %s, more than a wait before it", deadline, took)
			}
		}
	})
}

// The budget runs from the first failure, not from the call's start: a
// keyed SendWait that waited 20 s for its message's completion when the
// actor's node died is sent again through the failover, as a short call
// is. Counted from the start, its budget was spent before it failed, and
// the resend was left to the caller.
func TestALongAttemptThatBreaksIsRetriedThroughAFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const waited, failover = 20 * time.Second, 5 * time.Second
		start := time.Now()
		var broke time.Time
		attempts := 0
		rpc := func(context.Context, struct{}, ...grpc.CallOption) (string, error) {
			attempts++
			switch {
			case attempts == 1:
				time.Sleep(waited)
				broke = time.Now()
				return "", status.Error(codes.Unavailable, "error reading from server: EOF")
			case time.Since(broke) < failover:
				return "", nodeUnavailable(t)
			}
			return "completed", nil
		}
		// A keyed send is idempotent: retried also after its connection
		// broke mid-call.
		resp, err := invokeWith(context.Background(), defaultRetry(), idempotent, rpc, struct{}{})
		if err != nil || resp != "completed" {
			t.Fatalf("after %d attempts over %s: %q, %v; want the resend to get through once the actor is back", attempts, time.Since(start), resp, err)
		}
	})
}

// A call retried until its deadline, each attempt answered at once with a
// node's UNAVAILABLE (a forwarding node that cannot reach the actor's
// owner), ends with that UNAVAILABLE, never DEADLINE_EXCEEDED: an attempt
// takes a round trip, and one made with less than that left ends by the
// deadline before its answer arrives, its outcome unknown to the caller,
// where every failure before it was known. Retried until the deadline,
// the last attempt began at a random time before it, and one in a
// thousand calls of a CI rehearsal's network cut raced it so and lost.
func TestACallRetriedUntilItsDeadlineEndsWithItsLastKnownFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const roundTrip = 30 * time.Millisecond // a loaded machine's
		late := 0
		// Deadlines 7 ms apart over a few seconds: whatever the backoff's
		// randomness, some of them put a wait's end within a round trip
		// of the deadline.
		const calls = 400
		for i := range calls {
			deadline := time.Second + time.Duration(i)*7*time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			_, err := invokeWith(ctx, defaultRetry(), sideEffects, func(ctx context.Context, _ struct{}, _ ...grpc.CallOption) (struct{}, error) {
				select {
				case <-time.After(roundTrip):
					return struct{}{}, nodeUnavailable(t)
				case <-ctx.Done():
					return struct{}{}, status.FromContextError(ctx.Err()).Err()
				}
			}, struct{}{})
			cancel()
			if !errors.Is(err, rivet.ErrUnavailable) {
				late++
				if late <= 3 {
					t.Errorf("deadline %v: %v; want the node's UNAVAILABLE", deadline, err)
				}
			}
		}
		if late > 0 {
			t.Errorf("%d of %d calls retried until their deadline ended with something else than their last attempt's UNAVAILABLE", late, calls)
		}
	})
}

// The same for a subscription, whose attempts run on a context without
// its caller's deadline (the stream outlives it) and that the deadline
// cancels (SubscribeWith): the retries stop short of the deadline (the
// policy's until) as a call's do, and it ends with the last attempt's
// UNAVAILABLE, not with an attempt cut off by the deadline.
func TestASubscriptionRetriedUntilItsDeadlineEndsWithItsLastKnownFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const roundTrip = 30 * time.Millisecond
		late := 0
		const calls = 400
		for i := range calls {
			deadline := time.Second + time.Duration(i)*7*time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
			stop := context.AfterFunc(ctx, scancel)
			policy := defaultRetry()
			policy.until, _ = ctx.Deadline()
			_, err := invokeWith(sctx, policy, idempotent, func(ctx context.Context, _ struct{}, _ ...grpc.CallOption) (struct{}, error) {
				select {
				case <-time.After(roundTrip):
					return struct{}{}, nodeUnavailable(t)
				case <-ctx.Done():
					return struct{}{}, status.FromContextError(ctx.Err()).Err()
				}
			}, struct{}{})
			stop()
			scancel()
			cancel()
			if !errors.Is(err, rivet.ErrUnavailable) {
				late++
				if late <= 3 {
					t.Errorf("deadline %v: %v; want the node's UNAVAILABLE", deadline, err)
				}
			}
		}
		if late > 0 {
			t.Errorf("%d of %d subscriptions retried until their deadline ended with something else than their last attempt's UNAVAILABLE", late, calls)
		}
	})
}
