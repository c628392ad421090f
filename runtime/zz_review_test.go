package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	goruntime "runtime"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type rvStore struct {
	storage.Store
	getDelay    atomic.Int64
	failGetSub  atomic.Value // string: fail next Get whose key contains it
	commitDelay atomic.Int64
}

func (s *rvStore) Get(ctx context.Context, key string) (storage.KV, error) {
	if d := s.getDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if v, _ := s.failGetSub.Load().(string); v != "" && strings.Contains(key, v) {
		s.failGetSub.Store("")
		return storage.KV{}, errors.New("injected transient read error")
	}
	return s.Store.Get(ctx, key)
}

func (s *rvStore) Commit(ctx context.Context, txns ...storage.Txn) error {
	if d := s.commitDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	return s.Store.Commit(ctx, txns...)
}

type rvEnv struct {
	st     *rvStore
	h      *Host
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func rvStart(t *testing.T, st *rvStore, reg *rivet.Registry, mut func(*Config)) *rvEnv {
	ctx, cancel := context.WithCancel(context.Background())
	e := &rvEnv{st: st, cancel: cancel}
	com := storage.NewCommitter(st, storage.DefaultCommitterConfig())
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = com.Run(ctx) }()
	own := NewOwnership(st, NodeRecord{NodeID: "n1"}, 5*time.Second, nil)
	if err := own.Establish(ctx, AllPartitions(4)); err != nil {
		t.Fatal(err)
	}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = own.Run(ctx) }()
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Partitions = "n1", 4
	if mut != nil {
		mut(&cfg)
	}
	h, err := New(cfg, reg, st, com, own)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	e.h = h
	return e
}

func (e *rvEnv) stop(t *testing.T) {
	sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
	defer c()
	if err := e.h.Stop(sctx); err != nil {
		t.Logf("stop: %v", err)
	}
	e.cancel()
	e.wg.Wait()
}

type rvState struct {
	N    int `json:"n"`
	Seen int `json:"seen"`
}

func rvWait(what string, d time.Duration, ok func() bool) bool {
	dl := time.Now().Add(d)
	for !ok() {
		if time.Now().After(dl) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// 1. Destroy of an actor whose workflow sleeps: the evicted run's yield
// writes the wakeup record after the delete.
func TestReviewDestroyLeavesWakeup(t *testing.T) {
	sleeper := rivet.Actor[rvState]{
		Name: "sl",
		Run: func(ctx *workflow.Ctx[rvState]) error {
			return ctx.Sleep("nap", time.Hour)
		},
	}
	reg, _ := rivet.Setup(sleeper)
	e := rvStart(t, &rvStore{Store: storage.NewMemory()}, reg, nil)
	defer e.stop(t)
	ref := Ref{Name: "sl", Key: []string{"k"}}
	if _, _, err := e.h.GetOrCreate(context.Background(), ref, nil); err != nil {
		t.Fatal(err)
	}
	rvWait("sleep recorded", 5*time.Second, func() bool {
		h, err := e.h.History(context.Background(), ref)
		return err == nil && len(h.Entries) == 1
	})
	if err := e.h.Destroy(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	kvs, _ := e.st.List(context.Background(), storage.WakeupsPrefix, storage.ListOptions{})
	all, _ := e.st.List(context.Background(), "", storage.ListOptions{})
	for _, kv := range all {
		t.Logf("after destroy: %s = %s", kv.Key, kv.Value)
	}
	if len(kvs) != 0 {
		t.Errorf("BUG: %d wakeup record(s) survive Destroy: %s", len(kvs), kvs[0].Key)
	}
}

// 2. A run that yields without its activation being removed is never
// started again: the timer's wakeOne finds the activation and does nothing.
func TestReviewYieldInPlaceIsNeverRestarted(t *testing.T) {
	echo := rivet.Actor[rvState]{
		Name:   "ec",
		Queues: rivet.Queues{"ask": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[rvState]) error {
			return ctx.Loop("serve", func(lc *workflow.Ctx[rvState]) error {
				_, err := workflow.Next[int](lc, "wait")
				if err != nil {
					return err
				}
				return lc.Step("count", func(s *workflow.StepCtx[rvState]) error { s.State.Seen++; return nil })
			})
		},
		Actions: rivet.Actions[rvState]{"get": rivet.Query(func(c *rivet.ActionCtx[rvState]) (int, error) { return c.State.Seen, nil })},
	}
	reg, _ := rivet.Setup(echo)
	st := &rvStore{Store: storage.NewMemory()}
	e := rvStart(t, st, reg, nil)
	ref := Ref{Name: "ec", Key: []string{"k"}}
	if _, _, err := e.h.GetOrCreate(context.Background(), ref, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	e.stop(t)
	// A message queued while the node is down (e.g. sent before a crash).
	e = rvStart(t, st, reg, nil)
	defer e.stop(t)
	// Make the message body read fail once (transient), then enqueue via
	// another node's Send... simplest: restart with a queued message.
	e.stop(t)
	// put a message in storage directly
	_, part, prefix, _ := e.h.locate(ref)
	_ = part
	msg, _ := json.Marshal(queueMessage{Body: json.RawMessage(`1`), CreatedAt: time.Now().UnixMilli()})
	if err := st.Store.Commit(context.Background(), storage.Txn{Ops: []storage.Op{storage.Put(queueKey(prefix, 1, "ask"), msg)}}); err != nil {
		t.Fatal(err)
	}
	st.failGetSub.Store("/q/")
	e = rvStart(t, st, reg, nil)
	defer e.stop(t)
	ok := rvWait("message processed", 3*time.Second, func() bool {
		ins, err := e.h.Inspect(context.Background(), ref)
		return err == nil && strings.Contains(string(ins.State), `"seen":1`)
	})
	ins, _ := e.h.Inspect(context.Background(), ref)
	t.Logf("inspect: state=%s wf=%s active=%v queues=%v", ins.State, ins.WorkflowStatus, ins.Active, ins.Queues)
	if !ok {
		t.Errorf("BUG: after one transient read error the queued message is never processed")
	}
}

// 3. Stop hangs when a workflow starts during Stop (load completes after
// Stop snapshotted the activations).
func TestReviewStopHangsOnLateWorkflow(t *testing.T) {
	wf := rivet.Actor[rvState]{
		Name:   "w",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[rvState]) error {
			_, err := workflow.Next[int](ctx, "wait")
			return err
		},
	}
	reg, _ := rivet.Setup(wf)
	st := &rvStore{Store: storage.NewMemory()}
	e := rvStart(t, st, reg, nil)
	for _, k := range []string{"a", "b"} {
		if _, _, err := e.h.GetOrCreate(context.Background(), Ref{Name: "w", Key: []string{k}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	e.stop(t)
	e = rvStart(t, st, reg, nil)
	time.Sleep(200 * time.Millisecond) // wakeups loaded: both workflows running
	// Deactivate b so that a request must load it.
	e.h.mu.Lock()
	b := e.h.actors["w/b"]
	e.h.mu.Unlock()
	if b == nil {
		t.Fatal("b not active")
	}
	e.h.tryDeactivate(b)
	e.h.mu.Lock()
	_, still := e.h.actors["w/b"]
	e.h.mu.Unlock()
	if still {
		t.Fatal("b not deactivated")
	}
	// Slow commits make a's yield (during Stop) slow; slow reads make b's
	// load finish while Stop waits for the workflows.
	st.commitDelay.Store(int64(300 * time.Millisecond))
	st.getDelay.Store(int64(40 * time.Millisecond))
	go func() { _, _, _ = e.h.GetOrCreate(context.Background(), Ref{Name: "w", Key: []string{"b"}}, nil) }()
	time.Sleep(5 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		done <- e.h.Stop(sctx)
	}()
	select {
	case err := <-done:
		t.Logf("stop returned %v", err)
	case <-time.After(6 * time.Second):
		t.Errorf("BUG: Stop with a 2s ctx still blocked after 6s")
		buf := make([]byte, 1<<20)
		n := goruntime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "rivet/runtime.") {
				t.Log(g)
			}
		}
	}
	st.commitDelay.Store(0)
	st.getDelay.Store(0)
	e.cancel()
}

// 4. NextBatch with a count above the txn op limit wedges the workflow.
func TestReviewBigReceiveWedges(t *testing.T) {
	wf := rivet.Actor[rvState]{
		Name:   "bb",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[rvState]) error {
			if err := ctx.Sleep("nap", 300*time.Millisecond); err != nil {
				return err
			}
			ms, err := workflow.NextBatch[int](ctx, "batch", workflow.NextOptions{Count: 500})
			if err != nil {
				return err
			}
			return ctx.Step("count", func(s *workflow.StepCtx[rvState]) error { s.State.Seen = len(ms); return nil })
		},
	}
	reg, _ := rivet.Setup(wf)
	st := &rvStore{Store: storage.NewMemory()}
	e := rvStart(t, st, reg, nil)
	defer e.stop(t)
	ref := Ref{Name: "bb", Key: []string{"k"}}
	for i := 0; i < 200; i++ {
		if _, err := e.h.Send(context.Background(), SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	ok := rvWait("batch taken", 3*time.Second, func() bool {
		ins, err := e.h.Inspect(context.Background(), ref)
		return err == nil && ins.WorkflowStatus != WorkflowRunning && ins.WorkflowStatus != WorkflowSleeping
	})
	ins, _ := e.h.Inspect(context.Background(), ref)
	t.Logf("inspect: state=%s wf=%s err=%q active=%v queues=%v", ins.State, ins.WorkflowStatus, ins.WorkflowError, ins.Active, ins.Queues)
	if !ok {
		t.Errorf("BUG: workflow neither completed nor failed: wedged")
	}
}

// 5. waitCommitted reports a failure for a version that is durable.
func TestReviewWaitCommittedFailedFirst(t *testing.T) {
	a := &activation{ref: Ref{Name: "x"}, advanced: make(chan struct{})}
	a.version, a.committed, a.failed = 2, 1, storage.ErrFenced
	if err := a.waitCommitted(context.Background(), 1); err != nil {
		t.Errorf("BUG: version 1 is durable, waitCommitted says %v", err)
	}
}

// 6. packGroups ignores the fence's bytes.
func TestReviewPackGroupsFenceBytes(t *testing.T) {
	l := storage.Limits{MaxTxnOps: 128, MaxTxnBytes: 10000}
	k1, k2 := "a/0/x/k/state", "a/0/x/k/q/1"
	g1 := writeGroup{version: 1, ops: []storage.Op{storage.Put(k1, make([]byte, 5000-len(k1)-16))}}
	g2 := writeGroup{version: 2, ops: []storage.Op{storage.Put(k2, make([]byte, 5000-len(k2)-16-10))}}
	ops, _, n := packGroups([]writeGroup{g1, g2}, l)
	txn := storage.Txn{Fence: storage.Fence{Partition: 0, Token: 5}, Ops: ops}
	if err := l.Check(txn); err != nil {
		t.Errorf("BUG: packGroups merged %d groups into a txn the committer refuses: %v", n, err)
	}
}

// 7. tryDeactivate stops the workflow, then may keep the activation
// (pending commit): a zombie with no runner.
func TestReviewReaperZombie(t *testing.T) {
	wf := rivet.Actor[rvState]{
		Name:   "z",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[rvState]) error {
			_, err := workflow.Next[int](ctx, "wait")
			return err
		},
		Actions: rivet.Actions[rvState]{"inc": rivet.Action(func(c *rivet.ActionCtx[rvState], n int) (int, error) { c.State.N += n; return c.State.N, nil })},
	}
	reg, _ := rivet.Setup(wf)
	st := &rvStore{Store: storage.NewMemory()}
	e := rvStart(t, st, reg, func(c *Config) { c.IdleTimeout = time.Hour })
	defer e.stop(t)
	zombies := 0
	for i := 0; i < 300; i++ {
		ref := Ref{Name: "z", Key: []string{string(rune('a' + i%26)), time.Now().String()}}
		a, _, err := e.h.activate(context.Background(), ref, rvSpec(e.h, "z"), true, nil)
		if err != nil {
			t.Fatal(err)
		}
		rvWait("waiting", time.Second, func() bool { return a.idleWorkflow(0) })
		e.h.tryDeactivate(a)
		e.h.mu.Lock()
		still := e.h.actors[a.id] == a
		e.h.mu.Unlock()
		a.mu.Lock()
		r := a.wf.runner
		a.mu.Unlock()
		if still && r == nil {
			zombies++
		}
	}
	if zombies > 0 {
		t.Errorf("BUG: %d/300 activations left in memory with their workflow stopped", zombies)
	}
}

func rvSpec(h *Host, n string) *rivet.Spec { sp, _ := h.reg.Lookup(n); return sp }

// 8. A message that arrives just before the reaper stops the run can be
// stranded: the yield writes At=0 (message-only) over the Send's due mark.
func TestReviewStrandedMessage(t *testing.T) {
	wf := rivet.Actor[rvState]{
		Name:   "s",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[rvState]) error {
			return ctx.Loop("l", func(lc *workflow.Ctx[rvState]) error {
				_, err := workflow.Next[int](lc, "wait")
				if err != nil {
					return err
				}
				return lc.Step("c", func(s *workflow.StepCtx[rvState]) error { s.State.Seen++; return nil })
			})
		},
	}
	reg, _ := rivet.Setup(wf)
	st := &rvStore{Store: storage.NewMemory()}
	e := rvStart(t, st, reg, func(c *Config) { c.IdleTimeout = time.Hour })
	defer e.stop(t)
	stranded, hit := 0, 0
	for i := 0; i < 400; i++ {
		ref := Ref{Name: "s", Key: []string{"k", time.Now().String()}}
		a, _, err := e.h.activate(context.Background(), ref, rvSpec(e.h, "s"), true, nil)
		if err != nil {
			t.Fatal(err)
		}
		rvWait("waiting", time.Second, func() bool { return a.idleWorkflow(0) })
		sent := make(chan struct{})
		go func() {
			_, _ = e.h.Send(context.Background(), SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`)})
			close(sent)
		}()
		// the reaper, right when the Send's turn ends
		for !a.gate.busy() {
		}
		for a.gate.busy() {
		}
		e.h.tryDeactivate(a)
		<-sent
		e.h.mu.Lock()
		gone := e.h.actors[a.id] == nil
		e.h.mu.Unlock()
		if !gone {
			continue
		}
		hit++
		time.Sleep(20 * time.Millisecond)
		_, _, prefix, _ := e.h.locate(ref)
		qs, _ := st.List(context.Background(), prefix+storage.QueueSuffix, storage.ListOptions{})
		e.h.mu.Lock()
		active := e.h.actors[a.id] != nil
		e.h.mu.Unlock()
		if len(qs) > 0 && !active {
			enc, part, _, _ := e.h.locate(ref)
			_ = enc
			kv, _ := st.Get(context.Background(), storage.WakeupKey(part, ref.Name, storage.EncodeKey(ref.Key)))
			e.h.timers.mu.Lock()
			_, timer := e.h.timers.byID[a.id]
			e.h.timers.mu.Unlock()
			if !timer {
				stranded++
				t.Logf("stranded: wakeup=%s timer=%v", kv.Value, timer)
			}
		}
	}
	t.Logf("deactivated %d times", hit)
	if stranded > 0 {
		t.Errorf("BUG: %d messages left queued with the actor deactivated and no timer", stranded)
	}
}
