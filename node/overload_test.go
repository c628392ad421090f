package node_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/node"
)

type burstState struct {
	N int `json:"n"`
}

// A burst of calls to one actor beyond --max-waiting-calls: the node
// refuses the calls past the limit (UNAVAILABLE actor.overloaded, counted
// in /metrics) and the Go client retries them with backoff, so that every
// call of the burst runs, once.
func TestABurstPastMaxWaitingCallsRunsEveryCallOnceThroughTheClientsRetries(t *testing.T) {
	held, release := make(chan struct{}, 1), make(chan struct{})
	burst := rivet.Actor[burstState]{
		Name: "burst",
		Actions: rivet.Actions[burstState]{
			"hold": rivet.Action0(func(c *rivet.ActionCtx[burstState]) (int, error) {
				held <- struct{}{}
				select {
				case <-release:
				case <-c.Context().Done():
				}
				return c.State.N, nil
			}),
			"bump": rivet.Action0(func(c *rivet.ActionCtx[burstState]) (int, error) {
				c.State.N++
				return c.State.N, nil
			}),
		},
	}
	reg, err := rivet.Setup(burst)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := node.DefaultLocalConfig(t.TempDir())
	cfg.Logger = zap.NewNop()
	cfg.Runtime.MaxWaitingCalls = 2
	n := startNode(t, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := c.GetOrCreate("burst", "b")
	if _, err := rivet.Call[int](ctx, h, "bump"); err != nil {
		t.Fatal(err)
	}
	holding := make(chan error, 1)
	go func() { _, err := rivet.Call[int](ctx, h, "hold"); holding <- err }()
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("hold did not start")
	}
	const calls = 8
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for range calls {
		wg.Go(func() {
			_, err := rivet.Call[int](ctx, h, "bump")
			errs <- err
		})
	}
	// Until the node has refused some (the calls past the first two).
	deadline := time.Now().Add(time.Minute)
	for n.Host().Stats().CallsShed < calls-2 {
		if time.Now().After(deadline) {
			t.Fatalf("the node refused %d calls, want at least %d", n.Host().Stats().CallsShed, calls-2)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if err := <-holding; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a call of the burst failed: %v (the client should have retried it)", err)
		}
	}
	if got, err := rivet.Call[int](ctx, h, "bump"); err != nil || got != 1+calls+1 {
		t.Fatalf("n = %d, %v after 1 + %d + 1 bumps: each ran once", got, err, calls)
	}
	_, metrics := get(t, "http://"+n.HTTPAddr()+"/metrics")
	if !strings.Contains(metrics, "rivet_calls_shed_total ") || strings.Contains(metrics, "rivet_calls_shed_total 0\n") {
		t.Errorf("/metrics counts no refused call:\n%s", grepLines(metrics, "shed"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
