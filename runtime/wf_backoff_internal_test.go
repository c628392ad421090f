package runtime

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/workflow"
)

// refuseTimedStore refuses, as etcd out of space does, every commit that
// writes under the prefix it is given, and records when.
type refuseTimedStore struct {
	storage.Store
	prefix atomic.Value // string
	mu     sync.Mutex
	at     []time.Time
}

func (s *refuseTimedStore) Commit(ctx context.Context, txns ...storage.Txn) error {
	if p, _ := s.prefix.Load().(string); p != "" {
		for _, txn := range txns {
			for _, op := range txn.Ops {
				if strings.HasPrefix(op.Key, p) {
					s.mu.Lock()
					s.at = append(s.at, time.Now())
					s.mu.Unlock()
					return fmt.Errorf("%w: out of space", storage.ErrRefused)
				}
			}
		}
	}
	return s.Store.Commit(ctx, txns...)
}

func (s *refuseTimedStore) refusals() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

// The delay before a workflow that storage stopped runs again doubles with
// each failure in a row, up to the cap, and comes at most a quarter early
// (jitter), never later.
func TestWorkflowRerunDelay(t *testing.T) {
	for fails := 1; fails <= 40; fails++ {
		nominal := min(wfRerunMin<<min(fails-1, 16), wfRerunMax)
		for range 50 {
			if d := wfRerunDelay(fails); d > nominal || d < nominal*3/4 || d > wfRerunMax {
				t.Fatalf("delay after %d failures: %v, want %v to %v", fails, d, nominal*3/4, nominal)
			}
		}
	}
	if d := wfRerunDelay(1); d > time.Second {
		t.Errorf("first delay %v, want at most a second", d)
	}
}

type stalledState struct {
	N int `json:"n"`
}

// A workflow whose commits storage refuses (etcd out of space) runs again
// with a growing delay, not every second: the delay doubles from
// wfRerunMin to wfRerunMax (a small cap here, through the test hooks).
// Once storage takes writes again, the workflow runs within the cap and
// completes, its step's effect recorded once.
func TestAWorkflowThatStorageStopsBacksOff(t *testing.T) {
	shortRerunBackoff(t)
	entered, release, run := gatedStep()
	act := rivet.Actor[stalledState]{
		Name: "stalled",
		Run:  run,
	}
	reg, err := rivet.Setup(act)
	if err != nil {
		t.Fatal(err)
	}
	es, err := etcdstore.New(etcdtest.StartClient(t), "/wfbackoff/")
	if err != nil {
		t.Fatal(err)
	}
	store := &refuseTimedStore{Store: es}
	h, _ := memHostOn(t, reg, store)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "stalled", Key: []string{"s"}}
	status := func() string {
		t.Helper()
		ins, err := h.Inspect(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		return ins.WorkflowStatus
	}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the step never ran")
	}
	a := h.loaded(ref)
	if a == nil {
		t.Fatal("the actor is not in memory")
	}
	id := a.id
	// From the step's commit on, its history's writes are refused.
	store.prefix.Store(historyKey(a.prefix, ""))
	close(release)
	const runs = 5
	waitUntil(t, ctx, fmt.Sprintf("%d runs refused", runs), func() bool { return len(store.refusals()) >= runs })
	at := store.refusals()
	first, last := at[1].Sub(at[0]), at[runs-1].Sub(at[runs-2])
	// Nominally 200 ms, then 400, 800, 800 (a quarter less at most); a
	// loaded machine can only add to each. Without backoff each is at
	// least the same second. The bounds leave 700 ms for a stall.
	t.Logf("gaps between refused runs: %v", gaps(at[:runs]))
	if first >= 900*time.Millisecond || last < 600*time.Millisecond {
		t.Errorf("gaps between refused runs %v: want the first (%v) about 200 ms, under 900 ms, and the last (%v) about 800 ms, at least 600 ms", gaps(at[:runs]), first, last)
	}
	h.timers.mu.Lock()
	fails := h.timers.wfFails[id].fails
	it, scheduled := h.timers.byID[id]
	var next time.Time
	if scheduled {
		next = it.at
	}
	h.timers.mu.Unlock()
	if fails < runs-1 { // the last run may still be stopping
		t.Errorf("%d failures counted after %d refused runs", fails, len(store.refusals()))
	}
	if scheduled && time.Until(next) > wfRerunMax {
		t.Errorf("next run in %v, past the cap %v", time.Until(next), wfRerunMax)
	}

	store.prefix.Store("")
	back := time.Now()
	waitUntil(t, ctx, "the workflow to complete", func() bool { return status() == WorkflowCompleted })
	if took := time.Since(back); took > wfRerunMax+5*time.Second {
		t.Errorf("the workflow completed %v after storage came back, cap %v", took, wfRerunMax)
	}
	ins, err := h.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if string(ins.State) != `{"n":1}` {
		t.Errorf("state %s, want the step's effect once", ins.State)
	}
	h.timers.mu.Lock()
	left := len(h.timers.wfFails)
	h.timers.mu.Unlock()
	if left != 0 || h.timers.wfFailing.Load() != 0 {
		t.Errorf("%d workflows still counted as failing after the commit went through", left)
	}
}

func gaps(at []time.Time) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(at); i++ {
		out = append(out, at[i].Sub(at[i-1]).Round(time.Millisecond))
	}
	return out
}

func waitUntil(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// A client calling a workflow actor while storage refuses its workflow's
// commits does not cut the backoff short: each call loaded the actor
// (evicted by the refused run before it) and started a run, which storage
// stopped at its first commit, one run per call. The load defers the run
// to the backoff's wakeup, and the calls are answered meanwhile.
func TestCallsDoNotCutAWorkflowsStorageBackoffShort(t *testing.T) {
	shortRerunBackoff(t)
	entered, release, run := gatedStep()
	act := rivet.Actor[stalledState]{
		Name:    "polled",
		Run:     run,
		Actions: rivet.Actions[stalledState]{"get": rivet.Query(func(c *rivet.ActionCtx[stalledState]) (int, error) { return c.State.N, nil })},
	}
	reg, err := rivet.Setup(act)
	if err != nil {
		t.Fatal(err)
	}
	es, err := etcdstore.New(etcdtest.StartClient(t), "/wfpolled/")
	if err != nil {
		t.Fatal(err)
	}
	store := &refuseTimedStore{Store: es}
	h, _ := memHostOn(t, reg, store)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "polled", Key: []string{"p"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the step never ran")
	}
	a := h.loaded(ref)
	if a == nil {
		t.Fatal("the actor is not in memory")
	}
	store.prefix.Store(historyKey(a.prefix, ""))
	close(release)
	waitUntil(t, ctx, "the first refused run", func() bool { return len(store.refusals()) >= 1 })
	// 40 calls, 50 ms apart: 2 s, in which the backoff (200, 400, 800,
	// 800 ms) allows about 4 runs; a run per call would be 40.
	calls := 0
	for range 40 {
		if _, err := h.Call(ctx, CallRequest{Ref: ref, Action: "get"}); err == nil {
			calls++
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(store.refusals()); n > 10 {
		t.Errorf("%d runs refused during 40 calls in about 2 s, want the backoff's few", n)
	}
	if calls == 0 {
		t.Error("no call was answered while storage refused the workflow's commits")
	}
	store.prefix.Store("")
	waitUntil(t, ctx, "the workflow to complete", func() bool {
		ins, err := h.Inspect(ctx, ref)
		return err == nil && ins.WorkflowStatus == WorkflowCompleted
	})
	ins, err := h.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if string(ins.State) != `{"n":1}` {
		t.Errorf("state %s, want the step's effect once", ins.State)
	}
}

// shortRerunBackoff sets the backoff of workflows that storage stopped to
// 200 ms doubling to 800 ms for the test.
func shortRerunBackoff(t *testing.T) {
	oldMin, oldMax := wfRerunMin, wfRerunMax
	wfRerunMin, wfRerunMax = 200*time.Millisecond, 800*time.Millisecond
	t.Cleanup(func() { wfRerunMin, wfRerunMax = oldMin, oldMax })
}

// gatedStep returns a workflow of one step, "work", that adds 1 to the
// state once release is closed (entered is closed when a first attempt
// runs), or fails when its context ends.
func gatedStep() (entered, release chan struct{}, run func(*workflow.Ctx[stalledState]) error) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	run = func(ctx *workflow.Ctx[stalledState]) error {
		return ctx.Step("work", func(s *workflow.StepCtx[stalledState]) error {
			once.Do(func() { close(entered) })
			select {
			case <-release:
			case <-s.Context().Done():
				return s.Context().Err()
			}
			s.State.N++
			return nil
		})
	}
	return entered, release, run
}
