package workflow

// Tests of the pure replay core: no host, no goroutine, no clock.

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestBackoff(t *testing.T) {
	base, max := DefaultRetryBackoffBase, DefaultRetryBackoffMax
	for attempts, want := range map[int]time.Duration{
		0: 100 * time.Millisecond, 1: 200 * time.Millisecond, 2: 400 * time.Millisecond, 3: 800 * time.Millisecond,
		8: 25600 * time.Millisecond, 9: 30 * time.Second, 63: 30 * time.Second, 1000: 30 * time.Second,
	} {
		if got := Backoff(attempts, base, max); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", attempts, got, want)
		}
	}
	if got := Backoff(2, 200*time.Millisecond, 500*time.Millisecond); got != 500*time.Millisecond {
		t.Errorf("capped backoff = %v", got)
	}
}

func TestPolicyDefaults(t *testing.T) {
	p := policyOf(StepOptions{Name: "x"})
	want := retryPolicy{maxRetries: 3, base: 100 * time.Millisecond, max: 30 * time.Second, timeout: 30 * time.Second}
	if !reflect.DeepEqual(p, want) { // a func field: == cannot compare, DeepEqual says nil is nil
		t.Fatalf("defaults = %+v, want %+v", p, want)
	}
	p = policyOf(StepOptions{MaxRetries: NoRetries, Timeout: NoTimeout})
	if p.maxRetries != 0 || p.timeout != 0 {
		t.Fatalf("NoRetries/NoTimeout = %+v", p)
	}
	p = policyOf(StepOptions{MaxRetries: 5, Timeout: 5 * time.Second, RetryBackoffBase: 200 * time.Millisecond, RetryBackoffMax: 2 * time.Second, RetryOnTimeout: true})
	if !reflect.DeepEqual(p, retryPolicy{maxRetries: 5, base: 200 * time.Millisecond, max: 2 * time.Second, timeout: 5 * time.Second, retryOnTimeout: true}) {
		t.Fatalf("explicit = %+v", p)
	}
}

func TestPlanStep(t *testing.T) {
	p := policyOf(StepOptions{})
	failed := func(attempts int) *Entry {
		return &Entry{Path: "s", Kind: KindStep, Status: StatusFailed, Attempts: attempts, LastAttemptAt: t0}
	}
	cases := []struct {
		name string
		e    *Entry
		now  time.Time
		want stepPlan
	}{
		{"new", nil, t0, stepPlan{action: stepRun, attempt: 1}},
		{"completed", &Entry{Status: StatusCompleted}, t0, stepPlan{action: stepReplay}},
		{"exhausted", &Entry{Status: StatusExhausted}, t0, stepPlan{action: stepFail}},
		{"backoff 1", failed(1), t0.Add(199 * time.Millisecond), stepPlan{action: stepWait, at: t0.Add(200 * time.Millisecond)}},
		{"retry 2", failed(1), t0.Add(200 * time.Millisecond), stepPlan{action: stepRun, attempt: 2}},
		{"backoff 3", failed(3), t0, stepPlan{action: stepWait, at: t0.Add(800 * time.Millisecond)}},
		{"fewer retries in new code", failed(4), t0.Add(time.Hour), stepPlan{action: stepFail}},
	}
	for _, c := range cases {
		if got := planStep(c.e, p, c.now); got != c.want {
			t.Errorf("%s: plan = %+v, want %+v", c.name, got, c.want)
		}
	}
}

type codedErr struct{}

func (codedErr) Error() string     { return "card declined" }
func (codedErr) ErrorCode() string { return "card_declined" }

func TestRecordAttempt(t *testing.T) {
	p := policyOf(StepOptions{})
	res := func(err error, timedOut bool) attemptResult {
		return attemptResult{start: t0, end: t0.Add(time.Second), output: json.RawMessage(`1`), err: err, timedOut: timedOut}
	}
	plain := errors.New("boom")
	cases := []struct {
		name    string
		n       int
		r       attemptResult
		pol     retryPolicy
		status  Status
		failure FailureKind
	}{
		{"success", 1, res(nil, false), p, StatusCompleted, ""},
		{"first failure retries", 1, res(plain, false), p, StatusFailed, ""},
		{"fourth failure exhausts", 4, res(plain, false), p, StatusExhausted, FailureExhausted},
		{"third failure still retries", 3, res(plain, false), p, StatusFailed, ""},
		{"critical", 1, res(Critical(plain), false), p, StatusExhausted, FailureCritical},
		{"rollback", 1, res(Rollback(plain), false), p, StatusExhausted, FailureRollback},
		{"timeout is critical", 1, res(nil, true), p, StatusExhausted, FailureTimeout},
		{"timeout retried", 1, res(plain, true), policyOf(StepOptions{RetryOnTimeout: true}), StatusFailed, ""},
		{"timeout exhausted", 4, res(plain, true), policyOf(StepOptions{RetryOnTimeout: true}), StatusExhausted, FailureExhausted},
		{"no retries", 1, res(plain, false), policyOf(StepOptions{MaxRetries: NoRetries}), StatusExhausted, FailureExhausted},
	}
	for _, c := range cases {
		e := recordAttempt("s", c.n, c.r, c.pol)
		if e.Status != c.status || e.Failure != c.failure || e.Attempts != c.n || !e.LastAttemptAt.Equal(t0) {
			t.Errorf("%s: entry %+v, want status %s failure %q", c.name, e, c.status, c.failure)
		}
		if c.status == StatusCompleted && string(e.Output) != "1" {
			t.Errorf("%s: output %s", c.name, e.Output)
		}
	}
	e := recordAttempt("s", 4, res(fmt.Errorf("charge: %w", codedErr{}), false), p)
	se := stepErrorOf(e)
	var coder interface{ ErrorCode() string }
	if !errors.As(se, &coder) || coder.ErrorCode() != "card_declined" || se.Err.Error() != "charge: card declined" {
		t.Fatalf("recorded error lost its code: %#v", se.Err)
	}
	// The code survives the JSON round trip of the history.
	b, _ := json.Marshal(e)
	var back Entry
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !errors.As(stepErrorOf(&back), &coder) || coder.ErrorCode() != "card_declined" {
		t.Fatalf("code lost in JSON: %s", b)
	}
	if !errors.Is(stepErrorOf(recordAttempt("s", 1, res(nil, true), p)), ErrTimeout) {
		t.Fatal("a timed-out step does not match ErrTimeout")
	}
}

func entries(paths ...string) []Entry {
	out := make([]Entry, len(paths))
	for i, p := range paths {
		kind, path, _ := strings.Cut(p, ":")
		out[i] = Entry{Path: path, Kind: Kind(kind), Status: StatusCompleted}
	}
	return out
}

func mustHistory(t *testing.T, es []Entry) *History {
	t.Helper()
	h, err := NewHistory(es)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHistoryKindMismatch(t *testing.T) {
	h := mustHistory(t, entries("step:a", "loop:b"))
	_, err := h.Visit("b", KindStep)
	var de *DivergenceError
	if !errors.As(err, &de) || de.Path != "b" || !strings.Contains(de.Expected, "loop") || de.Found != "step" || !errors.Is(err, ErrDiverged) {
		t.Fatalf("err = %v", err)
	}
	if e, err := h.Visit("a", KindStep); err != nil || e == nil {
		t.Fatalf("visit a: %v %v", e, err)
	}
	if e, err := h.Visit("zzz", KindStep); err != nil || e != nil {
		t.Fatalf("visit of a missing entry: %v %v", e, err)
	}
}

func TestNewHistoryRejectsBadInput(t *testing.T) {
	if _, err := NewHistory(entries("step:a", "step:a")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("duplicate path: %v", err)
	}
	if _, err := NewHistory(entries("step:a//b")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty segment: %v", err)
	}
}

func TestCheckEndRootAndScopes(t *testing.T) {
	h := mustHistory(t, entries("step:a", "step:b", "loop:l", "step:l/~0/x", "step:l/~0/y", "join:j", "step:j/p/s"))
	for _, p := range []string{"a", "l", "l/~0/x", "j", "j/p/s"} {
		if _, err := h.Visit(p, ""); err != nil {
			t.Fatal(err)
		}
	}
	// The iteration scope misses y.
	err := h.CheckEnd("l/~0")
	var de *DivergenceError
	if !errors.As(err, &de) || de.Path != "l/~0/y" {
		t.Fatalf("iteration check: %v", err)
	}
	if err := h.CheckEnd("j/p"); err != nil {
		t.Fatalf("branch scope complete: %v", err)
	}
	// The root misses b (first unvisited in path order).
	if err := h.CheckEnd(""); !errors.As(err, &de) || de.Path != "b" {
		t.Fatalf("root check: %v", err)
	}
	h.Visit("b", "")
	h.Visit("l/~0/y", "")
	if err := h.CheckEnd(""); err != nil {
		t.Fatalf("all visited: %v", err)
	}
}

func TestVisitOrder(t *testing.T) {
	es := []Entry{
		{Path: "a", Seq: 1, Kind: KindStep}, {Path: "b", Seq: 2, Kind: KindStep}, {Path: "c", Seq: 3, Kind: KindStep},
		{Path: "l", Seq: 4, Kind: KindLoop}, {Path: "l/~0/x", Seq: 1, Kind: KindStep}, {Path: "l/~0/y", Seq: 2, Kind: KindStep},
		{Path: "old", Kind: KindStep}, // no Seq (older engine): not checked
	}
	h := mustHistory(t, es)
	if _, err := h.Visit("a", KindStep); err != nil {
		t.Fatal(err)
	}
	// c before b: swapped (or b removed).
	_, err := h.Visit("c", KindStep)
	var de *DivergenceError
	if !errors.As(err, &de) || de.Path != "b" || !strings.Contains(de.Expected, `step "b" before step "c"`) {
		t.Fatalf("swap: %v", err)
	}
	h2 := mustHistory(t, es)
	for _, p := range []string{"a", "b", "c", "l", "old"} {
		if _, err := h2.Visit(p, ""); err != nil {
			t.Fatalf("in order, %s: %v", p, err)
		}
	}
	// Scopes are ordered independently; visited-by-tree entries count.
	h2.VisitTree("l/~0/x")
	if _, err := h2.Visit("l/~0/y", ""); err != nil {
		t.Fatal(err)
	}
	h3 := mustHistory(t, es)
	h3.Visit("a", "")
	h3.Apply([]HistoryWrite{{DeleteTree: "b"}})
	if _, err := h3.Visit("c", ""); err != nil {
		t.Fatalf("a deleted entry does not block: %v", err)
	}
}

func TestCheckNewCatchesRenameBeforeItRuns(t *testing.T) {
	h := mustHistory(t, entries("step:a", "step:b"))
	h.Visit("a", KindStep)
	// The code renamed b to c: creating c while b is unvisited diverges.
	err := h.CheckNew("", "c", KindStep)
	var de *DivergenceError
	if !errors.As(err, &de) || de.Path != "b" || !strings.Contains(de.Found, `new step "c"`) {
		t.Fatalf("err = %v", err)
	}
	// A scope with nothing left is free to grow.
	h.Visit("b", KindStep)
	if err := h.CheckNew("", "c", KindStep); err != nil {
		t.Fatal(err)
	}
	// Sibling scopes do not interfere: a join branch only checks its own.
	h2 := mustHistory(t, entries("join:j", "step:j/a/s", "step:j/b/s"))
	h2.Visit("j", "")
	h2.Visit("j/a/s", "")
	if err := h2.CheckNew("j/a", "j/a/t", KindStep); err != nil {
		t.Fatalf("branch a blamed for branch b: %v", err)
	}
}

func TestVisitTreeAndIterations(t *testing.T) {
	h := mustHistory(t, entries("loop:l", "step:l/~1/a", "step:l/~2/a", "step:l/~10/a", "step:l/~10/b", "step:lx", "race:r", "step:r/w/s"))
	h.Visit("l", "")
	h.VisitIterationsBefore("l", 3)
	if p, ok := h.FirstUnvisited("l"); !ok || p != "l/~10/a" {
		t.Fatalf("after skipping iterations <3: %q %v", p, ok)
	}
	h.VisitTree("r")
	if p, _ := h.FirstUnvisited(""); p != "l/~10/a" {
		t.Fatalf("first unvisited = %q", p)
	}
	// Tree operations respect segment boundaries: l/~1 is not l/~10, l is not lx.
	h.Apply([]HistoryWrite{{DeleteTree: "l/~1"}, {DeleteTree: "l"}})
	if h.Get("lx") == nil || h.Get("l/~10/a") != nil || h.Get("l") != nil {
		t.Fatalf("delete tree: %v", h.Entries())
	}
	h3 := mustHistory(t, entries("step:l/~1/a", "step:l/~10/a"))
	h3.Apply([]HistoryWrite{{DeleteTree: "l/~1"}})
	if h3.Get("l/~10/a") == nil || h3.Get("l/~1/a") != nil {
		t.Fatalf("delete of l/~1 touched l/~10: %v", h3.Entries())
	}
}

// Apply deletes a run of tree deletes in one pass: a put keeps its order
// with them, as if each write applied alone (a put before the delete of
// its tree goes, one after it stays).
func TestApplyKeepsPutsInOrderWithTreeDeletes(t *testing.T) {
	start := entries("loop:l", "step:l/~1/a", "step:l/~2/a", "step:l/~3/a", "step:l/~10/a", "step:m/x", "step:n")
	put := func(p string) HistoryWrite {
		return HistoryWrite{Put: &Entry{Path: p, Kind: KindStep, Status: StatusCompleted}}
	}
	ws := []HistoryWrite{
		put("l/~1/b"), {DeleteTree: "l/~1"}, {DeleteTree: "l/~2"}, put("l/~2/c"), put("l/~3/b"),
		{DeleteTree: "l/~3"}, {Requeue: []RawMessage{{ID: 1}}}, {DeleteTree: "m", Prune: true}, put("m/y"), put("l/~2/d"),
	}
	whole := mustHistory(t, start)
	whole.Apply(ws)
	one := mustHistory(t, start)
	for _, w := range ws {
		one.Apply([]HistoryWrite{w})
	}
	var got []string
	for _, e := range whole.Entries() {
		got = append(got, e.Path)
	}
	want := []string{"l", "l/~10/a", "l/~2/c", "l/~2/d", "m/y", "n"}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(whole.Entries(), one.Entries()) {
		t.Fatalf("in one batch: %v, want %v; one write at a time: %v", got, want, one.Entries())
	}
}

func TestScopeClaim(t *testing.T) {
	s := newScope("l/~3")
	p, seq, err := s.claim("step", "charge")
	if err != nil || p != "l/~3/charge" || seq != 1 {
		t.Fatalf("claim = %q %d %v", p, seq, err)
	}
	var de *DivergenceError
	if _, _, err := s.claim("step", "charge"); !errors.As(err, &de) || de.Path != "l/~3/charge" {
		t.Fatalf("reused name: %v", err)
	}
	for _, bad := range []string{"", "a/b", "~1", strings.Repeat("x", 256), "bad\xffname"} {
		if _, _, err := s.claim("step", bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	if _, seq, _ := s.claim("step", "next"); seq != 2 {
		t.Fatalf("second name has seq %d", seq)
	}
	root := newScope("")
	if p, _, _ := root.claim("step", "a"); p != "a" {
		t.Fatalf("root path = %q", p)
	}
}

// TestPrunePlanBound drives the prune plan the way a loop does for 10,000
// iterations and checks that no more than interval+size iterations are ever
// kept, and that the last size are.
func TestPrunePlanBound(t *testing.T) {
	for _, c := range []struct{ interval, size int }{{20, 20}, {20, 5}, {3, 10}, {1, 1}} {
		kept := map[int]bool{}
		pruned := 0
		maxKept := 0
		for i := 0; i < 10000; i++ {
			kept[i] = true // iteration i ran
			next := i + 1
			if next%c.interval == 0 {
				var trees []string
				trees, pruned = prunePlan("l", pruned, next, c.size)
				for _, tr := range trees {
					var n int
					fmt.Sscanf(strings.TrimPrefix(tr, "l/~"), "%d", &n)
					if !kept[n] {
						t.Fatalf("%+v: pruned %s twice", c, tr)
					}
					delete(kept, n)
				}
			}
			maxKept = max(maxKept, len(kept))
		}
		if maxKept > c.interval+c.size {
			t.Errorf("%+v: kept up to %d iterations", c, maxKept)
		}
		for i := 10000 - c.size; i < 10000; i++ {
			if !kept[i] {
				t.Errorf("%+v: iteration %d pruned", c, i)
			}
		}
	}
}

func TestResolveVersion(t *testing.T) {
	if resolveVersion(true, 3) != 1 || resolveVersion(false, 3) != 3 {
		t.Fatal("resolveVersion")
	}
}

func TestAppendWrites(t *testing.T) {
	put := func(p string, it int) HistoryWrite { return HistoryWrite{Put: &Entry{Path: p, Iteration: it}} }
	got := AppendWrites(nil, put("l", 1), put("l/~0/a", 0), put("x", 0), put("l", 2), HistoryWrite{DeleteTree: "l/~0"}, HistoryWrite{DeleteTree: "l/~0"})
	var desc []string
	for _, w := range got {
		if w.Put != nil {
			desc = append(desc, fmt.Sprintf("put %s %d", w.Put.Path, w.Put.Iteration))
		} else {
			desc = append(desc, "del "+w.DeleteTree)
		}
	}
	want := []string{"put x 0", "put l 2", "del l/~0"}
	if !reflect.DeepEqual(desc, want) {
		t.Fatalf("batch = %v, want %v", desc, want)
	}
	got = AppendWrites(nil, HistoryWrite{DeleteTree: "r/a/x"}, HistoryWrite{DeleteTree: "r/a"})
	if len(got) != 1 || got[0].DeleteTree != "r/a" {
		t.Fatalf("nested deletes = %+v", got)
	}
	// A requeue writes no history: no delete drops it.
	back := HistoryWrite{Requeue: []RawMessage{{ID: 3, Queue: "q"}}}
	got = AppendWrites(nil, back, HistoryWrite{DeleteTree: "r/a"}, HistoryWrite{DeleteTree: "r"})
	if len(got) != 2 || len(got[0].Requeue) != 1 || got[1].DeleteTree != "r" {
		t.Fatalf("requeue and deletes = %+v", got)
	}
}

// TestTakenUnder: the messages a tree's receives took and did not
// complete, nested races and loops included, by ID; none of another tree.
func TestTakenUnder(t *testing.T) {
	msg := func(id uint64, completed bool) RecordedMessage {
		return RecordedMessage{RawMessage: RawMessage{ID: id, Queue: "q"}, Completed: completed}
	}
	h, err := NewHistory([]Entry{
		{Path: "r", Kind: KindRace, Status: StatusPending},
		{Path: "r/a/m", Kind: KindMessage, Status: StatusCompleted, Messages: []RecordedMessage{msg(5, false), msg(2, true)}},
		{Path: "r/a/inner/x/l/~3/m", Kind: KindMessage, Status: StatusCompleted, Messages: []RecordedMessage{msg(1, false)}},
		{Path: "r/ab/m", Kind: KindMessage, Status: StatusCompleted, Messages: []RecordedMessage{msg(9, false)}},
		{Path: "r/b/m", Kind: KindMessage, Status: StatusCompleted, Messages: []RecordedMessage{msg(4, false)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, m := range h.takenUnder("r/a") {
		ids = append(ids, m.ID)
	}
	if !reflect.DeepEqual(ids, []uint64{1, 5}) {
		t.Fatalf("taken under r/a = %v, want [1 5]", ids)
	}
}

func TestMergeWake(t *testing.T) {
	w := mergeWake(Wake{At: t0.Add(time.Hour), Queues: []string{"b"}}, Wake{At: t0, Queues: []string{"a", "b"}})
	if !w.At.Equal(t0) || !reflect.DeepEqual(w.Queues, []string{"a", "b"}) || w.AnyQueue {
		t.Fatalf("merge = %+v", w)
	}
	w = mergeWake(w, Wake{AnyQueue: true})
	if !w.AnyQueue || w.Queues != nil || !w.At.Equal(t0) {
		t.Fatalf("merge any = %+v", w)
	}
	if !(Wake{}).IsZero() || w.IsZero() {
		t.Fatal("IsZero")
	}
}

func TestPickWinner(t *testing.T) {
	c := []raceCandidate{{branch: 2, at: t0.Add(time.Second)}, {branch: 1, at: t0.Add(time.Second)}, {branch: 0, at: t0.Add(2 * time.Second)}}
	if w := pickWinner(c, -1); w != 1 {
		t.Fatalf("earliest then first declared: %d", w)
	}
	if w := pickWinner(c, 0); w != 0 {
		t.Fatalf("claimant: %d", w)
	}
	if w := pickWinner(nil, -1); w != -1 {
		t.Fatalf("none: %d", w)
	}
}

func TestEntryJSONRoundTrip(t *testing.T) {
	e := Entry{
		Path: "r", Kind: KindRace, Status: StatusCompleted, Time: t0, Winner: "bid", Output: json.RawMessage(`100`),
		Branches: map[string]Branch{"bid": {Status: StatusCompleted, Output: json.RawMessage(`100`)}, "expire": {Status: StatusCancelled}},
		Messages: []RecordedMessage{{RawMessage: RawMessage{ID: 7, Queue: "bids", Body: json.RawMessage(`{"amount":100}`), CreatedAt: t0}, Completed: true}},
		Error:    &RecordedError{Message: "m", Code: "c"},
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var back Entry
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e, back) {
		t.Fatalf("round trip:\n%+v\n%+v", e, back)
	}
	// Empty fields stay out of storage.
	b, _ = json.Marshal(Entry{Path: "a", Kind: KindSleep, Status: StatusPending, Deadline: t0})
	if string(b) != `{"path":"a","kind":"sleep","status":"pending","deadline":"2026-01-02T03:04:05Z"}` {
		t.Fatalf("sparse entry = %s", b)
	}
}

func TestFailureOf(t *testing.T) {
	for _, c := range []struct {
		err    error
		source Source
		ok     bool
	}{
		{&StepError{Kind: FailureExhausted}, SourceStep, true},
		{fmt.Errorf("wrapped: %w", &StepError{Kind: FailureTimeout}), SourceStep, true},
		{&StepError{Kind: FailureRollback}, "", false},
		{&JoinError{}, SourceJoin, true},
		{&RaceError{}, SourceRace, true},
		{errors.New("plain"), "", false},
		{ErrEvicted, "", false},
	} {
		f, ok := tryFailure(c.err, "block", nil)
		if ok != c.ok || (ok && f.Source != c.source) {
			t.Errorf("tryFailure(%v) = %+v %v", c.err, f, ok)
		}
	}
	for _, err := range []error{ErrEvicted, ErrCancelled, &DivergenceError{}, ErrEntryInProgress, &PanicError{}, fmt.Errorf("x: %w", ErrInvalid)} {
		if !isControl(err) {
			t.Errorf("%v is not a control error", err)
		}
	}
	if isControl(&StepError{}) || isControl(errors.New("x")) {
		t.Error("failures taken for control errors")
	}
	keys := func(m map[string]error) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	je := &JoinError{Path: "j", Errors: map[string]error{"b": errors.New("2"), "a": errors.New("1")}}
	if je.Error() != `workflow: join "j": 2 branch(es) failed: a: 1; b: 2` || len(je.Unwrap()) != 2 || keys(je.Errors)[0] != "a" {
		t.Fatalf("join error = %q", je.Error())
	}
}
