package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// notesState is the state of the notes workflows below: the notes handled,
// in order, and which branch the race went to.
type notesState struct {
	Notes  []string `json:"notes"`
	Status string   `json:"status"`
}

type notesCtx = workflow.Ctx[notesState]

// notesRace is a Temporal-style "update handler while a timer runs" (a
// user trial's): a race of a timer, which sleeps 10 s, against a loop
// that takes notes, handles each in a step (after handle, if set: a
// handling that takes workflow time) and completes it. Then the winner
// is recorded.
func notesRace(handle func(c *notesCtx, i int) error) func(c *notesCtx) error {
	return func(c *notesCtx) error {
		winner, _, err := workflow.Race(c, "ship-wait", []workflow.RaceBranch[notesState, bool]{
			{Name: "timer", Run: func(b *notesCtx) (bool, error) { return true, b.Sleep("t", 10*time.Second) }},
			{Name: "notes", Run: func(b *notesCtx) (bool, error) {
				for i := range 100 {
					m, err := workflow.Next[string](b, fmt.Sprintf("note-%d", i), workflow.NextOptions{Names: []string{"note"}})
					if err != nil {
						return false, err
					}
					if handle != nil {
						if err := handle(b, i); err != nil {
							return false, err
						}
					}
					if err := b.Step(fmt.Sprintf("add-note-%d", i), func(s *workflow.StepCtx[notesState]) error {
						s.State.Notes = append(s.State.Notes, m.Body)
						return nil
					}); err != nil {
						return false, err
					}
					if err := m.Complete("noted"); err != nil {
						return false, err
					}
				}
				return false, nil
			}},
		})
		if err != nil {
			return err
		}
		return c.Step("ship", func(s *workflow.StepCtx[notesState]) error { s.State.Status = "shipped by " + winner; return nil })
	}
}

// A race branch that took messages and completed every one of them holds
// the race no more: a timer raced against a loop that takes notes and
// completes each wins when it runs out, and the loop, waiting for its next
// note, is cancelled. The notes it took are handled once and answered,
// never put back. (A user trial: once the loop took one note, the timer's
// finish never won, and the workflow waited on the note queue for good.)
func TestARaceBranchThatCompletedItsMessagesLetsAnEarlierFinisherWin(t *testing.T) {
	for _, tc := range []struct {
		name   string
		handle func(c *notesCtx, i int) error
	}{
		// The notes are handled at once, long before the timer runs out.
		{"handled before the timer", nil},
		// The first note is handled until 20 s: the timer finishes at
		// 10 s while the loop holds it, uncompleted, and waits; the
		// note's completion lets it win, at its time. The second note,
		// there all along, ranks at the loop's time, 20 s: it stays in
		// its queue for what comes next.
		{"handled after the timer", slowFirstNote},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(notesState{})
			id1, ans1 := h.SendWait("note", "leave at door")
			id2, ans2 := h.SendWait("note", "ring twice")
			out := drive(t, h, notesRace(tc.handle))
			if out.Status != workflow.RunCompleted {
				t.Fatalf("%+v: want completed; history %s", out, h.HistoryJSON())
			}
			want := notesWanted(tc.handle)
			if s := h.State(); !reflect.DeepEqual(s, want) {
				t.Errorf("state %+v, want %+v", s, want)
			}
			answers := []<-chan json.RawMessage{ans1, ans2}[:len(want.Notes)]
			for _, a := range answers {
				select {
				case b := <-a:
					if string(b) != `"noted"` {
						t.Errorf("answer %s, want \"noted\"", b)
					}
				default:
					t.Errorf("a note's sender got no answer")
				}
			}
			wantDone := map[uint64]int{id1: 1, id2: 1}
			if len(want.Notes) == 1 {
				delete(wantDone, id2)
			}
			if c := h.Completions(); !reflect.DeepEqual(c, wantDone) {
				t.Errorf("completions %v, want %v", c, wantDone)
			}
			if q := h.Queue(); len(q) != 2-len(want.Notes) || len(q) > 0 && q[0].ID != id2 {
				t.Errorf("queue %v: want the notes not taken, none put back", q)
			}
		})
	}
}

// slowFirstNote handles the first note until 20 s, after the timer's end.
func slowFirstNote(c *notesCtx, i int) error {
	if i > 0 {
		return nil
	}
	return c.Sleep("handling", 20*time.Second)
}

// notesWanted is the end state of notesRace(handle) with two notes queued.
func notesWanted(handle func(c *notesCtx, i int) error) notesState {
	if handle == nil {
		return notesState{Notes: []string{"leave at door", "ring twice"}, Status: "shipped by timer"}
	}
	return notesState{Notes: []string{"leave at door"}, Status: "shipped by timer"}
}

// With no note, the timer wins (the trial's control).
func TestARaceOfATimerAndANotesLoopWithNoNoteGoesToTheTimer(t *testing.T) {
	h := newHost(notesState{})
	out := drive(t, h, notesRace(nil))
	if s := h.State(); out.Status != workflow.RunCompleted || s.Status != "shipped by timer" || len(s.Notes) != 0 {
		t.Fatalf("%+v, state %+v", out, s)
	}
}

// A branch that holds a message it has not completed still wins if it
// finishes, after another branch finished: the message a loser took and
// did not complete goes back to its queue, so the branch that took it must
// be the one that handles it. A plain Next's message never completed, and
// a Completable one before its Complete, hold the race so.
func TestARaceBranchHoldingAnUncompletedMessageStillWinsIfItFinishes(t *testing.T) {
	for _, tc := range []struct {
		name string
		// then is the branch's end, at 20 s, after the timer's (10 s).
		then func(c *notesCtx, m workflow.Message[string]) error
	}{
		{"never completed", func(c *notesCtx, m workflow.Message[string]) error { return nil }},
		{"completable, not completed when it finishes", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wf := func(c *notesCtx) error {
				winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[notesState, bool]{
					{Name: "timer", Run: func(b *notesCtx) (bool, error) { return true, b.Sleep("t", 10*time.Second) }},
					{Name: "note", Run: func(b *notesCtx) (bool, error) {
						m, err := workflow.Next[string](b, "note", workflow.NextOptions{Names: []string{"note"}, Completable: tc.then == nil})
						if err != nil {
							return false, err
						}
						if err := b.Sleep("handling", 20*time.Second); err != nil {
							return false, err
						}
						if err := b.Step("add", func(s *workflow.StepCtx[notesState]) error {
							s.State.Notes = append(s.State.Notes, m.Body)
							return nil
						}); err != nil {
							return false, err
						}
						if tc.then != nil {
							return false, tc.then(b, m)
						}
						return false, nil
					}},
				})
				if err != nil {
					return err
				}
				return c.Step("ship", func(s *workflow.StepCtx[notesState]) error { s.State.Status = "shipped by " + winner; return nil })
			}
			h := newHost(notesState{})
			h.Send("note", "leave at door")
			out := drive(t, h, wf)
			want := notesState{Notes: []string{"leave at door"}, Status: "shipped by note"}
			if s := h.State(); out.Status != workflow.RunCompleted || !reflect.DeepEqual(s, want) {
				t.Fatalf("%+v, state %+v, want %+v", out, s, want)
			}
			if q := h.Queue(); len(q) != 0 {
				t.Errorf("queue %v: the winner's message was put back", q)
			}
		})
	}
}

// A crash at any commit of those runs, before or after it applies (between
// a note's completion and the race's decision among them), replays to the
// same end: the timer wins, as it did live, and every note taken is
// handled and answered once, none put back.
func TestARaceBranchThatCompletedItsMessagesLosesAlikeOnReplay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		handle func(c *notesCtx, i int) error
	}{
		{"handled before the timer", nil},
		{"handled after the timer", slowFirstNote},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wf := notesRace(tc.handle)
			want := notesWanted(tc.handle)
			run := func(crash int, after bool) (*workflowtest.Host[notesState], workflow.Outcome) {
				h := newHost(notesState{})
				h.SendWait("note", "leave at door")
				h.SendWait("note", "ring twice")
				if crash > 0 {
					h.CrashAt(crash, after)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				out, _ := h.Drive(ctx, wf, workflowtest.DriveOptions{MaxActivations: 100})
				return h, out
			}
			check := func(what string, h *workflowtest.Host[notesState], out workflow.Outcome) {
				t.Helper()
				if s := h.State(); out.Status != workflow.RunCompleted || !reflect.DeepEqual(s, want) {
					t.Fatalf("%s: %+v, state %+v, want %+v; history %s", what, out, s, want, h.HistoryJSON())
				}
				wantDone := map[uint64]int{1: 1, 2: 1}
				if len(want.Notes) == 1 {
					delete(wantDone, 2)
				}
				if c := h.Completions(); !reflect.DeepEqual(c, wantDone) {
					t.Fatalf("%s: completions %v, want %v", what, c, wantDone)
				}
				if q := h.Queue(); len(q) != 2-len(want.Notes) {
					t.Fatalf("%s: queue %v: want the notes not taken, none put back", what, q)
				}
			}
			h, out := run(0, false)
			check("crash-free", h, out)
			commits := h.Commits()
			// Evicted at every wait until a time (the timer's, the
			// handling's): each activation replays what the last one
			// committed, the race undecided.
			h = newHost(notesState{})
			h.SendWait("note", "leave at door")
			h.SendWait("note", "ring twice")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, _ = h.Drive(ctx, wf, workflowtest.DriveOptions{MaxActivations: 100, Evict: func(workflow.Wake) bool { return true }})
			check("evicted at every timed wait", h, out)
			// Again and again: the branches' goroutines run in any order.
			for range 10 {
				for k := 1; k <= commits; k++ {
					for _, after := range []bool{false, true} {
						h, out := run(k, after)
						check(fmt.Sprintf("crash at commit %d of %d after=%v", k, commits, after), h, out)
					}
				}
			}
		})
	}
}
