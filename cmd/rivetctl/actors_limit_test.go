package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
	"github.com/rivet-go/rivet/workflow"
)

// A plain listing and --failed take --limit N (1 to 1000), as --status
// sleeping and waiting do: the first N actors by name and key, then a
// note on stderr that more were left out (none when nothing was). A
// cluster of many actors otherwise lists them all, which an operator
// looking at a few did not want to wait for.
func TestActorsLimitBoundsAPlainListing(t *testing.T) {
	reg, err := rivet.Setup(rivet.Actor[chargeState]{Name: "idle", Run: func(*workflow.Ctx[chargeState]) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		if r := rivetctl(t, addr, "create", "idle", k); r.code != 0 {
			t.Fatalf("create idle %s: %+v", k, r)
		}
	}

	r := rivetctl(t, addr, "actors", "--limit", "2")
	rows := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	note := "rivetctl: note: more actors left out after the 2 listed (--limit): narrow the list with ACTOR, or raise --limit (at most 1000)\n"
	if r.code != 0 || len(rows) != 3 || !strings.HasPrefix(rows[1], "idle  a ") || !strings.HasPrefix(rows[2], "idle  b ") || r.stderr != note {
		t.Errorf("actors --limit 2: %+v; want idle a and b, and the note %q", r, note)
	}

	r = rivetctl(t, addr, "-o", "json", "actors", "idle", "--limit", "3")
	var got []struct {
		Key []string `json:"key"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 || len(got) != 3 || got[2].Key[0] != "c" ||
		r.stderr != `{"note":"more actors left out after the 3 listed (--limit): narrow the list with ACTOR, or raise --limit (at most 1000)"}`+"\n" {
		t.Errorf("-o json actors idle --limit 3: %+v (%v); want a, b, c and a JSON note", r, err)
	}

	// Exactly as many as there are: nothing left out, no note.
	if r = rivetctl(t, addr, "actors", "--limit", "5"); r.code != 0 || strings.Count(r.stdout, "\nidle ") != 5 || r.stderr != "" {
		t.Errorf("actors --limit 5 of 5: %+v; want all five and no note", r)
	}
	if r = rivetctl(t, addr, "actors", "--failed", "--limit", "1"); r.code != 0 || r.stdout != "no failed workflows\n" || r.stderr != "" {
		t.Errorf("actors --failed --limit 1: %+v", r)
	}

	rivetctl(t, addr, "actors", "--limit", "0").wantErr(t, 2, "rivetctl: --limit 0: want 1 to 1000")
	rivetctl(t, addr, "actors", "--limit", "1001").wantErr(t, 2, "rivetctl: --limit 1001: want 1 to 1000")
	rivetctl(t, addr, "actors", "--status", "retrying", "--limit", "5").
		wantErr(t, 2, "rivetctl: --limit does not go with --status retrying (each node cuts its list to 1000 actors, and says how many it left out)")
}

// A listing with --limit asks for no more than it lacks, and reads no
// page after the one that completes it: a node whose pages are smaller
// than asked (one actor each here, of a listing that never ends) is asked
// for N pages, not for the rest of its actors.
func TestActorsLimitStopsReadingPagesOnceItHasN(t *testing.T) {
	f := servertest.NewFake()
	var pages atomic.Int32
	var asked atomic.Int32
	f.ListFunc = func(_ context.Context, opts runtime.ListOptions) (runtime.ListResult, error) {
		n := pages.Add(1)
		if n == 1 {
			asked.Store(int32(opts.Limit))
		}
		if n > 100 {
			return runtime.ListResult{}, fmt.Errorf("page %d: the listing does not stop", n)
		}
		return runtime.ListResult{
			Actors:        []runtime.ActorInfo{{Ref: runtime.Ref{Name: "counter", Key: []string{fmt.Sprint(n)}}, Owner: "node-1"}},
			NextPageToken: fmt.Sprint(n),
		}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	r := rivetctl(t, addr, "actors", "--limit", "3")
	if r.code != 0 || strings.Count(r.stdout, "\ncounter ") != 3 || !strings.Contains(r.stderr, "more actors left out after the 3 listed") {
		t.Fatalf("actors --limit 3: %+v", r)
	}
	if n := pages.Load(); n != 3 {
		t.Errorf("read %d pages for 3 actors of one a page, want 3", n)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("the first page asked for %d actors, want 3", n)
	}
}

// --failed --error-contains with --limit stops at the Nth match, and its
// note says only that failed workflows were left unread, not that more
// matches were left out: the next page holds more failed workflows,
// whose errors it did not read, not necessarily a match.
func TestActorsFailedLimitWithErrorContainsSaysWhatWasNotRead(t *testing.T) {
	f := servertest.NewFake()
	var pages atomic.Int32
	f.ListFunc = func(_ context.Context, opts runtime.ListOptions) (runtime.ListResult, error) {
		n := pages.Add(1)
		if !opts.FailedWorkflows || n > 100 {
			return runtime.ListResult{}, fmt.Errorf("page %d of failed %v", n, opts.FailedWorkflows)
		}
		// Every other failed workflow's error matches.
		msg := "step charge: card declined"
		if n%2 == 0 {
			msg = "history diverged"
		}
		return runtime.ListResult{
			Actors:        []runtime.ActorInfo{{Ref: runtime.Ref{Name: "order", Key: []string{fmt.Sprint(n)}}, Owner: "node-1", WorkflowError: msg}},
			NextPageToken: fmt.Sprint(n),
		}, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})
	r := rivetctl(t, addr, "actors", "--failed", "--error-contains", "declined", "--limit", "2")
	note := "rivetctl: note: more failed workflows not read (some may match --error-contains) after the 2 listed (--limit): narrow the list with ACTOR, or raise --limit (at most 1000)\n"
	if r.code != 0 || strings.Count(r.stdout, "\norder ") != 2 || strings.Contains(r.stdout, "diverged") || r.stderr != note {
		t.Errorf("actors --failed --error-contains declined --limit 2: %+v; want orders 1 and 3, and the note %q", r, note)
	}
	if n := pages.Load(); n != 3 {
		t.Errorf("read %d pages for the 2 matches of the first 3, want 3", n)
	}
}
