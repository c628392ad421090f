package node_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/workflow"
)

// An Inspect sent to a node that does not own the actor, forwarded to the
// one that does, shows the step its workflow has in flight (the owner's
// memory holds it) while the step's body holds the actor's turn, and
// nothing once the step has ended.
func TestAnInspectThroughAnotherNodeShowsTheStepInFlight(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	payer := rivet.Actor[tally]{Name: "payer", Run: func(c *workflow.Ctx[tally]) error {
		return c.Step("charge", func(s *workflow.StepCtx[tally]) error {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-s.Context().Done():
			}
			return nil
		})
	}}
	reg, err := rivet.Setup(payer)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	na, nb := twoNodesWith(t, ctx, reg, "/pending/")
	key := keysOn(na, "payer", "p", 1)[0]
	conn, err := grpc.NewClient(nb.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := rivetv1.NewActorServiceClient(conn) // to b, which forwards to a
	ref := &rivetv1.ActorRef{Name: "payer", Key: []string{key}}
	if _, err := cl.Create(ctx, &rivetv1.CreateRequest{Actor: ref}); err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the step did not start")
	}
	in, err := cl.Inspect(ctx, &rivetv1.InspectRequest{Actor: ref})
	if err != nil {
		t.Fatal(err)
	}
	if in.GetInfo().GetOwner() != "a" || len(in.GetPendingSteps()) != 1 {
		t.Fatalf("inspect through b: owner %q, pending steps %v; want a's answer, the step in flight", in.GetInfo().GetOwner(), in.GetPendingSteps())
	}
	if p := in.GetPendingSteps()[0]; p.GetPath() != "charge" || p.GetAttempt() != 1 || p.GetStartedAt() == nil || p.GetNextAttemptAt() != nil || p.GetLastError() != "" {
		t.Fatalf("inspect through b: pending step %v, want charge's attempt 1, running", p)
	}
	close(release)
	released = true
	waitUntil(t, "the workflow's end", 30*time.Second, func() bool {
		in, err = cl.Inspect(ctx, &rivetv1.InspectRequest{Actor: ref})
		return err == nil && in.GetWorkflowStatus() == "completed"
	})
	if len(in.GetPendingSteps()) != 0 {
		t.Fatalf("pending steps once the workflow completed: %v", in.GetPendingSteps())
	}
}
