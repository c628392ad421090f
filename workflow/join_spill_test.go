package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/internal/hosthook"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type spillState struct {
	// Runs counts the committed runs of each branch's step.
	Runs  map[string]int `json:"runs"`
	Total int            `json:"total"`
}

// spillBranches is how many branches spillJoin joins, each of whose
// values is about spillSize bytes: together over MaxRidingBytes, so that
// the join's outputs are committed apart, in several entries.
const spillBranches, spillSize = 40, 4000

// spillJoin joins branches of one step each, sleeps (so that a later
// activation replays the settled join from its record), then sums the
// values the join returned.
func spillJoin(c *workflow.Ctx[spillState]) error {
	bs := workflow.Branches[spillState, string]{}
	for i := range spillBranches {
		name := fmt.Sprintf("b%02d", i)
		bs[name] = func(c *workflow.Ctx[spillState]) (string, error) {
			return workflow.Step(c, "make", func(s *workflow.StepCtx[spillState]) (string, error) {
				if s.State.Runs == nil {
					s.State.Runs = map[string]int{}
				}
				s.State.Runs[name]++
				return name + ":" + strings.Repeat("x", spillSize), nil
			})
		}
	}
	got, err := workflow.Join(c, "fan", bs)
	if err != nil {
		return err
	}
	if err := c.Sleep("pause", time.Second); err != nil {
		return err
	}
	return c.Step("sum", func(s *workflow.StepCtx[spillState]) error {
		if len(got) != spillBranches {
			return workflow.Critical(fmt.Errorf("join returned %d values", len(got)))
		}
		for n, v := range got {
			if !strings.HasPrefix(v, n+":") || len(v) != len(n)+1+spillSize {
				return workflow.Critical(fmt.Errorf("branch %s returned %.20q... (%d bytes)", n, v, len(v)))
			}
			s.State.Total += len(v)
		}
		return nil
	})
}

type spillResult struct {
	status  workflow.RunStatus
	err     string
	state   spillState
	history string
}

func spillRun(t *testing.T, crashes map[int]bool, evict func(workflow.Wake) bool) (spillResult, []workflow.Entry, int, int) {
	t.Helper()
	h := workflowtest.NewHost(spillState{}, workflowtest.NewClock(t0))
	hosthook.NoAttemptMarkers(h) // compared with the crash-free run (newHost)
	for n, after := range crashes {
		h.CrashAt(n, after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, activations := h.Drive(ctx, spillJoin, workflowtest.DriveOptions{Evict: evict})
	if ctx.Err() != nil {
		t.Fatalf("crashes %v: the workflow did not finish: %+v", crashes, out)
	}
	res := spillResult{status: out.Status, state: h.State(), history: h.HistoryJSON()}
	if out.Err != nil {
		res.err = out.Err.Error()
	}
	return res, h.History(), activations, h.Commits()
}

func compareSpill(t *testing.T, what string, want, got spillResult) {
	t.Helper()
	if got.status != want.status || got.err != want.err {
		t.Fatalf("%s: ended %v (%s), want %v (%s)", what, got.status, got.err, want.status, want.err)
	}
	gs, _ := json.Marshal(got.state)
	ws, _ := json.Marshal(want.state)
	if string(gs) != string(ws) {
		t.Fatalf("%s: state %s, want %s", what, gs, ws)
	}
	if got.history != want.history {
		t.Fatalf("%s: history differs:\n got %s\nwant %s", what, got.history, want.history)
	}
}

// A join whose branches' values are too large together to ride in one
// commit records them in entries of its own, committed before the join's
// record; a crash at any commit, before or after it applies (between
// those entries, before the record), and evictions at random, end the
// workflow as the crash-free run does: the same values, every step's
// effect once, the same history.
func TestAJoinOfLargeOutputsReplaysThroughACrashAtEveryCommit(t *testing.T) {
	base, hist, _, commits := spillRun(t, nil, nil)
	if base.status != workflow.RunCompleted {
		t.Fatalf("crash-free run: %v (%s)", base.status, base.err)
	}
	if want := spillBranches * (4 + spillSize); base.state.Total != want {
		t.Fatalf("crash-free run summed %d bytes, want %d", base.state.Total, want)
	}
	for n, runs := range base.state.Runs {
		if runs != 1 {
			t.Fatalf("crash-free run: branch %s's step ran %d times", n, runs)
		}
	}
	parts := 0
	for _, e := range hist {
		switch {
		case e.Path == "fan" && (e.Status != workflow.StatusCompleted || e.OutputParts < 2 || len(e.Branches) != spillBranches):
			t.Fatalf("join record: %s, %d outputs entries, %d branches", e.Status, e.OutputParts, len(e.Branches))
		case e.Path == "fan":
			for n, b := range e.Branches {
				if len(b.Output) > 0 {
					t.Fatalf("join record holds branch %s's value", n)
				}
			}
		case strings.HasPrefix(e.Path, "fan/~outputs/"):
			parts++
			if e.Kind != workflow.KindJoinOutputs {
				t.Fatalf("%s: kind %s", e.Path, e.Kind)
			}
		}
	}
	if parts < 2 {
		t.Fatalf("%d outputs entries in the history", parts)
	}
	crashed := 0
	for k := 1; k <= commits+2; k++ {
		for _, after := range []bool{false, true} {
			got, _, activations, _ := spillRun(t, map[int]bool{k: after}, nil)
			compareSpill(t, fmt.Sprintf("crash at commit %d (after=%v)", k, after), base, got)
			if activations > 1 {
				crashed++
			}
		}
	}
	if crashed < 2*commits {
		t.Fatalf("only %d of %d runs crashed", crashed, 2*commits)
	}
	for seed := range int64(20) {
		rng := rand.New(rand.NewSource(seed))
		crashes := map[int]bool{}
		for range 3 {
			crashes[1+rng.Intn(commits+4)] = rng.Intn(2) == 0
		}
		got, _, _, _ := spillRun(t, crashes, func(workflow.Wake) bool { return rng.Intn(2) == 0 })
		compareSpill(t, fmt.Sprintf("seed %d, crashes %v", seed, crashes), base, got)
	}
	t.Logf("%d commits crash-free; %d runs crashed at one of them: every run equal", commits, crashed)
}

// A join whose branch names alone are too many for its record fails as it
// opens, before any branch runs, with a *BranchLimitError naming the count
// and the limit.
func TestAJoinOfTooManyBranchesIsRefusedBeforeAnyRuns(t *testing.T) {
	const n = 60_000
	ran := 0
	h := workflowtest.NewHost(spillState{}, workflowtest.NewClock(t0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := h.Run(ctx, func(c *workflow.Ctx[spillState]) error {
		bs := workflow.Branches[spillState, int]{}
		for i := range n {
			bs[fmt.Sprintf("branch-%06d", i)] = func(*workflow.Ctx[spillState]) (int, error) { ran++; return i, nil }
		}
		_, err := workflow.Join(c, "fan", bs)
		return err
	})
	var le *workflow.BranchLimitError
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &le) || !errors.Is(out.Err, workflow.ErrInvalid) {
		t.Fatalf("run %v (%v), want failed with a *BranchLimitError", out.Status, out.Err)
	}
	if le.Branches != n || le.Limit != workflow.MaxBranchBytes || le.Bytes <= le.Limit || !strings.Contains(le.Error(), "60000 branches") {
		t.Fatalf("error %+v: %v", le, le)
	}
	if ran != 0 || len(h.History()) != 0 {
		t.Fatalf("%d branches ran, %d entries recorded", ran, len(h.History()))
	}
}

// A settled join whose outputs entries lack a completed branch's value
// (a store that lost it, a tampered history) fails its replay with a
// *DivergenceError naming the branch, rather than hand the code a zero
// value for it.
func TestAJoinWhoseOutputsEntriesLackABranchFailsItsReplay(t *testing.T) {
	h := workflowtest.NewHost(spillState{}, workflowtest.NewClock(t0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, _ := h.Drive(ctx, spillJoin, workflowtest.DriveOptions{}); out.Status != workflow.RunCompleted {
		t.Fatalf("first run: %v (%v)", out.Status, out.Err)
	}
	hist := h.History()
	lost := false
	for i, e := range hist {
		if _, ok := e.Branches["b07"]; ok && e.Kind == workflow.KindJoinOutputs {
			delete(hist[i].Branches, "b07")
			lost = true
		}
	}
	if !lost {
		t.Fatal("no outputs entry holds branch b07's value")
	}
	h.SetHistory(hist)
	out := h.Run(ctx, spillJoin)
	var de *workflow.DivergenceError
	if !errors.As(out.Err, &de) || de.Path != "fan/b07" {
		t.Fatalf("replay without b07's value: %v (%v), want a *DivergenceError at fan/b07", out.Status, out.Err)
	}
}
