package runtime_test

import (
	"context"
	"fmt"
	goruntime "runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/internal/cputime"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type engineBenchState struct {
	N int `json:"n"`
}

// benchRuns makes every workflow's key unique across sub-benchmarks and
// -count runs.
var benchRuns atomic.Int64

// engineSteps counts the committed steps of BenchmarkEngineSteps.
var engineSteps atomic.Int64

// engineStepper is node's BenchmarkWorkflowSteps stepper: a loop of steps
// that each change the state.
var engineStepper = rivet.Actor[engineBenchState]{
	Name: "stepper",
	Run: func(ctx *workflow.Ctx[engineBenchState]) error {
		_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "work"}, func(lc *workflow.Ctx[engineBenchState], i int) (int, error) {
			if i == 50 {
				return i, workflow.Break
			}
			err := lc.Step("step", func(s *workflow.StepCtx[engineBenchState]) error {
				s.State.N++
				return nil
			})
			if err == nil {
				engineSteps.Add(1)
			}
			return i + 1, err
		})
		return err
	},
}

// engineSequencer is node's BenchmarkWorkflowSteps sequencer: 50 steps
// named by their number, each recording an output and changing no state
// (one history entry each, nothing pruned).
var engineSequencer = rivet.Actor[engineBenchState]{
	Name: "sequencer",
	Run: func(ctx *workflow.Ctx[engineBenchState]) error {
		for i := range 50 {
			if _, err := workflow.Step(ctx, "step-"+strconv.Itoa(i), func(*workflow.StepCtx[engineBenchState]) (int, error) { return i, nil }); err != nil {
				return err
			}
			engineSteps.Add(1)
		}
		return nil
	},
}

// BenchmarkEngineSteps is case (b) of node's BenchmarkWorkflowSteps (1,000
// workflows of 50 steps, each step changing the state) on the in-memory
// store: the CPU a step costs the workflow engine, the runtime and the
// group committer, without etcd's, whose cost per key dominates the node
// benchmark and whose heap the garbage collector scans there. It is the
// figure to watch when changing the step path.
func BenchmarkEngineSteps(b *testing.B) {
	reg, err := rivet.Setup(engineStepper, engineSequencer)
	if err != nil {
		b.Fatal(err)
	}
	st := storage.NewMemory()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	com := storage.NewCommitter(st, storage.DefaultCommitterConfig())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); _ = com.Run(ctx) }()
	cfg := runtime.DefaultConfig()
	cfg.NodeID = "n1"
	cfg.Partitions = 64
	own := runtime.NewOwnership(st, runtime.NodeRecord{NodeID: cfg.NodeID}, 5*time.Second, nil)
	if err := own.Establish(ctx, runtime.AllPartitions(cfg.Partitions)); err != nil {
		b.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = own.Run(ctx) }()
	h, err := runtime.New(cfg, reg, st, com, own)
	if err != nil {
		b.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		_ = h.Stop(sctx)
	}()
	b.Run("1000-workflows-concurrent", func(b *testing.B) { measureEngine(b, h, "stepper") })
	b.Run("1000-workflows-concurrent-named-steps", func(b *testing.B) { measureEngine(b, h, "sequencer") })
}

// measureEngine runs 1,000 workflows of actor, 50 steps each, b.N times.
func measureEngine(b *testing.B, h *runtime.Host, actor string) {
	ctx := context.Background()
	const workflows, steps = 1000, 50
	b.ResetTimer()
	var cpu, elapsed time.Duration
	var allocs, bytes uint64
	for run := range b.N {
		engineSteps.Store(0)
		var ms0, ms goruntime.MemStats
		goruntime.ReadMemStats(&ms0)
		cpu0, start := processCPU(b), time.Now()
		var cwg sync.WaitGroup
		next := atomic.Int64{}
		for range 64 {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				for w := next.Add(1) - 1; w < workflows; w = next.Add(1) - 1 {
					ref := runtime.Ref{Name: actor, Key: []string{fmt.Sprintf("r%d-%d-%d", benchRuns.Add(1), run, w)}}
					if _, err := h.Create(ctx, ref, nil); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		cwg.Wait()
		deadline := time.Now().Add(5 * time.Minute)
		for engineSteps.Load() < workflows*steps {
			if time.Now().After(deadline) {
				b.Fatalf("only %d of %d steps done", engineSteps.Load(), workflows*steps)
			}
			time.Sleep(time.Millisecond)
		}
		elapsed += time.Since(start)
		cpu += processCPU(b) - cpu0
		goruntime.ReadMemStats(&ms)
		allocs += ms.Mallocs - ms0.Mallocs
		bytes += ms.TotalAlloc - ms0.TotalAlloc
	}
	total := float64(b.N * workflows * steps)
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/total, "cpu-µs/step")
	b.ReportMetric(total/elapsed.Seconds(), "steps/s")
	b.ReportMetric(float64(allocs)/total, "allocs/step")
	b.ReportMetric(float64(bytes)/total, "B/step")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	d, err := cputime.Process()
	if err != nil {
		b.Fatal(err)
	}
	return d
}
