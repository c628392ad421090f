package runtime

import (
	"slices"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// An entry that records no time of its own (a version check, a rollback
// checkpoint, a removed marker) at the start of a try block, or after
// one, is placed by the block: a try block records no entry, so the
// entries before it in its scope are those before the block's place
// (Entry.TryPlaces), and those in an earlier block of the scope came
// before it too. A retry from before the block deletes the gate at its
// start, and one from inside the block deletes the gate after it: left,
// the replay reached a new step with a recorded gate not reached yet,
// and diverged.
func TestRetryAcrossATryBlockDeletesItsUntimedEntries(t *testing.T) {
	type st struct{}
	clock := workflowtest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	step := func(c *workflow.Ctx[st], name string) error {
		return c.Step(name, func(*workflow.StepCtx[st]) error { clock.Advance(time.Second); return nil })
	}
	gate := func(c *workflow.Ctx[st], name string) error {
		_, err := c.GetVersion(name, 1)
		return err
	}
	run := func(c *workflow.Ctx[st]) error {
		for _, n := range []string{"a", "b"} {
			if err := step(c, n); err != nil {
				return err
			}
		}
		if _, err := c.Try("t", func(c *workflow.Ctx[st]) error {
			if err := gate(c, "g"); err != nil {
				return err
			}
			return step(c, "s")
		}); err != nil {
			return err
		}
		if err := gate(c, "h"); err != nil {
			return err
		}
		if err := step(c, "c"); err != nil {
			return err
		}
		_, err := workflow.Next[int](c, "w")
		return err
	}
	for _, tc := range []struct {
		from string
		want []string
	}{
		{"b", []string{"b", "c", "h", "t/g", "t/s"}},
		{"t/s", []string{"c", "h", "t/s"}},
	} {
		h := workflowtest.NewHost(st{}, clock)
		if out := driveOut(t, h, run); out.Status != workflow.RunYielded {
			t.Fatalf("first run: %+v", out)
		}
		entries := h.History()
		trees, _, err := retryTrees(slices.Clone(entries), tc.from, "")
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(trees)
		if !slices.Equal(trees, tc.want) {
			t.Errorf("retry --from %s deletes %v, want %v", tc.from, trees, tc.want)
		}
		kept := slices.DeleteFunc(entries, func(e workflow.Entry) bool {
			return slices.ContainsFunc(trees, func(tr string) bool { return workflow.Under(e.Path, tr) })
		})
		h.SetHistory(kept)
		h.Send("q", 1)
		if out := driveOut(t, h, run); out.Status != workflow.RunCompleted {
			t.Fatalf("retried from %s: %+v", tc.from, out)
		}
	}
}
