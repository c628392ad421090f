package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
)

// A keyed Create through the Go client and a real node: a connection that
// breaks after the node created the actor (the answer lost, as in a
// failover) is retried by the client, and the retry answers the duplicate
// without running CreateState again; the same key with another input is
// INVALID_ARGUMENT, and a Create without the key ALREADY_EXISTS. A Create
// without a key is not retried after such a break (its outcome is
// unknown), and sent again it cannot tell its own create from another's.
func TestAKeyedCreateIsRetriedAfterABrokenConnection(t *testing.T) {
	var made atomic.Int32
	type st struct {
		N int `json:"n"`
	}
	def := rivet.Actor[st]{
		Name: "made",
		CreateState: func(in json.RawMessage) (st, error) {
			made.Add(1)
			var s st
			if len(in) > 0 {
				err := json.Unmarshal(in, &s)
				return s, err
			}
			return s, nil
		},
		Actions: rivet.Actions[st]{"get": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil })},
	}
	reg, err := rivet.Setup(def)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := startNode(t, ctx, clusterConfig(t, "a", etcdtest.Start(t), "/createkey/", eventParts, nil), reg)
	waitPlaced(t, time.Minute, eventParts, n)

	// Runs the Create, then loses its answer, as a connection that broke
	// after the node committed it.
	var breakNext, creates atomic.Int32
	broken := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !strings.HasSuffix(method, "/Create") {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		creates.Add(1)
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && breakNext.Add(-1) >= 0 {
			return status.Error(codes.Unavailable, "connection reset")
		}
		return err
	})
	c, err := client.New(n.GRPCAddr(), client.WithDialOptions(broken))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	breakNext.Store(1)
	res, err := c.CreateWith(ctx, "made", []string{"a"}, map[string]int{"n": 3}, client.CreateOptions{IdempotencyKey: "create-a"})
	if err != nil || !res.Duplicate || res.Name != "made" || creates.Load() != 2 {
		t.Fatalf("keyed create after a broken connection = %+v, %v (%d attempts); want it retried once, answered as a duplicate", res, err, creates.Load())
	}
	res, err = c.CreateWith(ctx, "made", []string{"a"}, json.RawMessage(`{ "n": 3 }`), client.CreateOptions{IdempotencyKey: "create-a"})
	if err != nil || !res.Duplicate {
		t.Fatalf("keyed create again = %+v, %v; want the duplicate", res, err)
	}
	if m := made.Load(); m != 1 {
		t.Fatalf("CreateState ran %d times, want 1", m)
	}
	if n, err := rivet.Call[int](ctx, c.Get("made", "a"), "get"); err != nil || n != 3 {
		t.Fatalf("state n = %d, %v; want 3", n, err)
	}
	if _, err := c.CreateWith(ctx, "made", []string{"a"}, map[string]int{"n": 4}, client.CreateOptions{IdempotencyKey: "create-a"}); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("the key with another input = %v, want ErrInvalidArgument", err)
	}
	if _, err := c.Create(ctx, "made", []string{"a"}, map[string]int{"n": 3}); !errors.Is(err, rivet.ErrAlreadyExists) {
		t.Fatalf("create without the key = %v, want ErrAlreadyExists", err)
	}

	// Without a key: not retried, and sent again it is ALREADY_EXISTS.
	breakNext.Store(1)
	creates.Store(0)
	if _, err := c.Create(ctx, "made", []string{"b"}, nil); !rivet.OutcomeUnknown(err) || creates.Load() != 1 {
		t.Fatalf("create without a key after a broken connection = %v (%d attempts); want outcome unknown, not retried", err, creates.Load())
	}
	if _, err := c.Create(ctx, "made", []string{"b"}, nil); !errors.Is(err, rivet.ErrAlreadyExists) {
		t.Fatalf("create without a key sent again = %v, want ErrAlreadyExists", err)
	}
}
