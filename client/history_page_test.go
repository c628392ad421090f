package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
	"github.com/rivet-go/rivet/workflow"
)

// big is an output 3000 entries of which do not fit in one answer.
var big = json.RawMessage(`"` + strings.Repeat("o", 3000) + `"`)

// offsetPages answers HistoryPage over n entries, its tokens their
// indexes.
func offsetPages(n int) func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
	return func(_ context.Context, _ runtime.Ref, opts runtime.HistoryOptions) (runtime.History, error) {
		start := 0
		if opts.PageToken != "" {
			i, _ := strconv.Atoi(opts.PageToken)
			start = i + 1
		}
		end := n
		if opts.Limit > 0 {
			end = min(n, start+opts.Limit)
		}
		h := runtime.History{WorkflowStatus: "sleeping"}
		for i := start; i < end; i++ {
			h.Entries = append(h.Entries, runtime.HistoryEntry{Path: fmt.Sprintf("step-%d", i), Kind: "step", Status: "completed", Output: big})
			if opts.Limit > 0 { // as runtime.Host.HistoryPage
				h.PageTokens = append(h.PageTokens, strconv.Itoa(i))
			}
		}
		if end < n {
			h.NextPageToken = strconv.Itoa(end - 1)
		}
		return h, nil
	}
}

// History follows the pages of a history longer than one, and too large
// for one answer, to its last entry, outputs included; HistoryPage
// returns one.
func TestHistoryFollowsPages(t *testing.T) {
	f := servertest.NewFake()
	f.HistoryFunc = offsetPages(3000)
	c := newClient(t, servertest.Start(t, f, servertest.Config{}))
	h, err := c.Actor("counter", "k").History(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Entries) != 3000 || h.NextPageToken != "" || h.WorkflowStatus != "sleeping" {
		t.Fatalf("%d entries, next %q, status %q; want 3000, none, sleeping", len(h.Entries), h.NextPageToken, h.WorkflowStatus)
	}
	for i, e := range h.Entries {
		if e.Path != fmt.Sprintf("step-%d", i) || e.OutputOmitted || len(e.Output) != len(big) {
			t.Fatalf("entry %d is %s, output of %d bytes (omitted %v)", i, e.Path, len(e.Output), e.OutputOmitted)
		}
	}
	p, err := c.Actor("counter", "k").HistoryPage(ctx(t), client.HistoryOptions{Limit: 10, PageToken: "19"})
	if err != nil || len(p.Entries) != 10 || p.Entries[0].Path != "step-20" || p.NextPageToken != "29" {
		t.Fatalf("a page: %+v, %v", p, err)
	}
}

// oldNode answers a first page as a node that pages would, then the
// whole history as a node from before History paged does, whatever the
// request: the node that owns the actor changed in a rolling upgrade.
type oldNode struct {
	rivetv1.UnimplementedActorServiceServer
}

func (oldNode) History(_ context.Context, req *rivetv1.HistoryRequest) (*rivetv1.HistoryResponse, error) {
	resp := &rivetv1.HistoryResponse{WorkflowStatus: "sleeping"}
	n := 5
	if req.GetPageToken() == "" {
		n, resp.NextPageToken, resp.Paged = 2, "1", true
	}
	for i := range n {
		resp.Entries = append(resp.Entries, &rivetv1.HistoryEntry{Path: fmt.Sprintf("step-%d", i), Kind: "step", Status: "completed"})
	}
	return resp, nil
}

// A page answered by a node from before History paged is the whole
// history: History returns it as it is, not after the pages before it.
func TestHistoryFromANodeThatDoesNotPageIsWhole(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rivetv1.RegisterActorServiceServer(srv, oldNode{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(l) })
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	h, err := newClient(t, l.Addr().String()).Actor("counter", "k").History(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Entries) != 5 || h.Entries[0].Path != "step-0" || h.Entries[4].Path != "step-4" {
		t.Fatalf("history of %d entries: %+v; want step-0 to step-4, once each", len(h.Entries), h.Entries)
	}
}

// A node whose page does not advance (it answers the token it was asked
// with again, or a page with no entry and a token) fails History at once:
// it does not follow the same page until the caller's deadline, adding
// its entries again each time (for ever without a deadline).
func TestHistoryFailsOnAPageThatDoesNotAdvance(t *testing.T) {
	for _, empty := range []bool{false, true} {
		var pages sync.Mutex
		asked := 0
		f := servertest.NewFake()
		f.HistoryFunc = func(_ context.Context, _ runtime.Ref, opts runtime.HistoryOptions) (runtime.History, error) {
			pages.Lock()
			asked++
			pages.Unlock()
			h := runtime.History{WorkflowStatus: "sleeping", NextPageToken: "7"}
			if !empty {
				h.Entries = []runtime.HistoryEntry{{Path: "step-7", Kind: "step", Status: "completed"}}
				h.PageTokens = []string{"7"}
			}
			if opts.PageToken == "" && !empty {
				h.Entries[0].Path, h.PageTokens[0], h.NextPageToken = "step-6", "6", "6"
			}
			return h, nil
		}
		c := newClient(t, servertest.Start(t, f, servertest.Config{}))
		cctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
		_, err := c.Actor("counter", "k").History(cctx)
		cancel()
		pages.Lock()
		n := asked
		pages.Unlock()
		if !errors.Is(err, rivet.ErrInternal) || !strings.Contains(err.Error(), "does not advance") || n > 3 {
			t.Fatalf("empty pages %v: History after %d pages: %v, want ErrInternal: the page does not advance", empty, n, err)
		}
	}
}

// ListAll likewise fails on a page that answers the token it was asked
// with again, rather than ask for it until the caller's deadline.
func TestListAllFailsOnAPageThatDoesNotAdvance(t *testing.T) {
	var pages sync.Mutex
	asked := 0
	f := servertest.NewFake()
	f.ListFunc = func(_ context.Context, opts runtime.ListOptions) (runtime.ListResult, error) {
		pages.Lock()
		asked++
		pages.Unlock()
		return runtime.ListResult{NextPageToken: "same"}, nil
	}
	c := newClient(t, servertest.Start(t, f, servertest.Config{}))
	cctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	_, err := c.ListAll(cctx, "counter")
	cancel()
	pages.Lock()
	n := asked
	pages.Unlock()
	if !errors.Is(err, rivet.ErrInternal) || !strings.Contains(err.Error(), "does not advance") || n > 3 {
		t.Fatalf("ListAll after %d pages: %v, want ErrInternal: the page does not advance", n, err)
	}
}

// rawPages answers HistoryPage as offsetPages does, each entry with its
// record when asked for raw entries (as runtime.Host.HistoryPage).
func rawPages(n int) func(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
	pages := offsetPages(n)
	return func(ctx context.Context, ref runtime.Ref, opts runtime.HistoryOptions) (runtime.History, error) {
		h, err := pages(ctx, ref, opts)
		for i := range h.Entries {
			if e := &h.Entries[i]; opts.Raw {
				e.Entry = json.RawMessage(fmt.Sprintf(`{"path":%q,"kind":"step","status":"completed","output":%s}`, e.Path, big))
				e.Output = nil
			}
		}
		return h, err
	}
}

// ExportHistory follows the pages of a history too large for one answer
// to its last entry, each entry whole as the engine records it, and the
// export decodes as one.
func TestExportHistoryFollowsPagesWhole(t *testing.T) {
	f := servertest.NewFake()
	f.HistoryFunc = rawPages(3000)
	c := newClient(t, servertest.Start(t, f, servertest.Config{}))
	x, err := c.Actor("counter", "k").ExportHistory(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if x.Actor != "counter" || len(x.Key) != 1 || x.Key[0] != "k" || x.WorkflowStatus != "sleeping" || x.ExportedAt.IsZero() || len(x.Entries) != 3000 {
		t.Fatalf("export of %s %v, status %q at %v, %d entries; want counter [k], sleeping, now, 3000", x.Actor, x.Key, x.WorkflowStatus, x.ExportedAt, len(x.Entries))
	}
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	x, err = workflow.DecodeHistoryExport(b)
	if err != nil {
		t.Fatal(err)
	}
	h, err := x.History()
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range h {
		if e.Path != fmt.Sprintf("step-%d", i) || string(e.Output) != string(big) {
			t.Fatalf("entry %d is %s with an output of %d bytes", i, e.Path, len(e.Output))
		}
	}
}

// A node from before history export ignores the request for raw entries
// (oldNode's first page: paged, without them): ExportHistory says so
// (ErrFailedPrecondition) rather than export a history without its
// records, or none.
func TestExportHistoryFromANodeBeforeExportFails(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rivetv1.RegisterActorServiceServer(srv, oldNode{})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(l) })
	t.Cleanup(func() { srv.Stop(); wg.Wait() })
	x, err := newClient(t, l.Addr().String()).Actor("counter", "k").ExportHistory(ctx(t))
	if !errors.Is(err, rivet.ErrFailedPrecondition) || !strings.Contains(err.Error(), "exports no raw history") {
		t.Fatalf("export from a node before export: %+v, %v; want ErrFailedPrecondition: it exports no raw history", x, err)
	}
}
