package node_test

import (
	"context"
	"fmt"
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

// wakeBench is what BenchmarkTimerWakes' workflows read and report.
var wakeBench struct {
	due     atomic.Int64 // unix ms every workflow sleeps until
	asleep  atomic.Int64 // workflows past their "plan" step
	mu      sync.Mutex
	fired   []time.Time // when each "fire" step ran
	firedBy map[string]int
}

// benchReminder sleeps until the instant the benchmark set when it started
// (recorded by its first step, so a replay sleeps until the same one), then
// records when it woke, once: the seed's reminder, one per actor.
var benchReminder = rivet.Actor[holderState]{
	Name: "wakeReminder",
	Run: func(ctx *workflow.Ctx[holderState]) error {
		due, err := workflow.Step(ctx, "plan", func(*workflow.StepCtx[holderState]) (int64, error) {
			wakeBench.asleep.Add(1)
			return wakeBench.due.Load(), nil
		})
		if err != nil {
			return err
		}
		if err := ctx.SleepUntil("nap", time.UnixMilli(due)); err != nil {
			return err
		}
		return ctx.Step("fire", func(s *workflow.StepCtx[holderState]) error {
			now := time.Now()
			s.State.N++
			wakeBench.mu.Lock()
			wakeBench.fired = append(wakeBench.fired, now)
			wakeBench.firedBy[fmt.Sprint(s.Key())]++
			wakeBench.mu.Unlock()
			return nil
		})
	},
}

// BenchmarkTimerWakes measures how fast one node wakes durable sleeps due
// at the same instant: N workflows (one actor each) sleep until one
// instant, a few seconds after they are all created; each, when it wakes,
// runs one step and finishes. evicted: each actor left memory before the
// instant (idle timeout 1 s), as any reminder set more than the idle
// timeout (30 s) ahead has, so each wake loads its actor from etcd through
// the node's wake loop, reads its history and replays it; in-memory: the
// actors stay in memory (their sleeps are in-memory timers). Figures:
// wakes/s from the instant to the last wake, lateness (a wake's time past
// the instant) at the median, p99 and max, and the process's CPU (etcd's
// included: it runs in the process) per wake.
func BenchmarkTimerWakes(b *testing.B) {
	for _, bc := range []struct {
		name string
		idle time.Duration
	}{{"evicted", time.Second}, {"in-memory", time.Hour}} {
		b.Run(bc.name, func(b *testing.B) { benchTimerWakes(b, bc.idle) })
	}
}

// wakeBenchN is how many workflows BenchmarkTimerWakes wakes at once.
const wakeBenchN = 3000

func benchTimerWakes(b *testing.B, idle time.Duration) {
	reg, err := rivet.Setup(benchReminder)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for range b.N {
		cfg := node.DefaultLocalConfig(b.TempDir())
		cfg.Logger = zap.NewNop()
		cfg.Runtime.IdleTimeout = idle
		n, err := node.Start(ctx, cfg, reg)
		if err != nil {
			b.Fatal(err)
		}
		c, err := client.New(n.GRPCAddr())
		if err != nil {
			b.Fatal(err)
		}
		wakeBench.asleep.Store(0)
		wakeBench.fired = make([]time.Time, 0, wakeBenchN)
		wakeBench.firedBy = map[string]int{}
		// Far enough ahead for a busy machine to create them all and
		// (evicted) for each to leave memory.
		lead := 8*time.Second + wakeBenchN*2*time.Millisecond
		due := time.Now().Add(lead).Truncate(time.Millisecond)
		wakeBench.due.Store(due.UnixMilli())
		var (
			wg     sync.WaitGroup
			next   atomic.Int64
			failed atomic.Bool
		)
		for range 64 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < wakeBenchN && !failed.Load(); i = next.Add(1) - 1 {
					if _, err := c.Create(ctx, "wakeReminder", []string{fmt.Sprintf("r-%d", i)}, nil); err != nil {
						b.Error(err)
						failed.Store(true)
					}
				}
			})
		}
		wg.Wait()
		if failed.Load() {
			b.FailNow()
		}
		for deadline := time.Now().Add(time.Minute); wakeBench.asleep.Load() < wakeBenchN; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d workflows asleep after a minute", wakeBench.asleep.Load(), wakeBenchN)
			}
		}
		if idle < time.Hour {
			for time.Now().Before(due) && n.Host().Stats().ActiveActors > 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		active := n.Host().Stats().ActiveActors
		if left := time.Until(due); left < 500*time.Millisecond {
			b.Fatalf("setup ran %v past its lead (%v): the workflows were not all asleep before the instant", -left+500*time.Millisecond, lead)
		}
		if idle < time.Hour && active > 0 {
			b.Fatalf("%d actors still in memory at the instant", active)
		}
		time.Sleep(time.Until(due))
		cpu0 := processCPU(b)
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
			wakeBench.mu.Lock()
			k := len(wakeBench.fired)
			wakeBench.mu.Unlock()
			if k >= wakeBenchN {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d wakes within 5 minutes", k, wakeBenchN)
			}
		}
		cpu := processCPU(b) - cpu0
		wakeBench.mu.Lock()
		lat := make([]time.Duration, len(wakeBench.fired))
		for i, t := range wakeBench.fired {
			lat[i] = t.Sub(due)
		}
		for k, v := range wakeBench.firedBy {
			if v != 1 {
				b.Errorf("%s fired %d times", k, v)
			}
		}
		wakeBench.mu.Unlock()
		slices.Sort(lat)
		last := lat[len(lat)-1]
		b.ReportMetric(float64(wakeBenchN)/last.Seconds(), "wakes/s")
		b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "late-p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "late-p99-ms")
		b.ReportMetric(float64(last.Milliseconds()), "late-max-ms")
		b.ReportMetric(float64(cpu.Microseconds())/wakeBenchN, "cpu-µs/wake")
		c.Close()
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		if err := n.Stop(sctx); err != nil {
			b.Fatal(err)
		}
		scancel()
	}
	b.ReportMetric(0, "ns/op")
}
