package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// markHost is a Host that keeps what it commits, and the attempt markers
// it is given (workflow.AttemptMarker) as storage would: a marker stays
// until a commit records its step's attempt. Its runs end as a crash ends
// them (cancelled, their bodies' attempts unrecorded); the next run reads
// what it kept.
type markHost struct {
	bareHost
	mu      sync.Mutex
	entries map[string]workflow.Entry
	marks   map[string]markAt
	loaded  map[string]markAt // the marks when the run started
	marked  []string          // the paths MarkAttempt was called for
}

type markAt struct {
	n  int
	at time.Time
}

func newMarkHost() *markHost {
	return &markHost{bareHost: bareHost{state: &rst{}}, entries: map[string]workflow.Entry{}, marks: map[string]markAt{}}
}

func (*markHost) Now() time.Time { return time.Now() }
func (*markHost) Timer(at time.Time) (<-chan time.Time, func()) {
	t := time.NewTimer(time.Until(at))
	return t.C, func() { t.Stop() }
}

func (h *markHost) apply(ws []workflow.HistoryWrite) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range ws {
		if e := w.Put; e != nil {
			h.entries[e.Path] = *e
			if m, ok := h.marks[e.Path]; ok && e.Kind == workflow.KindStep && e.Attempts >= m.n {
				delete(h.marks, e.Path)
			}
		}
	}
}

func (h *markHost) RunStep(_ context.Context, _ bool, fn func(workflow.StepEnv) []workflow.HistoryWrite) error {
	h.apply(fn(workflow.StepEnv{State: h.state}))
	return nil
}

func (h *markHost) Commit(_ context.Context, ws []workflow.HistoryWrite) error {
	h.apply(ws)
	return nil
}

func (h *markHost) MarkAttempt(path string, n int, at time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.marks[path] = markAt{n, at}
	h.marked = append(h.marked, path)
	return nil
}

func (h *markHost) AbandonedAttempt(path string) (int, time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	m, ok := h.loaded[path]
	return m.n, m.at, ok
}

// run runs fn on what the host kept, until it ends or crash is closed (a
// crash: the run is cancelled, nothing more is recorded).
func (h *markHost) run(t *testing.T, fn func(*workflow.Ctx[rst]) error, crash <-chan struct{}) workflow.Outcome {
	t.Helper()
	h.mu.Lock()
	h.loaded = make(map[string]markAt, len(h.marks))
	for p, m := range h.marks {
		h.loaded[p] = m
	}
	hist := make([]workflow.Entry, 0, len(h.entries))
	for _, e := range h.entries {
		hist = append(hist, e)
	}
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		select {
		case <-crash:
			cancel()
		case <-ctx.Done():
		}
	}()
	out := workflow.Run(ctx, fn, h, hist)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("the run did not end: %+v", out)
	}
	return out
}

// The engine counts an attempt its host's marker says was abandoned: the
// step's next attempt is n+1 (StepCtx.Attempt), the abandoned one is
// recorded as failed with a message saying how it ended, and a step whose
// every attempt is abandoned is exhausted after its retries.
func TestAnAbandonedMarkedAttemptIsCountedAndRecorded(t *testing.T) {
	h := newMarkHost()
	var seen []int
	var crash chan struct{}
	fn := func(c *workflow.Ctx[rst]) error {
		return c.StepWith(workflow.StepOptions{Name: "poison", MaxRetries: 1, RetryBackoffBase: time.Millisecond, RetryBackoffMax: time.Millisecond},
			func(s *workflow.StepCtx[rst]) error {
				seen = append(seen, s.Attempt())
				close(crash) // its node dies while it runs
				<-s.Context().Done()
				return s.Context().Err()
			})
	}
	for i := range 2 {
		crash = make(chan struct{})
		if out := h.run(t, fn, crash); out.Status != workflow.RunYielded {
			t.Fatalf("run %d: %+v, want yielded (crashed)", i+1, out)
		}
	}
	crash = make(chan struct{})
	out := h.run(t, fn, crash)
	var se *workflow.StepError
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &se) || se.Kind != workflow.FailureExhausted || se.Attempts != 2 ||
		!strings.Contains(out.Err.Error(), "attempt 2 ended without its outcome recorded") {
		t.Fatalf("third run: %+v; want the step exhausted after 2 attempts, the last ended with its node", out)
	}
	if len(seen) != 2 || seen[0] != 1 || seen[1] != 2 {
		t.Fatalf("attempts seen %v, want [1 2]", seen)
	}
	if e := h.entries["poison"]; e.Attempts != 2 || e.Status != workflow.StatusExhausted {
		t.Fatalf("record %+v, want exhausted after 2 attempts", e)
	}
	if len(h.marks) != 0 {
		t.Fatalf("markers left %v: the records supersede them", h.marks)
	}
}

// Do bodies that start together (a join's branches) are each marked while
// the host marks, and each counts after a crash: the node cannot tell
// which of them crashed it. Ephemeral steps are not marked.
func TestJoinedDoBodiesAreEachMarked(t *testing.T) {
	h := newMarkHost()
	var mu sync.Mutex
	attempts := map[string][]int{}
	var crash chan struct{}
	var started sync.WaitGroup
	fn := func(c *workflow.Ctx[rst]) error {
		if err := c.StepWith(workflow.StepOptions{Name: "cheap", Ephemeral: true}, func(*workflow.StepCtx[rst]) error { return nil }); err != nil {
			return err
		}
		_, err := workflow.Join(c, "fetch", workflow.Branches[rst, int]{
			"a": func(c *workflow.Ctx[rst]) (int, error) { return fetchDo(c, "a", &mu, attempts, &started) },
			"b": func(c *workflow.Ctx[rst]) (int, error) { return fetchDo(c, "b", &mu, attempts, &started) },
		})
		return err
	}
	crash = make(chan struct{})
	started.Add(2)
	go func() { started.Wait(); close(crash) }()
	if out := h.run(t, fn, crash); out.Status != workflow.RunYielded {
		t.Fatalf("first run: %+v, want yielded (crashed)", out)
	}
	if len(h.marks) != 2 {
		t.Fatalf("markers %v, want one per Do body in flight", h.marks)
	}
	for _, p := range h.marked {
		if p == "cheap" {
			t.Errorf("the ephemeral step was marked")
		}
	}
	if out := h.run(t, fn, make(chan struct{})); out.Status != workflow.RunCompleted {
		t.Fatalf("second run: %+v", out)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range []string{"a", "b"} {
		if got := attempts[b]; len(got) != 2 || got[0] != 1 || got[1] != 2 {
			t.Errorf("branch %s's attempts %v, want [1 2]", b, got)
		}
	}
}

func fetchDo(c *workflow.Ctx[rst], name string, mu *sync.Mutex, attempts map[string][]int, started *sync.WaitGroup) (int, error) {
	return workflow.Do(c, "fetch-"+name, func(d *workflow.DoCtx) (int, error) {
		mu.Lock()
		attempts[name] = append(attempts[name], d.Attempt())
		mu.Unlock()
		if d.Attempt() == 1 {
			started.Done()
			<-d.Context().Done()
			return 0, d.Context().Err()
		}
		return 1, nil
	})
}
