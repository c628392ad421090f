package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/placement"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type roomState struct {
	Posts int `json:"posts"`
}

// roomActor broadcasts what it is told to: "post" (event "message", the
// text), "postFail" (broadcasts, then fails), "undeclared" and "wrongType"
// (bugs), and its workflow's step "announce" (event "step") for each
// message of queue "announce"; a text "flaky" fails the step's first
// attempt after broadcasting.
var roomActor = rivet.Actor[roomState]{
	Name:   "room",
	Queues: rivet.Queues{"announce": rivet.QueueOf[string]()},
	Events: rivet.Events{"message": rivet.EventOf[string](), "step": rivet.EventOf[string](), "count": rivet.EventOf[int]()},
	Actions: rivet.Actions[roomState]{
		"post": rivet.Action(func(c *rivet.ActionCtx[roomState], text string) (int, error) {
			c.State.Posts++
			if err := c.Broadcast("message", text); err != nil {
				return 0, err
			}
			return c.State.Posts, c.Broadcast("count", c.State.Posts)
		}),
		"postFail": rivet.Action(func(c *rivet.ActionCtx[roomState], text string) (int, error) {
			c.State.Posts++
			if err := c.Broadcast("message", text); err != nil {
				return 0, err
			}
			return 0, rivet.UserError("nope", "the post failed after its broadcast", nil)
		}),
		"undeclared": rivet.Action0(func(c *rivet.ActionCtx[roomState]) (int, error) {
			return 0, c.Broadcast("nobody-declared-this", "x")
		}),
		"wrongType": rivet.Action0(func(c *rivet.ActionCtx[roomState]) (int, error) {
			return 0, c.Broadcast("message", 42)
		}),
		"peek": rivet.Query(func(c *rivet.ActionCtx[roomState]) (int, error) {
			return c.State.Posts, c.Broadcast("count", c.State.Posts)
		}),
	},
	Run: func(ctx *workflow.Ctx[roomState]) error {
		return ctx.Loop("announce-loop", func(l *workflow.Ctx[roomState]) error {
			m, err := workflow.Next[string](l, "wait-announce")
			if err != nil {
				return err
			}
			return l.StepWith(workflow.StepOptions{Name: "announce", RetryBackoffBase: time.Millisecond}, func(s *workflow.StepCtx[roomState]) error {
				if err := s.Broadcast("step", fmt.Sprintf("%s#%d", m.Body, s.Attempt())); err != nil {
					return err
				}
				if m.Body == "flaky" && s.Attempt() == 1 {
					return errors.New("first attempt fails")
				}
				s.State.Posts++
				return nil
			})
		})
	},
}

func roomRef(key string) runtime.Ref { return runtime.Ref{Name: "room", Key: []string{key}} }

// nextEvent waits for the subscription's next event.
func nextEvent(t *testing.T, s *runtime.Subscription) rivet.Event {
	t.Helper()
	select {
	case ev := <-s.Events():
		return ev
	case <-s.Done():
		t.Fatalf("subscription ended: %v", s.Err())
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return rivet.Event{}
}

func eventText(t *testing.T, ev rivet.Event) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(ev.Data, &s); err != nil {
		t.Fatalf("event %s data %s: %v", ev.Name, ev.Data, err)
	}
	return ev.Name + ":" + s
}

func TestEventsReachSubscribersInTurnOrder(t *testing.T) {
	e := newEnv(t, counterReg(t, roomActor), nil)
	h := e.host
	if _, err := h.Subscribe(ctx(t), roomRef("a"), nil); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("subscribe to a missing actor: %v, want ErrNotFound", err)
	}
	callInt(t, h, "room", "a", "post", true, "hello")
	if _, err := h.Subscribe(ctx(t), roomRef("a"), []string{"nope"}); !errors.Is(err, rivet.ErrUnknownEvent) || !strings.Contains(err.Error(), "count, message, step") {
		t.Fatalf("subscribe to an undeclared event: %v", err)
	}
	all, err := h.Subscribe(ctx(t), roomRef("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	msgs, err := h.Subscribe(ctx(t), roomRef("a"), []string{"message"})
	if err != nil {
		t.Fatal(err)
	}
	defer msgs.Close()
	// Many turns at once: each subscriber hears them in the order the
	// turns ran, which the counts they returned give.
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := call(t, h, "room", "a", "post", false, fmt.Sprint("m", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	texts := map[string]bool{}
	for i := range n {
		ev := nextEvent(t, all)
		if ev.Name != "message" {
			t.Fatalf("event %d is %s, want message (then its count)", i, ev.Name)
		}
		texts[eventText(t, ev)] = true
		cnt := nextEvent(t, all)
		var c int
		if err := json.Unmarshal(cnt.Data, &c); err != nil || cnt.Name != "count" || c != i+2 {
			t.Fatalf("after message %d: %s %s, want count %d", i, cnt.Name, cnt.Data, i+2)
		}
		if m := nextEvent(t, msgs); m.Name != "message" || string(m.Data) != string(ev.Data) {
			t.Fatalf("the filtered subscriber heard %s %s, want %s", m.Name, m.Data, ev.Data)
		}
	}
	if len(texts) != n {
		t.Fatalf("%d distinct messages, want %d", len(texts), n)
	}
	// A read-only action broadcasts too.
	callInt(t, h, "room", "a", "peek", false)
	if ev := nextEvent(t, all); ev.Name != "count" || string(ev.Data) != fmt.Sprint(n+1) {
		t.Fatalf("peek broadcast %s %s", ev.Name, ev.Data)
	}
}

func TestAFailedTurnPublishesNothing(t *testing.T) {
	e := newEnv(t, counterReg(t, roomActor), nil)
	h := e.host
	callInt(t, h, "room", "a", "post", true, "first")
	sub, err := h.Subscribe(ctx(t), roomRef("a"), []string{"message"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := call(t, h, "room", "a", "postFail", false, "never"); !errors.Is(err, rivet.ErrUser) {
		t.Fatalf("postFail: %v", err)
	}
	for _, bug := range []string{"undeclared", "wrongType"} {
		if _, err := call(t, h, "room", "a", bug, false); !errors.Is(err, rivet.ErrInternal) {
			t.Fatalf("%s: %v, want ErrInternal", bug, err)
		}
	}
	callInt(t, h, "room", "a", "post", false, "second")
	if got := eventText(t, nextEvent(t, sub)); got != "message:second" {
		t.Fatalf("first event after a failed turn: %s, want message:second", got)
	}
}

func TestEventsWaitForTheirTurnsCommit(t *testing.T) {
	e := newEnv(t, counterReg(t, roomActor), nil)
	h := e.host
	callInt(t, h, "room", "a", "post", true, "first")
	sub, err := h.Subscribe(ctx(t), roomRef("a"), []string{"message"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	e.store.holdGate, e.store.holdEntered = make(chan struct{}), make(chan struct{})
	e.store.holdCommitSub.Store("room")
	done := make(chan error, 1)
	go func() {
		_, err := call(t, h, "room", "a", "post", false, "held")
		done <- err
	}()
	<-e.store.holdEntered // the turn ran; its commit waits
	select {
	case ev := <-sub.Events():
		t.Fatalf("event %s %s published before its turn's commit", ev.Name, ev.Data)
	default:
	}
	close(e.store.holdGate)
	if got := eventText(t, nextEvent(t, sub)); got != "message:held" {
		t.Fatalf("event %s", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A commit that fails drops its turn's events: the change never
	// happened.
	e.store.refuseCommitSub.Store("room")
	if _, err := call(t, h, "room", "a", "post", false, "lost"); err == nil {
		t.Fatal("a post whose commit failed succeeded")
	}
	callInt(t, h, "room", "a", "post", false, "after")
	if got := eventText(t, nextEvent(t, sub)); got != "message:after" {
		t.Fatalf("event after a failed commit: %s, want message:after", got)
	}
}

func TestStepEventsAreThoseOfAttemptsThatSucceeded(t *testing.T) {
	e := newEnv(t, counterReg(t, roomActor), nil)
	h := e.host
	callInt(t, h, "room", "a", "post", true, "first")
	sub, err := h.Subscribe(ctx(t), roomRef("a"), []string{"step"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for _, text := range []string{"flaky", "steady"} {
		body, _ := json.Marshal(text)
		if _, err := h.Send(ctx(t), runtime.SendRequest{Ref: roomRef("a"), Queue: "announce", Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	// The flaky step's first attempt broadcast and failed: only its
	// second attempt is heard.
	for _, want := range []string{"step:flaky#2", "step:steady#1"} {
		if got := eventText(t, nextEvent(t, sub)); got != want {
			t.Fatalf("step event %s, want %s", got, want)
		}
	}
}

func TestSubscriptionsEndWithTheirPartitionOrActor(t *testing.T) {
	e := newEnv(t, counterReg(t, roomActor), nil)
	h := e.host
	callInt(t, h, "room", "a", "post", true, "x")
	callInt(t, h, "room", "b", "post", true, "x")
	moved, err := h.Subscribe(ctx(t), roomRef("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := placement.Partition("room", storage.EncodeKey([]string{"a"}), testPartitions)
	if err := h.Handoff(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, moved); !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("subscription after its partition left: %v, want ErrUnavailable", err)
	}
	destroyed, err := h.Subscribe(ctx(t), roomRef("b"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Destroy(ctx(t), roomRef("b")); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, destroyed); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("subscription of a destroyed actor: %v, want ErrNotFound", err)
	}
	closed, err := h.Subscribe(ctx(t), roomRef("c2"), nil)
	if !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("subscribe to a missing actor: %v, %v", closed, err)
	}
}

func waitErr(t *testing.T, s *runtime.Subscription) error {
	t.Helper()
	select {
	case <-s.Done():
		return s.Err()
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription did not end within 10 s")
		return nil
	}
}

func TestASubscriberThatFallsBehindIsDropped(t *testing.T) {
	e := newEnv(t, counterReg(t, roomActor), nil)
	h := e.host
	callInt(t, h, "room", "a", "post", true, "x")
	slow, err := h.Subscribe(ctx(t), roomRef("a"), []string{"message"})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := h.Subscribe(ctx(t), roomRef("a"), []string{"message"})
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	got := 0
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for got < runtime.SubscriberBuffer+1 {
			select {
			case <-fast.Events():
				got++
			case <-fast.Done():
				return
			}
		}
	}()
	for i := range runtime.SubscriberBuffer + 1 {
		callInt(t, h, "room", "a", "post", false, fmt.Sprint(i))
	}
	<-drained
	if got != runtime.SubscriberBuffer+1 {
		t.Fatalf("the subscriber that kept up heard %d events, want %d (ended: %v)", got, runtime.SubscriberBuffer+1, fast.Err())
	}
	var e2 *rivet.Error
	if err := waitErr(t, slow); !errors.Is(err, rivet.ErrQueueFull) || !errors.As(err, &e2) || e2.Group != "event" || e2.Code != "overflow" {
		t.Fatalf("the slow subscriber ended with %v, want event.overflow", err)
	}
	if len(slow.Events()) != runtime.SubscriberBuffer {
		t.Fatalf("the slow subscriber holds %d events, want the %d before it fell behind", len(slow.Events()), runtime.SubscriberBuffer)
	}
}
