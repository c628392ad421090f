package node

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/workflow"
)

type churnState struct {
	N    int `json:"n"`
	Done int `json:"done"`
}

var churnActor = rivet.Actor[churnState]{
	Name:   "churn",
	Queues: rivet.Queues{"work": rivet.QueueOf[int]()},
	Events: rivet.Events{"bumped": rivet.EventOf[int]()},
	Run: func(ctx *workflow.Ctx[churnState]) error {
		m, err := workflow.Next[int](ctx, "take")
		if err != nil {
			return err
		}
		return ctx.Step("record", func(s *workflow.StepCtx[churnState]) error {
			s.State.Done += m.Body
			return nil
		})
	},
	Actions: rivet.Actions[churnState]{
		"bump": rivet.Action(func(c *rivet.ActionCtx[churnState], by int) (int, error) {
			c.State.N += by
			if err := c.Broadcast("bumped", c.State.N); err != nil {
				return 0, err
			}
			if by > 0 {
				if _, err := c.Schedule().After(10*time.Millisecond, "bump", -by); err != nil {
					return 0, err
				}
			}
			return c.State.N, nil
		}),
		"slow": rivet.Action(func(c *rivet.ActionCtx[churnState], ms int) (int, error) {
			time.Sleep(time.Duration(ms) * time.Millisecond)
			return c.State.N, nil
		}),
	},
}

// countFDs is the open file descriptors of this process.
func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

type leakSample struct{ goroutines, fds, actors int }

func (s leakSample) String() string {
	return fmt.Sprintf("goroutines %d, fds %d, actors %d", s.goroutines, s.fds, s.actors)
}

func sampleLeaks(t *testing.T, n *Node) leakSample {
	return leakSample{goruntime.NumGoroutine(), countFDs(t), int(n.host.Stats().ActiveActors)}
}

// settleLeaks waits (up to wait) until the sample is within slack of base,
// and fails with both if it never is.
func settleLeaks(t *testing.T, n *Node, what string, base leakSample, slack int, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	var s leakSample
	for {
		goruntime.GC()
		s = sampleLeaks(t, n)
		if s.goroutines <= base.goroutines+slack && s.fds <= base.fds+slack && s.actors <= base.actors {
			t.Logf("%s: %v (baseline %v)", what, s, base)
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:goruntime.Stack(buf, true)]
			t.Logf("goroutines at the failure:\n%s", buf)
			t.Fatalf("%s: %v after %v, baseline %v", what, s, wait, base)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func startChurnNode(t *testing.T, ctx context.Context) (*Node, *client.Client) {
	reg, err := rivet.Setup(churnActor)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.Partitions = 8
	cfg.Runtime.IdleTimeout = 200 * time.Millisecond
	cfg.Logger = zap.NewNop()
	n := StartForTest(t, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return n, c
}

// Subscriptions opened and closed, and subscribers that vanish (their
// client closed, the subscription not), with an event waiting for them or
// not: nothing stays, on the node or in the client.
func TestChurnSubscriptionsLeaveNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, c := startChurnNode(t, ctx)
	h := c.Actor("churn", "sub")
	if _, err := h.Call(ctx, "bump", 0); err != nil {
		t.Fatal(err)
	}
	subs := func() (int, int64) {
		return int(n.host.Stats().EventSubscribers), n.srv.Streams()
	}
	round := func(i int) {
		// Opened, read, closed.
		s, err := h.Subscribe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Call(ctx, "bump", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
		s.Close()
		// A subscriber that vanishes: its client closes, the
		// subscription is never closed, with an event unread or not.
		vc, err := client.New(n.GRPCAddr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := vc.Actor("churn", "sub").Subscribe(ctx); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := h.Call(ctx, "bump", 0); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		vc.Close()
	}
	round(0)
	settleLeaks(t, n, "warm-up", leakSample{1 << 20, 1 << 20, 1 << 20}, 0, 5*time.Second)
	time.Sleep(300 * time.Millisecond)
	base := sampleLeaks(t, n)
	base.actors = 1 << 20
	for i := 1; i < 41; i++ {
		round(i)
	}
	settleLeaks(t, n, "subscription churn", base, 5, 10*time.Second)
	if subs, streams := subs(); subs != 0 || streams != 0 {
		t.Fatalf("%d subscriptions, %d streams on the node", subs, streams)
	}
}
