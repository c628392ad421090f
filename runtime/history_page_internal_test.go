package runtime

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// histPage returns the paths of a page of entries (a copy, sorted), its
// tokens and its next token, after the place the token
// after names ("" from the first).
func histPage(t *testing.T, entries []workflow.Entry, after string, limit int) (paths []string, next string) {
	t.Helper()
	var pos historyPos
	if after != "" {
		var err error
		if pos, err = decodeHistoryToken(after, "tag"); err != nil {
			t.Fatal(err)
		}
	}
	sorted := slices.Clone(entries)
	page, tokens, next := pageSorted(sorted, sortHistory(sorted), "tag", pos, limit)
	if len(tokens) != len(page) {
		t.Fatalf("%d tokens for %d entries", len(tokens), len(page))
	}
	for _, e := range page {
		paths = append(paths, e.Path)
	}
	if next != "" && next != tokens[len(tokens)-1] {
		t.Fatalf("next token %q is not the last entry's", next)
	}
	return paths, next
}

// Pages of one entry list a history in its order, try blocks, iterations
// (~10 after ~9) and branches included: each token resumes just after its
// entry.
func TestHistoryPagesListTheHistoryInItsOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var entries []workflow.Entry
	for i, p := range []string{"work/~10/step", "step-10", "work", "par/x/save", "b-try/only", "work/~2/step", "a", "par", "z-try/inner-2", "work/~9/step", "step-2",
		"steps", "par/y/fetch", "work/~1/step/inner", "par/x/t/fetch", "z-try/inner", "work/~1/step"} {
		seq := map[string]int{"steps": 1, "work": 2, "a": 3, "z-try/inner-2": 2, "step-2": 5, "step-10": 6, "par": 8, "par/x/save": 2}[p]
		if seq == 0 {
			seq = 1
		}
		kind := workflow.KindStep
		switch p {
		case "work":
			kind = workflow.KindLoop
		case "par":
			kind = workflow.KindJoin
		}
		entries = append(entries, workflow.Entry{Path: p, Seq: seq, Kind: kind, Time: t0.Add(time.Duration(i) * time.Second)})
	}
	whole := slices.Clone(entries)
	sortHistory(whole)
	var want []string
	for _, e := range whole {
		want = append(want, e.Path)
	}
	for _, limit := range []int{1, 2, 5} {
		var got []string
		token := ""
		for range len(entries) + 1 {
			paths, next := histPage(t, entries, token, limit)
			if len(paths) > limit || (next != "" && len(paths) != limit) {
				t.Fatalf("limit %d: page of %d entries (next %q)", limit, len(paths), next)
			}
			got = append(got, paths...)
			if token = next; token == "" {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: pages list\n %v\nwant\n %v", limit, got, want)
		}
	}
}

// A token names its entry's place in the order, not a count: entries
// deleted before it (a loop pruned, its own included), entries recorded
// since after it (an iteration ~10, which sorts after ~9 though its key
// does not) or before it (a branch behind the other) move nothing: the
// next page starts just after the token's entry, none listed twice.
func TestAHistoryPageTokenResumesAfterItsEntryWhateverWasRecordedSince(t *testing.T) {
	e := func(path string, seq int, kind workflow.Kind) workflow.Entry {
		return workflow.Entry{Path: path, Seq: seq, Kind: kind, Status: workflow.StatusCompleted}
	}
	entries := []workflow.Entry{e("a", 1, workflow.KindStep), e("loop", 2, workflow.KindLoop), e("j", 3, workflow.KindJoin),
		e("j/x/s1", 1, workflow.KindStep), e("j/y/s1", 1, workflow.KindStep)}
	for i := 1; i <= 9; i++ {
		entries = append(entries, e(fmt.Sprintf("loop/~%d/s", i), 1, workflow.KindStep))
	}
	page, token := histPage(t, entries, "", 3)
	if !slices.Equal(page, []string{"a", "loop", "loop/~1/s"}) || token == "" {
		t.Fatalf("first page %v, next %q", page, token)
	}
	// The loop prunes its first two iterations (the token's entry
	// among them) and runs a tenth.
	entries = slices.DeleteFunc(entries, func(x workflow.Entry) bool { return x.Path == "loop/~1/s" || x.Path == "loop/~2/s" })
	entries = append(entries, e("loop/~10/s", 1, workflow.KindStep))
	if page, token = histPage(t, entries, token, 3); !slices.Equal(page, []string{"loop/~3/s", "loop/~4/s", "loop/~5/s"}) {
		t.Fatalf("page after the prune: %v, want the iterations after ~1", page)
	}
	for _, want := range [][]string{{"loop/~6/s", "loop/~7/s", "loop/~8/s"}, {"loop/~9/s", "loop/~10/s", "j"}} {
		if page, token = histPage(t, entries, token, 3); !slices.Equal(page, want) {
			t.Fatalf("page %v, want %v", page, want)
		}
	}
	if page, token = histPage(t, entries, token, 1); !slices.Equal(page, []string{"j/x/s1"}) || token == "" {
		t.Fatalf("page %v (next %q), want j/x/s1 and more", page, token)
	}
	// A branch w, listed before x, starts, and x records a second step.
	entries = append(entries, e("j/w/s1", 1, workflow.KindStep), e("j/x/s2", 2, workflow.KindStep))
	if page, token = histPage(t, entries, token, 3); !slices.Equal(page, []string{"j/x/s2", "j/y/s1"}) || token != "" {
		t.Fatalf("last page %v (next %q), want j/x/s2 and j/y/s1, the last", page, token)
	}
}

// A token that is not one, or one of another actor's history, is
// ErrInvalidArgument.
func TestABadHistoryPageTokenIsInvalid(t *testing.T) {
	good := encodeHistoryToken("tag", historyPos{{Class: 1, N: 1, Seg: "a"}})
	if _, err := decodeHistoryToken(good, "tag"); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"!!", "bm90IGpzb24", encodeHistoryToken("tag", nil), encodeHistoryToken("tag", historyPos{{Class: 7, Seg: "a"}}),
		encodeHistoryToken("tag", historyPos{{Class: 1}})} {
		if _, err := decodeHistoryToken(tok, "tag"); !errors.Is(err, rivet.ErrInvalidArgument) {
			t.Errorf("token %q: %v, want ErrInvalidArgument", tok, err)
		}
	}
	if _, err := decodeHistoryToken(good, "other"); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("another actor's token: %v, want ErrInvalidArgument", err)
	}
}

// The histories a node holds for paging stay within their bound, the
// oldest dropped first; none is served once its keys changed or past its
// age; one larger than the bound is not held at all.
func TestHistoryPagesHoldWithinTheirBound(t *testing.T) {
	var p historyPages
	now := time.Now()
	third := historyPagesBytes/3 + 1
	for i, tag := range []string{"a", "b", "c"} {
		p.put(tag, &pagedHistory{seen: historyKeys{count: i + 1, newest: 7}, size: third, at: now.Add(time.Duration(i) * time.Second)})
	}
	later := now.Add(3 * time.Second)
	if p.get("a", historyKeys{count: 1, newest: 7}, later) != nil || p.get("b", historyKeys{count: 2, newest: 7}, later) == nil ||
		p.get("c", historyKeys{count: 3, newest: 7}, later) == nil || p.bytes != 2*third {
		t.Fatalf("held %v, %d bytes: want b and c, %d bytes", slices.Collect(maps.Keys(p.byTag)), p.bytes, 2*third)
	}
	if p.get("b", historyKeys{count: 2, newest: 8}, later) != nil || p.get("b", historyKeys{count: 1, newest: 7}, later) != nil {
		t.Fatal("a history whose keys changed was served")
	}
	if p.get("c", historyKeys{count: 3, newest: 7}, now.Add(historyPageAge+3*time.Second)) != nil || len(p.byTag) != 0 || p.bytes != 0 {
		t.Fatalf("past their age, %d histories (%d bytes) are held", len(p.byTag), p.bytes)
	}
	p.put("d", &pagedHistory{size: historyPagesBytes + 1, at: now})
	if len(p.byTag) != 0 || p.bytes != 0 {
		t.Fatal("a history larger than the bound is held")
	}
}

// A history held for paging is dropped once it is too old even if no
// page read comes after it: a node that served one long history does not
// hold it until its next history read.
func TestHistoryPagesAreDroppedWithNoReadToSweepThem(t *testing.T) {
	p := historyPages{age: 50 * time.Millisecond}
	p.put("a", &pagedHistory{size: 1 << 20, at: time.Now()})
	p.put("b", &pagedHistory{size: 1 << 20, at: time.Now().Add(100 * time.Millisecond)})
	held := func() (int, int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.byTag), p.bytes
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		n, bytes := held()
		if n == 0 && bytes == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d histories (%d bytes) held 10 s after their age", n, bytes)
		}
	}
}

func TestHistoryPagesHoldNothingAndArmNoTimerOnceClosed(t *testing.T) {
	p := historyPages{age: time.Hour}
	p.put("a", &pagedHistory{size: 1 << 20, at: time.Now()})
	p.close()
	p.put("b", &pagedHistory{size: 1 << 20, at: time.Now()})
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.byTag) != 0 || p.bytes != 0 || p.expiry != nil {
		t.Fatalf("after close: %d histories, %d bytes, timer armed %v", len(p.byTag), p.bytes, p.expiry != nil)
	}
}
