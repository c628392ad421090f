package seed_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rivet-go/rivet/examples/seed"
	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// The reminder workflow tested without a node, as a user tests their own
// (README, "Testing actors"): workflowtest.Host runs it against an
// in-memory actor, jumps its clock over the sleeps, and crashes it before
// and after each of its commits in turn, a new activation replaying the
// history each time. Every reminder fires once, in time order, whatever
// the crash. (A crash that loses the record of a run's first step counts
// the attempt, as a node does: the step runs again as attempt 2, after its
// backoff.)
func TestReminderWorkflowFiresOnceWhateverTheCrash(t *testing.T) {
	start := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	run := func(crashAt int, after bool) (*workflowtest.Host[seed.ReminderState], workflow.Outcome) {
		h := workflowtest.NewHost(seed.ReminderActor.State, workflowtest.NewClock(start))
		h.Name, h.Queues = seed.ReminderActor.Name, []string{"reminders"}
		if crashAt > 0 {
			h.CrashAt(crashAt, after)
		}
		h.Send("reminders", seed.Reminder{Text: "lunch", At: start.Add(3 * time.Hour).UnixMilli()})
		h.Send("reminders", seed.Reminder{Text: "standup", At: start.Add(time.Hour).UnixMilli()})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, _ := h.Drive(ctx, seed.ReminderActor.Run, workflowtest.DriveOptions{})
		return h, out
	}
	// Each reminder is slept for in the order it came: lunch at 12:00,
	// then standup, whose time has passed by then, at once.
	want := []string{"lunch", "standup"}
	check := func(what string, h *workflowtest.Host[seed.ReminderState], out workflow.Outcome) {
		t.Helper()
		// The loop never ends: Drive returns once it waits for a
		// reminder nobody sent.
		if !errors.Is(out.Err, workflowtest.ErrWaitsForMessages) {
			t.Fatalf("%s: outcome %+v (%v), want the run waiting for the next reminder", what, out, out.Err)
		}
		if got := h.State().Fired; !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: fired %v, want %v", what, got, want)
		}
		// 12:00, lunch's time; or the first retry's backoff (200 ms)
		// later if the crash lost the record of the step that fired
		// lunch: as on a node, the next run counts that attempt (its
		// marker) and runs the step again after its backoff. (A lost
		// record of standup's step, not the first body of its run, is
		// not counted: it runs again as attempt 1, at once.)
		wantAt := start.Add(3 * time.Hour)
		for _, e := range h.History() {
			if e.Attempts > 1 {
				wantAt = wantAt.Add(workflow.Backoff(1, workflow.DefaultRetryBackoffBase, workflow.DefaultRetryBackoffMax))
			}
		}
		if now := h.Clock.Now(); !now.Equal(wantAt) {
			t.Fatalf("%s: the clock at %v, want %v (12:00, lunch's time, or a retry's backoff after)", what, now, wantAt)
		}
	}
	ref, out := run(0, false)
	check("without a crash", ref, out)
	for n := 1; n <= ref.Commits(); n++ {
		for _, after := range []bool{false, true} {
			h, out := run(n, after)
			check(fmt.Sprintf("a crash at commit %d (after it applied: %v)", n, after), h, out)
		}
	}
}
