package node

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/rivet-go/rivet"
)

// A health Watch (gRPC's client-side health checking opens one on every
// node a client uses) ends as the stop stops serving, after telling
// NOT_SERVING: the health server ends none, and GracefulStop waited for
// it, and the release of the node's partitions after that, until the
// stop's deadline. The stop's context here is long: a stop that waits
// for the watch takes all of it, one that does not well under a second.
func TestAHealthWatchDoesNotHoldUpAStop(t *testing.T) {
	type st struct{ N int }
	reg, err := rivet.Setup(rivet.Actor[st]{Name: "watchW", Actions: rivet.Actions[st]{
		"get": rivet.Query(func(c *rivet.ActionCtx[st]) (int, error) { return c.State.N, nil }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := clusterStarter(t, ctx, reg, "/stop-watch-test/", 4)("a", nil)
	cc, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch = %v, %v; want SERVING", r, err)
	}
	watched := make(chan []healthpb.HealthCheckResponse_ServingStatus, 1)
	go func() {
		var seen []healthpb.HealthCheckResponse_ServingStatus
		for {
			r, err := w.Recv()
			if err != nil {
				watched <- seen
				return
			}
			seen = append(seen, r.GetStatus())
		}
	}()
	const budget = 20 * time.Second
	sctx, scancel := context.WithTimeout(context.Background(), budget)
	defer scancel()
	began := time.Now()
	if err := a.Stop(sctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	took := time.Since(began)
	if took > budget/2 {
		t.Errorf("the stop took %v (its budget %v): it waited for the watch", took, budget)
	}
	select {
	case seen := <-watched:
		if len(seen) != 1 || seen[0] != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("the watch saw %v before it ended; want NOT_SERVING", seen)
		}
	case <-ctx.Done():
		t.Fatal("the watch never ended")
	}
}
