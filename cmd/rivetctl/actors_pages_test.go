package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

// waitUntil blocks until at, or until ctx ends (its error, then).
func waitUntil(ctx context.Context, at time.Time) error {
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// --timeout bounds each page of an actor listing, not the whole: a node
// with 150,000 actors took about as long as the default --timeout to
// list them all (a user trial). Here the second page is answered only
// once the first page's deadline has passed: a listing under one deadline
// fails; one deadline per page lists both pages. A page that gets no
// answer in time fails the listing, saying so.
func TestActorsBoundsEachPageByTheTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	f := servertest.NewFake()
	var mu sync.Mutex
	var firstDeadline time.Time
	stuck := false
	f.ListFunc = func(ctx context.Context, opts runtime.ListOptions) (runtime.ListResult, error) {
		dl, _ := ctx.Deadline()
		page := runtime.ListResult{Actors: []runtime.ActorInfo{{Ref: runtime.Ref{Name: "counter", Key: []string{opts.PageToken + "k"}}, Owner: "node-1"}}}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case stuck && opts.PageToken == "1":
			<-ctx.Done() // no answer
			return runtime.ListResult{}, ctx.Err()
		case opts.PageToken == "":
			firstDeadline = dl
			page.NextPageToken = "1"
			return page, waitUntil(ctx, dl.Add(-timeout/2)) // half its time
		default:
			return page, waitUntil(ctx, firstDeadline.Add(50*time.Millisecond))
		}
	}
	addr := servertest.Start(t, f, servertest.Config{})
	r := rivetctl(t, addr, "--timeout", timeout.String(), "actors", "counter")
	if r.code != 0 || !strings.Contains(r.stdout, "\ncounter  k ") || !strings.Contains(r.stdout, "\ncounter  1k ") {
		t.Fatalf("exit %d, stdout %q, stderr %q: want both pages", r.code, r.stdout, r.stderr)
	}

	mu.Lock()
	stuck = true
	mu.Unlock()
	r = rivetctl(t, addr, "--timeout", "300ms", "actors", "counter")
	want := "rivetctl: deadline exceeded: no answer from " + addr + " within 300ms (--timeout) (DEADLINE_EXCEEDED); for one page of the listing, after 1 actors (each page has its own --timeout)\n"
	if r.code != 1 || r.stdout != "" || r.stderr != want {
		t.Fatalf("a page with no answer: exit %d, stdout %q, stderr %q; want exit 1 and %q", r.code, r.stdout, r.stderr, want)
	}
}
