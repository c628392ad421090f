package runtime_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

type vaultState struct {
	N int `json:"n"`
}

// A caller that can hand the host a chain (a PeerService stream, open to
// every holder of the client token) and guesses the chain of a turn
// running now, another client's call, does not get in: it waits for the
// turn like any caller. Roots were the node's ID and a counter, so the
// first few hundred numbers named every turn a fresh node had started, and
// the guess ran its action inside the other call's turn.
func TestGuessedChainDoesNotEnterAnotherCallersTurn(t *testing.T) {
	var inside atomic.Bool
	entered, release := make(chan struct{}), make(chan struct{})
	vault := rivet.Actor[vaultState]{
		Name: "vault",
		Actions: rivet.Actions[vaultState]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[vaultState]) (int, error) {
				inside.Store(true)
				defer inside.Store(false)
				close(entered)
				<-release
				return 0, nil
			}),
			// probe says whether it ran inside hold's turn.
			"probe": rivet.Action0(func(c *rivet.ActionCtx[vaultState]) (bool, error) { return inside.Load(), nil }),
		},
	}
	e := newEnv(t, counterReg(t, vault), nil)
	ref := runtime.Ref{Name: "vault", Key: []string{"v"}}
	held := make(chan error, 1)
	go func() {
		_, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "hold", Args: json.RawMessage("[]"), CreateIfMissing: true})
		held <- err
	}()
	select {
	case <-entered:
	case err := <-held:
		t.Fatalf("hold ended before it held: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("hold never ran")
	}
	const guesses = 256
	type probe struct {
		chain  string
		inside bool
		err    error
	}
	probes := make(chan probe, guesses)
	var wg sync.WaitGroup
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 1; i <= guesses; i++ {
		chain := "n1-" + strconv.FormatUint(uint64(i), 36)
		wg.Go(func() {
			raw, err := e.host.Call(cctx, runtime.CallRequest{Ref: ref, Action: "probe", Args: json.RawMessage("[]"), Chain: runtime.Chain{ID: chain}})
			p := probe{chain: chain, err: err}
			if err == nil {
				err = json.Unmarshal(raw, &p.inside)
				p.err = err
			}
			probes <- p
		})
	}
	// Every guess waits for the gate (none got in) before hold ends.
	deadline := time.Now().Add(20 * time.Second)
	for e.host.GateWaiters(ref) < guesses {
		select {
		case p := <-probes:
			close(release)
			t.Fatalf("a call with the guessed chain %q ran while another caller's turn held the actor (inside it: %v, err %v)", p.chain, p.inside, p.err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("%d of %d guesses wait for the gate", e.host.GateWaiters(ref), guesses)
		}
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("hold: %v", err)
	}
	wg.Wait()
	close(probes)
	for p := range probes {
		if p.err != nil || p.inside {
			t.Errorf("guess %q: inside %v, err %v", p.chain, p.inside, p.err)
		}
	}
}
