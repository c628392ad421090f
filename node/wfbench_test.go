package node_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/node"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/workflow"
)

type stepperState struct {
	N int `json:"n"`
}

// stepsDone counts committed steps across every stepper of the benchmark.
var stepsDone atomic.Int64

// stepper runs the number of steps given as its create input, one after
// another, each changing its state (so each commits state and history).
var stepper = steppingActor("stepper", true)

// recorder is stepper with steps that change no state: each commits its
// history entry alone (the loop's checkpoint and pruning as for stepper).
var recorder = steppingActor("recorder", false)

func steppingActor(name string, changeState bool) rivet.Actor[stepperState] {
	return rivet.Actor[stepperState]{
		Name: name,
		Run: func(ctx *workflow.Ctx[stepperState]) error {
			// Read inside a step, so that a replay sees the value the
			// first run recorded.
			steps, err := workflow.Step(ctx, "steps", func(s *workflow.StepCtx[stepperState]) (int, error) { return benchSteps.Load().(int), nil })
			if err != nil {
				return err
			}
			_, err = workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "work"}, func(lc *workflow.Ctx[stepperState], i int) (int, error) {
				if i == steps {
					return i, workflow.Break
				}
				var err error
				if changeState {
					err = lc.Step("step", func(s *workflow.StepCtx[stepperState]) error {
						s.State.N++
						return nil
					})
				} else {
					_, err = workflow.Step(lc, "step", func(*workflow.StepCtx[stepperState]) (int, error) { return i, nil })
				}
				if err == nil {
					stepsDone.Add(1)
				}
				return i + 1, err
			})
			return err
		},
	}
}

// sequencer runs its steps as a plain Go loop, each step named by its
// number ("step-0", "step-1"...) and changing no state, the way a Temporal
// workflow calls activities in a for loop: each commits its history entry
// alone, and nothing is pruned.
var sequencer = rivet.Actor[stepperState]{
	Name: "sequencer",
	Run: func(ctx *workflow.Ctx[stepperState]) error {
		steps, err := workflow.Step(ctx, "steps", func(s *workflow.StepCtx[stepperState]) (int, error) { return benchSteps.Load().(int), nil })
		if err != nil {
			return err
		}
		for i := range steps {
			if _, err := workflow.Step(ctx, "step-"+strconv.Itoa(i), func(*workflow.StepCtx[stepperState]) (int, error) { return i, nil }); err != nil {
				return err
			}
			stepsDone.Add(1)
		}
		return nil
	},
}

var benchSteps atomic.Value

// benchRun makes the actor keys of every run unique (-count reruns).
var benchRun atomic.Int64

// BenchmarkWorkflowSteps measures committed workflow steps per second on a
// real node: (a) one workflow running steps one after another, (b) 1,000
// workflows running steps at the same time. Each step commits its history
// entry and the state it changed in one fenced etcd transaction (one key:
// the entry carries the state). Beside
// them, etcd's own batched-put rate (64 goroutines, 64 puts per txn) on an
// embedded etcd of the same kind, measured in the same run.
func BenchmarkWorkflowSteps(b *testing.B) {
	reg, err := rivet.Setup(stepper, recorder, sequencer)
	if err != nil {
		b.Fatal(err)
	}
	cfg := node.DefaultLocalConfig(b.TempDir())
	cfg.Logger = zap.NewNop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	n, err := node.Start(ctx, cfg, reg)
	if err != nil {
		b.Fatal(err)
	}
	defer n.Stop(context.Background())
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	measure := func(b *testing.B, actor string, workflows, steps int) {
		benchSteps.Store(steps)
		total := int64(workflows * steps)
		b.ResetTimer()
		var elapsed time.Duration
		for range b.N {
			stepsDone.Store(0)
			st0 := n.Host().Stats()
			var ms0 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			cpu0 := processCPU(b)
			start := time.Now()
			// Create the workflows from 64 callers, as clients would.
			var wg sync.WaitGroup
			var failed atomic.Bool
			next := atomic.Int64{}
			run := benchRun.Add(1)
			for range min(64, workflows) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for w := next.Add(1) - 1; w < int64(workflows); w = next.Add(1) - 1 {
						if _, err := c.Create(ctx, actor, []string{fmt.Sprintf("run%d-%d", run, w)}, nil); err != nil {
							b.Error(err)
							failed.Store(true)
							return
						}
					}
				}()
			}
			wg.Wait()
			if failed.Load() {
				b.FailNow()
			}
			// The steady state: from the moment every workflow exists.
			steadyFrom, steadySteps := time.Now(), stepsDone.Load()
			for stepsDone.Load() < total {
				if ctx.Err() != nil {
					b.Fatalf("only %d of %d steps done", stepsDone.Load(), total)
				}
				time.Sleep(time.Millisecond)
			}
			elapsed += time.Since(start)
			if workflows > 1 && total-steadySteps > total/2 {
				b.ReportMetric(float64(total-steadySteps)/time.Since(steadyFrom).Seconds(), "steady-steps/s")
			}
			// Figures the load of other processes does not change much:
			// the process's CPU time and heap allocations per step, etcd's
			// included (it runs in this process).
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(total), "cpu-µs/step")
			b.ReportMetric(float64(ms.Mallocs-ms0.Mallocs)/float64(total), "allocs/step")
			b.ReportMetric(float64(ms.TotalAlloc-ms0.TotalAlloc)/float64(total), "B/step")
			st := n.Host().Stats()
			b.ReportMetric(float64(st.Commits-st0.Commits)/float64(total), "commits/step")
			b.ReportMetric(float64(st.Commits-st0.Commits)/float64(max(st.CommitBatches-st0.CommitBatches, 1)), "txns/batch")
		}
		b.ReportMetric(float64(total)*float64(b.N)/elapsed.Seconds(), "steps/s")
		b.ReportMetric(0, "ns/op")
	}
	b.Run("one-workflow-sequential", func(b *testing.B) { measure(b, "stepper", 1, 2000) })
	b.Run("1000-workflows-concurrent", func(b *testing.B) { measure(b, "stepper", 1000, 50) })
	// The same with steps that only record their output: what a step
	// costs without a state write.
	b.Run("1000-workflows-concurrent-no-state", func(b *testing.B) { measure(b, "recorder", 1000, 50) })
	// Steps in a plain Go loop, named by number, changing no state: one
	// etcd key per step, nothing pruned.
	b.Run("1000-workflows-concurrent-named-steps", func(b *testing.B) { measure(b, "sequencer", 1000, 50) })
	b.Run("etcd-batched-put-reference", func(b *testing.B) {
		cli := etcdtest.StartClient(b)
		var rate float64
		for range b.N {
			r, err := etcdstore.MeasureBatchedPutRate(ctx, cli, 3*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			rate += r
		}
		b.ReportMetric(rate/float64(b.N), "keys/s")
		b.ReportMetric(0, "ns/op")
	})
}
