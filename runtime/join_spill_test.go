package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/workflow"
)

// newEnvLimits is newEnv over a store that bounds its transactions to
// limits: a store of etcd's defaults bounds them at 1.4 MiB, which only
// a fan-out of tens of thousands of branches reaches.
func newEnvLimits(t *testing.T, reg *rivet.Registry, limits storage.Limits) *env {
	t.Helper()
	es, err := etcdstore.New(etcdtest.StartClient(t), "/test/", etcdstore.WithLimits(limits))
	if err != nil {
		t.Fatal(err)
	}
	cfg := runtime.DefaultConfig()
	cfg.StepGrace = runtime.ShortStepGrace
	cfg.NodeID = "n1"
	cfg.Partitions = testPartitions
	e := &env{t: t, store: &faultStore{Store: es}, reg: reg, cfg: cfg}
	e.start()
	t.Cleanup(func() { e.stop() })
	return e
}

type fanResult struct {
	ID string `json:"id"`
	N  int    `json:"n"`
}

type fanState struct {
	Sum   int `json:"sum"`
	Count int `json:"count"`
}

// fanOut joins n branches of one Do step each, whose outputs together
// pass one transaction of the store newEnvLimits makes, then waits for a
// "go" message, then sums what the join returned. Each branch's body
// counts its runs in runs; odd branches wait for gate first (until their
// run is stopped), so that the test can stop the host mid-join.
func fanOut(n int, runs []atomic.Int32, gate <-chan struct{}) rivet.Actor[fanState] {
	return rivet.Actor[fanState]{
		Name:   "fanOut",
		Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
		Run: func(ctx *workflow.Ctx[fanState]) error {
			bs := workflow.Branches[fanState, fanResult]{}
			for i := range n {
				bs[fmt.Sprintf("item-%05d", i)] = func(c *workflow.Ctx[fanState]) (fanResult, error) {
					return workflow.Do(c, "work", func(d *workflow.DoCtx) (fanResult, error) {
						runs[i].Add(1)
						if i%2 == 1 {
							select {
							case <-gate:
							case <-d.Context().Done():
								return fanResult{}, d.Context().Err()
							}
						}
						return fanResult{ID: fmt.Sprintf("result-of-item-%05d", i), N: i}, nil
					})
				}
			}
			got, err := workflow.Join(ctx, "fan", bs)
			if err != nil {
				return err
			}
			if _, err := workflow.Next[struct{}](ctx, "wait-go"); err != nil {
				return err
			}
			if _, err := workflow.Next[struct{}](ctx, "wait-go-again"); err != nil {
				return err
			}
			return ctx.Step("sum", func(s *workflow.StepCtx[fanState]) error {
				for name, r := range got {
					if r.ID != "result-of-"+name {
						return workflow.Critical(fmt.Errorf("branch %s returned %+v", name, r))
					}
					s.State.Sum += r.N
					s.State.Count++
				}
				return nil
			})
		},
	}
}

// A join whose branches' outputs are together more than one store
// transaction holds completes, its result whole, where it failed after
// every branch had run (RESOURCE_EXHAUSTED, "too large for one
// transaction": a trial's 20,000 branches): the outputs are committed
// apart, in entries of their own, before the join's record. A host
// stopped mid-join, a settle cut short between those commits (a storage
// error), and a replay of the settled join after a restart all give the
// same result, and no branch's body runs again once it completed.
func TestAJoinWhoseOutputsPassOneTransactionCompletes(t *testing.T) {
	t.Parallel()
	n := 3000
	limits := storage.Limits{MaxTxnOps: 128, MaxTxnBytes: 160 << 10}
	if s := os.Getenv("RIVET_BIG_JOIN"); s != "" {
		// RIVET_BIG_JOIN=20000: a trial's fan-out, under etcd's own
		// bounds.
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
		limits = storage.DefaultLimits()
	}
	runs := make([]atomic.Int32, n)
	gate := make(chan struct{})
	e := newEnvLimits(t, counterReg(t, fanOut(n, runs, gate)), limits)
	ref := runtime.Ref{Name: "fanOut", Key: []string{"f"}}
	started := time.Now()
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	ran := func(odd bool) int {
		c := 0
		for i := range runs {
			if i%2 == 1 == odd && runs[i].Load() > 0 {
				c++
			}
		}
		return c
	}
	// Mid-join: the even branches done, the odd ones in their bodies.
	waitFor(t, "every branch to start", 60*time.Second, func() bool { return ran(false)+ran(true) == n })
	waitFor(t, "the even branches to be recorded", 60*time.Second, func() bool {
		h, err := e.host.History(ctx(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, he := range h.Entries {
			if he.Kind == string(workflow.KindStep) && he.Status == string(workflow.StatusCompleted) {
				done++
			}
		}
		return done == (n+1)/2
	})
	e.restart()
	// The settle, cut short after its first outputs entry: the run stops
	// on the storage error and runs again from storage.
	e.store.failCommitSub.Store("fan/~outputs/1")
	close(gate)
	atGo := func() bool {
		ins := inspect(t, e.host, "fanOut", "f")
		if ins.WorkflowStatus == runtime.WorkflowFailed {
			t.Fatalf("workflow failed: %s", ins.WorkflowError)
		}
		return ins.WorkflowStatus == runtime.WorkflowSleeping && slices.Contains(ins.WorkflowWake.Queues, "go")
	}
	waitFor(t, "the join to settle", 60*time.Second, atGo)
	t.Logf("%d branches joined in %v", n, time.Since(started))
	for i := range runs {
		if got := runs[i].Load(); i%2 == 0 && got != 1 || got < 1 {
			t.Fatalf("branch %d's body ran %d times", i, got)
		}
	}
	send := func() {
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// The first message commits the settled join's record with the
	// receive; a restart then replays the join from its record and its
	// outputs entries.
	send()
	waitFor(t, "the first message's receive", 30*time.Second, func() bool {
		if !atGo() {
			return false
		}
		h, err := e.host.History(ctx(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(h.Entries, func(he runtime.HistoryEntry) bool { return he.Path == "wait-go" })
	})
	h, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	parts := 0
	for _, he := range h.Entries {
		if strings.HasPrefix(he.Path, "fan/~outputs/") {
			parts++
		}
		if he.Path == "fan" && he.Status != string(workflow.StatusCompleted) {
			t.Fatalf("join recorded %s", he.Status)
		}
	}
	if parts < 2 {
		t.Fatalf("history holds %d outputs entries of the join", parts)
	}
	e.restart()
	send()
	waitFor(t, "the workflow to end", 60*time.Second, func() bool {
		ins := inspect(t, e.host, "fanOut", "f")
		return ins.WorkflowStatus == runtime.WorkflowCompleted || ins.WorkflowStatus == runtime.WorkflowFailed
	})
	ins := inspect(t, e.host, "fanOut", "f")
	if want := fmt.Sprintf(`{"sum":%d,"count":%d}`, n*(n-1)/2, n); ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != want {
		t.Fatalf("workflow %s (%s), state %s, want %s", ins.WorkflowStatus, ins.WorkflowError, ins.State, want)
	}
	if v, _ := e.store.failCommitSub.Load().(string); v != "" {
		t.Fatalf("the settle wrote no second outputs entry: the join's outputs (%d branches) rode in one commit", n)
	}
}

// spillRetryN is how many branches spillRetry joins: their values, of
// about 5,000 bytes each, are over workflow.MaxRidingBytes together. (A
// retry --from inside a join deletes the entries recorded after the one
// it names, in one transaction: a few dozen at most.)
const spillRetryN = 20

// spillRetry joins spillRetryN branches of one step each; branch 7's
// step fails (no retries) until healthy, so the join fails with its other
// branches' values committed apart. runs counts each branch's body runs.
func spillRetry(runs []atomic.Int32, healthy *atomic.Bool) rivet.Actor[fanState] {
	return rivet.Actor[fanState]{
		Name: "spillRetry",
		Run: func(ctx *workflow.Ctx[fanState]) error {
			bs := workflow.Branches[fanState, fanResult]{}
			for i := range spillRetryN {
				bs[fmt.Sprintf("item-%05d", i)] = func(c *workflow.Ctx[fanState]) (fanResult, error) {
					return workflow.DoOpts(c, workflow.StepOptions{Name: "work", MaxRetries: workflow.NoRetries}, func(*workflow.DoCtx) (fanResult, error) {
						runs[i].Add(1)
						if i == 7 && !healthy.Load() {
							return fanResult{}, errors.New("item 7 is down")
						}
						return fanResult{ID: fmt.Sprintf("result-of-item-%05d", i) + strings.Repeat(".", 5000), N: i}, nil
					})
				}
			}
			got, err := workflow.Join(ctx, "fan", bs)
			if err != nil {
				return err
			}
			return ctx.Step("sum", func(s *workflow.StepCtx[fanState]) error {
				for name, r := range got {
					if !strings.HasPrefix(r.ID, "result-of-"+name+".") {
						return workflow.Critical(fmt.Errorf("branch %s returned %.40q", name, r.ID))
					}
					s.State.Sum += r.N
					s.State.Count++
				}
				return nil
			})
		},
	}
}

// A failed join whose branches' values were committed apart is retried,
// plainly and from inside it (--from its failed step), as any failed
// join: the retried branch runs again, the others replay, and the join
// settles with every branch's value.
func TestRetryOfAFailedJoinWithOutputsCommittedApart(t *testing.T) {
	t.Parallel()
	for _, from := range []string{"", "fan/item-00007/work"} {
		t.Run("from="+from, func(t *testing.T) {
			t.Parallel()
			runs := make([]atomic.Int32, spillRetryN)
			var healthy atomic.Bool
			e := newEnv(t, counterReg(t, spillRetry(runs, &healthy)), nil)
			ref := runtime.Ref{Name: "spillRetry", Key: []string{"r"}}
			if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the join to fail", 30*time.Second, func() bool {
				return inspect(t, e.host, "spillRetry", "r").WorkflowStatus == runtime.WorkflowFailed
			})
			h, err := e.host.History(ctx(t), ref)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(h.Entries, func(he runtime.HistoryEntry) bool { return he.Path == "fan/~outputs/1" }) {
				t.Fatalf("the failed join's values were not committed apart")
			}
			healthy.Store(true)
			if _, err := e.host.RetryWorkflow(ctx(t), ref, from); err != nil {
				t.Fatalf("retry --from %q: %v", from, err)
			}
			waitFor(t, "the retried workflow to end", 30*time.Second, func() bool {
				st := inspect(t, e.host, "spillRetry", "r").WorkflowStatus
				return st == runtime.WorkflowCompleted || st == runtime.WorkflowFailed
			})
			ins := inspect(t, e.host, "spillRetry", "r")
			if want := fmt.Sprintf(`{"sum":%d,"count":%d}`, spillRetryN*(spillRetryN-1)/2, spillRetryN); ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != want {
				t.Fatalf("workflow %s (%s), state %s, want %s", ins.WorkflowStatus, ins.WorkflowError, ins.State, want)
			}
			for i := range runs {
				// Only the failed step runs again; from inside the join,
				// so do the steps recorded after it.
				got := runs[i].Load()
				if i == 7 && got != 2 || i != 7 && (got < 1 || got > 2 || from == "" && got != 1) {
					t.Fatalf("branch %d's body ran %d times", i, got)
				}
			}
		})
	}
}

// While a node of an older build may replay the workflow (the node has
// not seen every node's record say it reads them), a join keeps its values
// in its record, as before: such a build reads values committed apart as
// zero values.
func TestAJoinKeepsItsValuesInItsRecordUntilEveryNodeReadsThemApart(t *testing.T) {
	t.Parallel()
	runs := make([]atomic.Int32, spillRetryN)
	var healthy atomic.Bool
	healthy.Store(true)
	e := newEnv(t, counterReg(t, spillRetry(runs, &healthy)), nil)
	e.host.SetWriteFormat(2)
	ref := runtime.Ref{Name: "spillRetry", Key: []string{"old"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to end", 30*time.Second, func() bool {
		st := inspect(t, e.host, "spillRetry", "old").WorkflowStatus
		return st == runtime.WorkflowCompleted || st == runtime.WorkflowFailed
	})
	ins := inspect(t, e.host, "spillRetry", "old")
	if want := fmt.Sprintf(`{"sum":%d,"count":%d}`, spillRetryN*(spillRetryN-1)/2, spillRetryN); ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != want {
		t.Fatalf("workflow %s (%s), state %s, want %s", ins.WorkflowStatus, ins.WorkflowError, ins.State, want)
	}
	h, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, he := range h.Entries {
		if strings.Contains(he.Path, "~outputs") {
			t.Fatalf("history holds %s", he.Path)
		}
	}
}

// spillLoopRounds is how many iterations spillLoop runs, each joining
// spillRetryN branches of about 5,000-byte values (written apart).
const spillLoopRounds = 6

// spillLoop is a loop that prunes its history every 2 iterations (its
// iterations in slots), each iteration a join whose values go apart from
// its record, then a step that sums them.
var spillLoop = rivet.Actor[fanState]{
	Name: "spillLoop",
	Run: func(ctx *workflow.Ctx[fanState]) error {
		_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "rounds", HistoryPruneInterval: 2, HistorySize: 1}, func(lc *workflow.Ctx[fanState], round int) (int, error) {
			if round == spillLoopRounds {
				return round, workflow.Break
			}
			bs := workflow.Branches[fanState, fanResult]{}
			for i := range spillRetryN {
				bs[fmt.Sprintf("item-%05d", i)] = func(c *workflow.Ctx[fanState]) (fanResult, error) {
					return workflow.Do(c, "work", func(*workflow.DoCtx) (fanResult, error) {
						return fanResult{ID: strings.Repeat(".", 5000), N: round*spillRetryN + i}, nil
					})
				}
			}
			got, err := workflow.Join(lc, "fan", bs)
			if err != nil {
				return round, err
			}
			return round + 1, lc.Step("sum", func(s *workflow.StepCtx[fanState]) error {
				for _, r := range got {
					s.State.Sum += r.N
					s.State.Count++
				}
				return nil
			})
		})
		return err
	},
}

// A loop whose iterations each join values written apart prunes them with
// the iterations it prunes: its history keeps the outputs entries of the
// iterations it keeps only, storage no more than its slots hold, and a
// restart on the way (or once it ended) changes no sum.
func TestALoopPrunesTheValuesItsJoinsWroteApart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, spillLoop), nil)
	ref := runtime.Ref{Name: "spillLoop", Key: []string{"l"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a few rounds", 30*time.Second, func() bool {
		var st fanState
		_ = json.Unmarshal(inspect(t, e.host, "spillLoop", "l").State, &st)
		return st.Count >= 3*spillRetryN
	})
	e.restart()
	waitFor(t, "the workflow to end", 60*time.Second, func() bool {
		st := inspect(t, e.host, "spillLoop", "l").WorkflowStatus
		return st == runtime.WorkflowCompleted || st == runtime.WorkflowFailed
	})
	ins := inspect(t, e.host, "spillLoop", "l")
	n := spillLoopRounds * spillRetryN
	if want := fmt.Sprintf(`{"sum":%d,"count":%d}`, n*(n-1)/2, n); ins.WorkflowStatus != runtime.WorkflowCompleted || string(ins.State) != want {
		t.Fatalf("workflow %s (%s), state %s, want %s", ins.WorkflowStatus, ins.WorkflowError, ins.State, want)
	}
	// The loop keeps its last iteration (the one that breaks), so every
	// join's values went with the iterations it pruned. In storage, they
	// are in the loop's slots (2 + 1), overwritten by later iterations, as
	// every entry of its iterations: no more than a join's (2 entries) in
	// each, whatever the number of iterations.
	h, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, he := range h.Entries {
		if strings.Contains(he.Path, "~outputs") {
			t.Fatalf("history holds %s after the loop pruned its iteration", he.Path)
		}
	}
	enc := storage.EncodeKey(ref.Key)
	kvs, err := e.store.List(ctx(t), storage.ActorPrefix(placement.Partition(ref.Name, enc, testPartitions), ref.Name, enc)+storage.WorkflowSuffix, storage.ListOptions{KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for _, kv := range kvs {
		if strings.Contains(kv.Key, "/fan/~outputs/") {
			stored++
		}
	}
	if stored > 3*2 {
		t.Fatalf("storage holds %d outputs entries of joins, want at most those of the loop's 3 slots (6)", stored)
	}
}
