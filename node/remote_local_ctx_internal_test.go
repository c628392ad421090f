package node

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

type holdState struct {
	N int `json:"n"`
}

// A call from an actor's code to an actor of another node, whose partition
// moves to the caller's node while the call waits to be sent (the other
// node crashed, and this one took its partitions), ends with the caller's
// context, as it would on the other node or had the actor been here from
// the start, even if the called action does not heed it: the caller's
// turn (or step) is not held until the called code chooses to return.
func TestACallWhosePartitionMovesToTheCallersNodeEndsWithItsContext(t *testing.T) {
	const parts = 8
	started, release := make(chan struct{}), make(chan struct{})
	var startOnce, releaseOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo) // before the nodes stop: a's stop waits for hold
	holder := rivet.Actor[holdState]{
		Name: "holder",
		Actions: rivet.Actions[holdState]{
			"ping": rivet.Query(func(*rivet.ActionCtx[holdState]) (int, error) { return 1, nil }),
			// hold ignores its context.
			"hold": rivet.Query(func(*rivet.ActionCtx[holdState]) (int, error) {
				startOnce.Do(func() { close(started) })
				<-release
				return 2, nil
			}),
		},
	}
	// asker calls hold, and gives up on it once it has started.
	asker := rivet.Actor[holdState]{
		Name: "asker",
		Actions: rivet.Actions[holdState]{
			"ask": rivet.Action(func(c *rivet.ActionCtx[holdState], key string) (string, error) {
				ctx, cancel := context.WithCancel(c.Context())
				defer cancel()
				go func() {
					select {
					case <-started:
						cancel()
					case <-ctx.Done():
					}
				}()
				_, err := rivet.Call[int](ctx, c.Client().GetOrCreate("holder", key), "hold")
				if err == nil {
					return "answered", nil
				}
				return "gave up: " + err.Error(), nil
			}),
		},
	}
	reg, err := rivet.Setup(holder, asker)
	if err != nil {
		t.Fatal(err)
	}
	ctx, a, b := twoNodesWithShortLeases(t, reg, "/remote-local-ctx-test/", parts)

	held, heldPart := ownedRef(t, b, "holder", "h")
	askRef, _ := ownedRef(t, a, "asker", "x")
	// a's connection to b up, then b gone: as in
	// TestACallToACrashedNodesActorWaitsForItsPartitionToMove, a call
	// from a is not sent until a owns the partition, and runs here.
	if got, err := (remote{a.view}).Call(ctx, runtime.CallRequest{Ref: held, Action: "ping", CreateIfMissing: true}); err != nil || string(got) != "1" {
		t.Fatalf("ping on b: %s, %v", got, err)
	}
	conn, err := a.view.conn(b.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	crash(ctx, b)
	awaitCond(t, ctx, "a's connection to b to leave READY", func() bool { return conn.GetState() != connectivity.Ready })
	if a.host.Owns(heldPart) {
		t.Fatal("a owns the holder's partition before the call: the call would not go through a's Remote")
	}

	done := make(chan string, 1)
	go func() {
		args, _ := json.Marshal([]string{held.Key[0]})
		res, err := a.host.Call(ctx, runtime.CallRequest{Ref: askRef, Action: "ask", Args: args, CreateIfMissing: true})
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		var s string
		_ = json.Unmarshal(res, &s)
		done <- s
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("hold did not start within 30 s of b's crash")
	}
	if !a.host.Owns(heldPart) {
		t.Fatal("hold started, but a does not own its partition")
	}
	select {
	case got := <-done:
		if got != "gave up: context canceled" {
			t.Fatalf("ask = %q, want the call given up (context canceled)", got)
		}
	case <-time.After(10 * time.Second):
		letGo()
		t.Fatalf("the call waited for the called action to return (ask = %q once it was let go)", <-done)
	}
	// hold goes on to its end, and its actor answers once it returns.
	letGo()
	if got, err := a.host.Call(ctx, runtime.CallRequest{Ref: held, Action: "ping"}); err != nil || string(got) != "1" {
		t.Fatalf("ping after: %s, %v", got, err)
	}
}
