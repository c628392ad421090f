package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet/client"
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
	// The first page was printed as it came (TestActorsPrintsEachPageAsItComes).
	wantOut := "NAME     KEY  PARTITION  OWNER   CREATED\ncounter  k    0          node-1  -\n"
	if r.code != 1 || r.stdout != wantOut || r.stderr != want {
		t.Fatalf("a page with no answer: exit %d, stdout %q, stderr %q; want exit 1, %q and %q", r.code, r.stdout, r.stderr, wantOut, want)
	}
	// In JSON, the array is left open: a listing cut short must not
	// parse as a whole one.
	r = rivetctl(t, addr, "--timeout", "300ms", "-o", "json", "actors", "counter")
	if r.code != 1 || !strings.HasPrefix(r.stdout, `[{"name":"counter","key":["k"]`) || json.Valid([]byte(r.stdout)) ||
		!strings.Contains(r.stderr, `"code":"DEADLINE_EXCEEDED"`) || !strings.Contains(r.stderr, "after 1 actors (each page has its own --timeout)") {
		t.Fatalf("-o json, a page with no answer: exit %d, stdout %q, stderr %q; want exit 1, an array left open and the error", r.code, r.stdout, r.stderr)
	}
}

// An actor listing is printed a page at a time as the pages come, not
// gathered first: rivetctl held a node's 100,000 actors (80 MB) and
// printed nothing for 7 s before (a user trial), and its memory grew with
// the cluster. Here the second page is answered only once the first
// page's rows are on stdout; columns keep the widths of the first page
// and widen for a wider cell; -o json is the one array it was.
func TestActorsPrintsEachPageAsItComes(t *testing.T) {
	out := &syncBuffer{}
	f := servertest.NewFake()
	f.ListFunc = func(ctx context.Context, opts runtime.ListOptions) (runtime.ListResult, error) {
		switch opts.PageToken {
		case "":
			return runtime.ListResult{NextPageToken: "1", Actors: []runtime.ActorInfo{
				{Ref: runtime.Ref{Name: "counter", Key: []string{"a"}}, Partition: 7, Owner: "node-1"},
			}}, nil
		case "1":
			// A deadline well under the test's: a listing that prints
			// only at its end fails here with nothing printed.
			deadline := time.Now().Add(5 * time.Second)
			for got := out.written(); !strings.Contains(got, "counter  a  ") && !strings.Contains(got, `"key":["a"]`); got = out.written() {
				if time.Now().After(deadline) || ctx.Err() != nil {
					return runtime.ListResult{}, errors.New("the first page was not printed before the second was asked for")
				}
				time.Sleep(10 * time.Millisecond)
			}
			return runtime.ListResult{Actors: []runtime.ActorInfo{
				{Ref: runtime.Ref{Name: "counter", Key: []string{"longer-key"}}, Partition: 1023, Owner: "node-1"},
			}}, nil
		}
		return runtime.ListResult{}, errors.New("unexpected page token " + opts.PageToken)
	}
	addr := servertest.Start(t, f, servertest.Config{})
	code := run(context.Background(), []string{"--addr", addr, "--timeout", "20s", "actors", "counter"}, strings.NewReader(""), out, io.Discard, func(string) string { return "" })
	got := out.written()
	want := "NAME     KEY  PARTITION  OWNER   CREATED\n" +
		"counter  a    7          node-1  -\n" +
		"counter  longer-key  1023       node-1  -\n"
	if code != 0 || got != want {
		t.Fatalf("exit %d, stdout:\n%s\nwant:\n%s", code, got, want)
	}

	out = &syncBuffer{}
	code = run(context.Background(), []string{"--addr", addr, "--timeout", "20s", "-o", "json", "actors", "counter"}, strings.NewReader(""), out, io.Discard, func(string) string { return "" })
	var actors []client.ActorInfo
	if err := json.Unmarshal([]byte(out.written()), &actors); code != 0 || err != nil || len(actors) != 2 || actors[1].Key[0] != "longer-key" {
		t.Fatalf("-o json: exit %d, %v, stdout %q", code, err, out.written())
	}
}

// written returns all that was written to s so far.
func (s *syncBuffer) written() string {
	str, _ := s.since(0)
	return str
}
