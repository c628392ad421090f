package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/examples/counter"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
)

type errorsState struct{}

// blocker's wait runs until its caller gives up.
var blocker = rivet.Actor[errorsState]{
	Name: "blocker",
	Actions: rivet.Actions[errorsState]{
		"wait": rivet.Query(func(c *rivet.ActionCtx[errorsState]) (int, error) {
			<-c.Context().Done()
			return 0, c.Context().Err()
		}),
	},
}

// errer's fail returns an error of its own with an n-byte message.
var errer = rivet.Actor[errorsState]{
	Name: "errer",
	Actions: rivet.Actions[errorsState]{
		"fail": rivet.QueryArg(func(c *rivet.ActionCtx[errorsState], n int) (int, error) {
			return 0, rivet.UserError("too_long", strings.Repeat("e", n), nil)
		}),
	},
}

// An actor's error larger than the peer stream's bound, forwarded, reaches
// its caller cut to fit, its kind and code intact, and fails no other call
// forwarded on the same stream (it broke the stream, and all of them).
func TestALargeActorErrorForwardedFailsNoOtherCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reg, err := rivet.Setup(blocker, errer, counter.Actor)
	if err != nil {
		t.Fatal(err)
	}
	na, nb := twoNodesWith(t, ctx, reg, "/bigerr/")
	errKey, blockKey := keysOn(na, "errer", "e", 1)[0], keysOn(na, "blocker", "s", 1)[0]
	raw := func(addr string) rivetv1.ActorServiceClient {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return rivetv1.NewActorServiceClient(conn)
	}
	onA, onB := raw(na.GRPCAddr()), raw(nb.GRPCAddr())
	fail := &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "errer", Key: []string{errKey}}, Action: "fail", Args: []byte("[3145728]"), CreateIfMissing: true}
	asError := func(err error) *rivet.Error { return rpcerr.FromStatus(status.Convert(err)) }

	_, direct := onA.Call(ctx, fail)
	if e := asError(direct); !errors.Is(e, rivet.ErrUser) || len(e.Message) != 3<<20 {
		t.Fatalf("called on its owner: %.200v", direct)
	}
	other := make(chan error, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		_, err := onB.Call(wctx, &rivetv1.CallRequest{Actor: &rivetv1.ActorRef{Name: "blocker", Key: []string{blockKey}}, Action: "wait", Args: []byte("[]"), CreateIfMissing: true})
		other <- err
	}()
	waitUntil(t, "the other call to run on node a", 10*time.Second, func() bool { return na.Host().Stats().ActiveActors >= 2 })
	_, forwarded := onB.Call(ctx, fail)
	if e := asError(forwarded); !errors.Is(e, rivet.ErrUser) || e.Code != "too_long" || !strings.HasPrefix(e.Message, "eee") || !strings.Contains(e.Message, "(cut: 3145728 bytes in all)") {
		t.Errorf("called through node b: %.300v; want the actor's error, cut", forwarded)
	}
	if err := <-other; status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a call forwarded on the same stream ended with %v, want its own DEADLINE_EXCEEDED", err)
	}
}
