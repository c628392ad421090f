package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
)

// While a node's stop is held open by a turn in flight, its connections
// get no GOAWAY, and a client of several addresses (round_robin) keeps
// sending it calls, which it refuses (node.stopping). The client retries
// them at once on another address: it waited a backoff (25-50 ms) for each
// instead, which slowed its calls about twelvefold for as long as the turn
// lasted. The clients' first backoff here is past their retry budget, so
// that a refusal retried only after a backoff fails the call. A client of
// the stopping node alone gets the refusal (its backoff stays), of a call,
// an admin call and a stream alike (refuseWhileClosing,
// refuseStreamsWhileClosing); health answers, NOT_SERVING.
func TestAClientOfSeveralNodesRetriesAStoppingNodesRefusalAtOnce(t *testing.T) {
	type st struct{ N int }
	entered, release := make(chan struct{}, 1), make(chan struct{})
	w := rivet.Actor[st]{Name: "stopW", Actions: rivet.Actions[st]{
		"hold": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-c.Context().Done():
			}
			return 0, nil
		}),
		"inc": rivet.Action0(func(c *rivet.ActionCtx[st]) (int, error) { c.State.N++; return c.State.N, nil }),
	}}
	reg, err := rivet.Setup(w)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const parts = 8
	start := clusterStarter(t, ctx, reg, "/stop-refusal-test/", parts)
	a := start("a", nil)
	b := start("b", []string{a.GossipAddr()})
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	keys := func(n *Node, prefix string, want int) []string {
		var out []string
		for i := 0; len(out) < want && i < 100_000; i++ {
			k := fmt.Sprint(prefix, i)
			p, err := n.host.PartitionOf(runtime.Ref{Name: "stopW", Key: []string{k}})
			if err != nil {
				t.Fatal(err)
			}
			if n.host.Owns(p) {
				out = append(out, k)
			}
		}
		if len(out) < want {
			t.Fatalf("%d keys of %s, want %d", len(out), n.ID(), want)
		}
		return out
	}
	onA, onB := keys(a, "a", 8), keys(b, "b", 2)
	noBackoff := client.WithRetry(time.Hour, time.Minute)
	c, err := client.New(a.GRPCAddr()+","+b.GRPCAddr(), noBackoff)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cb, err := client.New(b.GRPCAddr(), noBackoff)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	ca, err := client.New(a.GRPCAddr(), noBackoff)
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	for _, k := range onA {
		if _, err := rivet.Call[int](ctx, c.GetOrCreate("stopW", k), "inc"); err != nil {
			t.Fatal(err)
		}
	}
	held := make(chan error, 1)
	go func() {
		_, err := rivet.Call[int](ctx, cb.GetOrCreate("stopW", onB[0]), "hold")
		held <- err
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the holding turn never started")
	}
	stopped := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer scancel()
		stopped <- b.Stop(sctx)
	}()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	awaitCond(t, ctx, "b to refuse new calls", b.closing.Load)
	// Half of these go to b (round_robin), whose every refusal a backoff
	// would turn into a failure.
	const calls = 40
	for i := range calls {
		if _, err := rivet.Call[int](ctx, c.GetOrCreate("stopW", onA[i%len(onA)]), "inc"); err != nil {
			t.Fatalf("call %d while b's stop is held open: %v", i, err)
		}
	}
	stopping := func(what string, err error) {
		t.Helper()
		var rerr *rivet.Error
		if !errors.Is(err, rivet.ErrUnavailable) || !errors.As(err, &rerr) || rerr.Group != "node" || rerr.Code != "stopping" {
			t.Errorf("%s to b alone as it stops = %v; want it refused UNAVAILABLE node.stopping", what, err)
		}
	}
	_, err = rivet.Call[int](ctx, cb.GetOrCreate("stopW", onA[0]), "inc")
	stopping("a call", err)
	// A new call that a forwards to b, which still owns its actor, is
	// refused by b's host: UNAVAILABLE, but not node.stopping (a is not
	// stopping, and would forward it to b again).
	var rerr *rivet.Error
	if _, err := rivet.Call[int](ctx, ca.GetOrCreate("stopW", onB[1]), "inc"); !errors.Is(err, rivet.ErrUnavailable) || !errors.As(err, &rerr) || rerr.Code == "stopping" {
		t.Errorf("a call through a to an actor of b as b stops = %v; want it refused UNAVAILABLE, not node.stopping", err)
	}
	// Nothing but its peers' streams and health is served: an admin call
	// and a stream (reflection's) are refused as a call is.
	_, err = cb.Members(ctx)
	stopping("an admin call", err)
	if ok, err := cb.Healthy(ctx); ok || err != nil {
		t.Errorf("b's health as it stops = %v, %v; want NOT_SERVING", ok, err)
	}
	cc, err := grpc.NewClient(b.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if rs, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx); err != nil {
		stopping("a reflection stream", rpcerr.FromStatus(status.Convert(err)))
	} else {
		_ = rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
		_, err := rs.Recv()
		stopping("a reflection stream", rpcerr.FromStatus(status.Convert(err)))
	}
	close(release)
	if err := <-held; err != nil {
		t.Errorf("the holding turn: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("stop b: %v", err)
	}
}
