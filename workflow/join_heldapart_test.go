package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// failingFanOut is a join of n branches that each fail at once with an
// error of their own, and one more ("wait") that waits for a message:
// every failure comes while another branch goes on, so each is held.
func failingFanOut(n int) func(*logCtx) error {
	return func(c *logCtx) error {
		bs := workflow.Branches[log, int]{
			"wait": func(c *logCtx) (int, error) {
				m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"go"}})
				return m.Body.N, err
			},
		}
		for i := range n {
			bs[fmt.Sprintf("b%05d", i)] = func(*logCtx) (int, error) { return 0, fmt.Errorf("branch %d failed", i) }
		}
		_, err := workflow.Join(c, "fan", bs)
		return err
	}
}

// historyBytes runs failingFanOut(n) on h to its end (through a restart
// while the join is pending) and returns the bytes of the entries it
// wrote, as a host encodes them.
func historyBytes(t *testing.T, h *workflowtest.Host[log], n int) int {
	t.Helper()
	var written atomic.Int64
	h.OnBatch = func(batch []workflow.HistoryWrite) {
		for _, w := range batch {
			if w.Put != nil {
				b, err := workflow.MarshalEntry(w.Put)
				if err != nil {
					t.Error(err)
				}
				written.Add(int64(len(b)))
			}
		}
	}
	wf := failingFanOut(n)
	if out := drive(t, h, wf); out.Status != workflow.RunYielded {
		t.Fatalf("first run: %s %v", out.Status, out.Err)
	}
	h.Send("go", job{1})
	je := failedWith[*workflow.JoinError](t, drive(t, h, wf))
	if len(je.Errors) != n {
		t.Fatalf("%d branches failed, want %d", len(je.Errors), n)
	}
	for _, e := range h.History() {
		if strings.Contains(e.Path, "~held") {
			t.Fatalf("entry %q left after the join settled", e.Path)
		}
	}
	return int(written.Load())
}

// TestAJoinsFailingBranchesWriteLinearBytes: a branch that fails while
// others go on commits its failure in an entry of its own, not in the
// join's record rewritten whole: the bytes a fan-out writes grow with its
// branches, not with their square. The record rewritten for each failure
// wrote 600 KB for 100 branches and 58 MB for 1,000 (quadratic); their
// own entries write about 285 bytes per branch, record and settle
// included.
func TestAJoinsFailingBranchesWriteLinearBytes(t *testing.T) {
	const perBranch = 1024 // bytes; about 300 are written
	var small int
	for _, n := range []int{100, 1000} {
		h := newHost(log{})
		h.HeldBranchesApart = true
		got := historyBytes(t, h, n)
		t.Logf("%d failing branches: %d bytes written, %d a branch", n, got, got/n)
		if got > perBranch*n {
			t.Fatalf("%d failing branches wrote %d bytes, over %d a branch", n, got, perBranch)
		}
		if n == 100 {
			small = got
		} else if got > 15*small {
			t.Fatalf("10 times the branches wrote %.1f times the bytes (%d, %d): not linear", float64(got)/float64(small), small, got)
		}
	}
}

// TestAJoinHeldInItsRecordReplaysHeld: a pending join whose record holds
// a failed branch, as builds before held failures apart recorded it (and
// a host that does not hold them apart), is replayed by an
// engine that holds them apart: the branch comes back failed from the
// record without running its changed code, a branch failing after the
// restart is held in an entry of its own, and the join settles with both
// failures as it would have before, its record holding them and no held
// entry left.
func TestAJoinHeldInItsRecordReplaysHeld(t *testing.T) {
	h := newHost(log{})
	var runs atomic.Int32
	wf := func(lenient bool) func(*logCtx) error {
		return func(c *logCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
				"a": heldBranches()[0].a(lenient, &runs),
				"b": func(c *logCtx) (int, error) {
					m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"go"}})
					return m.Body.N, err
				},
				"c": func(c *logCtx) (int, error) {
					if _, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"c"}}); err != nil {
						return 0, err
					}
					return 0, codedErr{}
				},
			})
			return err
		}
	}
	if out := drive(t, h, wf(false)); out.Status != workflow.RunYielded || runs.Load() != 1 {
		t.Fatalf("first run: %s %v, a's step ran %d times", out.Status, out.Err, runs.Load())
	}
	if e := entryAt(t, h.History(), "j"); e.Branches["a"].Status != workflow.StatusFailed {
		t.Fatalf("the old way, a's failure is in the join's record: %+v", e)
	}
	h.HeldBranchesApart = true
	h.Send("c", job{1})
	if out := drive(t, h, wf(true)); out.Status != workflow.RunYielded {
		t.Fatalf("second run: %s %v", out.Status, out.Err)
	}
	if e := entryAt(t, h.History(), "j/~held/c"); e.Kind != workflow.KindHeldBranch || e.Status != workflow.StatusCompleted || e.Branches["c"].Status != workflow.StatusFailed {
		t.Fatalf("c's failure, held apart: %+v", e)
	}
	h.Send("go", job{1})
	out := drive(t, h, wf(true))
	je := failedWith[*workflow.JoinError](t, out)
	var coder interface{ ErrorCode() string }
	if len(je.Errors) != 2 || !errors.As(je.Errors["a"], &coder) || coder.ErrorCode() != "card_declined" || je.Errors["c"] == nil {
		t.Fatalf("join error %v, want a's recorded failure and c's", je)
	}
	if runs.Load() != 1 {
		t.Fatalf("a's step ran %d times", runs.Load())
	}
	e := entryAt(t, h.History(), "j")
	if e.Status != workflow.StatusFailed || e.Branches["a"].Status != workflow.StatusFailed || e.Branches["b"].Status != workflow.StatusCompleted || e.Branches["c"].Status != workflow.StatusFailed {
		t.Fatalf("settled join %+v", e)
	}
	for _, e := range h.History() {
		if strings.HasPrefix(e.Path, "j/~held") {
			t.Fatalf("entry %q left after the join settled", e.Path)
		}
	}
}

// oldHeldJoin is the history of TestAJoinHeldInItsRecordReplaysHeld's
// first run as the build before held failures apart committed it: the
// pending join "j" holds branch a's failure in its record.
const oldHeldJoin = `[
	{"path":"j","seq":1,"kind":"join","status":"pending","time":"2026-01-02T03:04:05Z","branches":{
		"a":{"status":"failed","error":{"message":"workflow: step \"j/a/charge\" failed (critical, 1 attempt): card declined","code":"card_declined"},"failed_at":"j/a/charge"},
		"b":{"status":"pending"},
		"c":{"status":"pending"}},"started_at":"2026-01-02T03:04:05Z"},
	{"path":"j/a/charge","seq":1,"kind":"step","status":"exhausted","time":"2026-01-02T03:04:05Z","attempts":1,"last_attempt_at":"2026-01-02T03:04:05Z","error":{"message":"card declined","code":"card_declined"},"failure":"critical"}
]`

// TestAJoinHeldByAnOlderBuildReplaysHeld: the history an older build
// committed, its join's record holding a failed branch, replays with that
// branch held failed (its changed code, which would succeed, does not
// run), and the join settles as it did there, whether the engine holds
// failures apart or not. A compatibility guard: main passes it too.
func TestAJoinHeldByAnOlderBuildReplaysHeld(t *testing.T) {
	forHeldModes(t, func(t *testing.T, apart bool) {
		var entries []workflow.Entry
		if err := json.Unmarshal([]byte(oldHeldJoin), &entries); err != nil {
			t.Fatal(err)
		}
		h := newHost(log{})
		h.HeldBranchesApart = apart
		h.SetHistory(entries)
		var runs atomic.Int32
		wf := func(c *logCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
				"a": heldBranches()[0].a(true, &runs),
				"b": func(c *logCtx) (int, error) {
					m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"go"}})
					return m.Body.N, err
				},
				"c": func(c *logCtx) (int, error) {
					if _, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"c"}}); err != nil {
						return 0, err
					}
					return 0, codedErr{}
				},
			})
			return err
		}
		h.Send("c", job{1})
		h.Send("go", job{2})
		je := failedWith[*workflow.JoinError](t, drive(t, h, wf))
		var coder interface{ ErrorCode() string }
		if len(je.Errors) != 2 || !errors.As(je.Errors["a"], &coder) || coder.ErrorCode() != "card_declined" || je.Errors["c"] == nil {
			t.Fatalf("join error %v, want a's recorded failure and c's", je)
		}
		if runs.Load() != 0 {
			t.Fatalf("a's step ran %d times", runs.Load())
		}
		if e := entryAt(t, h.History(), "j"); e.Branches["b"].Status != workflow.StatusCompleted || e.Branches["a"].FailedAt != "j/a/charge" {
			t.Fatalf("settled join %+v", e)
		}
	})
}

// BenchmarkJoin runs a join of n branches of one step each, all of which
// succeed or all of which fail after their step (each failure but the
// last while others go on, so held), on a fresh workflowtest.Host per
// op: commits and bytes of entries written per op beside the allocations
// (inrecord: the failures held in the join's record, as before
// HeldBranchesHost).
func BenchmarkJoin(b *testing.B) {
	for _, tc := range []struct {
		name     string
		n        int
		fail     bool
		inRecord bool
	}{
		{"succeed-100", 100, false, false},
		{"fail-100", 100, true, false},
		{"fail-100-inrecord", 100, true, true},
		{"fail-1000", 1000, true, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			wf := func(c *logCtx) error {
				bs := workflow.Branches[log, int]{}
				for i := range tc.n {
					bs[fmt.Sprintf("b%05d", i)] = func(c *logCtx) (int, error) {
						v, err := workflow.Step(c, "s", func(*logStep) (int, error) { return i, nil })
						if err == nil && tc.fail {
							err = fmt.Errorf("branch %d failed", i)
						}
						return v, err
					}
				}
				_, err := workflow.Join(c, "fan", bs)
				return err
			}
			b.ReportAllocs()
			var commits, written int64
			for b.Loop() {
				h := newHost(log{})
				h.HeldBranchesApart = !tc.inRecord
				h.OnBatch = func(batch []workflow.HistoryWrite) {
					for _, w := range batch {
						if w.Put != nil {
							e, _ := workflow.MarshalEntry(w.Put)
							written += int64(len(e))
						}
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				out := h.Run(ctx, wf)
				cancel()
				if want := map[bool]workflow.RunStatus{false: workflow.RunCompleted, true: workflow.RunFailed}[tc.fail]; out.Status != want {
					b.Fatalf("run %s %v, want %s", out.Status, out.Err, want)
				}
				commits += int64(h.Commits())
			}
			b.ReportMetric(float64(commits)/float64(b.N), "commits/op")
			b.ReportMetric(float64(written)/float64(b.N), "written-B/op")
		})
	}
}

// TestAJoinAsksWhetherToHoldApartAtEachFailure: a host whose gate closes
// while a join runs (a node of an older storage format registered again)
// has the join's next failure held in its record, not in an entry of its
// own that the older node would not read; the failure held apart before
// stays so, and the join settles with both.
func TestAJoinAsksWhetherToHoldApartAtEachFailure(t *testing.T) {
	h := newHost(log{})
	h.HeldBranchesApart = true
	wf := func(c *logCtx) error {
		_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
			"a": func(*logCtx) (int, error) { return 0, errors.New("a failed") },
			"b": func(*logCtx) (int, error) {
				// Until a's failure is held, then the gate closes.
				for deadline := time.Now().Add(30 * time.Second); h.HeldBranchesApart; time.Sleep(5 * time.Millisecond) {
					for _, e := range h.History() {
						if e.Path == "j/~held/a" {
							h.HeldBranchesApart = false
						}
					}
					if time.Now().After(deadline) {
						return 0, errors.New("a's failure not held apart within 30s")
					}
				}
				return 0, errors.New("b failed")
			},
			"wait": func(c *logCtx) (int, error) {
				m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"go"}})
				return m.Body.N, err
			},
		})
		return err
	}
	if out := drive(t, h, wf); out.Status != workflow.RunYielded {
		t.Fatalf("first run: %s %v", out.Status, out.Err)
	}
	hist := h.History()
	if e := entryAt(t, hist, "j/~held/a"); e.Branches["a"].Status != workflow.StatusFailed {
		t.Fatalf("a's failure, held apart while the gate was open: %+v", e)
	}
	for _, e := range hist {
		if e.Path == "j/~held/b" {
			t.Fatal("b's failure, after the gate closed, held in an entry of its own (j/~held/b)")
		}
	}
	if e := entryAt(t, hist, "j"); e.Branches["b"].Status != workflow.StatusFailed {
		t.Fatalf("b's failure, after the gate closed, not in the join's record: %+v", e)
	}
	h.Send("go", job{1})
	je := failedWith[*workflow.JoinError](t, drive(t, h, wf))
	if len(je.Errors) != 2 || je.Errors["a"] == nil || je.Errors["b"] == nil {
		t.Fatalf("join error %v, want a's failure and b's", je)
	}
	for _, e := range h.History() {
		if strings.HasPrefix(e.Path, "j/~held") {
			t.Fatalf("entry %q left after the join settled", e.Path)
		}
	}
}

// TestAJoinsGateOpeningWhileAnotherBranchFailsInItsRecord: a branch
// failing in the join's record (gate closed) while another fails held
// apart (the gate opened meanwhile) each keep their failure, and (under
// -race) the held-apart one does not read the record the other rewrites.
func TestAJoinsGateOpeningWhileAnotherBranchFailsInItsRecord(t *testing.T) {
	h := newHost(log{})
	wf := func(c *logCtx) error {
		_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
			"a": func(*logCtx) (int, error) {
				// Until b's failure is in the record, then the gate opens.
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
					for _, e := range h.History() {
						if e.Path == "j" && e.Branches["b"].Status == workflow.StatusFailed {
							h.HeldBranchesApart = true
							return 0, errors.New("a failed")
						}
					}
					if time.Now().After(deadline) {
						return 0, errors.New("b's failure not in the record within 30s")
					}
				}
			},
			"b": func(*logCtx) (int, error) { return 0, errors.New("b failed") },
			"wait": func(c *logCtx) (int, error) {
				m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"go"}})
				return m.Body.N, err
			},
		})
		return err
	}
	if out := drive(t, h, wf); out.Status != workflow.RunYielded {
		t.Fatalf("first run: %s %v", out.Status, out.Err)
	}
	hist := h.History()
	if e := entryAt(t, hist, "j/~held/a"); e.Branches["a"].Status != workflow.StatusFailed {
		t.Fatalf("a's failure, after the gate opened: %+v", e)
	}
	if e := entryAt(t, hist, "j"); e.Branches["b"].Status != workflow.StatusFailed {
		t.Fatalf("b's failure, while the gate was closed, not in the join's record: %+v", e)
	}
	h.Send("go", job{1})
	je := failedWith[*workflow.JoinError](t, drive(t, h, wf))
	if len(je.Errors) != 2 || je.Errors["a"] == nil || je.Errors["b"] == nil {
		t.Fatalf("join error %v, want a's failure and b's", je)
	}
}
