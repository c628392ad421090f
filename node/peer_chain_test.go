package node_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/auth"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/server"
)

type lockerState struct {
	N int `json:"n"`
}

// A holder of the client token who opens a PeerService stream to a node,
// as a node does, and forwards calls carrying guessed call chains (the
// node's ID and the first numbers of its counter) does not get into the
// turn of another client's call: chain roots are unguessable. Nor does one
// who puts the guesses where a client can (the request's chain field, the
// chain's metadata key), which ActorService ignores. A guess that got in
// would run its action inside the other call's turn, beside its half-done
// change.
func TestTokenHolderCannotJoinAnotherCallersTurn(t *testing.T) {
	var inside atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	locker := rivet.Actor[lockerState]{
		Name: "locker",
		Actions: rivet.Actions[lockerState]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[lockerState]) (int, error) {
				inside.Store(true)
				defer inside.Store(false)
				close(entered)
				select {
				case <-release:
				case <-c.Context().Done():
				}
				return 0, nil
			}),
			"probe": rivet.Action0(func(c *rivet.ActionCtx[lockerState]) (bool, error) { return inside.Load(), nil }),
		},
	}
	reg, err := rivet.Setup(locker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const token = "s3cret"
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.Logger = zap.NewNop()
	cfg.NodeID = "victim"
	cfg.Token = token
	cfg.Runtime.MaxWaitingCalls = -1 // every guess waits, none is refused
	n := startNode(t, ctx, cfg, reg)
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.NewCredentials(token)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := rivetv1.NewActorServiceClient(conn)
	ref := &rivetv1.ActorRef{Name: "locker", Key: []string{"l"}}
	held := make(chan error, 1)
	go func() {
		_, err := cl.Call(ctx, &rivetv1.CallRequest{Actor: ref, Action: "hold", Args: []byte("[]"), CreateIfMissing: true})
		held <- err
	}()
	defer releaseOnce.Do(func() { close(release) })
	select {
	case <-entered:
	case err := <-held:
		t.Fatalf("hold ended before it held: %v", err)
	case <-ctx.Done():
		t.Fatal("hold never ran")
	}

	pc := server.NewPeerConn(conn)
	defer pc.Close()
	peer := rivetv1.NewActorServiceClient(pc)
	const guesses = 256
	type result struct {
		how, chain string
		inside     bool
		err        error
	}
	results := make(chan result, 2*guesses)
	var wg sync.WaitGroup
	probe := func(how, chain string, c rivetv1.ActorServiceClient, ctx context.Context, req *rivetv1.CallRequest) {
		wg.Go(func() {
			r := result{how: how, chain: chain}
			resp, err := c.Call(ctx, req)
			if r.err = err; err == nil {
				r.err = json.Unmarshal(resp.GetResult(), &r.inside)
			}
			results <- r
		})
	}
	for i := 1; i <= guesses; i++ {
		chain := n.ID() + "-" + strconv.FormatUint(uint64(i), 36)
		probe("peer stream", chain, peer, server.WithChain(ctx, chain), &rivetv1.CallRequest{Actor: ref, Action: "probe", Args: []byte("[]")})
		probe("client call", chain, cl, metadata.AppendToOutgoingContext(ctx, server.ChainKey, chain),
			&rivetv1.CallRequest{Actor: ref, Action: "probe", Args: []byte("[]"), Chain: &rivetv1.CallChain{Id: chain}})
	}
	// Every guess waits for the actor's gate behind hold (a guess that
	// re-entered would answer at once, inside hold's turn).
	waiting := func() int {
		for _, ha := range n.Host().HotActors(10) {
			if ha.Ref.Name == "locker" {
				return ha.Waiting
			}
		}
		return -1
	}
	for deadline := time.Now().Add(45 * time.Second); waiting() < 2*guesses; time.Sleep(5 * time.Millisecond) {
		select {
		case r := <-results:
			t.Fatalf("%s with the guessed chain %q ended while another caller's turn held the actor (inside it: %v, err %v)", r.how, r.chain, r.inside, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d guesses wait for the actor", waiting(), 2*guesses)
		}
	}
	releaseOnce.Do(func() { close(release) })
	wg.Wait()
	close(results)
	for r := range results {
		if r.err != nil || r.inside {
			t.Errorf("%s with the guessed chain %q: inside hold's turn %v, err %v", r.how, r.chain, r.inside, r.err)
		}
	}
	if err := <-held; err != nil {
		t.Fatalf("hold: %v", err)
	}
}
