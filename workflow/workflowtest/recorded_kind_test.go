package workflowtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// A step's failure caused by a call to an action the other actor does not
// have (the FakeClient answers it as a node does), or by a bare rivet
// sentinel, matches that kind with errors.Is as a *workflow.RecordedError,
// in the run that records it and in the next, which reads it from the
// history; an entry recorded before groups were kept (no group) matches no
// kind, as then, and keeps its code.
func TestRecordedErrorMatchesItsRivetKindLiveAndOnReplay(t *testing.T) {
	type obs struct{ unknown, notFound, code bool }
	var runs []obs
	bodies := 0
	wf := func(wc *workflow.Ctx[struct{}]) error {
		opts := func(name string) workflow.StepOptions {
			return workflow.StepOptions{Name: name, MaxRetries: workflow.NoRetries}
		}
		_, unknown, err := workflow.TryStepOpts(wc, opts("call"), func(s *workflow.StepCtx[struct{}]) (int, error) {
			bodies++
			return rivet.Call[int](s.Context(), s.Client().GetOrCreate("payments", "p"), "chrage")
		})
		if err != nil {
			return err
		}
		_, bare, err := workflow.TryStepOpts(wc, opts("bare"), func(s *workflow.StepCtx[struct{}]) (int, error) {
			bodies++
			return 0, fmt.Errorf("no order o-1: %w", rivet.ErrNotFound)
		})
		if err != nil {
			return err
		}
		var code interface{ ErrorCode() string }
		runs = append(runs, obs{
			unknown:  unknown != nil && errors.Is(unknown, rivet.ErrUnknownAction) && !errors.Is(unknown, rivet.ErrInternal),
			notFound: bare != nil && errors.Is(bare, rivet.ErrNotFound) && !errors.Is(bare, rivet.ErrUnknownAction),
			code:     unknown != nil && errors.As(unknown, &code) && code.ErrorCode() == "unknown_action",
		})
		_, err = workflow.Next[struct{}](wc, "wait-go")
		return err
	}
	h := workflowtest.NewHost(struct{}{}, workflowtest.NewClock(time.Unix(1700000000, 0)))
	fc := workflowtest.NewFakeClient()
	// payments is known, with a charge action the workflow misspells.
	workflowtest.HandleAction(fc, "payments", "charge", func(ctx context.Context, key []string, cents int) (int, error) { return cents, nil })
	h.Client = fc
	drive := func() workflow.Outcome {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{MaxActivations: 20})
		return out
	}
	// The first Drive ends with the run waiting for its message: the
	// second is a new run, which replays both failures.
	drive()
	h.Send("go", struct{}{})
	if out := drive(); out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %v (%v), want completed", out.Status, out.Err)
	}
	if bodies != 2 || len(runs) < 2 {
		t.Fatalf("%d bodies ran, %d runs; want each body once and a replay", bodies, len(runs))
	}
	for i, o := range runs {
		if o != (obs{true, true, true}) {
			t.Fatalf("run %d (of %d; the first is live): %+v, want every kind matched", i+1, len(runs), o)
		}
	}

	// The same history with its groups dropped, as recorded before they
	// were kept: codes still read, kinds no longer match.
	hist := h.History()
	for i := range hist {
		if hist[i].Error != nil {
			if hist[i].Error.Group == "" {
				t.Fatalf("entry %q recorded without a group: %+v", hist[i].Path, hist[i].Error)
			}
			hist[i].Error.Group = ""
		}
	}
	h.SetHistory(hist)
	runs = nil
	h.Send("go", struct{}{}) // unused: the replay ends at the completed receive
	drive()
	if bodies != 2 || len(runs) == 0 || runs[0] != (obs{false, false, true}) {
		t.Fatalf("%d bodies, runs %+v: an entry without a group matches no kind and keeps its code", bodies, runs)
	}
}
