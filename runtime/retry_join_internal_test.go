package runtime

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// A retry of a failed join or race puts it back to pending and deletes only
// the failures of its failed branches (rivet-semantics.md 1.7: completed
// branches replay their outputs; a race's branches, all failed, go on from
// their failures); a join a Try caught is left alone.
func TestRetryTreesOfAFailedJoin(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	step := func(path string, seq int, st workflow.Status, s int) workflow.Entry {
		return workflow.Entry{Path: path, Seq: seq, Kind: workflow.KindStep, Status: st, Time: at(s)}
	}
	ok, ex := workflow.StatusCompleted, workflow.StatusExhausted
	failed := func(failedAt string) workflow.Branch {
		return workflow.Branch{Status: workflow.StatusFailed, FailedAt: failedAt}
	}
	join := func(path string, seq int, s int, br map[string]workflow.Branch) workflow.Entry {
		return workflow.Entry{Path: path, Seq: seq, Kind: workflow.KindJoin, Status: workflow.StatusFailed, Time: at(s), Branches: br}
	}
	done := workflow.Branch{Status: workflow.StatusCompleted}
	entries := func() []workflow.Entry {
		return []workflow.Entry{
			// A join a Try caught: its failure stays.
			join("t/j0", 1, 1, map[string]workflow.Branch{"a": failed("t/j0/a/s")}),
			step("t/j0/a/s", 1, ex, 1),
			{Path: "l", Seq: 2, Kind: workflow.KindLoop, Status: workflow.StatusPending, Time: at(2)},
			// A join in a loop: a completes, b's step fails after a
			// caught failure and a completed step; c fails in a nested
			// join, d with its own error, e in a race, f was recorded
			// before branches named their failure.
			join("l/~0/j", 1, 9, map[string]workflow.Branch{
				"a": done, "b": failed("l/~0/j/b/s2"), "c": failed("l/~0/j/c/k"), "d": failed(workflow.NoEntry),
				"e": failed("l/~0/j/e/r"), "f": failed(""),
			}),
			step("l/~0/j/a/s", 1, ok, 3),
			step("l/~0/j/b/try/x", 1, ex, 3),
			step("l/~0/j/b/s1", 2, ok, 4),
			step("l/~0/j/b/s2", 3, ex, 5),
			join("l/~0/j/c/k", 1, 6, map[string]workflow.Branch{"p": done, "q": failed("l/~0/j/c/k/q/s")}),
			step("l/~0/j/c/k/p/s", 1, ok, 5),
			step("l/~0/j/c/k/q/s", 1, ex, 6),
			step("l/~0/j/d/s", 1, ok, 3),
			{Path: "l/~0/j/e/r", Seq: 1, Kind: workflow.KindRace, Status: workflow.StatusFailed, Time: at(7),
				Branches: map[string]workflow.Branch{"x": failed("l/~0/j/e/r/x/t"), "y": failed("")}},
			step("l/~0/j/e/r/x/s", 1, ok, 4),
			step("l/~0/j/e/r/x/t", 2, ex, 5),
			step("l/~0/j/e/r/y/s", 1, ex, 7),
			step("l/~0/j/f/s", 1, ok, 3),
			step("l/~0/j/f/t", 2, ex, 8),
		}
	}
	pending := func(resets []workflow.Entry) []string {
		var out []string
		for _, e := range resets {
			if (e.Kind != workflow.KindJoin && e.Kind != workflow.KindRace) || e.Status != workflow.StatusPending || !e.Time.IsZero() {
				t.Errorf("reset %+v, want a pending join or race without a time", e)
			}
			for n, b := range e.Branches {
				if b.Status != workflow.StatusPending {
					t.Errorf("reset %s: branch %s is %s, want pending", e.Path, n, b.Status)
				}
			}
			out = append(out, e.Path)
		}
		slices.Sort(out)
		return out
	}
	for _, failedAt := range []string{"l/~0/j", ""} {
		trees, resets, err := retryTrees(entries(), "", failedAt)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(trees)
		want := []string{"l/~0/j/b/s2", "l/~0/j/c/k/q/s", "l/~0/j/e/r/x/t", "l/~0/j/e/r/y/s", "l/~0/j/f/t"}
		wantReset := []string{"l/~0/j", "l/~0/j/c/k", "l/~0/j/e/r"}
		if failedAt == "" {
			// A status recorded before FailedAt: every failure goes,
			// the caught ones included (as before).
			want = []string{"l/~0/j/b/s2", "l/~0/j/c/k/q/s", "l/~0/j/e/r/x/t", "l/~0/j/e/r/y/s", "l/~0/j/f/t", "t/j0/a/s"}
			wantReset = []string{"l/~0/j", "l/~0/j/c/k", "l/~0/j/e/r", "t/j0"}
		}
		if !slices.Equal(trees, want) {
			t.Errorf("retry (failed at %q) deletes %v, want %v", failedAt, trees, want)
		}
		if got := pending(resets); !slices.Equal(got, wantReset) {
			t.Errorf("retry (failed at %q) resets %v, want %v", failedAt, got, wantReset)
		}
	}

	// --from an entry of a failed branch: the join goes back to pending,
	// its failures are retried, and what came after the entry goes (the
	// nested join too, which settled after it).
	trees, resets, err := retryTrees(entries(), "l/~0/j/b/s1", "l/~0/j")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(trees)
	if want := []string{"l/~0/j/b/s1", "l/~0/j/b/s2", "l/~0/j/c/k", "l/~0/j/e/r", "l/~0/j/f/t"}; !slices.Equal(trees, want) {
		t.Errorf("retry --from l/~0/j/b/s1 deletes %v, want %v", trees, want)
	}
	if got, want := pending(resets), []string{"l/~0/j"}; !slices.Equal(got, want) {
		t.Errorf("retry --from l/~0/j/b/s1 resets %v, want %v", got, want)
	}
	// --from an entry of a failed race's branch: the race goes back to
	// pending too, and so does the join that holds it; what came after the
	// entry goes.
	trees, resets, err = retryTrees(entries(), "l/~0/j/e/r/x/t", "l/~0/j")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(trees)
	if want := []string{"l/~0/j/b/s2", "l/~0/j/c/k", "l/~0/j/e/r/x/t", "l/~0/j/e/r/y/s", "l/~0/j/f/t"}; !slices.Equal(trees, want) {
		t.Errorf("retry --from l/~0/j/e/r/x/t deletes %v, want %v", trees, want)
	}
	if got, want := pending(resets), []string{"l/~0/j", "l/~0/j/e/r"}; !slices.Equal(got, want) {
		t.Errorf("retry --from l/~0/j/e/r/x/t resets %v, want %v", got, want)
	}
	// Inside a race that completed, --from stays refused.
	won := append(entries(),
		workflow.Entry{Path: "w", Seq: 3, Kind: workflow.KindRace, Status: workflow.StatusCompleted, Time: at(10), Winner: "x",
			Branches: map[string]workflow.Branch{"x": done, "y": {Status: workflow.StatusCancelled}}},
		step("w/x/s", 1, ok, 10))
	if _, _, err := retryTrees(won, "w/x/s", "l/~0/j"); err == nil {
		t.Error("retry --from inside a completed race: no error")
	}
}

// A join or race that is still pending holds the failures of the branches
// that failed while others went on; a retry that deletes entries of such a
// branch puts it back to pending, or the replay would hold it failed
// without running what the retry deleted.
func TestRetryTreesUnholdsBranchesOfAPendingJoinOrRace(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	step := func(path string, seq int, st workflow.Status, s int) workflow.Entry {
		return workflow.Entry{Path: path, Seq: seq, Kind: workflow.KindStep, Status: st, Time: at(s)}
	}
	for _, kind := range []workflow.Kind{workflow.KindJoin, workflow.KindRace} {
		entries := func() []workflow.Entry {
			return []workflow.Entry{
				{Path: "j", Seq: 1, Kind: kind, Status: workflow.StatusPending, Branches: map[string]workflow.Branch{
					"a": {Status: workflow.StatusFailed, FailedAt: "j/a/s"},
					"b": {Status: workflow.StatusPending},
					"c": {Status: workflow.StatusFailed, FailedAt: workflow.NoEntry},
				}},
				step("j/a/s", 1, workflow.StatusExhausted, 2),
				step("j/b/s", 1, workflow.StatusCompleted, 3),
				step("j/c/s", 1, workflow.StatusCompleted, 1),
			}
		}
		for _, tc := range []struct {
			from  string
			trees []string
			reset []string // the branches put back to pending
		}{
			{"j/a/s", []string{"j/a/s", "j/b/s"}, []string{"a"}},
			{"j/c/s", []string{"j/a/s", "j/b/s", "j/c/s"}, []string{"a", "c"}},
			{"j/b/s", []string{"j/b/s"}, nil},
			{"j", []string{"j"}, nil},
		} {
			trees, resets, err := retryTrees(entries(), tc.from, noEntry)
			if err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			slices.Sort(trees)
			if !slices.Equal(trees, tc.trees) {
				t.Errorf("%s: --from %s deletes %v, want %v", kind, tc.from, trees, tc.trees)
			}
			var reset []string
			for _, e := range resets {
				if e.Path != "j" || e.Kind != kind || e.Status != workflow.StatusPending || len(e.Branches) != 3 {
					t.Errorf("%s: --from %s: reset %+v", kind, tc.from, e)
				}
				for n, b := range e.Branches {
					if b.Status == workflow.StatusPending && entries()[0].Branches[n].Status == workflow.StatusFailed {
						reset = append(reset, n)
					}
				}
			}
			slices.Sort(reset)
			if !slices.Equal(reset, tc.reset) {
				t.Errorf("%s: --from %s puts back to pending %v, want %v", kind, tc.from, reset, tc.reset)
			}
		}
	}
}

// The same, with the failures held apart from the join's record
// (workflow.HeldBranchesHost): a retry that deletes entries in a held
// branch deletes the join's held entries, in one prefix delete whatever
// their number (the retry is one store transaction, which etcd bounds),
// and puts those of the branches it deletes no entries in into the join's
// record, where they stay held; one that deletes none in a held branch
// keeps them.
func TestRetryTreesUnholdsBranchesHeldApart(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	step := func(path string, seq int, st workflow.Status, s int) workflow.Entry {
		return workflow.Entry{Path: path, Seq: seq, Kind: workflow.KindStep, Status: st, Time: at(s)}
	}
	held := func(branch string, b workflow.Branch) workflow.Entry {
		return workflow.Entry{Path: "j/~held/" + branch, Kind: workflow.KindHeldBranch, Status: workflow.StatusCompleted, Branches: map[string]workflow.Branch{branch: b}}
	}
	failedA := workflow.Branch{Status: workflow.StatusFailed, FailedAt: "j/a/s"}
	failedC := workflow.Branch{Status: workflow.StatusFailed, FailedAt: workflow.NoEntry}
	const many = 200 // held branches beside a, each an entry of its own
	entries := func() []workflow.Entry {
		j := workflow.Entry{Path: "j", Seq: 1, Kind: workflow.KindJoin, Status: workflow.StatusPending, Branches: map[string]workflow.Branch{
			"a": {Status: workflow.StatusPending},
			"b": {Status: workflow.StatusPending},
			"c": {Status: workflow.StatusPending},
		}}
		es := []workflow.Entry{
			step("j/a/s", 1, workflow.StatusExhausted, 2),
			step("j/b/s", 1, workflow.StatusCompleted, 3),
			step("j/c/s", 1, workflow.StatusCompleted, 1),
			held("a", failedA),
			held("c", failedC),
		}
		for i := range many {
			n := fmt.Sprintf("m%03d", i)
			j.Branches[n] = workflow.Branch{Status: workflow.StatusPending}
			es = append(es, held(n, failedC))
		}
		return append([]workflow.Entry{j}, es...)
	}
	for _, tc := range []struct {
		from   string
		failed string // failedAt, without from
		trees  []string
		// stay: the branches the reset record holds failed; nil: no
		// reset.
		stay []string
	}{
		{"j/a/s", noEntry, []string{"j/a/s", "j/b/s", "j/~held"}, []string{"c", "m*"}},
		{"j/c/s", noEntry, []string{"j/a/s", "j/b/s", "j/c/s", "j/~held"}, []string{"m*"}},
		{"j/b/s", noEntry, []string{"j/b/s"}, nil},
		{"j", noEntry, []string{"j"}, nil},
		// Without --from, the failure that failed the workflow: a held
		// entry is no failed entry of its own.
		{"", "j/a/s", []string{"j/a/s", "j/~held"}, []string{"c", "m*"}},
	} {
		trees, resets, err := retryTrees(entries(), tc.from, tc.failed)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(trees)
		if !slices.Equal(trees, tc.trees) {
			t.Errorf("--from %q (failed at %s) deletes %d trees %v, want %v", tc.from, tc.failed, len(trees), trees[:min(len(trees), 8)], tc.trees)
		}
		if tc.stay == nil {
			for _, e := range resets {
				t.Errorf("--from %q: reset %+v (the record holds no failure)", tc.from, e)
			}
			continue
		}
		if len(resets) != 1 || resets[0].Path != "j" || resets[0].Status != workflow.StatusPending {
			t.Fatalf("--from %q: resets %+v, want j's record", tc.from, resets)
		}
		for n, b := range resets[0].Branches {
			stays := slices.Contains(tc.stay, n) || strings.HasPrefix(n, "m") && slices.Contains(tc.stay, "m*")
			want := workflow.Branch{Status: workflow.StatusPending}
			if stays {
				want = failedC
			}
			if !reflect.DeepEqual(b, want) {
				t.Errorf("--from %q: j's record holds %s %+v, want %+v", tc.from, n, b, want)
			}
		}
	}
}

// A retry from an entry a join keeps for itself (a held failure, a
// settled join's values) is refused: no code made it, and the retry would
// delete the join's entries made after it in its other branches, running
// their completed steps again. A held failure's refusal names its
// branch's failed entry (or, failed with its own error, its first, or,
// the branch having made none, the join), and a loop iteration's '~' is
// no such scope.
func TestRetryFromAJoinsOwnEntriesIsRefused(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	step := func(path string, seq int, st workflow.Status, s int) workflow.Entry {
		return workflow.Entry{Path: path, Seq: seq, Kind: workflow.KindStep, Status: st, Time: at(s)}
	}
	held := func(join, branch string, b workflow.Branch) workflow.Entry {
		return workflow.Entry{Path: join + "/~held/" + branch, Kind: workflow.KindHeldBranch, Status: workflow.StatusCompleted, Time: at(2), Branches: map[string]workflow.Branch{branch: b}}
	}
	entries := []workflow.Entry{
		{Path: "l", Seq: 1, Kind: workflow.KindLoop, Status: workflow.StatusCompleted, Time: at(0)},
		step("l/~0/s", 1, workflow.StatusCompleted, 0),
		{Path: "done", Seq: 2, Kind: workflow.KindJoin, Status: workflow.StatusCompleted, Time: at(1), OutputParts: 1, Branches: map[string]workflow.Branch{"x": {Status: workflow.StatusCompleted}}},
		step("done/x/s", 1, workflow.StatusCompleted, 1),
		{Path: "done/~outputs/0", Kind: workflow.KindJoinOutputs, Status: workflow.StatusCompleted, Time: at(1)},
		{Path: "j", Seq: 3, Kind: workflow.KindJoin, Status: workflow.StatusPending, Time: at(2), Branches: map[string]workflow.Branch{
			"a": {Status: workflow.StatusPending},
			"b": {Status: workflow.StatusPending},
			"c": {Status: workflow.StatusPending},
			"d": {Status: workflow.StatusPending},
		}},
		step("j/a/s", 1, workflow.StatusExhausted, 2),
		step("j/b/s", 1, workflow.StatusCompleted, 3),
		step("j/c/s", 1, workflow.StatusCompleted, 1),
		held("j", "a", workflow.Branch{Status: workflow.StatusFailed, FailedAt: "j/a/s"}),
		held("j", "c", workflow.Branch{Status: workflow.StatusFailed, FailedAt: workflow.NoEntry}),
		held("j", "d", workflow.Branch{Status: workflow.StatusFailed, FailedAt: workflow.NoEntry}),
	}
	for _, tc := range []struct{ from, names string }{
		{"j/~held/a", `retry from the branch's failed entry, "j/a/s"`},
		{"j/~held/c", `retry from its first entry "j/c/s", which runs the branch again`},
		{"j/~held/d", `retry from the join "j", which runs all its branches again`},
		{"done/~outputs/0", `"done"`},
	} {
		for _, rewind := range []bool{true, false} {
			_, _, err := planRetry(slices.Clone(entries), tc.from, noEntry, rewind)
			if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.names) {
				t.Errorf("--from %s (rewind %v): %v, want refused, naming %s", tc.from, rewind, err, tc.names)
			}
		}
	}
	// Not rewind: the loop has completed, which checkRewind refuses.
	if trees, _, err := planRetry(slices.Clone(entries), "l/~0/s", noEntry, false); err != nil || !slices.Contains(trees, "l/~0/s") {
		t.Errorf("--from l/~0/s, in a loop iteration: %v, %v", trees, err)
	}
}
