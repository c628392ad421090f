package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/node/nodetest"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

func countStep(s *workflow.StepCtx[tally]) error { s.State.N++; return nil }

// jobV1 is the code deployed: its runs sleep an hour at "wait".
func jobV1(c *workflow.Ctx[tally]) error {
	if err := c.Step("a", countStep); err != nil {
		return err
	}
	if err := c.Sleep("wait", time.Hour); err != nil {
		return err
	}
	return c.Step("b", countStep)
}

// A history exported from a node replays in a test: the code that
// recorded it fits it; a change that renames a step before where the run
// sleeps is the *workflow.DivergenceError the node would fail the run
// with, naming the step; the same change gated with GetVersion fits.
func TestAnExportedHistoryReplaysChangedCode(t *testing.T) {
	c, _ := nodetest.Start(t, t.TempDir(), rivet.Actor[tally]{Name: "job", Run: jobV1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := c.Actor("job", "a")
	if _, err := h.Info(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		hist, err := h.NoCreate().History(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(hist.Entries); n == 2 && hist.Entries[1].Path == "wait" && hist.Entries[1].Status == "pending" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the workflow is %s with %+v 10 s after it began; want it asleep at wait", hist.WorkflowStatus, hist.Entries)
		}
		time.Sleep(20 * time.Millisecond)
	}
	x, err := h.NoCreate().ExportHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Through a file, as rivetctl history --raw writes it.
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	if x, err = workflow.DecodeHistoryExport(b); err != nil {
		t.Fatal(err)
	}
	if x.Actor != "job" || len(x.Key) != 1 || x.Key[0] != "a" || len(x.Entries) != 2 {
		t.Fatalf("export of %s %v with %d entries; want job [a], 2 entries:\n%s", x.Actor, x.Key, len(x.Entries), b)
	}

	if err := workflowtest.Replay(ctx, x, jobV1); err != nil {
		t.Fatalf("the code that recorded the history replays with %v, want nil", err)
	}
	renamed := func(c *workflow.Ctx[tally]) error {
		if err := c.Step("a-renamed", countStep); err != nil {
			return err
		}
		if err := c.Sleep("wait", time.Hour); err != nil {
			return err
		}
		return c.Step("b", countStep)
	}
	var de *workflow.DivergenceError
	if err := workflowtest.Replay(ctx, x, renamed); !errors.As(err, &de) || de.Path != "a" {
		t.Fatalf("a renamed step replays with %v, want a *workflow.DivergenceError at a", err)
	}
	gated := func(c *workflow.Ctx[tally]) error {
		v, err := c.GetVersion("rename-a", 2)
		if err != nil {
			return err
		}
		name := "a-renamed"
		if v == 1 {
			name = "a"
		}
		if err := c.Step(name, countStep); err != nil {
			return err
		}
		if err := c.Sleep("wait", time.Hour); err != nil {
			return err
		}
		return c.Step("b", countStep)
	}
	if err := workflowtest.Replay(ctx, x, gated); err != nil {
		t.Fatalf("the rename gated with GetVersion replays with %v, want nil", err)
	}
	// The replays changed nothing on the node.
	if in, err := h.NoCreate().Inspect(ctx); err != nil || string(in.State) != `{"n":1}` {
		t.Fatalf("state after the replays: %s, %v; want {\"n\":1}", in.State, err)
	}
}
