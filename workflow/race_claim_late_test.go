package workflow_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

// A race branch that took messages wins if it finishes, whatever the other
// branches' times: its next receive takes a message that comes after
// another branch finished, rather than wait for the race's decision (which
// waits for the branch to finish).
func TestARaceClaimHoldersNextReceiveTakesAMessageAfterAnotherBranchFinished(t *testing.T) {
	wf := func(c *logCtx) error {
		winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, string]{
			{Name: "timeout", Run: func(c *logCtx) (string, error) { return "timeout", c.Sleep("nap", 5*time.Second) }},
			{Name: "talk", Run: func(c *logCtx) (string, error) {
				if _, err := workflow.Next[job](c, "first", workflow.NextOptions{Names: []string{"q"}}); err != nil {
					return "", err
				}
				if _, err := workflow.Next[job](c, "second", workflow.NextOptions{Names: []string{"q"}}); err != nil {
					return "", err
				}
				return "talk", nil
			}},
		})
		if err != nil {
			return err
		}
		return c.Step("rec", func(s *logStep) error { s.State.Log = append(s.State.Log, winner); return nil })
	}
	h := newHost(log{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan workflow.Outcome, 1)
	go func() { done <- h.Run(ctx, wf) }()
	blocked := func(what string) {
		t.Helper()
		select {
		case <-h.Wakes():
		case out := <-done:
			t.Fatalf("%s: the run ended: %+v", what, out)
		case <-ctx.Done():
			t.Fatalf("%s: the run did not block", what)
		}
	}
	blocked("start")
	h.Clock.Set(t0.Add(1 * time.Second))
	h.Send("q", job{1}) // taken by "first": the branch holds the claim
	blocked("first taken")
	h.Clock.Set(t0.Add(6 * time.Second)) // the timeout branch finishes at 5s
	blocked("timeout finished")
	h.Clock.Set(t0.Add(7 * time.Second))
	h.Send("q", job{2})
	select {
	case out := <-done:
		if out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"talk"}) {
			t.Fatalf("%+v, log %v, want [talk]", out, h.State().Log)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the run hangs: queue %d, history %s", len(h.Queue()), h.HistoryJSON())
	}
}
