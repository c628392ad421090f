package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
	"github.com/rivet-go/rivet/workflow"
)

// history prints a history longer than a page, and too large for one
// answer (7.5 MB of outputs), whole, outputs included, in text and as one
// JSON document: it follows the pages.
func TestHistoryPrintsAHistoryOfManyPagesWhole(t *testing.T) {
	const n = 2500 // the node serves at most 1000 a page
	output := func(i int) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(`"%d %s"`, i, strings.Repeat("o", 3000)))
	}
	var pages atomic.Int32
	f := servertest.NewFake()
	f.HistoryFunc = func(_ context.Context, _ runtime.Ref, opts runtime.HistoryOptions) (runtime.History, error) {
		pages.Add(1)
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
			h.Entries = append(h.Entries, runtime.HistoryEntry{Path: fmt.Sprintf("step-%d", i), Kind: "step", Status: "completed", Attempts: 1, Output: output(i)})
			if opts.Limit > 0 { // as runtime.Host.HistoryPage
				h.PageTokens = append(h.PageTokens, strconv.Itoa(i))
			}
		}
		if end < n {
			h.NextPageToken = strconv.Itoa(end - 1)
		}
		return h, nil
	}
	addr := servertest.Start(t, f, servertest.Config{})

	r := rivetctl(t, addr, "history", "counter", "main")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != n+2 || lines[0] != "workflow  sleeping" || !strings.HasPrefix(lines[2], "step-0 ") || !strings.HasPrefix(lines[n+1], fmt.Sprintf("step-%d ", n-1)) {
		t.Fatalf("history: exit %d, %d lines, want %d:\n%.500s\n...%s", r.code, len(lines), n+2, r.stdout, r.stderr)
	}
	for i, l := range lines[2:] {
		if !strings.HasPrefix(l, fmt.Sprintf("step-%d ", i)) || !strings.Contains(l, fmt.Sprintf(`"%d ooo`, i)) {
			t.Fatalf("line %d: %q, want step-%d", i+2, l, i)
		}
	}
	if p := pages.Load(); p < 3 {
		t.Errorf("history asked for %d pages, want 3 at least", p)
	}

	r = rivetctl(t, addr, "-o", "json", "history", "counter", "main")
	var h client.History
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&h); r.code != 0 || err != nil || dec.More() {
		t.Fatalf("history -o json: exit %d, %v, more %v:\n%.500s", r.code, err, dec.More(), r.stdout)
	}
	if len(h.Entries) != n || h.NextPageToken != "" || h.Entries[n-1].Path != fmt.Sprintf("step-%d", n-1) || string(h.Entries[n-1].Output) != string(output(n-1)) || h.Entries[0].OutputOmitted {
		t.Fatalf("history -o json: %d entries, next %q", len(h.Entries), h.NextPageToken)
	}
}

// On a real node, history prints a workflow of 1,200 steps from a plain
// Go loop (two pages) whole, in the order they ran.
func TestHistoryOfALongWorkflowOnARealNode(t *testing.T) {
	const n = 1200
	reg, err := rivet.Setup(rivet.Actor[chargeState]{
		Name: "looper",
		Run: func(ctx *workflow.Ctx[chargeState]) error {
			for i := range n {
				if _, err := workflow.Step(ctx, fmt.Sprintf("step-%d", i), func(*workflow.StepCtx[chargeState]) (int, error) { return i, nil }); err != nil {
					return err
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := startNodeOf(t, reg)
	if r := rivetctl(t, addr, "create", "looper", "k"); r.code != 0 {
		t.Fatalf("create: %+v", r)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.HasPrefix(rivetctl(t, addr, "history", "looper", "k").stdout, "workflow  completed\n") {
		if time.Now().After(deadline) {
			t.Fatalf("the loop did not complete: %.300s", rivetctl(t, addr, "history", "looper", "k").stdout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var h client.History
	r := rivetctl(t, addr, "-o", "json", "history", "looper", "k")
	if err := json.Unmarshal([]byte(r.stdout), &h); err != nil || len(h.Entries) != n {
		t.Fatalf("history -o json: %d entries, %v (%.300s)", len(h.Entries), err, r.stderr)
	}
	for i, e := range h.Entries {
		if e.Path != fmt.Sprintf("step-%d", i) || string(e.Output) != strconv.Itoa(i) {
			t.Fatalf("entry %d: %s = %s", i, e.Path, e.Output)
		}
	}
}
