package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet/caller"
)

// siblingHost is a host with queues, whose clock moves only when the test
// says (advance), and whose receives of a queue may wait, as they look,
// for what the test chooses (gates): the interleavings of two join
// siblings' receives below are the test's, not the scheduler's.
type siblingHost struct {
	mu      sync.Mutex
	now     time.Time
	timers  []siblingTimer
	queues  map[string][]RawMessage
	gates   map[string]func(context.Context)
	looked  map[string]chan struct{}
	notify  chan struct{}
	requeue []RawMessage
	// took, by queue, runs once the receive's take is recorded (durable),
	// before Receive returns.
	took map[string]func()
}

type siblingTimer struct {
	at time.Time
	c  chan time.Time
}

func (h *siblingHost) Now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *siblingHost) Timer(at time.Time) (<-chan time.Time, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := make(chan time.Time, 1)
	if !at.After(h.now) {
		c <- h.now
	} else {
		h.timers = append(h.timers, siblingTimer{at: at, c: c})
	}
	return c, func() {}
}

// advance moves the clock to at, firing the timers due.
func (h *siblingHost) advance(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = at
	var left []siblingTimer
	for _, tm := range h.timers {
		if tm.at.After(at) {
			left = append(left, tm)
			continue
		}
		tm.c <- at
	}
	h.timers = left
}

func (h *siblingHost) RunStep(context.Context, bool, func(StepEnv) []HistoryWrite) error {
	return errors.New("no steps here")
}

func (h *siblingHost) Commit(_ context.Context, ws []HistoryWrite) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range ws {
		h.requeue = append(h.requeue, w.Requeue...)
	}
	return nil
}

func (h *siblingHost) Client() caller.Client { return nil }

func (h *siblingHost) Receive(ctx context.Context, names []string, n int, record func([]RawMessage) []HistoryWrite) ([]RawMessage, error) {
	q := names[0]
	h.mu.Lock()
	if c, ok := h.looked[q]; ok {
		close(c)
		delete(h.looked, q)
	}
	gate := h.gates[q]
	delete(h.gates, q)
	h.mu.Unlock()
	if gate != nil {
		gate(ctx)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// One receive of a queue at a time, here: record reads the clock,
	// so it is called without the host's lock.
	h.mu.Lock()
	ms := slices.Clone(h.queues[q][:min(n, len(h.queues[q]))])
	h.queues[q] = h.queues[q][len(ms):]
	h.mu.Unlock()
	if len(ms) == 0 {
		return nil, nil
	}
	ws := record(ms)
	h.mu.Lock()
	if ws == nil {
		h.queues[q] = append(ms, h.queues[q]...)
		h.mu.Unlock()
		return nil, nil
	}
	for _, w := range ws {
		h.requeue = append(h.requeue, w.Requeue...)
	}
	took := h.took[q]
	delete(h.took, q)
	h.mu.Unlock()
	if took != nil {
		took()
	}
	return ms, nil
}

func (h *siblingHost) MessageNotify() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.notify
}

// send queues a message and wakes the receives.
func (h *siblingHost) send(q string, m RawMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queues[q] = append(h.queues[q], m)
	close(h.notify)
	h.notify = make(chan struct{})
}

func (h *siblingHost) Complete(context.Context, uint64, json.RawMessage, []HistoryWrite) error {
	return nil
}
func (h *siblingHost) Actor() (string, []string) { return "test", []string{"test"} }
func (h *siblingHost) Waiting(Wake)              {}

// A race branch holds its race's claim while a message it took is not
// completed, however its join's siblings interleave: one sibling's
// Complete drops the claim (the branch held no other message then) while
// the other is taking a message, its claim's look done, and the taker
// keeps the message it took; with the claim, as a replay would find
// (holdsMessages). Else a branch that finished earlier won the race, and
// the taker's message, handled in part perhaps, went back to its queue.
// With again, the completing sibling receives again at once, looking with
// a claim of its own, which it gives back when it finds nothing: the
// taker's claim, taken meanwhile, must stay.
func TestARaceClaimStaysWithAJoinSiblingThatTookAMessageAsAnotherCompletedItsOwn(t *testing.T) {
	for _, again := range []bool{false, true} {
		name := "sibling ends"
		if again {
			name = "sibling receives again"
		}
		t.Run(name, func(t *testing.T) {
			h := &siblingHost{now: t0, queues: map[string][]RawMessage{
				"q1": {{ID: 1, Queue: "q1", Body: json.RawMessage(`1`), CreatedAt: t0}},
				"q2": {{ID: 2, Queue: "q2", Body: json.RawMessage(`2`), CreatedAt: t0}},
			}, gates: map[string]func(context.Context){}, looked: map[string]chan struct{}{"q2": make(chan struct{}), "q3": make(chan struct{}), "q4": make(chan struct{})}, notify: make(chan struct{})}
			var (
				r         *run
				rc        *race
				completed = make(chan struct{})
				ready     = make(chan struct{})
			)
			// y's take of m2 waits until x completed m1 (and, again, began
			// its next receive's look).
			q2looked, q3looked, q4looked := h.looked["q2"], h.looked["q3"], h.looked["q4"]
			h.gates["q2"] = func(ctx context.Context) {
				for _, c := range []chan struct{}{ready, completed, q3looked} {
					if c == q3looked && !again {
						break
					}
					select {
					case <-c:
					case <-ctx.Done():
						return
					}
				}
			}
			if again {
				// x's look finds nothing only once y took m2, with the claim
				// (or without it, the bug: then once y waits for m4).
				h.gates["q3"] = func(ctx context.Context) {
					select {
					case <-q4looked:
					case <-ctx.Done():
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done := make(chan Outcome, 1)
			go func() {
				done <- Run(ctx, func(c *Ctx[struct{}]) error {
					r = c.x.t.r
					w, _, err := Race(c, "r", []RaceBranch[struct{}, int]{
						{Name: "a", Run: func(c *Ctx[struct{}]) (int, error) { return 0, c.Sleep("z", time.Second) }},
						{Name: "b", Run: func(c *Ctx[struct{}]) (int, error) {
							r.mu.Lock()
							rc = c.x.t.races[0].r
							r.mu.Unlock()
							close(ready)
							_, err := Join(c, "j", Branches[struct{}, int]{
								"x": func(c *Ctx[struct{}]) (int, error) {
									m, err := Next[int](c, "m1", NextOptions{Names: []string{"q1"}})
									if err != nil {
										return 0, err
									}
									// y's look is done: it takes m2 once
									// m1 is completed.
									select {
									case <-q2looked:
									case <-ctx.Done():
									}
									if err := m.Complete("done"); err != nil {
										return 0, err
									}
									close(completed)
									if again {
										_, err = Next[int](c, "m3", NextOptions{Names: []string{"q3"}})
									}
									return 0, err
								},
								"y": func(c *Ctx[struct{}]) (int, error) {
									if _, err := Next[int](c, "m2", NextOptions{Names: []string{"q2"}}); err != nil {
										return 0, err
									}
									_, err := Next[int](c, "m4", NextOptions{Names: []string{"q4"}})
									return 0, err
								},
							})
							return 1, err
						}},
					})
					if err != nil {
						return err
					}
					if w != "b" {
						return errors.New("won by " + w)
					}
					return nil
				}, h, nil)
			}()
			// y took m2 and waits for m4; x waits for m3, if it receives
			// again. a finishes then, and must wait for b.
			select {
			case <-q4looked:
			case out := <-done:
				t.Fatalf("the run ended before y took m2: %+v", out)
			case <-ctx.Done():
				t.Fatal("y never took m2")
			}
			// a's sleep waits for its timer.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				h.mu.Lock()
				n := len(h.timers)
				h.mu.Unlock()
				if n > 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("a never slept")
				}
			}
			h.advance(t0.Add(time.Second))
			if !untilLocked(r, func() bool { return len(rc.cands) == 1 || rc.decided }) {
				t.Fatal("a never finished")
			}
			h.send("q4", RawMessage{ID: 4, Queue: "q4", Body: json.RawMessage(`4`), CreatedAt: t0.Add(time.Second)})
			if again {
				h.send("q3", RawMessage{ID: 3, Queue: "q3", Body: json.RawMessage(`3`), CreatedAt: t0.Add(time.Second)})
			}
			var out Outcome
			select {
			case out = <-done:
			case <-ctx.Done():
				t.Fatal("the run hangs")
			}
			if out.Status != RunCompleted {
				t.Fatalf("outcome %s %v, want completed, won by b; put back %v", out.Status, out.Err, h.requeue)
			}
			if len(h.requeue) != 0 {
				t.Fatalf("put back %v", h.requeue)
			}
		})
	}
}

// A join sibling's take is durable once the host's Receive returns, and
// reaches the run's history only after: a sibling's completion in between
// must not give up the branch's claim, or a finisher waiting for it wins
// and the message just taken goes back to its queue.
func TestARaceClaimStaysWithAJoinSiblingWhoseTakeIsDurableAsAnotherCompletes(t *testing.T) {
	h := &siblingHost{now: t0, queues: map[string][]RawMessage{
		"q1": {{ID: 1, Queue: "q1", Body: json.RawMessage(`1`), CreatedAt: t0}},
		"q2": {{ID: 2, Queue: "q2", Body: json.RawMessage(`2`), CreatedAt: t0}},
	}, gates: map[string]func(context.Context){}, looked: map[string]chan struct{}{}, notify: make(chan struct{}), took: map[string]func(){}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		r           *run
		rc          *race
		tookM1      = make(chan struct{})
		completeNow = make(chan struct{})
		completed   = make(chan struct{})
		inGap       = make(chan string, 1)
	)
	// y takes m2 once x holds m1, so the claim is b's.
	h.gates["q2"] = func(ctx context.Context) {
		select {
		case <-tookM1:
		case <-ctx.Done():
		}
	}
	// Between y's take and its return: a finishes, x completes m1 and
	// ends.
	h.took["q2"] = func() {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			h.mu.Lock()
			n := len(h.timers)
			h.mu.Unlock()
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				inGap <- "a never slept"
				return
			}
		}
		h.advance(t0.Add(time.Second))
		close(completeNow)
		select {
		case <-completed:
		case <-ctx.Done():
		}
		if !untilLocked(r, func() bool { return len(rc.cands) == 1 || rc.decided }) {
			inGap <- "a never finished"
			return
		}
		inGap <- ""
	}
	done := make(chan Outcome, 1)
	go func() {
		done <- Run(ctx, func(c *Ctx[struct{}]) error {
			r = c.x.t.r
			w, _, err := Race(c, "r", []RaceBranch[struct{}, int]{
				{Name: "a", Run: func(c *Ctx[struct{}]) (int, error) { return 0, c.Sleep("z", time.Second) }},
				{Name: "b", Run: func(c *Ctx[struct{}]) (int, error) {
					r.mu.Lock()
					rc = c.x.t.races[0].r
					r.mu.Unlock()
					_, err := Join(c, "j", Branches[struct{}, int]{
						"x": func(c *Ctx[struct{}]) (int, error) {
							m, err := Next[int](c, "m1", NextOptions{Names: []string{"q1"}})
							if err != nil {
								return 0, err
							}
							close(tookM1)
							select {
							case <-completeNow:
							case <-ctx.Done():
							}
							err = m.Complete("done")
							close(completed)
							return 0, err
						},
						"y": func(c *Ctx[struct{}]) (int, error) {
							if _, err := Next[int](c, "m2", NextOptions{Names: []string{"q2"}}); err != nil {
								return 0, err
							}
							_, err := Next[int](c, "m4", NextOptions{Names: []string{"q4"}})
							return 0, err
						},
					})
					return 1, err
				}},
			})
			if err != nil {
				return err
			}
			if w != "b" {
				return errors.New("won by " + w)
			}
			return nil
		}, h, nil)
	}()
	select {
	case msg := <-inGap:
		if msg != "" {
			t.Fatal(msg)
		}
	case <-ctx.Done():
		t.Fatal("y never took m2")
	}
	// y, holding m2 with the claim, goes on to m4 and wins.
	h.send("q4", RawMessage{ID: 4, Queue: "q4", Body: json.RawMessage(`4`), CreatedAt: t0.Add(time.Second)})
	var out Outcome
	select {
	case out = <-done:
	case <-ctx.Done():
		t.Fatal("the run hangs")
	}
	if out.Status != RunCompleted {
		t.Fatalf("outcome %s %v, want completed, won by b; put back %v", out.Status, out.Err, h.requeue)
	}
	if len(h.requeue) != 0 {
		t.Fatalf("put back %v", h.requeue)
	}
}
