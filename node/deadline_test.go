package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
)

// waiterEnds gets how each of waiter's waits ended (its context's error).
var waiterEnds = make(chan error, 1)

// waiter's wait waits on its context, and says how it ended.
var waiter = rivet.Actor[errorsState]{
	Name: "waiter",
	Actions: rivet.Actions[errorsState]{
		"wait": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (int, error) {
			<-c.Context().Done()
			waiterEnds <- c.Context().Err()
			return 0, c.Context().Err()
		}),
	},
}

// An action whose caller's deadline runs out sees it run out
// (context.DeadlineExceeded), called on its node or through another: on
// its node it saw context.Canceled nearly every time (the client's reset
// of the stream at its deadline arrives before the node's own timer
// fires), and its call counted as cancelled, not timed out; through
// another node, now and then (that node's cancel beat the owner's timer).
// A caller that gives up before its deadline still cancels it at once.
func TestAnActionSeesItsCallersDeadlineRunOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := rivet.Setup(waiter)
	if err != nil {
		t.Fatal(err)
	}
	na, nb := twoNodesWith(t, ctx, reg, "/deadline/")
	ref := &rivetv1.ActorRef{Name: "waiter", Key: []string{keysOn(na, "waiter", "w", 1)[0]}}
	raw := func(addr string) rivetv1.ActorServiceClient {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return rivetv1.NewActorServiceClient(conn)
	}
	ended := func() error {
		t.Helper()
		select {
		case err := <-waiterEnds:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the action did not end within 10 s of its caller")
			return nil
		}
	}
	for _, via := range []struct {
		name string
		c    rivetv1.ActorServiceClient
	}{{"on its node", raw(na.GRPCAddr())}, {"through another node", raw(nb.GRPCAddr())}} {
		for i := range 10 {
			cctx, ccancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err := via.c.Call(cctx, &rivetv1.CallRequest{Actor: ref, Action: "wait", Args: []byte("[]"), CreateIfMissing: true})
			ccancel()
			if status.Code(err) != codes.DeadlineExceeded {
				t.Errorf("%s, call %d: %v, want DEADLINE_EXCEEDED", via.name, i, err)
			}
			if got := ended(); !errors.Is(got, context.DeadlineExceeded) {
				t.Errorf("%s, call %d: the action's context ended with %v, want its deadline exceeded", via.name, i, got)
			}
		}
		// Given up a second before its deadline: cancelled at once.
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		go func() {
			time.Sleep(50 * time.Millisecond)
			ccancel()
		}()
		start := time.Now()
		_, err := via.c.Call(cctx, &rivetv1.CallRequest{Actor: ref, Action: "wait", Args: []byte("[]"), CreateIfMissing: true})
		if status.Code(err) != codes.Canceled {
			t.Errorf("%s, cancelled: %v, want CANCELED", via.name, err)
		}
		if got := ended(); !errors.Is(got, context.Canceled) || time.Since(start) > 900*time.Millisecond {
			t.Errorf("%s, cancelled: the action's context ended with %v after %v, want cancelled before the deadline", via.name, got, time.Since(start))
		}
	}
}

// clock's actions say when their context's deadline is, as the node that
// runs them has it.
var clock = rivet.Actor[errorsState]{
	Name: "clock",
	Actions: rivet.Actions[errorsState]{
		"deadline": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (int64, error) {
			d, ok := c.Context().Deadline()
			if !ok {
				return 0, nil
			}
			return d.UnixNano(), nil
		}),
		"wait": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (int, error) {
			<-c.Context().Done()
			return 0, c.Context().Err()
		}),
	},
}

// A call forwarded to its actor's owner runs there under a deadline no
// earlier than its caller's, and one that runs out of time fails for its
// caller as its deadline (context.DeadlineExceeded) as it does on the
// owner's node: the forwarded request's timeout was cut down to the
// millisecond, the owner's timeout answer reached the client a moment
// before its own deadline, and the error was rivet.ErrTimeout alone in 4
// calls of 40 (a user trial).
func TestAForwardedCallRunsOutOfTimeWithItsCallersDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := rivet.Setup(clock)
	if err != nil {
		t.Fatal(err)
	}
	na, nb := twoNodesWith(t, ctx, reg, "/fwd-deadline/")
	h := dial(t, nb).Actor("clock", keysOn(na, "clock", "c", 1)[0])
	for i := range 20 {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		want, _ := cctx.Deadline()
		got, err := rivet.Call[int64](cctx, h, "deadline")
		ccancel()
		if err != nil {
			t.Fatal(err)
		}
		if got < want.UnixNano() {
			t.Errorf("call %d: the owner's deadline is %v before the caller's", i, time.Duration(want.UnixNano()-got))
		}
	}
	for i := range 20 {
		cctx, ccancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := h.Call(cctx, "wait")
		ccancel()
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, rivet.ErrTimeout) {
			t.Errorf("call %d: %v (context.DeadlineExceeded %v, rivet.ErrTimeout %v); want both", i, err, errors.Is(err, context.DeadlineExceeded), errors.Is(err, rivet.ErrTimeout))
		}
	}
}
