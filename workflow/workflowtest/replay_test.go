package workflowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type tally struct {
	N int `json:"n"`
}

var replayT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// export runs fn on a fresh Host until it first waits, and exports the
// history it recorded as a node would.
func export(t testing.TB, fn func(*workflow.Ctx[tally]) error) *workflow.HistoryExport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h := workflowtest.NewHost(tally{}, workflowtest.NewClock(replayT0))
	h.Drive(ctx, fn, workflowtest.DriveOptions{Stop: func(workflow.Wake) bool { return true }})
	if ctx.Err() != nil {
		t.Fatal("the workflow did not reach its wait")
	}
	x := &workflow.HistoryExport{Format: workflow.HistoryExportFormat, Actor: h.Name, Key: h.Key, WorkflowStatus: "sleeping", ExportedAt: h.Clock.Now()}
	for _, e := range h.History() {
		b, err := workflow.MarshalEntry(&e)
		if err != nil {
			t.Fatal(err)
		}
		x.Entries = append(x.Entries, b)
	}
	// As a file would: the document decodes back to what it was.
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatal(err)
	}
	x, err = workflow.DecodeHistoryExport(b)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func replay(t *testing.T, x *workflow.HistoryExport, fn func(*workflow.Ctx[tally]) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := workflowtest.Replay(ctx, x, fn)
	if ctx.Err() != nil {
		t.Fatalf("Replay did not end: %v", err)
	}
	return err
}

func count(s *workflow.StepCtx[tally]) error { s.State.N++; return nil }

// v1 is the code runs in flight were started with: they sleep at "wait".
func v1(c *workflow.Ctx[tally]) error {
	if err := c.Step("a", count); err != nil {
		return err
	}
	if err := c.Sleep("wait", time.Hour); err != nil {
		return err
	}
	return c.Step("b", count)
}

// Replay of the code that recorded a history is nil; of code that renamed
// a recorded step, the node's *workflow.DivergenceError naming its path;
// of the rename gated with GetVersion, nil again (the run takes the old
// path).
func TestReplayFindsADivergenceAndAcceptsItsGate(t *testing.T) {
	x := export(t, v1)
	if err := replay(t, x, v1); err != nil {
		t.Fatalf("the recording code replays with %v, want nil", err)
	}
	renamed := func(c *workflow.Ctx[tally]) error {
		if err := c.Step("a2", count); err != nil {
			return err
		}
		return c.Sleep("wait", time.Hour)
	}
	var de *workflow.DivergenceError
	if err := replay(t, x, renamed); !errors.As(err, &de) || de.Path != "a" {
		t.Fatalf("a renamed step replays with %v, want a *workflow.DivergenceError at a", err)
	}
	gated := func(c *workflow.Ctx[tally]) error {
		v, err := c.GetVersion("rename-a", 2)
		if err != nil {
			return err
		}
		name := "a2"
		if v == 1 {
			name = "a"
		}
		if err := c.Step(name, count); err != nil {
			return err
		}
		return c.Sleep("wait", time.Hour)
	}
	if err := replay(t, x, gated); err != nil {
		t.Fatalf("the gated rename replays with %v, want nil", err)
	}
}

// A replay runs nothing the history does not hold: no step, Do step or
// rollback handler body past its end, none of those it holds either.
func TestReplayRunsNoBody(t *testing.T) {
	x := export(t, v1)
	var ran atomic.Int32
	body := func(s *workflow.StepCtx[tally]) error { ran.Add(1); return nil }
	fn := func(c *workflow.Ctx[tally]) error {
		if err := c.Step("a", body); err != nil {
			return err
		}
		if err := c.Sleep("wait", time.Hour); err != nil {
			return err
		}
		return c.Step("b", body)
	}
	if err := replay(t, x, fn); err != nil {
		t.Fatal(err)
	}
	// The same history read past its sleep's end: "b" comes next.
	x.ExportedAt = x.ExportedAt.Add(2 * time.Hour)
	do := func(c *workflow.Ctx[tally]) error {
		if err := c.Step("a", body); err != nil {
			return err
		}
		if err := c.Sleep("wait", time.Hour); err != nil {
			return err
		}
		if _, err := workflow.Do(c, "b", func(*workflow.DoCtx) (int, error) { ran.Add(1); return 1, nil }); err != nil {
			return err
		}
		return c.Step("c", body)
	}
	if err := replay(t, x, do); err != nil {
		t.Fatal(err)
	}
	if err := replay(t, x, fn); err != nil {
		t.Fatal(err)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d bodies ran in replays", n)
	}
}

// A divergence in one branch of a join is found whatever the other
// branches do: one that reaches the end of its history first (a new step
// after its sleep) waits there for the others rather than end the replay.
func TestReplayChecksEveryJoinBranch(t *testing.T) {
	rec := func(second string) func(*workflow.Ctx[tally]) error {
		return func(c *workflow.Ctx[tally]) error {
			_, err := workflow.Join(c, "par", workflow.Branches[tally, int]{
				"fast": func(c *workflow.Ctx[tally]) (int, error) {
					if err := c.Sleep("nap", time.Minute); err != nil {
						return 0, err
					}
					return 0, c.Step("x", count)
				},
				"slow": func(c *workflow.Ctx[tally]) (int, error) {
					for _, name := range []string{"y1", "y2", "y3", second} {
						if err := c.Step(name, count); err != nil {
							return 0, err
						}
					}
					return 0, c.Sleep("long", time.Hour)
				},
			})
			return err
		}
	}
	x := export(t, rec("y4"))
	// Past the nap: branch fast goes on to "x", which is not recorded.
	x.ExportedAt = x.ExportedAt.Add(2 * time.Minute)
	for range 20 {
		var de *workflow.DivergenceError
		if err := replay(t, x, rec("y4b")); !errors.As(err, &de) || !strings.HasPrefix(de.Path, "par/slow/") {
			t.Fatalf("a step renamed in a join branch replays with %v, want a divergence in par/slow", err)
		}
	}
	if err := replay(t, x, rec("y4")); err != nil {
		t.Fatal(err)
	}
}

// The export of a run that failed replays to its recorded failure, as the
// node's run does when it runs again, and not to where a compensation
// left to run would stop it: a replay runs none.
func TestReplayOfAFailedRunReturnsItsFailure(t *testing.T) {
	var undone atomic.Int32
	fn := func(c *workflow.Ctx[tally]) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		_, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "a"}, func(s *workflow.StepCtx[tally]) (int, error) { return 1, count(s) },
			func(*workflow.StepCtx[tally], int) error { undone.Add(1); return nil })
		if err != nil {
			return err
		}
		return c.Step("b", func(*workflow.StepCtx[tally]) error { return workflow.Critical(errString("no")) })
	}
	x := export(t, fn)
	// As a node that stopped before the compensation of "a" committed
	// left it.
	h, err := x.History()
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range h {
		if e.Path == "a" {
			e.RollbackDone = false
			x.Entries[i], _ = workflow.MarshalEntry(&e)
		}
	}
	undone.Store(0)
	var se *workflow.StepError
	if err := replay(t, x, fn); !errors.As(err, &se) || se.Path != "b" {
		t.Fatalf("a failed run replays with %v, want its *workflow.StepError at b", err)
	}
	if n := undone.Load(); n != 0 {
		t.Fatalf("the replay ran %d compensations", n)
	}
}
