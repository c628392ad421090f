package workflow_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// TestRecordedTimeoutMatchesErrTimeout: a join or race whose branch failed
// because a step timed out or a Next with a timeout got nothing matches
// ErrTimeout, live and when replayed from its recorded history (JSON), so
// that code testing it takes the same path both times.
func TestRecordedTimeoutMatchesErrTimeout(t *testing.T) {
	cases := []struct {
		name string
		op   func(h *workflowtest.Host[log], c *logCtx) error
	}{
		{"join with a timed-out step", func(h *workflowtest.Host[log], c *logCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
				"primary": func(c *logCtx) (int, error) {
					return workflow.StepOpts(c, workflow.StepOptions{Name: "call", Timeout: time.Second}, func(s *logStep) (int, error) {
						h.Clock.Advance(time.Second)
						<-s.Context().Done()
						return 0, s.Context().Err()
					})
				},
				"other": func(c *logCtx) (int, error) {
					return workflow.Step(c, "ok", func(*logStep) (int, error) { return 1, nil })
				},
			})
			return err
		}},
		{"join with a timed-out Next", func(h *workflowtest.Host[log], c *logCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
				"wait": func(c *logCtx) (int, error) {
					m, err := workflow.Next[job](c, "reply", workflow.NextOptions{Names: []string{"replies"}, Timeout: time.Minute})
					return m.Body.N, err
				},
				"other": func(c *logCtx) (int, error) {
					return workflow.Step(c, "ok", func(*logStep) (int, error) { return 1, nil })
				},
			})
			return err
		}},
		{"race whose branches all failed", func(h *workflowtest.Host[log], c *logCtx) error {
			_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
				{Name: "wait", Run: func(c *logCtx) (int, error) {
					m, err := workflow.Next[job](c, "reply", workflow.NextOptions{Names: []string{"replies"}, Timeout: time.Minute})
					return m.Body.N, err
				}},
				{Name: "bad", Run: func(c *logCtx) (int, error) {
					return workflow.StepOpts(c, workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(*logStep) (int, error) {
						return 0, codedErr{}
					})
				}},
			})
			return err
		}},
		{"join in a Try", func(h *workflowtest.Host[log], c *logCtx) error {
			f, err := c.Try("t", func(c *logCtx) error {
				_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
					"wait": func(c *logCtx) (int, error) {
						m, err := workflow.Next[job](c, "reply", workflow.NextOptions{Names: []string{"replies"}, Timeout: time.Minute})
						return m.Body.N, err
					},
				})
				return err
			})
			if err != nil {
				return err
			}
			return f
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(log{})
			var seen []bool
			wf := func(c *logCtx) error {
				err := tc.op(h, c)
				if err != nil {
					seen = append(seen, errors.Is(err, workflow.ErrTimeout))
				}
				if errors.Is(err, workflow.ErrTimeout) {
					// The fallback: recorded live, so a replay that did not
					// take this path again would diverge.
					return c.Step("fallback", func(s *logStep) error {
						s.State.Log = append(s.State.Log, "fallback")
						return nil
					})
				}
				return err
			}
			out := drive(t, h, wf)
			if out.Status != workflow.RunCompleted || len(seen) != 1 || !seen[0] {
				t.Fatalf("live: outcome %s %v, ErrTimeout matched %v", out.Status, out.Err, seen)
			}
			out = drive(t, h, wf)
			if out.Status != workflow.RunCompleted || len(seen) != 2 || !seen[1] {
				t.Fatalf("replay: outcome %s %v, ErrTimeout matched %v", out.Status, out.Err, seen)
			}
			if got := h.State().Log; len(got) != 1 {
				t.Fatalf("fallback ran %v", got)
			}
		})
	}
}

// TestRecordedTimeoutOldEntries: a branch error recorded before the
// timeout was kept reads as it did then (no match), and the field is
// written only for a timeout, so other entries are unchanged.
func TestRecordedTimeoutOldEntries(t *testing.T) {
	var b workflow.Branch
	if err := json.Unmarshal([]byte(`{"status":"failed","error":{"message":"workflow: timed out","code":"x"}}`), &b); err != nil {
		t.Fatal(err)
	}
	if errors.Is(b.Error, workflow.ErrTimeout) || b.Error.ErrorCode() != "x" {
		t.Fatalf("old entry read as %+v", b.Error)
	}
	out, err := json.Marshal(workflow.Branch{Status: workflow.StatusFailed, Error: &workflow.RecordedError{Message: "m"}})
	if err != nil || string(out) != `{"status":"failed","error":{"message":"m"}}` {
		t.Fatalf("marshalled %s %v", out, err)
	}
}
