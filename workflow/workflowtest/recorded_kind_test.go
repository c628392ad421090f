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

// codedError is an error type of the workflow code's own with a code,
// wrapping err (nil: nothing).
type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string     { return "coded " + e.code }
func (e *codedError) ErrorCode() string { return e.code }
func (e *codedError) Unwrap() error     { return e.err }

// A step's failure matches, as a *workflow.RecordedError, the rivet kind
// its error matched when it was recorded, in the run that records it and
// in the next, which reads it from the history: a call to an action the
// other actor does not have (the FakeClient answers it as a node does), a
// bare sentinel, a (group, code) no build lists (as the client decodes a
// newer node's answer: its kind from the status code), a broken
// connection's unavailable, and an error type of the code's own that
// wraps a sentinel; one that wraps nothing of rivet's matches no kind,
// whatever its code. Codes are the errors' own (none made up). An entry
// recorded before the kind was kept matches no kind, as then.
func TestRecordedErrorMatchesItsRivetKindLiveAndOnReplay(t *testing.T) {
	unlisted := &rivet.Error{Kind: rivet.ErrFailedPrecondition, Group: "actor", Code: "brand_new", Message: "a newer node's reason"}
	cases := []struct {
		step string
		err  func(s *workflow.StepCtx[struct{}]) error
		kind error // nil: none
		code string
	}{
		{"unknown-action", func(s *workflow.StepCtx[struct{}]) error {
			_, err := rivet.Call[int](s.Context(), s.Client().GetOrCreate("payments", "p"), "chrage")
			return err
		}, rivet.ErrUnknownAction, "unknown_action"},
		{"bare", func(*workflow.StepCtx[struct{}]) error {
			return fmt.Errorf("no order o-1: %w", rivet.ErrNotFound)
		}, rivet.ErrNotFound, ""},
		{"unlisted-pair", func(*workflow.StepCtx[struct{}]) error { return unlisted }, rivet.ErrFailedPrecondition, "brand_new"},
		{"broken-connection", func(*workflow.StepCtx[struct{}]) error {
			return &rivet.Error{Kind: rivet.ErrUnavailable, Message: "connection reset"}
		}, rivet.ErrUnavailable, ""},
		{"own-wrapping", func(*workflow.StepCtx[struct{}]) error {
			return &codedError{code: "no_stock", err: rivet.ErrQueueFull}
		}, rivet.ErrQueueFull, "no_stock"},
		{"own-alone", func(*workflow.StepCtx[struct{}]) error {
			return &codedError{code: "not_found"}
		}, nil, "not_found"},
	}
	// what describes how a failure fails its case, "" if it does not.
	what := func(i int, f *workflow.Failure) string {
		c := cases[i]
		if f == nil {
			return "no failure"
		}
		for _, k := range rivet.Kinds() {
			if errors.Is(f, k) != (k == c.kind) || errors.Is(f.Err, k) != (k == c.kind) {
				return fmt.Sprintf("errors.Is(%v) = %v", k, errors.Is(f, k))
			}
		}
		var code interface{ ErrorCode() string }
		if !errors.As(f.Err, &code) || code.ErrorCode() != c.code {
			got := "none"
			if code != nil {
				got = fmt.Sprintf("%q", code.ErrorCode())
			}
			return "code " + got
		}
		if rivet.OutcomeUnknown(f) || errors.Is(f, workflow.ErrTimeout) {
			return "outcome unknown or a timeout"
		}
		return ""
	}
	var runs [][]string
	bodies := 0
	wf := func(wc *workflow.Ctx[struct{}]) error {
		var seen []string
		for i, c := range cases {
			_, f, err := workflow.TryStepOpts(wc, workflow.StepOptions{Name: c.step, MaxRetries: workflow.NoRetries}, func(s *workflow.StepCtx[struct{}]) (int, error) {
				bodies++
				return 0, c.err(s)
			})
			if err != nil {
				return err
			}
			seen = append(seen, what(i, f))
		}
		runs = append(runs, seen)
		_, err := workflow.Next[struct{}](wc, "wait-go")
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
	check := func(when string) {
		t.Helper()
		for r, seen := range runs {
			for i, s := range seen {
				if s != "" {
					t.Errorf("%s, run %d of %d (the first is live): step %q: %s", when, r+1, len(runs), cases[i].step, s)
				}
			}
		}
	}
	// The first Drive ends with the run waiting for its message: the
	// second is a new run, which replays every failure.
	drive()
	h.Send("go", struct{}{})
	if out := drive(); out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %v (%v), want completed", out.Status, out.Err)
	}
	if bodies != len(cases) || len(runs) < 2 {
		t.Fatalf("%d bodies ran, %d runs; want each body once and a replay", bodies, len(runs))
	}
	check("recorded")

	// The same history as a build that did not keep the kind recorded it:
	// no kind (the codes are what those builds wrote too), and so no kind
	// matches, as then.
	hist := h.History()
	n := 0
	for i := range hist {
		if e := hist[i].Error; e != nil {
			n++
			if (e.RivetKind == "") != (e.Code == "not_found") {
				t.Fatalf("entry %q: kind %q", hist[i].Path, e.RivetKind)
			}
			e.RivetKind = ""
		}
	}
	if n != len(cases) {
		t.Fatalf("%d entries with an error, want %d", n, len(cases))
	}
	h.SetHistory(hist)
	runs = nil
	for i := range cases {
		cases[i].kind = nil
	}
	h.Send("go", struct{}{}) // unused: the replay ends at the completed receive
	drive()
	if bodies != len(cases) || len(runs) == 0 {
		t.Fatalf("%d bodies, %d runs: want a replay of the old entries", bodies, len(runs))
	}
	check("recorded without the kind")
}
