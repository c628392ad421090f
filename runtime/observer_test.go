package runtime_test

import (
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

// inbox has a queue and no workflow: its messages stay pending.
// inbox keeps what is sent to it: nothing takes its messages.
var inbox = queuesOnly[struct{}]{rivet.Actor[struct{}]{
	Name:   "inbox",
	Queues: rivet.Queues{"in": rivet.QueueOf[int]()},
}}

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
	e := newEnv(t, counterReg(t, inbox), func(c *runtime.Config) {
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
	waitFor(t, "the actors to be deactivated", 10*time.Second, func() bool { return e.host.Stats().ActiveActors == 0 })
	if s := e.host.Stats(); s.QueuedMessages != 0 {
		t.Fatalf("queued %d after deactivation, want 0", s.QueuedMessages)
	}
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
