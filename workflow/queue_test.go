package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

type job struct {
	N int `json:"n"`
}

// recv records the ids and bodies of messages in the state, in a step, so
// that the state shows which messages were processed and how often.
func recv(c *logCtx, name string, ms ...workflow.Message[job]) error {
	return c.Step(name, func(s *logStep) error {
		for _, m := range ms {
			s.State.Log = append(s.State.Log, fmt.Sprintf("%s:%d:%d", m.Name, m.ID, m.Body.N))
		}
		return nil
	})
}

func TestNextFiltersQueuesFIFO(t *testing.T) {
	h := newHost(log{})
	h.Send("q1", job{1})
	h.Send("q2", job{2})
	h.Send("q1", job{3})
	out := drive(t, h, func(c *logCtx) error {
		for i, names := range [][]string{{"q1"}, {"q1"}, nil} {
			m, err := workflow.Next[job](c, fmt.Sprint("next-", i), workflow.NextOptions{Names: names})
			if err != nil {
				return err
			}
			if err := recv(c, fmt.Sprint("rec-", i), m); err != nil {
				return err
			}
		}
		return nil
	})
	if want := []string{"q1:1:1", "q1:3:3", "q2:2:2"}; out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, want) {
		t.Fatalf("outcome %+v log %v", out, h.State().Log)
	}
	if len(h.Queue()) != 0 {
		t.Fatalf("queue %v", h.Queue())
	}
}

func TestNextBatchTakesWhatIsThere(t *testing.T) {
	h := newHost(log{})
	for i := 1; i <= 5; i++ {
		h.Send("q", job{i})
	}
	out := drive(t, h, func(c *logCtx) error {
		for i := 0; i < 2; i++ {
			ms, err := workflow.NextBatch[job](c, fmt.Sprint("batch-", i), workflow.NextOptions{Count: 3})
			if err != nil {
				return err
			}
			if err := recv(c, fmt.Sprint("rec-", i), ms...); err != nil {
				return err
			}
		}
		return nil
	})
	if want := []string{"q:1:1", "q:2:2", "q:3:3", "q:4:4", "q:5:5"}; out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, want) {
		t.Fatalf("outcome %+v log %v", out, h.State().Log)
	}
	if e := entryAt(t, h.History(), "batch-1"); len(e.Messages) != 2 {
		t.Fatalf("second batch %+v", e)
	}
}

func TestReceiveTimeouts(t *testing.T) {
	h := newHost(log{})
	var nextErr error
	wf := func(c *logCtx) error {
		ms, err := workflow.NextBatch[job](c, "batch", workflow.NextOptions{Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		_, nextErr = workflow.Next[job](c, "one", workflow.NextOptions{Timeout: time.Minute})
		return c.Step("done", func(s *logStep) error {
			s.State.N = len(ms)
			s.State.Times = append(s.State.Times, h.Clock.Now())
			return nil
		})
	}
	// Evicted while waiting: the deadline was recorded at the first call.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-h.Wakes(); cancel() }()
	out := h.Run(ctx, wf)
	cancel()
	if out.Status != workflow.RunYielded || !out.Wake.At.Equal(t0.Add(30*time.Second)) || !out.Wake.AnyQueue {
		t.Fatalf("yield %+v", out)
	}
	h.Clock.Advance(10 * time.Second)
	out = drive(t, h, wf)
	if out.Status != workflow.RunCompleted || h.State().N != 0 {
		t.Fatalf("outcome %+v", out)
	}
	if !errors.Is(nextErr, workflow.ErrTimeout) {
		t.Fatalf("Next timed out with %v", nextErr)
	}
	// 30 s from the first call, then a minute.
	if want := t0.Add(90 * time.Second); !h.State().Times[0].Equal(want) {
		t.Fatalf("done at %v, want %v", h.State().Times[0].Sub(t0), want.Sub(t0))
	}
}

// TestNextWakesOnMessage: a blocked receive reports what it waits for and
// wakes when a matching message is sent.
func TestNextWakesOnMessage(t *testing.T) {
	h := newHost(log{})
	wf := func(c *logCtx) error {
		m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"jobs"}})
		if err != nil {
			return err
		}
		return recv(c, "rec", m)
	}
	done := make(chan workflow.Outcome, 1)
	go func() { done <- h.Run(context.Background(), wf) }()
	w := <-h.Wakes()
	if !reflect.DeepEqual(w.Queues, []string{"jobs"}) || w.AnyQueue || !w.At.IsZero() {
		t.Fatalf("waiting for %+v", w)
	}
	h.Send("other", job{1}) // wakes it, but does not match
	h.Send("jobs", job{2})
	if out := <-done; out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"jobs:2:2"}) {
		t.Fatalf("outcome %+v log %v", out, h.State().Log)
	}
	if q := h.Queue(); len(q) != 1 || q[0].Queue != "other" {
		t.Fatalf("queue %v", q)
	}
}

// TestReceiveIsAtomicWithHistory crashes the receive's commit, before and
// after it applies: the message is either still queued or recorded, and is
// processed exactly once.
func TestReceiveIsAtomicWithHistory(t *testing.T) {
	for _, after := range []bool{false, true} {
		h := newHost(log{})
		h.Send("q", job{7})
		h.CrashAt(1, after)
		out := drive(t, h, func(c *logCtx) error {
			m, err := workflow.Next[job](c, "wait")
			if err != nil {
				return err
			}
			return recv(c, "rec", m)
		})
		if out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"q:1:7"}) || len(h.Queue()) != 0 {
			t.Fatalf("after=%v: outcome %+v log %v queue %v", after, out, h.State().Log, h.Queue())
		}
	}
}

func TestCompletableMessages(t *testing.T) {
	h := newHost(log{})
	id, resp := h.SendWait("q", job{20})
	h.Send("q", job{30})
	wf := func(c *logCtx) error {
		m, err := workflow.Next[job](c, "first", workflow.NextOptions{Completable: true})
		if err != nil {
			return err
		}
		// Receiving again before completing is refused.
		if _, err := workflow.Next[job](c, "too-early"); !errors.Is(err, workflow.ErrNotCompleted) {
			return fmt.Errorf("receive before complete: %v", err)
		}
		if err := m.Complete(map[string]int{"doubled": m.Body.N * 2}); err != nil {
			return err
		}
		if err := m.Complete("again"); !errors.Is(err, workflow.ErrInvalid) { // completed once
			return fmt.Errorf("a second Complete: %v, want ErrInvalid", err)
		}
		m2, err := workflow.Next[job](c, "second")
		if err != nil {
			return err
		}
		return recv(c, "rec", m, m2)
	}
	h.CrashAt(3, false) // the step: the replay replays the completion
	out := drive(t, h, wf)
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if got := <-resp; string(got) != `{"doubled":40}` {
		t.Fatalf("response %s", got)
	}
	if c := h.Completions(); !reflect.DeepEqual(c, map[uint64]int{id: 1}) {
		t.Fatalf("completions %v", c)
	}
	if e := entryAt(t, h.History(), "first"); !e.Messages[0].Completed {
		t.Fatalf("completion not recorded: %+v", e)
	}
}

func TestMessageThatDoesNotDecode(t *testing.T) {
	h := newHost(log{})
	h.Send("q", "not a job")
	out := drive(t, h, func(c *logCtx) error {
		_, err := workflow.Next[job](c, "wait")
		return err
	})
	var ute *json.UnmarshalTypeError
	if out.Status != workflow.RunFailed || !errors.As(out.Err, &ute) {
		t.Fatalf("outcome %+v", out)
	}
}

// A Complete that fails (a response that does not marshal) leaves the
// message owed: the next receive still refuses to go on, rather than take
// another message while the first one's sender waits for ever.
func TestAFailedCompleteStillHoldsUpTheNextReceive(t *testing.T) {
	h := newHost(log{})
	_, resp := h.SendWait("q", job{1})
	h.Send("q", job{2})
	var completeErr, nextErr error
	drive(t, h, func(c *logCtx) error {
		m, err := workflow.Next[job](c, "first", workflow.NextOptions{Completable: true, Timeout: time.Second})
		if err != nil {
			return err
		}
		completeErr = m.Complete(func() {}) // does not marshal
		_, nextErr = workflow.Next[job](c, "second", workflow.NextOptions{Timeout: time.Second})
		return nil
	})
	if completeErr == nil {
		t.Fatal("Complete with a response that does not marshal succeeded")
	}
	select {
	case r := <-resp:
		t.Fatalf("the sender was answered %s", r)
	default:
	}
	if !errors.Is(nextErr, workflow.ErrNotCompleted) {
		t.Fatalf("the next receive: %v, want ErrNotCompleted (the first message is still owed)", nextErr)
	}
}

// A message a join branch received, completed after the join, fails with
// an error that says so (it said "cancelled: race lost", for a join): a
// settled join does not run its branches on replay, so the message would
// not be there to complete. Complete it in its branch.
func TestCompleteAfterItsBranchEndedSaysSo(t *testing.T) {
	h := newHost(log{})
	h.SendWait("q", job{1})
	var late error
	out := drive(t, h, func(c *logCtx) error {
		var kept workflow.Message[job]
		if _, err := workflow.Join(c, "j", workflow.Branches[log, int]{
			"b": func(c *logCtx) (int, error) {
				var err error
				kept, err = workflow.Next[job](c, "n", workflow.NextOptions{Completable: true})
				return 0, err
			},
		}); err != nil {
			return err
		}
		late = kept.Complete("x")
		return nil
	})
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if !errors.Is(late, workflow.ErrInvalid) || errors.Is(late, workflow.ErrCancelled) || !strings.Contains(late.Error(), "branch") {
		t.Fatalf("Complete after the join: %v", late)
	}
}

// A second Complete of a message in one run fails with ErrInvalid, its
// response sent to no one, from a copy of the Message too; on replay the
// first Complete returns nil again (the completion is in the history) and
// the second fails again: the run sees what the first run saw.
func TestASecondCompleteOfAMessageFailsLiveAndOnReplay(t *testing.T) {
	h := newHost(log{})
	id, resp := h.SendWait("q", job{20})
	type seen struct{ first, second, copied error }
	var runs []seen
	wf := func(c *logCtx) error {
		m, err := workflow.Next[job](c, "take", workflow.NextOptions{Completable: true})
		if err != nil {
			return err
		}
		kept := m
		var s seen
		s.first = m.Complete("first")
		s.second = m.Complete("second")
		s.copied = kept.Complete("copied")
		runs = append(runs, s)
		return c.Step("after", func(*logStep) error { return nil })
	}
	h.CrashAt(3, false) // the step's commit (after the receive's and the completion's): the next run replays the completion
	out := drive(t, h, wf)
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2 (live, then a replay after the crash)", len(runs))
	}
	for i, s := range runs {
		if s.first != nil {
			t.Fatalf("run %d: the first Complete: %v, want nil", i+1, s.first)
		}
		for _, err := range []error{s.second, s.copied} {
			if !errors.Is(err, workflow.ErrInvalid) || !strings.Contains(err.Error(), "completed already") {
				t.Fatalf("run %d: a second Complete: %v, want ErrInvalid saying it was completed already", i+1, err)
			}
		}
	}
	if got := <-resp; string(got) != `"first"` {
		t.Fatalf("response %s, want the first Complete's", got)
	}
	if c := h.Completions(); !reflect.DeepEqual(c, map[uint64]int{id: 1}) {
		t.Fatalf("completions %v, want one", c)
	}
}

// A Complete whose response does not marshal fails, and leaves the message
// to the next Complete, on replay as live: the replay marshals too, so
// that each call returns what it returned live (the replayed completion
// is the second call's, not the first's).
func TestACompleteThatDoesNotMarshalFailsLiveAndOnReplay(t *testing.T) {
	h := newHost(log{})
	id, resp := h.SendWait("q", job{20})
	type seen struct{ bad, good, again error }
	var runs []seen
	wf := func(c *logCtx) error {
		m, err := workflow.Next[job](c, "take", workflow.NextOptions{Completable: true})
		if err != nil {
			return err
		}
		var s seen
		s.bad = m.Complete(func() {})
		s.good = m.Complete("good")
		s.again = m.Complete(func() {})
		runs = append(runs, s)
		return c.Step("after", func(*logStep) error { return nil })
	}
	h.CrashAt(3, false) // the step's commit (after the receive's and the completion's): the next run replays the completion
	out := drive(t, h, wf)
	if out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2 (live, then a replay after the crash)", len(runs))
	}
	for i, s := range runs {
		if s.bad == nil || errors.Is(s.bad, workflow.ErrInvalid) || !strings.Contains(s.bad.Error(), "does not marshal") {
			t.Errorf("run %d: Complete(func(){}): %v, want its marshal error", i+1, s.bad)
		}
		if s.good != nil {
			t.Errorf("run %d: the Complete after it: %v, want nil", i+1, s.good)
		}
		if !errors.Is(s.again, workflow.ErrInvalid) {
			t.Errorf("run %d: a Complete after the message was completed: %v, want ErrInvalid", i+1, s.again)
		}
	}
	if got := <-resp; string(got) != `"good"` {
		t.Fatalf("response %s, want the one that marshalled", got)
	}
	if c := h.Completions(); !reflect.DeepEqual(c, map[uint64]int{id: 1}) {
		t.Fatalf("completions %v, want one", c)
	}
}
