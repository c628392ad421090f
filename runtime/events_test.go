package runtime_test

import (
	"context"
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
		"big": rivet.Action(func(c *rivet.ActionCtx[roomState], n int) (int, error) {
			c.State.Posts++
			return c.State.Posts, c.Broadcast("message", strings.Repeat("x", n))
		}),
		// postNestedThenFail changes the state and broadcasts, has a
		// re-entrant post commit that change with its own, then fails:
		// the change stays, and so does its event.
		"postNestedThenFail": rivet.Action0(func(c *rivet.ActionCtx[roomState]) (int, error) {
			c.State.Posts += 100
			if err := c.Broadcast("message", "outer+100"); err != nil {
				return 0, err
			}
			if _, err := c.Client().Get("room", c.Key()...).Call(c.Context(), "post", "inner"); err != nil {
				return 0, err
			}
			return 0, rivet.UserError("nope", "fails after a re-entrant post", nil)
		}),
		// postThenPanicPeek changes the state and broadcasts, then has a
		// re-entrant read panic: the change is its own to keep.
		"postThenPanicPeek": rivet.Action0(func(c *rivet.ActionCtx[roomState]) (int, error) {
			c.State.Posts += 10
			if err := c.Broadcast("message", "ten"); err != nil {
				return 0, err
			}
			if _, err := c.Client().Get("room", c.Key()...).Call(c.Context(), "panicPeek"); !errors.Is(err, rivet.ErrInternal) {
				return 0, fmt.Errorf("panicPeek: %v, want ErrInternal", err)
			}
			return c.State.Posts, nil
		}),
		"panicPeek": rivet.Query(func(c *rivet.ActionCtx[roomState]) (int, error) { panic("a bug") }),
		// deepOuter and deepMiddle nest two re-entrant turns: deepMiddle's
		// post commits the changes of both; deepMiddle fails if told to,
		// deepOuter always.
		"deepOuter": rivet.Action(func(c *rivet.ActionCtx[roomState], middleFails bool) (int, error) {
			c.State.Posts += 1000
			if err := c.Broadcast("message", "outer"); err != nil {
				return 0, err
			}
			_, err := c.Client().Get("room", c.Key()...).Call(c.Context(), "deepMiddle", middleFails)
			if err != nil && !errors.Is(err, rivet.ErrUser) {
				return 0, err
			}
			return 0, rivet.UserError("nope", "the outer turn fails", nil)
		}),
		"deepMiddle": rivet.Action(func(c *rivet.ActionCtx[roomState], fail bool) (int, error) {
			c.State.Posts += 100
			if err := c.Broadcast("message", "middle"); err != nil {
				return 0, err
			}
			if _, err := c.Client().Get("room", c.Key()...).Call(c.Context(), "post", "inner"); err != nil {
				return 0, err
			}
			if fail {
				return 0, rivet.UserError("nope", "the middle turn fails", nil)
			}
			return c.State.Posts, nil
		}),
		// outlive starts a re-entrant slowPeek and returns while it runs.
		"outlive": rivet.Action0(func(c *rivet.ActionCtx[roomState]) (int, error) {
			cl := c.Client()
			go func() {
				_, err := cl.Get("room", c.Key()...).Call(context.Background(), "slowPeek")
				slowDone <- err
			}()
			<-slowEntered
			return 0, nil
		}),
		"slowPeek": rivet.Query(func(c *rivet.ActionCtx[roomState]) (int, error) {
			slowEntered <- struct{}{}
			<-slowRelease
			return c.State.Posts, c.Broadcast("count", c.State.Posts)
		}),
		// peekThenFail changes the state, has it read and broadcast by a
		// re-entrant read-only call, then fails: the change never was.
		"peekThenFail": rivet.Action0(func(c *rivet.ActionCtx[roomState]) (int, error) {
			c.State.Posts = 99
			if _, err := c.Client().Get("room", c.Key()...).Call(c.Context(), "peek"); err != nil {
				return 0, err
			}
			return 0, rivet.UserError("nope", "fails after a re-entrant peek", nil)
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

// The channels of outlive and slowPeek.
var (
	slowEntered = make(chan struct{})
	slowRelease = make(chan struct{})
	slowDone    = make(chan error, 1)
)

func roomRef(key string) runtime.Ref { return runtime.Ref{Name: "room", Key: []string{key}} }

// eventReader reads a subscription's events one by one.
type eventReader struct {
	*runtime.Subscription
	pending []rivet.Event
}

func subscribe(t *testing.T, h *runtime.Host, ref runtime.Ref, names ...string) *eventReader {
	t.Helper()
	s, err := h.Subscribe(ctx(t), ref, names)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &eventReader{Subscription: s}
}

// taken says how many events are waiting, without waiting.
func (r *eventReader) taken() int {
	r.pending = r.Take(r.pending)
	return len(r.pending)
}

// nextEvent waits for the subscription's next event.
func nextEvent(t *testing.T, r *eventReader) rivet.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for len(r.pending) == 0 {
		select {
		case <-r.Ready():
			r.pending = r.Take(r.pending)
		case <-r.Done():
			if r.pending = r.Take(r.pending); len(r.pending) == 0 {
				t.Fatalf("subscription ended: %v", r.Err())
			}
		case <-timeout:
			t.Fatal("no event within 10 s")
		}
	}
	ev := r.pending[0]
	r.pending = r.pending[1:]
	return ev
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
	t.Parallel()
	e := newEnv(t, counterReg(t, roomActor), nil)
	h := e.host
	if _, err := h.Subscribe(ctx(t), roomRef("a"), nil); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("subscribe to a missing actor: %v, want ErrNotFound", err)
	}
	callInt(t, h, "room", "a", "post", true, "hello")
	if _, err := h.Subscribe(ctx(t), roomRef("a"), []string{"nope"}); !errors.Is(err, rivet.ErrUnknownEvent) || !strings.Contains(err.Error(), "count, message, step") {
		t.Fatalf("subscribe to an undeclared event: %v", err)
	}
	all := subscribe(t, h, roomRef("a"))
	msgs := subscribe(t, h, roomRef("a"), "message")
	if ins := inspect(t, h, "room", "a"); strings.Join(ins.Events, ",") != "count,message,step" || ins.Subscribers != 2 {
		t.Fatalf("inspect: events %v, %d subscribers; want count,message,step and 2", ins.Events, ins.Subscribers)
	}
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
	t.Parallel()
	_, h, sub := newRoom(t, "message")
	if _, err := call(t, h, "room", "a", "postFail", false, "never"); !errors.Is(err, rivet.ErrUser) {
		t.Fatalf("postFail: %v", err)
	}
	for _, bug := range []string{"undeclared", "wrongType"} {
		if _, err := call(t, h, "room", "a", bug, false); !errors.Is(err, rivet.ErrInternal) {
			t.Fatalf("%s: %v, want ErrInternal", bug, err)
		}
	}
	callInt(t, h, "room", "a", "post", false, "second")
	wantEvents(t, sub, "message:second")
}

func TestEventsWaitForTheirTurnsCommit(t *testing.T) {
	t.Parallel()
	e, h, sub := newRoom(t, "message")
	e.store.holdGate, e.store.holdEntered = make(chan struct{}), make(chan struct{})
	e.store.holdCommitSub.Store("room")
	done := make(chan error, 1)
	go func() {
		_, err := call(t, h, "room", "a", "post", false, "held")
		done <- err
	}()
	<-e.store.holdEntered // the turn ran; its commit waits
	if n := sub.taken(); n != 0 {
		t.Fatalf("%d events published before their turn's commit", n)
	}
	close(e.store.holdGate)
	wantEvents(t, sub, "message:held")
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
	wantEvents(t, sub, "message:after")
}

// A commit whose outcome is unknown may have applied, and its caller may
// learn so: its turn's events are dropped all the same, so the actor's
// subscriptions end (UNAVAILABLE), telling subscribers that they may have
// missed events. A new subscription hears what follows.
func TestAnInDoubtCommitEndsTheActorsSubscriptions(t *testing.T) {
	t.Parallel()
	// A host whose in-doubt writes do not make it claim their partition
	// again (which would end the partition's subscriptions anyway): the
	// actor's own subscriptions end all the same.
	e, h, sub := newRoom(t, "message")
	callInt(t, h, "room", "b", "post", true, "x")
	other := subscribe(t, h, roomRef("b"), "message")
	e.store.failCommitSub.Store("room")
	cctx, cancel := context.WithCancel(ctx(t))
	called := make(chan struct{})
	go func() {
		defer close(called)
		raw, _ := rivet.MarshalArgs("in doubt")
		// Its outcome is unknown: it waits to learn it, until cancelled.
		_, _ = h.Call(cctx, runtime.CallRequest{Ref: roomRef("a"), Action: "post", Args: raw})
	}()
	err := waitErr(t, sub)
	cancel()
	<-called
	if !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("subscription after an in-doubt commit of its actor: %v, want ErrUnavailable", err)
	}
	again := subscribe(t, h, roomRef("a"), "message")
	callInt(t, h, "room", "a", "post", false, "after")
	wantEvents(t, again, "message:after")
	callInt(t, h, "room", "b", "post", false, "b")
	wantEvents(t, other, "message:b")
}

// A step's events go with its commit: a failed attempt's too, since its
// changes to the state are committed (roll-forward).
func TestStepEventsGoWithTheirCommits(t *testing.T) {
	t.Parallel()
	_, h, sub := newRoom(t, "step")
	for _, text := range []string{"flaky", "steady"} {
		body, _ := json.Marshal(text)
		if _, err := h.Send(ctx(t), runtime.SendRequest{Ref: roomRef("a"), Queue: "announce", Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"step:flaky#1", "step:flaky#2", "step:steady#1"} {
		if got := eventText(t, nextEvent(t, sub)); got != want {
			t.Fatalf("step event %s, want %s", got, want)
		}
	}
}

func TestSubscriptionsEndWithTheirPartitionOrActor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, roomActor), nil)
	h := e.host
	callInt(t, h, "room", "a", "post", true, "x")
	callInt(t, h, "room", "b", "post", true, "x")
	moved := subscribe(t, h, roomRef("a"))
	p := placement.Partition("room", storage.EncodeKey([]string{"a"}), testPartitions)
	if err := h.Handoff(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, moved); !errors.Is(err, rivet.ErrUnavailable) {
		t.Fatalf("subscription after its partition left: %v, want ErrUnavailable", err)
	}
	destroyed := subscribe(t, h, roomRef("b"))
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

func waitErr(t *testing.T, s *eventReader) error {
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
	t.Parallel()
	e := newEnv(t, counterReg(t, roomActor), nil)
	h := e.host
	callInt(t, h, "room", "a", "post", true, "x")
	slow := subscribe(t, h, roomRef("a"), "message")
	fast := subscribe(t, h, roomRef("a"), "message")
	got := 0
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for got < runtime.SubscriberBuffer+1 {
			select {
			case <-fast.Ready():
				got += len(fast.Take(nil))
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
	if n := len(slow.Take(nil)); n != 0 {
		t.Fatalf("the dropped subscriber still holds %d events", n)
	}
}

// The bound counts what waits on the node, not what its sender took: a
// server's sender takes every event waiting (its batch) and then blocks
// while the subscriber does not read, and the subscriber is dropped only
// once the bound is over again besides that batch. So a subscriber may be
// up to twice the bound behind (here in bytes) before it is dropped, as
// the docs say.
func TestASubscriberIsDroppedPastTheBoundBesidesTheBatchBeingSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, roomActor), nil)
	h := e.host
	callInt(t, h, "room", "a", "post", true, "x")
	slow := subscribe(t, h, roomRef("a"), "message")
	const size = 1<<20 - 100 // with its name and quotes, 8 fit in SubscriberBytes
	fill := func() {
		t.Helper()
		for range runtime.SubscriberBytes >> 20 {
			callInt(t, h, "room", "a", "big", false, size)
		}
	}
	alive := func() bool {
		select {
		case <-slow.Done():
			return false
		default:
			return true
		}
	}
	fill()
	if !alive() {
		t.Fatalf("dropped at the bound: %v", slow.Err())
	}
	// The sender takes its batch, and blocks sending it.
	if n := len(slow.Take(nil)); n != runtime.SubscriberBytes>>20 {
		t.Fatalf("took %d events, want %d", n, runtime.SubscriberBytes>>20)
	}
	fill()
	if !alive() {
		t.Fatalf("dropped at the bound besides the batch: %v", slow.Err())
	}
	callInt(t, h, "room", "a", "big", false, size)
	var e2 *rivet.Error
	if err := waitErr(t, slow); !errors.As(err, &e2) || e2.Code != "overflow" {
		t.Fatalf("past the bound besides the batch: %v, want event.overflow", err)
	}
}

func TestWhetherAnyoneListensChangesNoOutcome(t *testing.T) {
	e := newEnv(t, counterReg(t, roomActor), func(c *runtime.Config) { c.MaxResultBytes = 1000 })
	h := e.host
	callInt(t, h, "room", "a", "post", true, "x")
	// An event over the limit fails its turn whether or not anyone
	// listens: watching an actor must not change what it does.
	for _, watched := range []bool{false, true} {
		if watched {
			subscribe(t, h, roomRef("a"))
		}
		if _, err := call(t, h, "room", "a", "big", false, 2000); !errors.Is(err, rivet.ErrTooLarge) {
			t.Fatalf("watched %v: an event over the limit: %v, want ErrTooLarge", watched, err)
		}
		if n := callInt(t, h, "room", "a", "big", false, 10); n != 2 {
			t.Fatalf("watched %v: posts %d after a failed and a good big, want 2 (the failed one discarded)", watched, n)
		}
		// Back to one post for the next round.
		if err := h.Destroy(ctx(t), roomRef("a")); err != nil {
			t.Fatal(err)
		}
		callInt(t, h, "room", "a", "post", true, "x")
	}
}

// A read-only call into the actor from one of its turns reads that turn's
// changes, not yet written: what it broadcasts goes, or is dropped, with
// that turn.
func TestAReentrantReadPublishesWithTheTurnItReadFrom(t *testing.T) {
	_, h, sub := newRoom(t, "count")
	if _, err := call(t, h, "room", "a", "peekThenFail", false); !errors.Is(err, rivet.ErrUser) {
		t.Fatalf("peekThenFail: %v", err)
	}
	callInt(t, h, "room", "a", "post", false, "y")
	if ev := nextEvent(t, sub); string(ev.Data) != "2" {
		t.Fatalf("first count event %s, want 2 (99 was never written)", ev.Data)
	}
}

// A re-entrant state-changing turn commits the changes of the turn it
// re-entered so far, with its own: that turn's events so far go with them,
// even if it then fails.
func TestAReentrantWriteTakesTheEventsOfWhatItCommits(t *testing.T) {
	t.Parallel()
	_, h, sub := newRoom(t, "message")
	if _, err := call(t, h, "room", "a", "postNestedThenFail", false); !errors.Is(err, rivet.ErrUser) {
		t.Fatalf("postNestedThenFail: %v", err)
	}
	if n := callInt(t, h, "room", "a", "post", false, "after"); n != 103 {
		t.Fatalf("posts %d, want 103: the outer change was committed by the re-entrant post", n)
	}
	wantEvents(t, sub, "message:outer+100", "message:inner", "message:after")
}

// A re-entrant turn that ends after the turn it re-entered publishes on its
// own, and later turns are not taken for its nested ones.
func TestAReentrantTurnThatOutlivesItsRoot(t *testing.T) {
	t.Parallel()
	_, h, sub := newRoom(t, "count")
	callInt(t, h, "room", "a", "outlive", false)
	slowRelease <- struct{}{}
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub); string(ev.Data) != "1" {
		t.Fatalf("the late re-entrant peek broadcast %s, want 1", ev.Data)
	}
	callInt(t, h, "room", "a", "peek", false)
	if ev := nextEvent(t, sub); string(ev.Data) != "1" {
		t.Fatalf("a later peek broadcast %s, want 1", ev.Data)
	}
}

// A re-entrant read that panics discards nothing of the turn it re-entered.
func TestAPanickingReentrantReadKeepsTheOuterTurnsChanges(t *testing.T) {
	t.Parallel()
	_, h, sub := newRoom(t, "message")
	if n := callInt(t, h, "room", "a", "postThenPanicPeek", false); n != 11 {
		t.Fatalf("posts %d after postThenPanicPeek, want 11", n)
	}
	if n := callInt(t, h, "room", "a", "post", false, "after"); n != 12 {
		t.Fatalf("posts %d, want 12", n)
	}
	wantEvents(t, sub, "message:ten", "message:after")
}

// Two levels of re-entrant turns: the innermost commit writes the changes
// of both turns it is nested in, which stay (and their events go out)
// whichever of them then fails.
func TestNestedReentrantTurnsCommitTogether(t *testing.T) {
	_, h, sub := newRoom(t, "message")
	want := 1
	for _, middleFails := range []bool{false, true} {
		if _, err := call(t, h, "room", "a", "deepOuter", false, middleFails); !errors.Is(err, rivet.ErrUser) {
			t.Fatalf("deepOuter(%v): %v", middleFails, err)
		}
		want += 1101
		if n := callInt(t, h, "room", "a", "peek", false); n != want {
			t.Fatalf("middle fails %v: posts %d in memory, want %d (all committed by the inner post)", middleFails, n, want)
		}
		if st := string(inspect(t, h, "room", "a").State); st != fmt.Sprintf(`{"posts":%d}`, want) {
			t.Fatalf("middle fails %v: stored state %s, want posts %d", middleFails, st, want)
		}
		for _, w := range []string{"message:outer", "message:middle", "message:inner"} {
			if got := eventText(t, nextEvent(t, sub)); got != w {
				t.Fatalf("middle fails %v: event %s, want %s", middleFails, got, w)
			}
		}
	}
}

// newRoom starts a host with room "a" posted to once, and subscribes to the
// room's events named.
func newRoom(t *testing.T, names ...string) (*env, *runtime.Host, *eventReader) {
	t.Helper()
	e := newEnv(t, counterReg(t, roomActor), nil)
	callInt(t, e.host, "room", "a", "post", true, "x")
	return e, e.host, subscribe(t, e.host, roomRef("a"), names...)
}

// wantEvents checks the subscription's next events, as eventText gives them.
func wantEvents(t *testing.T, sub *eventReader, want ...string) {
	t.Helper()
	for _, w := range want {
		if got := eventText(t, nextEvent(t, sub)); got != w {
			t.Fatalf("event %s, want %s", got, w)
		}
	}
}
