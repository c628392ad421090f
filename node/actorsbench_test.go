package node_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/workflow"
)

type holderState struct {
	N int `json:"n"`
}

// benchHolder is a plain actor, as most actors are: small state, a read-only
// action, no workflow.
var benchHolder = rivet.Actor[holderState]{
	Name: "holder",
	Actions: rivet.Actions[holderState]{
		"get": rivet.Query(func(c *rivet.ActionCtx[holderState]) (int, error) { return c.State.N, nil }),
	},
}

// workflowsWaiting counts the waiter and sleeper workflows that reached
// their wait (their "ready" step ran).
var workflowsWaiting atomic.Int64

// benchWaiter is a workflow blocked on its queue with no timeout, as a
// mailbox-style workflow spends most of its life.
var benchWaiter = rivet.Actor[holderState]{
	Name:   "waiter",
	Queues: rivet.Queues{"jobs": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[holderState]) error {
		if err := ctx.Step("ready", func(*workflow.StepCtx[holderState]) error { workflowsWaiting.Add(1); return nil }); err != nil {
			return err
		}
		_, err := workflow.Next[int](ctx, "wait-job")
		return err
	},
}

// benchLooper is waiter in the shape most workflows wait in: a loop whose
// iteration receives (the seed's reminder and coordinator patterns).
var benchLooper = rivet.Actor[holderState]{
	Name:   "looper",
	Queues: rivet.Queues{"jobs": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[holderState]) error {
		if err := ctx.Step("ready", func(*workflow.StepCtx[holderState]) error { workflowsWaiting.Add(1); return nil }); err != nil {
			return err
		}
		return ctx.Loop("mailbox", func(lc *workflow.Ctx[holderState]) error {
			_, err := workflow.Next[int](lc, "wait-job")
			return err
		})
	},
}

// benchSleeper is a workflow in a durable sleep, still in memory (its actor
// has not been idle for the idle timeout yet).
var benchSleeper = rivet.Actor[holderState]{
	Name: "sleeper",
	Run: func(ctx *workflow.Ctx[holderState]) error {
		if err := ctx.Step("ready", func(*workflow.StepCtx[holderState]) error { workflowsWaiting.Add(1); return nil }); err != nil {
			return err
		}
		return ctx.Sleep("nap", time.Hour)
	},
}

// benchActors is how many actors of each kind BenchmarkActiveActors makes.
const benchActors = 10_000

// BenchmarkActiveActors measures what actors cost a node's memory, and how
// fast it brings stored actors back into memory: 10,000 plain actors
// (each called once, so in memory), 10,000 workflows waiting on a queue,
// 10,000 waiting on a queue in a loop and 10,000 in a durable sleep, on one node with its embedded etcd; then
// the node restarted on the same data, which holds them all in storage and
// none in memory; then a read-only call to each plain actor (each loads
// the actor from etcd: an activation), and the same calls again (in
// memory). Memory figures are the process's heap and goroutine stacks in
// use after a collection, etcd's included (it runs in the process), per
// actor of each kind.
func BenchmarkActiveActors(b *testing.B) {
	reg, err := rivet.Setup(benchHolder, benchWaiter, benchLooper, benchSleeper)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cfg := node.DefaultLocalConfig(dir)
	cfg.Logger = zap.NewNop()
	// Every actor stays in memory for the figures, however long a busy
	// machine takes to make them all.
	cfg.Runtime.IdleTimeout = time.Hour
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	start := func() (*node.Node, *client.Client) {
		n, err := node.Start(ctx, cfg, reg)
		if err != nil {
			b.Fatal(err)
		}
		c, err := client.New(n.GRPCAddr())
		if err != nil {
			b.Fatal(err)
		}
		return n, c
	}
	stop := func(n *node.Node, c *client.Client) {
		c.Close()
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		if err := n.Stop(sctx); err != nil {
			b.Fatal(err)
		}
	}
	// each runs f for every key of kind from 64 callers and returns how
	// long that took and each call's latency, sorted.
	each := func(kind string, f func(key []string) error) (time.Duration, []time.Duration) {
		var (
			wg     sync.WaitGroup
			next   atomic.Int64
			mu     sync.Mutex
			lat    = make([]time.Duration, 0, benchActors)
			failed atomic.Bool
		)
		t0 := time.Now()
		for range 64 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < benchActors && !failed.Load(); i = next.Add(1) - 1 {
					c0 := time.Now()
					if err := f([]string{fmt.Sprintf("%s-%d", kind, i)}); err != nil {
						b.Error(err)
						failed.Store(true)
						return
					}
					d := time.Since(c0)
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if failed.Load() {
			b.FailNow()
		}
		slices.Sort(lat)
		return time.Since(t0), lat
	}
	type mem struct{ heap, stacks uint64 }
	inUse := func() mem {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return mem{ms.HeapInuse, ms.StackInuse}
	}
	// settled waits until the node has committed nothing for a while, so
	// that the workflows' last entries (the waits) are in.
	settled := func(n *node.Node) {
		last, still := n.Host().Stats().Commits, 0
		for deadline := time.Now().Add(time.Minute); still < 3; {
			if time.Now().After(deadline) {
				b.Fatal("the node kept committing for a minute")
			}
			time.Sleep(100 * time.Millisecond)
			if c := n.Host().Stats().Commits; c == last {
				still++
			} else {
				last, still = c, 0
			}
		}
	}
	until := func(what string, cond func() bool) {
		for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("not within 2 minutes: %s", what)
			}
		}
	}
	perActor := func(unit string, before, after mem) {
		b.ReportMetric(float64(int64(after.heap)-int64(before.heap))/benchActors, unit+"-heap-B/actor")
		b.ReportMetric(float64(int64(after.stacks)-int64(before.stacks))/benchActors, unit+"-stack-B/actor")
	}

	for range b.N {
		workflowsWaiting.Store(0)
		n, c := start()
		settled(n)
		m0, g0 := inUse(), runtime.NumGoroutine()

		_, _ = each("holder", func(key []string) error {
			_, err := c.Actor("holder", key...).Call(ctx, "get")
			return err
		})
		m1, g1 := inUse(), runtime.NumGoroutine()
		perActor("plain", m0, m1)

		_, _ = each("waiter", func(key []string) error {
			_, err := c.Create(ctx, "waiter", key, nil)
			return err
		})
		until("every waiter at its receive", func() bool { return workflowsWaiting.Load() == benchActors })
		settled(n)
		m2, g2 := inUse(), runtime.NumGoroutine()
		perActor("waiting", m1, m2)

		_, _ = each("looper", func(key []string) error {
			_, err := c.Create(ctx, "looper", key, nil)
			return err
		})
		until("every looper at its receive", func() bool { return workflowsWaiting.Load() == 2*benchActors })
		settled(n)
		m2l, g2l := inUse(), runtime.NumGoroutine()
		perActor("waiting-in-loop", m2, m2l)

		_, _ = each("sleeper", func(key []string) error {
			_, err := c.Create(ctx, "sleeper", key, nil)
			return err
		})
		until("every sleeper at its sleep", func() bool { return workflowsWaiting.Load() == 3*benchActors })
		settled(n)
		m3, g3 := inUse(), runtime.NumGoroutine()
		perActor("sleeping", m2l, m3)
		b.ReportMetric(float64(g1-g0)/benchActors, "plain-goroutines/actor")
		b.ReportMetric(float64(g2-g1)/benchActors, "waiting-goroutines/actor")
		b.ReportMetric(float64(g2l-g2)/benchActors, "waiting-in-loop-goroutines/actor")
		b.ReportMetric(float64(g3-g2l)/benchActors, "sleeping-goroutines/actor")
		if active := n.Host().Stats().ActiveActors; active < 4*benchActors {
			b.Fatalf("%d actors in memory, want %d: the figures above are not per active actor", active, 4*benchActors)
		}
		stop(n, c)

		// The same data, none of it in memory.
		n, c = start()
		settled(n)
		m4 := inUse()
		b.ReportMetric(float64(int64(m4.heap)-int64(m0.heap))/(4*benchActors), "stored-heap-B/actor")
		if active := n.Host().Stats().ActiveActors; active > benchActors/100 {
			b.Fatalf("%d actors in memory after a restart, want none of the 40,000 stored", active)
		}
		get := func(key []string) error {
			_, err := c.Actor("holder", key...).NoCreate().Call(ctx, "get")
			return err
		}
		cpu0 := processCPU(b)
		took, lat := each("holder", get)
		b.ReportMetric(benchActors/took.Seconds(), "activations/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "activation-p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "activation-p99-µs")
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/benchActors, "activation-cpu-µs")
		cpu0 = processCPU(b)
		took, lat = each("holder", get)
		b.ReportMetric(benchActors/took.Seconds(), "warm-calls/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "warm-p50-µs")
		b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/benchActors, "warm-cpu-µs")
		stop(n, c)
	}
	b.ReportMetric(0, "ns/op")
}
