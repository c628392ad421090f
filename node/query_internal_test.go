package node

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
)

// A read-only call (client Query, rivet.CallQuery) runs a query on its
// owner or through another node; one of an action that changes the actor
// is refused with FAILED_PRECONDITION before it runs or creates anything,
// wherever it was sent. And the forwarding node sends a read-only call
// again when its hop broke mid-call, where a plain call's outcome is
// unknown and it is not sent again.
func TestAReadOnlyCallRunsOnlyAQueryAndIsSentAgainAfterABrokenHop(t *testing.T) {
	const parts = 8
	reg, err := rivet.Setup(counter.Actor, asker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, a, b := twoNodesWithShortLeases(t, reg, "/query-test/", parts)
	var onB []runtime.Ref
	for i := 0; len(onB) < 2 && i < 1000; i++ {
		ref := runtime.Ref{Name: "counter", Key: []string{fmt.Sprint("q", i)}}
		if p, err := a.host.PartitionOf(ref); err != nil {
			t.Fatal(err)
		} else if b.host.Owns(p) {
			onB = append(onB, ref)
		}
	}
	if len(onB) < 2 {
		t.Fatalf("found %d counters on b", len(onB))
	}
	created, missing := onB[0], onB[1]
	askerKey := ""
	for i := 0; askerKey == "" && i < 1000; i++ {
		if p, err := a.host.PartitionOf(runtime.Ref{Name: "asker", Key: []string{fmt.Sprint("x", i)}}); err != nil {
			t.Fatal(err)
		} else if a.host.Owns(p) {
			askerKey = fmt.Sprint("x", i)
		}
	}

	clients := map[*Node]*client.Client{}
	cl := func(n *Node) *client.Client {
		if clients[n] == nil {
			c, err := client.New(n.GRPCAddr(), client.WithRetry(0, 0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			clients[n] = c
		}
		return clients[n]
	}
	for _, n := range []*Node{b, a} { // the owner, then through a
		cl := cl(n)
		if _, err := cl.GetOrCreate(created.Name, created.Key...).Call(ctx, "increment", 2); err != nil {
			t.Fatal(err)
		}
		if got, err := rivet.CallQuery[int](ctx, cl.Get(created.Name, created.Key...), "getCount"); err != nil {
			t.Fatalf("a query through %s: %v", n.cfg.NodeID, err)
		} else if n == b && got != 2 || n == a && got != 4 {
			t.Fatalf("a query through %s: %d", n.cfg.NodeID, got)
		}
		_, err = cl.Actor(missing.Name, missing.Key...).Query(ctx, "increment", 1)
		var e *rivet.Error
		if !errors.Is(err, rivet.ErrFailedPrecondition) || !errors.As(err, &e) || e.Group != "actor" || e.Code != "not_read_only" {
			t.Fatalf("a read-only call of increment through %s: %v; want FAILED_PRECONDITION actor.not_read_only", n.cfg.NodeID, err)
		}
		if _, err := cl.Actor(missing.Name, missing.Key...).NoCreate().Info(ctx); !errors.Is(err, rivet.ErrNotFound) {
			t.Fatalf("the refused read-only call through %s created its actor: %v", n.cfg.NodeID, err)
		}
	}

	// From an actor of a, through its node's Remote: the mark goes with
	// the hop.
	if _, err := cl(a).Actor("asker", askerKey).Call(ctx, "ask", missing.Key[0], "increment"); !errors.Is(err, rivet.ErrFailedPrecondition) || !strings.Contains(err.Error(), "not read-only") {
		t.Fatalf("an actor's read-only call of increment on b: %v; want FAILED_PRECONDITION, not read-only", err)
	}
	if n, err := cl(a).Actor("asker", askerKey).Call(ctx, "ask", created.Key[0], "getCount"); err != nil || string(n) != "4" {
		t.Fatalf("an actor's read-only call of getCount on b: %s, %v; want 4", n, err)
	}
	if _, err := cl(b).Actor(missing.Name, missing.Key...).NoCreate().Info(ctx); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("an actor's refused read-only call created its callee: %v", err)
	}

	// A hop that breaks as a stream does when its node goes: a bare
	// UNAVAILABLE once the request may have been sent. And an answer
	// marked outcome unknown: the query ran, and passed on what a call of
	// its own got.
	marked, _ := rpcerr.ToStatus(&rivet.Error{Kind: rivet.ErrUnavailable, Message: "what a call of the query's own got"})
	// rivet_forward_failures_total counts a request whose last attempt's
	// hop failed, once, not one that was sent again and answered.
	r := remote{a.view}
	for _, c := range []struct {
		safe    resend
		first   error
		want    int    // attempts
		counted uint64 // in rivet_forward_failures_total
	}{
		{resendNever, status.Error(codes.Unavailable, "the stream to the actor's owner broke during the forwarded call"), 1, 1},
		{resendReadOnly, status.Error(codes.Unavailable, "the stream to the actor's owner broke during the forwarded call"), 2, 0},
		{resendKeyed, status.Error(codes.Unavailable, "the stream to the actor's owner broke during the forwarded call"), 2, 0},
		{resendNever, status.Error(codes.Unavailable, "peer: "+rpcerr.NotSentMark+": connection refused"), 2, 0},
		{resendReadOnly, marked.Err(), 1, 0},
		{resendKeyed, marked.Err(), 1, 0},
	} {
		failures := a.view.fwdBroken.Load() + a.view.fwdNotSent.Load()
		calls := 0
		err := r.do(ctx, created, c.safe, func() error { return errors.New("not local") }, func(*server.PeerConn) error {
			calls++
			if calls == 1 {
				return c.first
			}
			return nil
		})
		if calls != c.want || c.want == 2 && err != nil || c.want == 1 && !rivet.OutcomeUnknown(err) {
			t.Errorf("safe %v, first attempt %v: %v after %d attempts; want %d attempts, an answer after 2, outcome unknown after 1", c.safe, c.first, err, calls, c.want)
		}
		if got := a.view.fwdBroken.Load() + a.view.fwdNotSent.Load() - failures; got != c.counted {
			t.Errorf("safe %v, first attempt %v: %d forward failures counted, want %d", c.safe, c.first, got, c.counted)
		}
	}
}

// asker's ask makes a read-only call of counter KEY's ACTION.
var asker = rivet.Actor[struct{}]{
	Name: "asker",
	Actions: rivet.Actions[struct{}]{
		"ask": rivet.Action2(func(c *rivet.ActionCtx[struct{}], key, action string) (int, error) {
			return rivet.CallQuery[int](c.Context(), c.Client().Get("counter", key), action)
		}),
	},
}
