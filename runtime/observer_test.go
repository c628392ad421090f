package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
)

// recordObserver counts what a Host tells its Observer.
type recordObserver struct {
	mu       sync.Mutex
	turns    map[runtime.TurnKind]int
	calls    int
	failures []error
}

func (o *recordObserver) Turn(kind runtime.TurnKind, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.turns == nil {
		o.turns = map[runtime.TurnKind]int{}
	}
	o.turns[kind]++
}

func (o *recordObserver) Call(actor string, took time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if err != nil {
		o.failures = append(o.failures, err)
	}
}

// inbox has a queue and no workflow: nothing takes its messages, so they
// stay pending. Each activation stays in memory while hold holds it (a
// KeepAwake task from OnWake), however long its idle timeout has run: a
// test's short idle timeout otherwise put it to sleep whenever the test's
// goroutine went without the CPU for that long, as on a loaded machine,
// and its queue left Stats between a send and the look at it.
func inbox(hold *holder) rivet.Definition {
	return queuesOnly[struct{}]{rivet.Actor[struct{}]{
		Name:   "inbox",
		Queues: rivet.Queues{"in": rivet.QueueOf[int]()},
		OnWake: func(c *rivet.ActionCtx[struct{}]) error {
			held := hold.current()
			return c.KeepAwake(func(ctx context.Context, _ rivet.Client) {
				select {
				case <-held:
				case <-ctx.Done():
				}
			})
		},
	}}
}

// holder keeps in memory the activations that start while it holds
// (inbox's), until it lets them go.
type holder struct {
	mu sync.Mutex
	ch chan struct{}
}

// hold keeps the activations that start from now on in memory.
func (h *holder) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ch = make(chan struct{})
}

// release lets the activations held go to sleep when idle, and those that
// start from now on too.
func (h *holder) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.ch)
}

// current is what an activation starting now waits for to go: closed if
// the holder does not hold.
func (h *holder) current() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ch
}

func send(t *testing.T, h *runtime.Host, name, key, queue string, body any) {
	t.Helper()
	b, _ := json.Marshal(body)
	if _, err := h.Send(ctx(t), runtime.SendRequest{Ref: runtime.Ref{Name: name, Key: []string{key}}, Queue: queue, Body: b, CreateIfMissing: true}); err != nil {
		t.Fatal(err)
	}
}

// The Observer hears of every call and turn, and Stats counts the queued
// messages of the actors in memory: they leave the count when their actor
// is deactivated or destroyed, and come back with its next activation.
func TestObserverAndQueueStats(t *testing.T) {
	t.Parallel()
	obs := &recordObserver{}
	// The inbox stays in memory while its queue is counted, and leaves it
	// once let go: its idle timeout alone decides neither.
	hold := &holder{}
	hold.hold()
	e := newEnv(t, counterReg(t, inbox(hold)), func(c *runtime.Config) {
		c.Observer = obs
		c.IdleTimeout = 100 * time.Millisecond
	})
	callInt(t, e.host, "counter", "c", "increment", true, 1)
	if _, err := call(t, e.host, "counter", "c", "nope", true); !errors.Is(err, rivet.ErrUnknownAction) {
		t.Fatalf("unknown action: %v", err)
	}
	for i := range 3 {
		send(t, e.host, "inbox", "a", "in", i)
	}
	if s := e.host.Stats(); s.QueuedMessages != 3 || s.MessagesSent != 3 {
		t.Fatalf("queued %d, sent %d; want 3, 3", s.QueuedMessages, s.MessagesSent)
	}
	hold.release()
	waitFor(t, "the actors to be deactivated", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	if s := e.host.Stats(); s.QueuedMessages != 0 {
		t.Fatalf("queued %d after deactivation, want 0", s.QueuedMessages)
	}
	hold.hold()
	send(t, e.host, "inbox", "a", "in", 4) // loads the 3 from storage
	if s := e.host.Stats(); s.QueuedMessages != 4 {
		t.Fatalf("queued %d after reactivation, want 4", s.QueuedMessages)
	}
	if err := e.host.Destroy(ctx(t), runtime.Ref{Name: "inbox", Key: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if s := e.host.Stats(); s.QueuedMessages != 0 {
		t.Fatalf("queued %d after destroy, want 0", s.QueuedMessages)
	}

	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.calls != 2 || len(obs.failures) != 1 || !errors.Is(obs.failures[0], rivet.ErrUnknownAction) {
		t.Errorf("observer saw %d calls, failures %v; want 2 calls, one unknown action", obs.calls, obs.failures)
	}
	if obs.turns[runtime.TurnAction] != 1 || obs.turns[runtime.TurnSend] != 4 || obs.turns[runtime.TurnAdmin] != 1 {
		t.Errorf("observer saw turns %v; want 1 action, 4 sends, 1 admin", obs.turns)
	}
}

// waitObserver is a recordObserver that hears of the waits for the gate
// too (a runtime.WaitObserver).
type waitObserver struct {
	recordObserver
	waits map[runtime.TurnKind]int
}

func (o *waitObserver) TurnWait(kind runtime.TurnKind, waited time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.waits == nil {
		o.waits = map[runtime.TurnKind]int{}
	}
	o.waits[kind]++
}

// Every turn's wait for the gate is observed, as its duration is: also
// that of an admin turn of an actor not in memory, whose load takes the
// gate for it (its turn comes first), which was observed as a turn and
// not as a wait.
func TestEveryTurnObservedHasItsWaitObserved(t *testing.T) {
	t.Parallel()
	obs := &waitObserver{}
	e := newEnv(t, counterReg(t), func(c *runtime.Config) {
		c.Observer = obs
		c.IdleTimeout = 100 * time.Millisecond
	})
	ref := runtime.Ref{Name: "counter", Key: []string{"c"}}
	callInt(t, e.host, "counter", "c", "increment", true, 1)
	waitFor(t, "the actor to be deactivated", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	if ok, err := e.host.CancelScheduledCall(ctx(t), ref, "every:none"); ok || err != nil {
		t.Fatalf("cancel of no call: %v %v", ok, err)
	}
	waitFor(t, "the actor to be deactivated again", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	if err := e.host.Destroy(ctx(t), ref); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.turns[runtime.TurnAdmin] != 2 || obs.turns[runtime.TurnAction] != 1 {
		t.Fatalf("turns %v, want 1 action and 2 admin", obs.turns)
	}
	for kind, n := range obs.turns {
		if w := obs.waits[kind]; w != n {
			t.Errorf("%v: %d turns observed, %d waits", kind, n, w)
		}
	}
}
