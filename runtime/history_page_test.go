package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type roundsState struct {
	N int `json:"n"`
}

// rounds records 30 named steps from a plain for loop (which nothing
// prunes), then waits for a message, then 30 more, until a message of 0.
var rounds = rivet.Actor[roundsState]{
	Name:   "rounds",
	Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[roundsState]) error {
		for r := 0; ; r++ {
			for i := range 30 {
				if err := ctx.Step(fmt.Sprintf("r%d-step-%d", r, i), func(s *workflow.StepCtx[roundsState]) error { s.State.N++; return nil }); err != nil {
					return err
				}
			}
			m, err := workflow.Next[int](ctx, fmt.Sprintf("r%d-wait", r))
			if err != nil || m.Body == 0 {
				return err
			}
		}
	},
}

// roundsAsleep starts a rounds actor and waits until its workflow sleeps
// after its first round's 30 steps.
func roundsAsleep(t *testing.T) (*env, runtime.Ref) {
	t.Helper()
	e := newEnv(t, counterReg(t, rounds), nil)
	ref := runtime.Ref{Name: "rounds", Key: []string{"a"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first round's steps", 20*time.Second, func() bool {
		h, err := e.host.History(ctx(t), ref)
		return err == nil && h.WorkflowStatus == runtime.WorkflowSleeping && len(h.Entries) == 30
	})
	return e, ref
}

func historyPaths(h runtime.History) []string {
	var paths []string
	for _, e := range h.Entries {
		paths = append(paths, e.Path)
	}
	return paths
}

// A history pages in its order, and a page token resumes just after its
// page's last entry while the workflow records more: the pages together
// list the whole history once, each entry once. A token that is not one,
// or one of another actor's history, is ErrInvalidArgument.
func TestHistoryPagesWhileTheWorkflowRecordsMore(t *testing.T) {
	t.Parallel()
	e, ref := roundsAsleep(t)
	page := func(token string, limit int) runtime.History {
		t.Helper()
		h, err := e.host.HistoryPage(ctx(t), ref, runtime.HistoryOptions{Limit: limit, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Entries) > limit || (h.NextPageToken != "" && len(h.Entries) != limit) || len(h.PageTokens) != len(h.Entries) {
			t.Fatalf("page of %d entries (limit %d), %d tokens, next %q", len(h.Entries), limit, len(h.PageTokens), h.NextPageToken)
		}
		return h
	}
	first := page("", 7)
	got := historyPaths(first)
	if got[0] != "r0-step-0" || got[6] != "r0-step-6" || first.NextPageToken == "" || first.WorkflowStatus != runtime.WorkflowSleeping {
		t.Fatalf("first page: %v, status %s, next %q", got, first.WorkflowStatus, first.NextPageToken)
	}
	// The workflow records a second round, then a third, while the pages
	// are read.
	token := first.NextPageToken
	for round := 1; round <= 2; round++ {
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
		h := page(token, 7)
		got, token = append(got, historyPaths(h)...), h.NextPageToken
		waitFor(t, fmt.Sprintf("round %d's steps", round), 20*time.Second, func() bool {
			h, err := e.host.History(ctx(t), ref)
			return err == nil && h.WorkflowStatus == runtime.WorkflowSleeping && len(h.Entries) >= 31*round+30
		})
	}
	for token != "" {
		h := page(token, 7)
		got, token = append(got, historyPaths(h)...), h.NextPageToken
	}
	whole, err := e.host.History(ctx(t), ref)
	if err != nil {
		t.Fatal(err)
	}
	if want := historyPaths(whole); !slices.Equal(got, want) || len(want) != 30*3+2 || want[30] != "r0-wait" || want[31] != "r1-step-0" {
		t.Fatalf("the pages listed\n %v\nthe history is\n %v", got, want)
	}
	// A token resumes after its entry, not at a count.
	mid := page("", 40)
	if rest := page(mid.PageTokens[29], 2); !slices.Equal(historyPaths(rest), []string{"r0-wait", "r1-step-0"}) {
		t.Fatalf("after r0-step-29: %v", historyPaths(rest))
	}
	// Bad tokens.
	other := runtime.Ref{Name: "rounds", Key: []string{"b"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), other, nil); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"not a token", "e30"} {
		if _, err := e.host.HistoryPage(ctx(t), ref, runtime.HistoryOptions{Limit: 5, PageToken: tok}); !errors.Is(err, rivet.ErrInvalidArgument) {
			t.Errorf("token %q: %v, want ErrInvalidArgument", tok, err)
		}
	}
	if _, err := e.host.HistoryPage(ctx(t), other, runtime.HistoryOptions{Limit: 5, PageToken: first.NextPageToken}); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("another actor's token: %v, want ErrInvalidArgument", err)
	}
	// No limit: the whole history after the token.
	if h, err := e.host.HistoryPage(ctx(t), ref, runtime.HistoryOptions{PageToken: first.NextPageToken}); err != nil || h.NextPageToken != "" ||
		!slices.Equal(historyPaths(h), historyPaths(whole)[7:]) {
		t.Fatalf("the rest: %d entries, next %q, %v", len(h.Entries), h.NextPageToken, err)
	}
}

// Paging a history that does not change reads its entries once: the pages
// after the first come from what the node holds while the history's keys
// are as they were (a read of the keys alone). An entry recorded between
// two pages makes the next page read the history again, and list it.
func TestHistoryPagesReadAnUnchangedHistoryOnce(t *testing.T) {
	t.Parallel()
	e, ref := roundsAsleep(t)
	page := func(token string) runtime.History {
		t.Helper()
		h, err := e.host.HistoryPage(ctx(t), ref, runtime.HistoryOptions{Limit: 4, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	reads := e.store.historyReads.Load()
	var got []string
	pages := 0
	for h := page(""); ; h = page(h.NextPageToken) {
		got, pages = append(got, historyPaths(h)...), pages+1
		if h.NextPageToken == "" {
			break
		}
	}
	if n := e.store.historyReads.Load() - reads; n != 1 || pages != 8 || len(got) != 30 || got[29] != "r0-step-29" {
		t.Fatalf("%d pages listed %d entries (last %q) and read the history %d times, want 8 pages, 30 entries, 1 read", pages, len(got), got[len(got)-1], n)
	}

	// The workflow records a round more between the first page and the
	// second: the second reads again, and the pages list it all.
	first := page("")
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`1`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second round's steps", 20*time.Second, func() bool {
		h, err := e.host.History(ctx(t), ref)
		return err == nil && h.WorkflowStatus == runtime.WorkflowSleeping && len(h.Entries) == 61
	})
	reads = e.store.historyReads.Load()
	got = historyPaths(first)
	for token := first.NextPageToken; token != ""; {
		h := page(token)
		got, token = append(got, historyPaths(h)...), h.NextPageToken
	}
	if n := e.store.historyReads.Load() - reads; n != 1 || len(got) != 61 || got[30] != "r0-wait" || got[60] != "r1-step-29" {
		t.Fatalf("after a change, the pages listed %d entries (last %q) and read the history %d times, want 61 and 1", len(got), got[len(got)-1], n)
	}
}
