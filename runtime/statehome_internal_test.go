package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type foldState struct {
	N int `json:"n"`
}

// foldActor runs a loop of steps; iteration i changes the state if
// changes(i) says so. Then it waits for a message on "go", multiplies N by
// 10 in a step, and ends. Its action "add" adds its argument to N.
// foldActions are the actions of the scenarios' actors: "add" adds its
// argument to N.
func foldActions() rivet.Actions[foldState] {
	return rivet.Actions[foldState]{
		"add": rivet.Action(func(c *rivet.ActionCtx[foldState], n int) (int, error) {
			c.State.N += n
			return c.State.N, nil
		}),
	}
}

func foldActor(iterations int, changes func(i int) bool, prune int) rivet.Actor[foldState] {
	return rivet.Actor[foldState]{
		Name:    "folder",
		Queues:  rivet.Queues{"go": rivet.QueueOf[int]()},
		Actions: foldActions(),
		Run: func(ctx *workflow.Ctx[foldState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: prune}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if i == iterations {
					return i, workflow.Break
				}
				err := lc.Step("s", func(s *workflow.StepCtx[foldState]) error {
					if changes(i) {
						s.State.N++
					}
					return nil
				})
				return i + 1, err
			})
			if err != nil {
				return err
			}
			if _, err := workflow.Next[int](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}}); err != nil {
				return err
			}
			return ctx.Step("times-ten", func(s *workflow.StepCtx[foldState]) error {
				s.State.N *= 10
				return nil
			})
		},
	}
}

// foldEnv is a host on a memory store that a test can restart.
type foldEnv struct {
	t     *testing.T
	reg   *rivet.Registry
	store storage.Store
	h     *Host
	stop  func(context.Context) error
	ref   Ref
}

func newFoldEnv(t *testing.T, actor rivet.Actor[foldState]) *foldEnv {
	reg, err := rivet.Setup(actor)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	t.Cleanup(func() { store.Close() })
	e := &foldEnv{t: t, reg: reg, store: store, ref: Ref{Name: "folder", Key: []string{"f"}}}
	e.h, e.stop = memHostOn(t, reg, store)
	return e
}

// restart stops the host and starts another on the same store, as a node
// started again: what the new one reads is what storage holds.
func (e *foldEnv) restart() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.stop(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.h, e.stop = memHostOn(e.t, e.reg, e.store)
}

// inspect returns the actor's state as Inspect shows it: from storage
// unless the actor is in memory.
func (e *foldEnv) inspect() (string, string) {
	e.t.Helper()
	ins, err := e.h.Inspect(context.Background(), e.ref)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(ins.State), ins.WorkflowStatus
}

// waitGoAt waits in iteration i for a message on the "go" queue (entry
// "wait") if i is one of at: where the scenarios restart a loop mid-way.
func waitGoAt(c *workflow.Ctx[foldState], i int, at ...int) error {
	if !slices.Contains(at, i) {
		return nil
	}
	_, err := workflow.Next[int](c, "wait", workflow.NextOptions{Names: []string{"go"}})
	return err
}

func (e *foldEnv) waitState(want string) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, _ := e.inspect()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("state %s, want %s", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// create creates the actor, which starts its workflow.
func (e *foldEnv) create() {
	e.t.Helper()
	if _, _, err := e.h.GetOrCreate(context.Background(), e.ref, nil); err != nil {
		e.t.Fatal(err)
	}
}

// waitEnded waits for the workflow to complete or fail, and returns the
// state and the status then.
func (e *foldEnv) waitEnded() (string, string) {
	e.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got, st := e.inspect()
		if st == WorkflowCompleted || st == WorkflowFailed {
			return got, st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("workflow %s, state %s: not ended", st, got)
		}
	}
}

func (e *foldEnv) stateKey() string {
	e.t.Helper()
	_, _, prefix, err := e.h.locate(e.ref)
	if err != nil {
		e.t.Fatal(err)
	}
	kv, err := e.store.Get(context.Background(), prefix+storage.StateSuffix)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(kv.Value)
}

func (e *foldEnv) call(action string, arg int) string {
	e.t.Helper()
	out, err := e.h.Call(context.Background(), CallRequest{Ref: e.ref, Action: action, Args: json.RawMessage(`[` + itoa(arg) + `]`)})
	if err != nil {
		e.t.Fatal(err)
	}
	return string(out)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// A step that changes the state writes one key, its entry, which carries
// the state; a node started again, Inspect of the actor out of memory, and
// the actor loaded again all see the state of the last step.
func TestAStepsStateRidesInItsEntry(t *testing.T) {
	e := newFoldEnv(t, foldActor(12, func(int) bool { return true }, 5))
	e.create()
	e.waitState(`{"n":12}`)
	if got := e.stateKey(); got != `{"n":0}` {
		t.Fatalf("state key %s after 12 steps that changed the state: the steps wrote it, want it left as created ({\"n\":0})", got)
	}
	e.restart()
	if got, _ := e.inspect(); got != `{"n":12}` {
		t.Fatalf("after a restart, the actor out of memory shows %s, want {\"n\":12}", got)
	}
	if got := e.call("add", 1); got != "13" {
		t.Fatalf("add 1 after a restart: %s, want 13 (the state the steps left)", got)
	}
}

// The newest state wins wherever it is: an action's (the state key) after
// a step's (its entry), and a step's after an action's.
func TestTheNewestStateWinsBetweenActionsAndSteps(t *testing.T) {
	e := newFoldEnv(t, foldActor(1, func(int) bool { return true }, 0))
	ctx := context.Background()
	e.create()
	e.waitState(`{"n":1}`)
	if got := e.call("add", 5); got != "6" {
		t.Fatalf("add 5: %s, want 6", got)
	}
	e.restart()
	if got, _ := e.inspect(); got != `{"n":6}` {
		t.Fatalf("after an action that followed the step, storage shows %s, want {\"n\":6}", got)
	}
	if _, err := e.h.Send(ctx, SendRequest{Ref: e.ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	e.waitState(`{"n":60}`)
	// The step's state shows before the run records its end.
	if _, st := e.waitEnded(); st != WorkflowCompleted {
		t.Fatalf("workflow %s, want completed", st)
	}
	e.restart()
	if got, _ := e.inspect(); got != `{"n":60}` {
		t.Fatalf("after a step that followed the action, storage shows %s, want {\"n\":60}", got)
	}
	if got := e.call("add", 1); got != "61" {
		t.Fatalf("add 1: %s, want 61", got)
	}
}

// A loop keeps its iterations in slots: pruning deletes nothing, and the
// entry of the last step that changed the state, pruned, keeps it until a
// later iteration overwrites its slot, which then carries it.
func TestAStateInAPrunedIterationSurvives(t *testing.T) {
	e := newFoldEnv(t, foldActor(30, func(i int) bool { return i == 0 }, 5))
	counted := &countingStore{Store: e.store}
	e.store = counted
	e.restart()
	ctx := context.Background()
	e.create()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h, err := e.h.History(ctx, e.ref)
		if err != nil {
			t.Fatal(err)
		}
		ended := false
		for _, en := range h.Entries {
			ended = ended || en.Path == "l" && en.Status == string(workflow.StatusCompleted)
		}
		if ended {
			for _, en := range h.Entries {
				if en.Path == "l/~0/s" {
					t.Fatal("iteration 0 is listed: it was pruned")
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, _, prefix, err := e.h.locate(e.ref)
	if err != nil {
		t.Fatal(err)
	}
	kvs, err := e.store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	// The loop's entry and one per slot: 5 (interval) + 5 (size).
	if len(kvs) != 11 {
		t.Fatalf("%d history keys after 30 iterations, want 11 (the loop and 10 slots)", len(kvs))
	}
	if n := counted.historyDeletes.Load(); n != 0 {
		t.Fatalf("%d history deletes: pruning a loop with slots deletes nothing", n)
	}
	e.restart()
	if got, _ := e.inspect(); got != `{"n":1}` {
		t.Fatalf("after a restart: %s, want {\"n\":1}", got)
	}
}

// countingStore counts the deletes of history keys committed.
type countingStore struct {
	storage.Store
	historyDeletes atomic.Int64
}

func (s *countingStore) Commit(ctx context.Context, txns ...storage.Txn) error {
	for _, txn := range txns {
		for _, op := range txn.Ops {
			if op.Kind != storage.OpPut && strings.Contains(op.Key, "/"+storage.WorkflowSuffix) {
				s.historyDeletes.Add(1)
			}
		}
	}
	return s.Store.Commit(ctx, txns...)
}

// A retry that deletes the entry holding the state writes the state key
// in its commit: the replayed step failing, storage still has the state.
func TestARetryThatDeletesTheEntryHoldingTheStateKeepsIt(t *testing.T) {
	var runs atomic.Int32
	actor := rivet.Actor[foldState]{
		Name: "folder",
		Run: func(ctx *workflow.Ctx[foldState]) error {
			_, err := workflow.StepOpts(ctx, workflow.StepOptions{Name: "a"}, func(s *workflow.StepCtx[foldState]) (struct{}, error) {
				if runs.Add(1) > 1 {
					return struct{}{}, workflow.Critical(errors.New("a fails from its second run on"))
				}
				s.State.N += 5
				return struct{}{}, nil
			})
			if err != nil {
				return err
			}
			return ctx.Step("b", func(*workflow.StepCtx[foldState]) error {
				return workflow.Critical(errors.New("b always fails"))
			})
		},
	}
	e := newFoldEnv(t, actor)
	ctx := context.Background()
	e.create()
	waitFailed := func() {
		t.Helper()
		if _, st := e.waitEnded(); st != WorkflowFailed {
			t.Fatalf("workflow %s, want failed", st)
		}
	}
	waitFailed()
	if got := e.stateKey(); got != `{"n":0}` {
		t.Fatalf("state key %s: the step's entry should hold the state", got)
	}
	if _, err := e.h.RetryWorkflow(ctx, e.ref, "a"); err != nil {
		t.Fatal(err)
	}
	waitFailed()
	if runs.Load() != 2 {
		t.Fatalf("a ran %d times, want 2", runs.Load())
	}
	e.restart()
	if got, _ := e.inspect(); got != `{"n":5}` {
		t.Fatalf("after the retry deleted a's entry and a failed again: %s, want {\"n\":5}", got)
	}
}

// Until every node of the cluster reads states in history entries (a
// rolling upgrade from a build that does not), steps write the state key.
func TestStepsWriteTheStateKeyWhileTheClusterMayNotReadEntries(t *testing.T) {
	e := newFoldEnv(t, foldActor(3, func(int) bool { return true }, 0))
	e.h.SetWriteFormat(1)
	e.create()
	e.waitState(`{"n":3}`)
	if got := e.stateKey(); got != `{"n":3}` {
		t.Fatalf("state key %s, want {\"n\":3}: a node of an older build would read it", got)
	}
}

// A build that drops an actor type's workflow (its Run) still loads the
// state the old workflow's last steps left in their entries: the history
// stays in storage, and the state key is older.
func TestAStateInHistoryOutlivesTheTypesWorkflow(t *testing.T) {
	e := newFoldEnv(t, foldActor(3, func(int) bool { return true }, 0))
	e.create()
	e.waitState(`{"n":3}`)
	// The next build: the same type, its actions only.
	noRun := foldActor(0, nil, 0)
	noRun.Run, noRun.Queues = nil, nil
	reg, err := rivet.Setup(noRun)
	if err != nil {
		t.Fatal(err)
	}
	e.reg = reg
	e.restart()
	if got, _ := e.inspect(); got != `{"n":3}` {
		t.Fatalf("Inspect without the workflow: %s, want {\"n\":3}", got)
	}
	if got := e.call("add", 1); got != "4" {
		t.Fatalf("add 1 once the type has no workflow: %s, want 4 (the state the steps left)", got)
	}
}

type bigFoldState struct {
	N   int    `json:"n"`
	Pad string `json:"pad"`
}

// bigFoldPad is a state large enough that it fits in one transaction once,
// not twice (storage.DefaultLimits: 1.4 MiB).
var bigFoldPad = strings.Repeat("x", 800<<10)

// runBigFold runs run as the workflow of an actor with a state of about
// 800 KiB and returns its end: status, error and the state's N as Inspect
// shows it once a restarted host has it out of memory.
func runBigFold(t *testing.T, run func(ctx *workflow.Ctx[bigFoldState]) error) (status, wfErr string, n int) {
	t.Helper()
	reg, err := rivet.Setup(rivet.Actor[bigFoldState]{Name: "big", Run: run})
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	t.Cleanup(func() { store.Close() })
	// States this large ride in entries only if told to: what is tested
	// is that one that does still fits.
	foldAll := func(c *Config) { c.MaxFoldedStateBytes = c.MaxStateBytes }
	h, stop := memHostOn(t, reg, store, foldAll)
	ctx := context.Background()
	ref := Ref{Name: "big", Key: []string{"b"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ins, err := h.Inspect(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if workflowEnded(ins.WorkflowStatus) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workflow did not end: %s", ins.WorkflowStatus)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := stop(sctx); err != nil {
		t.Fatal(err)
	}
	h, _ = memHostOn(t, reg, store, foldAll)
	ins, err := h.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	var st bigFoldState
	if err := json.Unmarshal(ins.State, &st); err != nil {
		t.Fatal(err)
	}
	return ins.WorkflowStatus, ins.WorkflowError, st.N
}

// A step that changes a large state, with a loop's prune in its commit,
// fits in a transaction as it did before states rode in entries: the state
// goes to the state key or to the step's entry, once, whatever entry the
// prune deletes (the limit check counted it twice).
func TestALargeStatesStepWithAPruneFits(t *testing.T) {
	status, wfErr, n := runBigFold(t, func(ctx *workflow.Ctx[bigFoldState]) error {
		_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 2}, func(lc *workflow.Ctx[bigFoldState], i int) (int, error) {
			if i == 6 {
				return i, workflow.Break
			}
			return i + 1, lc.Step("s", func(s *workflow.StepCtx[bigFoldState]) error {
				s.State.Pad = bigFoldPad
				s.State.N++
				return nil
			})
		})
		return err
	})
	if status != WorkflowCompleted || n != 6 {
		t.Fatalf("workflow %s (%s), n %d; want completed, 6", status, wfErr, n)
	}
}

// A step's attempt that rewrites the entry holding a large state (its
// earlier attempt's, rolled forward) with a large output commits, as it
// did before states rode in entries: the state goes to the state key
// first (carried by the rewrite, the commit was too large for the store,
// which evicted the actor, whose workflow ran the same attempt again, for
// ever).
func TestARewriteOfTheEntryHoldingALargeStateFits(t *testing.T) {
	attempts := 0
	status, wfErr, n := runBigFold(t, func(ctx *workflow.Ctx[bigFoldState]) error {
		_, err := workflow.StepOpts(ctx, workflow.StepOptions{Name: "s", RetryBackoffBase: time.Millisecond}, func(s *workflow.StepCtx[bigFoldState]) (string, error) {
			attempts++
			if attempts == 1 {
				s.State.Pad = bigFoldPad
				s.State.N = 1
				return "", errors.New("first attempt fails")
			}
			return strings.Repeat("y", 700<<10), nil
		})
		return err
	})
	if status != WorkflowCompleted || n != 1 {
		t.Fatalf("workflow %s (%s), n %d; want completed, 1", status, wfErr, n)
	}
}

// beforeHistoryList is a store that runs once, before the first List of
// an actor's history that it sees once armed, a commit of another writer.
type beforeHistoryList struct {
	storage.Store
	armed atomic.Pointer[func()]
}

func (s *beforeHistoryList) List(ctx context.Context, prefix string, opts storage.ListOptions) ([]storage.KV, error) {
	if strings.HasSuffix(prefix, storage.WorkflowSuffix) {
		if f := s.armed.Swap(nil); f != nil {
			(*f)()
		}
	}
	return s.Store.List(ctx, prefix, opts)
}

// Inspect of an actor out of memory reads the state key after the history:
// a commit between the two reads that deletes the entry holding the state
// writes the state key (placeState), which a read of the state key first
// missed, and of the history it saw only older entries' states.
func TestInspectSeesTheStateOfACommitThatDeletesItsHome(t *testing.T) {
	e := newFoldEnv(t, foldActor(12, func(int) bool { return true }, 0))
	ctx := context.Background()
	e.create()
	e.waitState(`{"n":12}`)
	_, _, prefix, err := e.h.locate(e.ref)
	if err != nil {
		t.Fatal(err)
	}
	store := &beforeHistoryList{Store: e.store}
	e.store = store
	e.restart()
	// As a retry from the last step would commit (an activation loaded
	// meanwhile): the step's entry, which holds the state, goes, and the
	// state key takes the state.
	commit := func() {
		if err := e.store.(*beforeHistoryList).Store.Commit(ctx, storage.Txn{Ops: []storage.Op{
			storage.Delete(historyKey(prefix, "l/~11/s")),
			storage.Put(prefix+storage.StateSuffix, []byte(`{"n":12}`)),
		}}); err != nil {
			t.Error(err)
		}
	}
	store.armed.Store(&commit)
	if got, _ := e.inspect(); got != `{"n":12}` {
		t.Fatalf("Inspect read %s, want {\"n\":12}: the state key's, written with the delete of the entry that held it", got)
	}
}

// A loop whose iterations record different names leaves entries of pruned
// iterations in slots no later iteration wrote: a node started again in
// the middle of the loop (where iteration 30 waits for a message) drops
// them, resumes where the loop was, and ends with every iteration counted
// once, not failed by a divergence.
func TestALoopInSlotsResumesAfterARestart(t *testing.T) {
	const iterations = 60
	actor := rivet.Actor[foldState]{
		Name:   "folder",
		Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[foldState]) error {
			_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 4, HistorySize: 3}, func(lc *workflow.Ctx[foldState], i int) (int, error) {
				if i == iterations {
					return i, workflow.Break
				}
				if err := waitGoAt(lc, i, 30); err != nil {
					return i, err
				}
				name := [...]string{"a", "b", "c"}[i%3]
				if err := lc.Step(name, func(s *workflow.StepCtx[foldState]) error {
					s.State.N++
					return nil
				}); err != nil {
					return i, err
				}
				return i + 1, lc.Sleep("nap", 2*time.Millisecond)
			})
			return err
		},
	}
	e := newFoldEnv(t, actor)
	ctx := context.Background()
	e.create()
	// A restart before iteration 30 reaches its wait replays to it all
	// the same: the loop is in its middle either way, not ended.
	e.waitState(`{"n":30}`)
	e.restart()
	if _, err := e.h.Send(ctx, SendRequest{Ref: e.ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	if got, st := e.waitEnded(); st != WorkflowCompleted || got != `{"n":60}` {
		ins, _ := e.h.Inspect(ctx, e.ref)
		t.Fatalf("workflow %s (%s), state %s: want completed with {\"n\":60}", st, ins.WorkflowError, got)
	}
	h, err := e.h.History(ctx, e.ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range h.Entries {
		if it, ok := strings.CutPrefix(en.Path, "l/~"); ok {
			var i int
			_, _ = fmt.Sscanf(it, "%d", &i)
			if i < iterations-3 {
				t.Errorf("history lists %s, of an iteration the loop pruned", en.Path)
			}
		}
	}
}

type padState struct {
	N   int    `json:"n"`
	Pad string `json:"pad"`
}

// A state over MaxFoldedStateBytes goes to the state key, not into the
// entries of the steps that change it: the entries a loop keeps (its last
// iterations) each kept a copy (a user trial: a 250 KB state in the 40
// entries kept, 11 MB per actor). One within it rides in its entry.
func TestALargeStateStaysOutOfTheHistory(t *testing.T) {
	for _, c := range []struct {
		pad    int
		folded bool
	}{{pad: 8 << 10, folded: false}, {pad: 100, folded: true}} {
		t.Run(fmt.Sprint(c.pad), func(t *testing.T) {
			pad := strings.Repeat("x", c.pad)
			reg, err := rivet.Setup(rivet.Actor[padState]{Name: "padded", Run: func(ctx *workflow.Ctx[padState]) error {
				_, err := workflow.LoopWith(ctx, workflow.LoopOptions[int]{Name: "l", HistoryPruneInterval: 5}, func(lc *workflow.Ctx[padState], i int) (int, error) {
					if i == 30 {
						return i, workflow.Break
					}
					return i + 1, lc.Step("s", func(s *workflow.StepCtx[padState]) error {
						s.State.N++
						s.State.Pad = pad
						return nil
					})
				})
				return err
			}})
			if err != nil {
				t.Fatal(err)
			}
			store := storage.NewMemory()
			t.Cleanup(func() { store.Close() })
			h, stop := memHostOn(t, reg, store)
			ctx := context.Background()
			ref := Ref{Name: "padded", Key: []string{"p"}}
			if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				ins, err := h.Inspect(ctx, ref)
				if err != nil {
					t.Fatal(err)
				}
				if workflowEnded(ins.WorkflowStatus) {
					if ins.WorkflowStatus != WorkflowCompleted {
						t.Fatalf("workflow %s: %s", ins.WorkflowStatus, ins.WorkflowError)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the workflow did not end: %s", ins.WorkflowStatus)
				}
			}
			_, _, prefix, err := h.locate(ref)
			if err != nil {
				t.Fatal(err)
			}
			kvs, err := store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			copies, bytes := 0, 0
			for _, kv := range kvs {
				bytes += len(kv.Value)
				if strings.HasPrefix(string(kv.Value), foldedStateField) {
					copies++
				}
			}
			if c.folded && copies == 0 {
				t.Fatalf("a %d-byte state rode in none of the %d entries kept, want it in its step's", c.pad, len(kvs))
			}
			if !c.folded && (copies > 0 || bytes > c.pad) {
				t.Fatalf("a %d-byte state rode in %d of the %d entries kept (%d bytes), want in none", c.pad, copies, len(kvs), bytes)
			}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := stop(sctx); err != nil {
				t.Fatal(err)
			}
			h, _ = memHostOn(t, reg, store)
			ins, err := h.Inspect(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			var st padState
			if err := json.Unmarshal(ins.State, &st); err != nil || st.N != 30 || st.Pad != pad {
				t.Fatalf("after a restart: n %d, pad of %d bytes (%v); want 30, %d", st.N, len(st.Pad), err, c.pad)
			}
		})
	}
}
