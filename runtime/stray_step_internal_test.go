package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// A step called on the workflow's Ctx from a goroutine the workflow code
// started (misuse), still running when the workflow's function returns
// with an error, must not commit after the run ended: the run fails with
// ErrInvalid naming it, and the step's write (its entry, its change to the
// state) is refused, with ErrInvalid, rather than landing in the history
// of a workflow recorded failed, where a retry would replay it. Nor does
// it outlive the run: it has returned by the time the failure is recorded.
func TestAStepFromAGoroutineDoesNotCommitAfterTheRunFailed(t *testing.T) {
	type st struct{ N int }
	strayErr := make(chan error, 1)
	a := rivet.Actor[st]{
		Name: "strayer",
		Run: func(c *workflow.Ctx[st]) error {
			started := make(chan struct{})
			go func() {
				_, err := workflow.Step(c, "stray", func(s *workflow.StepCtx[st]) (int, error) {
					close(started)
					<-s.Context().Done() // the run ended
					s.State.N = 7
					return 1, nil
				})
				strayErr <- err
			}()
			<-started
			return errors.New("the workflow's own failure")
		},
	}
	reg, err := rivet.Setup(a)
	if err != nil {
		t.Fatal(err)
	}
	h := memHost(t, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := Ref{Name: "strayer", Key: []string{"k"}}
	if _, _, err := h.GetOrCreate(ctx, ref, nil); err != nil {
		t.Fatal(err)
	}
	var hist History
	for hist.WorkflowStatus != WorkflowFailed {
		if ctx.Err() != nil {
			t.Fatalf("the workflow did not fail: %+v", hist)
		}
		time.Sleep(10 * time.Millisecond)
		if hist, err = h.History(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	var serr error
	select {
	case serr = <-strayErr:
	default:
		t.Error("the stray step still ran when the run was recorded failed")
		select {
		case serr = <-strayErr:
		case <-ctx.Done():
			t.Fatal("the stray step never returned")
		}
	}
	if !errors.Is(serr, workflow.ErrInvalid) {
		t.Errorf("the stray step returned %v, want ErrInvalid", serr)
	}
	if !strings.Contains(hist.WorkflowError, "invalid use") || !strings.Contains(hist.WorkflowError, `"stray"`) {
		t.Errorf("workflow error %q should be ErrInvalid naming the step still running", hist.WorkflowError)
	}
	// Whatever the stray step committed is durable by now (History
	// settles the actor's writes).
	if hist, err = h.History(ctx, ref); err != nil {
		t.Fatal(err)
	}
	for _, e := range hist.Entries {
		if e.Path == "stray" {
			t.Errorf("the stray step committed its entry after the run ended: %+v", e)
		}
	}
	ins, err := h.Inspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ins.State), "7") {
		t.Errorf("the stray step committed its state change after the run ended: %s", ins.State)
	}
}
