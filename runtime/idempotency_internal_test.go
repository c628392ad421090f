package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type inboxState struct{}

// inbox keeps what it is sent to q and other: its workflow waits for
// another queue.
var inbox = rivet.Actor[inboxState]{
	Name:   "inbox",
	Queues: rivet.Queues{"q": rivet.QueueOf[int](), "other": rivet.QueueOf[int](), "never": rivet.QueueOf[int]()},
	Run: func(c *workflow.Ctx[inboxState]) error {
		_, err := workflow.Next[int](c, "wait", workflow.NextOptions{Names: []string{"never"}})
		return err
	},
}

// gatedInbox completes one message of q with twice its body, once a
// message on gate lets it.
var gatedInbox = rivet.Actor[inboxState]{
	Name:   "gatedInbox",
	Queues: rivet.Queues{"gate": rivet.QueueOf[int](), "q": rivet.QueueOf[int]()},
	Run: func(c *workflow.Ctx[inboxState]) error {
		if _, err := workflow.Next[int](c, "gate", workflow.NextOptions{Names: []string{"gate"}}); err != nil {
			return err
		}
		m, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"q"}, Completable: true})
		if err != nil {
			return err
		}
		return m.Complete(m.Body * 2)
	},
}

// hostOfOn starts a host of actor on a new in-memory store (closed when
// the test ends).
func hostOfOn(t *testing.T, actor rivet.Actor[inboxState]) (*rivet.Registry, storage.Store, *Host, func(context.Context) error) {
	t.Helper()
	reg, err := rivet.Setup(actor)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.NewMemory()
	t.Cleanup(func() { store.Close() })
	h, stop := memHostOn(t, reg, store)
	return reg, store, h, stop
}

func depthOf(t *testing.T, h *Host, ref Ref, queue string) uint64 {
	t.Helper()
	ins, err := h.Inspect(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range ins.Queues {
		if q.Queue == queue {
			return q.Depth
		}
	}
	return 0
}

// A send with an idempotency key queues its message once: sent again with
// the same key (a client retrying a send whose outcome it did not learn),
// also after the actor was loaded again, it queues nothing and answers with
// the first message's ID. The same key with another message is the
// caller's mistake; a key too long is refused.
func TestASendWithAnIdempotencyKeyQueuesOnce(t *testing.T) {
	reg, store, h, stop := hostOfOn(t, inbox)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "inbox", Key: []string{"k"}}
	send := func(h *Host, key, queue, body string) (SendResult, error) {
		return h.Send(ctx, SendRequest{Ref: ref, Queue: queue, Body: json.RawMessage(body), CreateIfMissing: true, IdempotencyKey: key})
	}
	first, err := send(h, "order-1", "q", "7")
	if err != nil || first.Duplicate {
		t.Fatalf("first send: %+v, %v", first, err)
	}
	again, err := send(h, "order-1", "q", "7")
	if err != nil || !again.Duplicate || again.MessageID != first.MessageID {
		t.Fatalf("the same send again: %+v, %v; want a duplicate of message %d", again, err, first.MessageID)
	}
	if spaced, err := send(h, "order-1", "q", " 7\n"); err != nil || !spaced.Duplicate {
		t.Errorf("the same body formatted anew: %+v, %v; want a duplicate", spaced, err)
	}
	if _, err := send(h, "order-1", "q", "8"); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("the same key with another body: %v, want ErrInvalidArgument", err)
	}
	if _, err := send(h, "order-1", "other", "7"); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("the same key with another queue: %v, want ErrInvalidArgument", err)
	}
	if _, err := send(h, strings.Repeat("x", maxIdempotencyKeyBytes+1), "q", "7"); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("a key too long: %v, want ErrInvalidArgument", err)
	}
	second, err := send(h, "order-2", "q", "7")
	if err != nil || second.Duplicate || second.MessageID == first.MessageID {
		t.Fatalf("another key: %+v, %v", second, err)
	}
	if plain, err := send(h, "", "q", "7"); err != nil || plain.Duplicate {
		t.Fatalf("no key: %+v, %v", plain, err)
	}
	if d := depthOf(t, h, ref, "q"); d != 3 {
		t.Fatalf("queue depth %d, want 3", d)
	}
	if err := stop(ctx); err != nil {
		t.Fatal(err)
	}
	h, _ = memHostOn(t, reg, store)
	again, err = send(h, "order-1", "q", "7")
	if err != nil || !again.Duplicate || again.MessageID != first.MessageID {
		t.Fatalf("after a reload: %+v, %v; want a duplicate of message %d", again, err, first.MessageID)
	}
	if d := depthOf(t, h, ref, "q"); d != 3 {
		t.Fatalf("after a reload, queue depth %d, want 3", d)
	}
}

// noteInbox is inbox with messages that are JSON objects.
var noteInbox = rivet.Actor[inboxState]{
	Name: "noteInbox",
	Queues: rivet.Queues{"q": rivet.QueueOf[struct {
		Text string `json:"text"`
		At   int    `json:"at"`
	}](), "never": rivet.QueueOf[int]()},
	Run: inbox.Run,
}

// The same key with the same JSON value is a retry, whatever the order of
// its objects' members: a client in another language may build the body
// anew from a map, which keeps no order (a user trial from Python was
// refused). A key recorded by a build from before, which digested the
// compacted body alone, still takes a retry of the same bytes.
func TestARetriedSendIsTheSameMessageWhateverTheOrderOfItsMembers(t *testing.T) {
	reg, store, h, stop := hostOfOn(t, noteInbox)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "noteInbox", Key: []string{"k"}}
	send := func(h *Host, key, body string) (SendResult, error) {
		return h.Send(ctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(body), CreateIfMissing: true, IdempotencyKey: key})
	}
	first, err := send(h, "n-1", `{"text":"a","at":1}`)
	if err != nil || first.Duplicate {
		t.Fatalf("first send: %+v, %v", first, err)
	}
	if again, err := send(h, "n-1", "{ \"at\": 1,\n \"text\": \"a\" }"); err != nil || !again.Duplicate || again.MessageID != first.MessageID {
		t.Errorf("the same value, its members in another order: %+v, %v; want a duplicate of message %d", again, err, first.MessageID)
	}
	for _, other := range []string{`{"at":2,"text":"a"}`, `{"text":"b","at":1}`} {
		if _, err := send(h, "n-1", other); !errors.Is(err, rivet.ErrInvalidArgument) {
			t.Errorf("the same key with %s: %v, want ErrInvalidArgument", other, err)
		}
	}

	// A record as a build from before wrote it: no Same.
	if _, err := send(h, "n-2", `{"text":"c","at":3}`); err != nil {
		t.Fatal(err)
	}
	key := sendKeyKey(storage.ActorPrefix(h.loaded(ref).part, ref.Name, storage.EncodeKey(ref.Key)), "n-2")
	if err := stop(ctx); err != nil {
		t.Fatal(err)
	}
	kv, err := store.Get(ctx, key)
	var rec sendKeyRecord
	if err != nil || json.Unmarshal(kv.Value, &rec) != nil || rec.Same == "" || rec.Sum == "" {
		t.Fatalf("the key's record %q, %v: want both digests", kv.Value, err)
	}
	rec.Same = ""
	old, _ := json.Marshal(rec)
	if err := store.Commit(ctx, storage.Txn{Ops: []storage.Op{storage.Put(key, old)}}); err != nil {
		t.Fatal(err)
	}
	h, _ = memHostOn(t, reg, store)
	for _, same := range []string{`{"text":"c","at":3}`, ` {"text": "c", "at": 3}`} {
		if again, err := send(h, "n-2", same); err != nil || !again.Duplicate {
			t.Errorf("%s to an older record: %+v, %v; want a duplicate", same, again, err)
		}
	}
	if _, err := send(h, "n-2", `{"text":"d","at":3}`); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("another body to an older record: %v, want ErrInvalidArgument", err)
	}
	if d := depthOf(t, h, ref, "q"); d != 2 {
		t.Errorf("queue depth %d, want 2", d)
	}
}

// An actor keeps its last sendKeysKept keys, each for sendKeysWindow: a
// key pushed out, or expired, is a new send; storage holds no more keys.
func TestAnActorKeepsItsLastIdempotencyKeysForAWhile(t *testing.T) {
	kept, window := sendKeysKept, sendKeysWindow
	sendKeysKept, sendKeysWindow = 3, time.Hour
	defer func() { sendKeysKept, sendKeysWindow = kept, window }()
	_, store, h, _ := hostOfOn(t, inbox)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "inbox", Key: []string{"k"}}
	send := func(key string) SendResult {
		t.Helper()
		res, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), CreateIfMissing: true, IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for i := range 5 {
		send(fmt.Sprint("k", i))
	}
	prefix := storage.ActorPrefix(h.loaded(ref).part, ref.Name, storage.EncodeKey(ref.Key))
	kvs, err := store.List(ctx, prefix+storage.IdempotencySuffix, storage.ListOptions{KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 3 {
		t.Errorf("%d keys stored, want the last 3", len(kvs))
	}
	if send("k4").Duplicate != true {
		t.Error("k4, among the last 3, was sent again")
	}
	if send("k0").Duplicate {
		t.Error("k0, pushed out by the 3 after it, is still a duplicate")
	}
	sendKeysWindow = 20 * time.Millisecond
	for at := time.Now(); time.Since(at) < 3*sendKeysWindow; {
		time.Sleep(5 * time.Millisecond) // the keys' time runs out
	}
	if send("k0").Duplicate {
		t.Error("k0, older than the window, is still a duplicate")
	}
}

// A send that waits, sent again with its key once the first sender's wait
// ran out, waits for the first message while it is queued, and gets its
// completion.
func TestADuplicateSendWaitsForTheFirstMessage(t *testing.T) {
	_, _, h, _ := hostOfOn(t, gatedInbox)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "gatedInbox", Key: []string{"k"}}
	req := SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`21`), CreateIfMissing: true, IdempotencyKey: "job-1", Wait: true, Timeout: 10 * time.Millisecond}
	first, err := h.Send(ctx, req)
	if err != nil || first.Status != SendTimedOut {
		t.Fatalf("first send: %+v, %v; want it timed out (the workflow waits for its gate)", first, err)
	}
	type result struct {
		res SendResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		req.Timeout = 30 * time.Second
		res, err := h.Send(ctx, req)
		done <- result{res, err}
	}()
	// Once the duplicate waits, the gate lets the workflow complete it.
	for until := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		a := h.loaded(ref)
		a.wf.notifyMu.Lock()
		_, waits := a.wf.completions[first.MessageID]
		a.wf.notifyMu.Unlock()
		if waits {
			break
		}
		if time.Now().After(until) {
			t.Fatal("the duplicate never waited for message", first.MessageID)
		}
	}
	if _, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "gate", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || !r.res.Duplicate || r.res.MessageID != first.MessageID || r.res.Status != SendCompleted || string(r.res.Response) != "42" {
		t.Fatalf("duplicate: %+v, %v; want message %d completed with 42", r.res, r.err, first.MessageID)
	}
	// Taken and completed: sent again, it answers at once with the same
	// completion, kept with its key (its workflow has ended since).
	again, err := h.Send(ctx, req)
	if err != nil || !again.Duplicate || again.Status != SendCompleted || string(again.Response) != "42" || again.WorkflowStatus != "" {
		t.Fatalf("after its completion: %+v, %v; want a duplicate, completed with 42", again, err)
	}
}

// idleLoop takes messages of q in a loop that keeps one iteration of
// history, waiting a moment for each: once it has waited a few times
// with none, no history entry holds a message it took. Its action enq
// enqueues a message of q (ActionCtx.Enqueue).
var idleLoop = rivet.Actor[inboxState]{
	Name:   "idleLoop",
	Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
	Actions: rivet.Actions[inboxState]{
		"enq": rivet.Action0(func(c *rivet.ActionCtx[inboxState]) (int, error) { return 0, c.Enqueue("q", 3) }),
	},
	Run: func(c *workflow.Ctx[inboxState]) error {
		_, err := workflow.LoopWith(c, workflow.LoopOptions[int]{Name: "loop", HistoryPruneInterval: 1, HistorySize: 1},
			func(c *workflow.Ctx[inboxState], n int) (int, error) {
				_, err := workflow.Next[int](c, "next", workflow.NextOptions{Names: []string{"q"}, Timeout: 5 * time.Millisecond})
				if err != nil && !errors.Is(err, workflow.ErrTimeout) {
					return n, err
				}
				return n + 1, nil
			})
		return err
	},
}

// A message ID an idempotency key holds is not given to another message
// after the actor is loaded again, though neither its queue nor its
// workflow's history (pruned) holds that message any more: a duplicate
// of the key would answer with, and wait for, another message.
func TestAKeysMessageIDIsNotGivenAgainAfterAReload(t *testing.T) {
	testKeysMessageIDAfterAReload(t, false)
}

// Nor to a message an action enqueues (ActionCtx.Enqueue), the first to
// take an ID after the reload.
func TestAKeysMessageIDIsNotGivenAgainToAnEnqueuedMessage(t *testing.T) {
	testKeysMessageIDAfterAReload(t, true)
}

func testKeysMessageIDAfterAReload(t *testing.T, enqueueFirst bool) {
	reg, store, h, stop := hostOfOn(t, idleLoop)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "idleLoop", Key: []string{"k"}}
	send := func(h *Host, key string) SendResult {
		t.Helper()
		res, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), CreateIfMissing: true, IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := send(h, "a")
	prefix := storage.ActorPrefix(h.loaded(ref).part, ref.Name, storage.EncodeKey(ref.Key))
	// Taken, and its receive pruned from the history.
	for until := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(until) {
			t.Fatal("the history still holds the message")
		}
		if depthOf(t, h, ref, "q") != 0 {
			continue
		}
		kvs, err := store.List(ctx, prefix+storage.WorkflowSuffix, storage.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		held := false
		for _, kv := range kvs {
			held = held || strings.Contains(string(kv.Value), `"messages"`)
		}
		if !held {
			break
		}
	}
	if err := stop(ctx); err != nil {
		t.Fatal(err)
	}
	h, _ = memHostOn(t, reg, store)
	if enqueueFirst {
		// An enqueue takes an ID as a send does: after the keys'.
		if _, err := h.Call(ctx, CallRequest{Ref: ref, Action: "enq"}); err != nil {
			t.Fatal(err)
		}
	}
	plain, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`2`)})
	if err != nil {
		t.Fatal(err)
	}
	second := send(h, "b")
	for _, id := range []uint64{plain.MessageID, second.MessageID} {
		if id <= first.MessageID {
			t.Errorf("message %d after the reload, want one after %d, the first key's", id, first.MessageID)
		}
	}
	if enqueueFirst && plain.MessageID != first.MessageID+2 {
		t.Errorf("send after the enqueue got message %d, want %d: the enqueued message takes %d, the one after the first key's", plain.MessageID, first.MessageID+2, first.MessageID+1)
	}
	if again := send(h, "a"); !again.Duplicate || again.MessageID != first.MessageID {
		t.Errorf("the first key again: %+v, want a duplicate of message %d", again, first.MessageID)
	}
}

// doneAtOnce's workflow ends at once: nothing takes its messages.
var doneAtOnce = rivet.Actor[inboxState]{
	Name:   "doneAtOnce",
	Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
	Run:    func(c *workflow.Ctx[inboxState]) error { return nil },
}

// A duplicate that waits, sent to an actor whose workflow has ended (and
// so will never take the first message), answers at once as the first
// send did, with the workflow's status: it does not wait for its timeout.
func TestADuplicateSendToAnEndedWorkflowDoesNotWait(t *testing.T) {
	reg, store, h, stop := hostOfOn(t, doneAtOnce)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := Ref{Name: "doneAtOnce", Key: []string{"k"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	for until := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ins, err := h.Inspect(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if ins.WorkflowStatus == WorkflowCompleted {
			break
		}
		if time.Now().After(until) {
			t.Fatal("the workflow never completed")
		}
	}
	req := SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`1`), IdempotencyKey: "once"}
	first, err := h.Send(ctx, req)
	if err != nil || first.WorkflowStatus != WorkflowCompleted {
		t.Fatalf("first send: %+v, %v; want it enqueued for an ended workflow", first, err)
	}
	for _, reload := range []bool{false, true} {
		if reload {
			if err := stop(ctx); err != nil {
				t.Fatal(err)
			}
			h, stop = memHostOn(t, reg, store)
		}
		for _, wait := range []bool{false, true} {
			req.Wait, req.Timeout = wait, 5*time.Second
			t0 := time.Now()
			res, err := h.Send(ctx, req)
			if err != nil || !res.Duplicate || res.MessageID != first.MessageID || res.Status != SendEnqueued || res.WorkflowStatus != WorkflowCompleted {
				t.Errorf("reload %v, wait %v: %+v, %v; want a duplicate of message %d, enqueued, workflow completed", reload, wait, res, err, first.MessageID)
			}
			if d := time.Since(t0); d > 2*time.Second {
				t.Errorf("reload %v, wait %v: answered after %s", reload, wait, d)
			}
		}
	}
}

// takeThenGate takes a message of q, then waits in a Do step (which holds
// no turn, so sends go on) until takeGate closes before it completes it.
var (
	takeGate     = make(chan struct{})
	takeThenGate = rivet.Actor[inboxState]{
		Name:   "takeThenGate",
		Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
		Run: func(c *workflow.Ctx[inboxState]) error {
			m, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"q"}, Completable: true})
			if err != nil {
				return err
			}
			if _, err := workflow.Do(c, "hold", func(d *workflow.DoCtx) (int, error) {
				select {
				case <-takeGate:
					return 0, nil
				case <-d.Context().Done():
					return 0, d.Context().Err()
				}
			}); err != nil {
				return err
			}
			return m.Complete(m.Body * 2)
		},
	}
)

// A send that waits, sent again with its key while the first sender still
// waits, waits too and gets the completion, whether the message is still
// queued or taken: a step that runs again on the actor's new node sends
// again while its first run's wait on the old one may not be over yet.
// Before, only one sender could wait for a message, and the duplicate was
// answered "enqueued" at once, without the completion it was waiting for.
func TestADuplicateSendWaitsBesideTheFirstSender(t *testing.T) {
	for _, c := range []struct {
		actor rivet.Actor[inboxState]
		taken bool // the workflow took the message before the duplicate
	}{{gatedInbox, false}, {takeThenGate, true}} {
		t.Run(c.actor.Name, func(t *testing.T) {
			takeGate = make(chan struct{}) // before any host of this test runs
			_, _, h, _ := hostOfOn(t, c.actor)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ref := Ref{Name: c.actor.Name, Key: []string{"k"}}
			if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
				t.Fatal(err)
			}
			req := SendRequest{Ref: ref, Queue: "q", Body: json.RawMessage(`21`), IdempotencyKey: "job-1", Wait: true, Timeout: 40 * time.Second}
			type result struct {
				res SendResult
				err error
			}
			done := make(chan result, 2)
			send := func() {
				res, err := h.Send(ctx, req)
				done <- result{res, err}
			}
			waiters := func(want int, taken bool) {
				t.Helper()
				for until := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					a := h.loaded(ref)
					a.wf.notifyMu.Lock()
					var n int
					var seq uint64
					for id, chs := range a.wf.completions {
						n, seq = len(chs), id
					}
					took := a.wf.taken[seq]
					a.wf.notifyMu.Unlock()
					if n == want && took == taken {
						return
					}
					if time.Now().After(until) {
						select {
						case r := <-done:
							t.Logf("a send returned: %+v, %v", r.res, r.err)
						default:
						}
						t.Fatalf("%d sender(s) wait, the message taken: %v; want %d, %v", n, took, want, taken)
					}
				}
			}
			go send()
			waiters(1, c.taken)
			go send()
			waiters(2, c.taken)
			if c.taken {
				close(takeGate)
			} else if _, err := h.Send(ctx, SendRequest{Ref: ref, Queue: "gate", Body: json.RawMessage(`1`)}); err != nil {
				t.Fatal(err)
			}
			dups := 0
			for range 2 {
				r := <-done
				if r.err != nil || r.res.Status != SendCompleted || string(r.res.Response) != "42" {
					t.Fatalf("a sender got %+v, %v; want the completion, 42", r.res, r.err)
				}
				if r.res.Duplicate {
					dups++
				}
			}
			if dups != 1 {
				t.Errorf("%d of the two sends say duplicate, want 1", dups)
			}
		})
	}
}
