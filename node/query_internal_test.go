package node

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/examples/counter"
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
	reg, err := rivet.Setup(counter.Actor)
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

	for _, n := range []*Node{b, a} { // the owner, then through a
		cl, err := client.New(n.GRPCAddr(), client.WithRetry(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
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

	// A hop that breaks as a stream does when its node goes: a bare
	// UNAVAILABLE once the request may have been sent.
	r := remote{a.view}
	for _, safe := range []bool{false, true} {
		calls := 0
		err := r.do(ctx, created, safe, func() error { return errors.New("not local") }, func(*server.PeerConn) error {
			calls++
			if calls == 1 {
				return status.Error(codes.Unavailable, "the stream to the actor's owner broke during the forwarded call")
			}
			return nil
		})
		switch {
		case safe && (err != nil || calls != 2):
			t.Errorf("a read-only call whose hop broke: %v after %d attempts; want sent again, answered", err, calls)
		case !safe && (calls != 1 || !rivet.OutcomeUnknown(err)):
			t.Errorf("a plain call whose hop broke: %v after %d attempts; want one attempt, its outcome unknown", err, calls)
		}
	}
}
