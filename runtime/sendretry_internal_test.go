package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/storage/etcdstore"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/workflow"
)

type retryState struct {
	Taken []int `json:"taken"`
}

// retryGates hold the workflow of retried between its receive and its
// Complete, by message body: each test uses bodies of its own.
var retryGates = struct {
	sync.Mutex
	m map[int]*retryGate
}{m: map[int]*retryGate{}}

type retryGate struct {
	entered chan struct{} // gets one value each time a run reaches the hold
	release chan struct{}
}

func holdBody(t *testing.T, body int) *retryGate {
	g := &retryGate{entered: make(chan struct{}, 16), release: make(chan struct{})}
	retryGates.Lock()
	retryGates.m[body] = g
	retryGates.Unlock()
	t.Cleanup(func() {
		retryGates.Lock()
		delete(retryGates.m, body)
		retryGates.Unlock()
	})
	return g
}

func (g *retryGate) waitEntered(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("the workflow never reached the hold %s", what)
	}
}

// retried takes a message of q (recording its body in the state), waits
// in a Do step (which holds no turn) while the message's gate holds it,
// and completes it with twice its body.
var retried = rivet.Actor[retryState]{
	Name:   "retried",
	Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
	Actions: rivet.Actions[retryState]{
		"ping": rivet.Query(func(c *rivet.ActionCtx[retryState]) (int, error) { return len(c.State.Taken), nil }),
	},
	Run: func(c *workflow.Ctx[retryState]) error {
		return c.Loop("serve", func(lc *workflow.Ctx[retryState]) error {
			m, err := workflow.Next[int](lc, "take", workflow.NextOptions{Names: []string{"q"}, Completable: true})
			if err != nil {
				return err
			}
			if err := lc.Step("note", func(s *workflow.StepCtx[retryState]) error {
				s.State.Taken = append(s.State.Taken, m.Body)
				return nil
			}); err != nil {
				return err
			}
			if _, err := workflow.Do(lc, "hold", func(d *workflow.DoCtx) (int, error) {
				retryGates.Lock()
				g := retryGates.m[m.Body]
				retryGates.Unlock()
				if g == nil {
					return 0, nil
				}
				select {
				case g.entered <- struct{}{}:
				default:
				}
				select {
				case <-g.release:
					return 0, nil
				case <-d.Context().Done():
					return 0, d.Context().Err()
				}
			}); err != nil {
				return err
			}
			return m.Complete(m.Body * 2)
		})
	},
}

// retriedLarge completes each message of q with a string of as many
// bytes as its body says.
var retriedLarge = rivet.Actor[retryState]{
	Name:   "retriedLarge",
	Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
	Run: func(c *workflow.Ctx[retryState]) error {
		return c.Loop("serve", func(lc *workflow.Ctx[retryState]) error {
			m, err := workflow.Next[int](lc, "take", workflow.NextOptions{Names: []string{"q"}, Completable: true})
			if err != nil {
				return err
			}
			return m.Complete(strings.Repeat("x", m.Body))
		})
	},
}

// retryHost starts a host of retried over a real embedded etcd; restart
// stops it and starts another over the same store, as a node restarted.
type retryHost struct {
	t     *testing.T
	reg   *rivet.Registry
	store storage.Store
	h     *Host
	stop  func(context.Context) error
}

func newRetryHost(t *testing.T) *retryHost {
	t.Helper()
	reg, err := rivet.Setup(retried, retriedLarge)
	if err != nil {
		t.Fatal(err)
	}
	store, err := etcdstore.New(etcdtest.StartClient(t), "/sendretry/")
	if err != nil {
		t.Fatal(err)
	}
	r := &retryHost{t: t, reg: reg, store: store}
	r.h, r.stop = memHostOn(t, reg, store, shortStepGrace)
	return r
}

// shortStepGrace gives a retryHost the grace newEnv's hosts give a step in
// flight when it stops: a restart whose workflow is held in its Do step
// waits that long before it cancels the step.
func shortStepGrace(c *Config) { c.StepGrace = ShortStepGrace }

func (r *retryHost) restart(ctx context.Context) {
	r.t.Helper()
	if err := r.stop(ctx); err != nil {
		r.t.Fatal(err)
	}
	r.h, r.stop = memHostOn(r.t, r.reg, r.store, shortStepGrace)
}

type sendAnswer struct {
	res SendResult
	err error
}

func (r *retryHost) sendAsync(ctx context.Context, req SendRequest) chan sendAnswer {
	ch := make(chan sendAnswer, 1)
	h := r.h
	go func() {
		res, err := h.Send(ctx, req)
		ch <- sendAnswer{res, err}
	}()
	return ch
}

// waitWaiters waits until n senders wait for a completion on ref's
// activation, failing at once if the send of early answers meanwhile.
func (r *retryHost) waitWaiters(ref Ref, n int, early chan sendAnswer) {
	r.t.Helper()
	for until := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		select {
		case a := <-early:
			r.t.Fatalf("the retried send was answered before the workflow completed the message: %+v, %v", a.res, a.err)
		default:
		}
		got := 0
		if a := r.h.loaded(ref); a != nil {
			a.wf.notifyMu.Lock()
			for _, chs := range a.wf.completions {
				got += len(chs)
			}
			a.wf.notifyMu.Unlock()
		}
		if got == n {
			return
		}
		if time.Now().After(until) {
			r.t.Fatalf("%d senders wait, want %d", got, n)
		}
	}
}

func answered(t *testing.T, what string, ch chan sendAnswer) sendAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(30 * time.Second):
		t.Fatalf("%s was never answered", what)
		return sendAnswer{}
	}
}

func wantCompleted(t *testing.T, what string, a sendAnswer, id uint64, response string, dup bool) {
	t.Helper()
	if a.err != nil || a.res.Status != SendCompleted || string(a.res.Response) != response || a.res.MessageID != id || a.res.Duplicate != dup {
		t.Fatalf("%s: %+v (response %s), %v; want message %d completed with %s, duplicate %v", what, a.res, a.res.Response, a.err, id, response, dup)
	}
}

// taken returns what the workflow of ref took, once it took want
// messages, and checks that none is still queued.
func (r *retryHost) taken(ctx context.Context, ref Ref, want int) []int {
	r.t.Helper()
	for until := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ins, err := r.h.Inspect(ctx, ref)
		if err != nil {
			r.t.Fatal(err)
		}
		var st retryState
		if err := json.Unmarshal(ins.State, &st); err != nil {
			r.t.Fatal(err)
		}
		if len(st.Taken) >= want {
			if d := depthOf(r.t, r.h, ref, "q"); d != 0 {
				r.t.Errorf("%d messages still queued, want none", d)
			}
			return st.Taken
		}
		if time.Now().After(until) {
			r.t.Fatalf("the workflow took %v, want %d messages", st.Taken, want)
		}
	}
}

// A waiting send with an idempotency key whose wait broke (its caller
// left) after the workflow took the message, sent again with the same key,
// waits for that message's completion and gets it, as a Temporal Update
// retried with its update ID does. Before, the retry was answered
// "duplicate, enqueued" at once: the message was taken, no sender waited
// for it, and its completion was not kept for anyone.
func TestAKeyedWaitingSendRetriedAfterItsWaitBrokeGetsTheCompletion(t *testing.T) {
	r := newRetryHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ref := Ref{Name: "retried", Key: []string{"a"}}
	g := holdBody(t, 101)
	req := SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`101`), CreateIfMissing: true, IdempotencyKey: "job-a", Wait: true, Timeout: 40 * time.Second}
	firstCtx, leave := context.WithCancel(ctx)
	first := r.sendAsync(firstCtx, req)
	g.waitEntered(t, "after the first send")
	leave()
	if a := answered(t, "the first send", first); !errors.Is(a.err, context.Canceled) {
		t.Fatalf("the first send, its caller gone: %+v, %v; want its context's error", a.res, a.err)
	}
	again := r.sendAsync(ctx, req)
	r.waitWaiters(ref, 1, again)
	close(g.release)
	a := answered(t, "the send retried", again)
	wantCompleted(t, "the send retried while the message was taken", a, a.res.MessageID, "202", true)
	if got := r.taken(ctx, ref, 1); !slices.Equal(got, []int{101}) {
		t.Errorf("the workflow took %v, want [101]", got)
	}
}

// A waiting send with an idempotency key retried after its message was
// completed gets the same completion, at once, also from the actor loaded
// again (a node restarted); nothing is queued twice. A retry that does not
// wait is answered "duplicate, enqueued" as before, and a key used with
// another body is still refused. Before, a waiting retry after the
// completion was answered "duplicate, enqueued", without the response.
func TestAKeyedWaitingSendRetriedAfterItsCompletionGetsTheSameResponse(t *testing.T) {
	r := newRetryHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ref := Ref{Name: "retried", Key: []string{"b"}}
	req := SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`102`), CreateIfMissing: true, IdempotencyKey: "job-b", Wait: true, Timeout: 20 * time.Second}
	first, err := r.h.Send(ctx, req)
	wantCompleted(t, "the first send", sendAnswer{first, err}, first.MessageID, "204", false)
	for _, restart := range []bool{false, true} {
		if restart {
			r.restart(ctx)
		}
		t0 := time.Now()
		res, err := r.h.Send(ctx, req)
		wantCompleted(t, fmt.Sprintf("the send retried (restarted %v)", restart), sendAnswer{res, err}, first.MessageID, "204", true)
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("restarted %v: the retry was answered after %s, want at once", restart, d)
		}
		noWait := req
		noWait.Wait, noWait.Timeout = false, 0
		res, err = r.h.Send(ctx, noWait)
		if err != nil || !res.Duplicate || res.Status != SendEnqueued || res.MessageID != first.MessageID || res.Response != nil {
			t.Errorf("restarted %v: the send retried without waiting: %+v, %v; want a duplicate of message %d, enqueued", restart, res, err, first.MessageID)
		}
		other := req
		other.Body = json.RawMessage(`7`)
		if _, err := r.h.Send(ctx, other); !errors.Is(err, rivet.ErrInvalidArgument) {
			t.Errorf("restarted %v: the key sent with another body: %v, want INVALID_ARGUMENT", restart, err)
		}
	}
	if got := r.taken(ctx, ref, 1); !slices.Equal(got, []int{102}) {
		t.Errorf("the workflow took %v, want [102]", got)
	}
}

// The same across a restart of the node (the actor loaded again, its
// workflow replaying to the taken message): a retry of a keyed waiting
// send whose first sender's wait ended with the node gets the completion
// the new activation makes, whether it comes before the completion (it
// waits) or after (the completion was kept, by an activation that no send
// had read the keys of).
func TestAKeyedWaitingSendRetriedAcrossARestartGetsTheCompletion(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		body       int
		afterwards bool // the retry comes after the new activation completed the message
	}{{"waits", 103, false}, {"after", 104, true}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRetryHost(t)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			ref := Ref{Name: "retried", Key: []string{"c"}}
			g := holdBody(t, c.body)
			req := SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(fmt.Sprint(c.body)), CreateIfMissing: true, IdempotencyKey: "job-c", Wait: true, Timeout: 40 * time.Second}
			first := r.sendAsync(ctx, req)
			g.waitEntered(t, "after the first send")
			r.restart(ctx)
			// The node stopped before the completion: "enqueued", not an
			// error (or UNAVAILABLE, if the stop came first).
			if a := answered(t, "the first send", first); a.err == nil && a.res.Status != SendEnqueued || a.err != nil && !errors.Is(a.err, rivet.ErrUnavailable) {
				t.Fatalf("the first send, its node stopped: %+v, %v; want enqueued or UNAVAILABLE", a.res, a.err)
			}
			want := fmt.Sprint(c.body * 2)
			if c.afterwards {
				// Loaded again by a call: its workflow replays, runs the
				// hold again and completes the message.
				if _, err := r.h.Call(ctx, CallRequest{Ref: ref, Action: "ping"}); err != nil {
					t.Fatal(err)
				}
				g.waitEntered(t, "after the restart")
				close(g.release)
				r.taken(ctx, ref, 1)
				waitIdleWorkflow(t, r.h, ref)
				res, err := r.h.Send(ctx, req)
				wantCompleted(t, "the send retried after the completion", sendAnswer{res, err}, res.MessageID, want, true)
			} else {
				again := r.sendAsync(ctx, req)
				r.waitWaiters(ref, 1, again)
				g.waitEntered(t, "after the restart")
				close(g.release)
				a := answered(t, "the send retried", again)
				wantCompleted(t, "the send retried", a, a.res.MessageID, want, true)
			}
			if got := r.taken(ctx, ref, 1); !slices.Equal(got, []int{c.body}) {
				t.Errorf("the workflow took %v, want [%d]", got, c.body)
			}
		})
	}
}

// waitIdleWorkflow waits until ref's workflow waits for a message again
// (it completed the one it held).
func waitIdleWorkflow(t *testing.T, h *Host, ref Ref) {
	t.Helper()
	for until := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a := h.loaded(ref)
		if a != nil {
			if r := a.runner(); r != nil {
				r.mu.Lock()
				waiting := r.waiting && len(r.wake.Queues) > 0
				r.mu.Unlock()
				if waiting {
					return
				}
			}
		}
		if time.Now().After(until) {
			t.Fatal("the workflow never waited for a message again")
		}
	}
}

// A send without an idempotency key is as before: sent again after its
// wait broke, it is a new message (taken and completed in its turn), and
// nothing is kept for either beyond their history.
func TestAnUnkeyedWaitingSendKeepsNothingForARetry(t *testing.T) {
	r := newRetryHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ref := Ref{Name: "retried", Key: []string{"d"}}
	g := holdBody(t, 105)
	req := SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`105`), CreateIfMissing: true, Wait: true, Timeout: 40 * time.Second}
	firstCtx, leave := context.WithCancel(ctx)
	first := r.sendAsync(firstCtx, req)
	g.waitEntered(t, "after the first send")
	leave()
	answered(t, "the first send", first)
	again := r.sendAsync(ctx, req)
	close(g.release)
	a := answered(t, "the send again", again)
	if a.err != nil || a.res.Duplicate || a.res.Status != SendCompleted || string(a.res.Response) != "210" {
		t.Fatalf("the send again: %+v (response %s), %v; want a new message, completed with 210", a.res, a.res.Response, a.err)
	}
	if got := r.taken(ctx, ref, 2); !slices.Equal(got, []int{105, 105}) {
		t.Errorf("the workflow took %v, want [105 105]", got)
	}
	act := r.h.loaded(ref)
	if act == nil {
		t.Fatal("the actor is not loaded")
	}
	kvs, err := r.store.List(ctx, act.prefix, storage.ListOptions{KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if rest := kv.Key[len(act.prefix):]; strings.HasPrefix(rest, "k") {
			t.Errorf("an unkeyed send left %s", kv.Key)
		}
	}
}

// A completion too large to keep with its history write in one etcd
// transaction (within the bound of an action's result, over etcd's) is
// answered to its waiting sender, not kept: a waiting retry after it is
// answered "duplicate, enqueued" at once, not left to wait for a
// completion that came.
func TestAKeyedWaitingSendRetriedAfterACompletionTooLargeToKeepIsAnsweredAtOnce(t *testing.T) {
	r := newRetryHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ref := Ref{Name: "retriedLarge", Key: []string{"e"}}
	size := r.store.Limits().MaxTxnBytes + 1024
	req := SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(fmt.Sprint(size)), CreateIfMissing: true, IdempotencyKey: "job-e", Wait: true, Timeout: 20 * time.Second}
	first, err := r.h.Send(ctx, req)
	if err != nil || first.Status != SendCompleted || len(first.Response) != size+2 {
		t.Fatalf("the first send: status %q, %d bytes of response, %v; want it completed with %d bytes", first.Status, len(first.Response), err, size+2)
	}
	t0 := time.Now()
	res, err := r.h.Send(ctx, req)
	if err != nil || !res.Duplicate || res.Status != SendEnqueued || res.MessageID != first.MessageID {
		t.Errorf("the send retried: %+v, %v; want a duplicate of message %d, enqueued", res, err, first.MessageID)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the retry was answered after %s, want at once", d)
	}
}

// A completion is kept for a retry up to maxKeptCompletionBytes, within
// any transaction's bound: one byte more, and its retry is answered
// "enqueued" at once (an actor keeps up to 1024 of them, for a day, so a
// completion as large as a result could hold gigabytes of etcd's space).
func TestAKeptCompletionIsBoundedTo64KiB(t *testing.T) {
	r := newRetryHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, c := range []struct {
		key  string
		size int // of the response, a JSON string: its body's number + 2
		kept bool
	}{{"at-the-bound", maxKeptCompletionBytes, true}, {"over-it", maxKeptCompletionBytes + 1, false}} {
		ref := Ref{Name: "retriedLarge", Key: []string{c.key}}
		req := SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(fmt.Sprint(c.size - 2)), CreateIfMissing: true, IdempotencyKey: "job-" + c.key, Wait: true, Timeout: 20 * time.Second}
		first, err := r.h.Send(ctx, req)
		if err != nil || first.Status != SendCompleted || len(first.Response) != c.size {
			t.Fatalf("%s: the first send: status %q, %d bytes of response, %v; want it completed with %d bytes", c.key, first.Status, len(first.Response), err, c.size)
		}
		res, err := r.h.Send(ctx, req)
		switch {
		case err != nil || !res.Duplicate || res.MessageID != first.MessageID:
			t.Errorf("%s: the send retried: %+v, %v; want a duplicate of message %d", c.key, res, err, first.MessageID)
		case c.kept && (res.Status != SendCompleted || !bytes.Equal(res.Response, first.Response)):
			t.Errorf("%s: the retry got %q with %d bytes, want the kept completion", c.key, res.Status, len(res.Response))
		case !c.kept && res.Status != SendEnqueued:
			t.Errorf("%s: the retry got %q with %d bytes, want enqueued (not kept)", c.key, res.Status, len(res.Response))
		}
	}
}
