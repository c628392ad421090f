package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// keylessNode is a node older than Create's idempotency key: it drops the
// key (an unknown proto field) and creates as without one.
type keylessNode struct {
	*servertest.Fake
	creates atomic.Int32
}

func (n *keylessNode) CreateWith(ctx context.Context, ref runtime.Ref, input json.RawMessage, _ runtime.CreateOptions) (runtime.ActorInfo, bool, error) {
	n.creates.Add(1)
	return n.Fake.CreateWith(ctx, ref, input, runtime.CreateOptions{})
}

// A keyed Create the client sent again after a connection that broke once
// the node could have run it, answered ALREADY_EXISTS by a node that
// ignores the key, may be of its own first attempt: the error is still
// ALREADY_EXISTS, but of an unknown outcome, and says so. The same answer
// to a first attempt, or to a retry after the node's own UNAVAILABLE (which
// says it did not run), is definite; and a node that knows the key answers
// the retry as a duplicate.
func TestAKeyedCreateRetriedAgainstANodeThatIgnoresTheKey(t *testing.T) {
	var breakNext, refuseNext atomic.Bool
	refused, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnavailable, "partition 3 is moving"))
	broken := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if refuseNext.Swap(false) {
			return nil, refused.Err() // a node's own answer: not run
		}
		resp, err := h(ctx, req)
		if breakNext.Swap(false) {
			// Ran, and the answer is lost as a broken connection loses it.
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return resp, err
	})
	opts := servertest.Config{GRPCOptions: []grpc.ServerOption{broken}}
	old := &keylessNode{Fake: servertest.NewFake()}
	c := newClient(t, servertest.Start(t, old, opts))
	keyed := client.CreateOptions{IdempotencyKey: "c1"}

	breakNext.Store(true)
	_, err := c.CreateWith(ctx(t), "counter", []string{"a"}, 1, keyed)
	if !errors.Is(err, rivet.ErrAlreadyExists) || !rivet.OutcomeUnknown(err) || old.creates.Load() != 2 {
		t.Errorf("retried keyed create, older node: %v (outcome unknown %v), %d attempts; want ALREADY_EXISTS of an unknown outcome after 2 attempts",
			err, rivet.OutcomeUnknown(err), old.creates.Load())
	}
	if err != nil && !strings.Contains(err.Error(), "an earlier attempt of this create, whose connection broke, may have created the actor (a node older than Create's idempotency key ignores it)") {
		t.Errorf("retried keyed create, older node: %q; want it to say an earlier attempt may have created the actor", err)
	}
	var re *rivet.Error
	if !errors.As(err, &re) || rpcerr.Code(err) != codes.AlreadyExists {
		t.Errorf("retried keyed create, older node: %v (%T); want a *rivet.Error inside, code ALREADY_EXISTS", err, err)
	}

	// Answered at the first attempt: the actor is another create's.
	_, err = c.CreateWith(ctx(t), "counter", []string{"a"}, 1, keyed)
	if !errors.Is(err, rivet.ErrAlreadyExists) || rivet.OutcomeUnknown(err) {
		t.Errorf("keyed create answered at once: %v (outcome unknown %v); want a definite ALREADY_EXISTS", err, rivet.OutcomeUnknown(err))
	}
	// A retry after the node's own UNAVAILABLE: the first attempt did not run.
	refuseNext.Store(true)
	_, err = c.CreateWith(ctx(t), "counter", []string{"a"}, 1, keyed)
	if !errors.Is(err, rivet.ErrAlreadyExists) || rivet.OutcomeUnknown(err) {
		t.Errorf("keyed create retried after a refusal: %v (outcome unknown %v); want a definite ALREADY_EXISTS", err, rivet.OutcomeUnknown(err))
	}

	// A node that knows the key.
	c = newClient(t, servertest.Start(t, servertest.NewFake(), opts))
	breakNext.Store(true)
	res, err := c.CreateWith(ctx(t), "counter", []string{"a"}, 1, keyed)
	if err != nil || !res.Duplicate {
		t.Errorf("retried keyed create, a node that knows the key: %+v, %v; want the duplicate", res, err)
	}
}
