package runtime_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

var heldJoinHealthy, heldJoinPanics atomic.Bool

type heldJoinState struct {
	Sum int `json:"sum"`
}

// heldJoin joins a branch whose step fails until healthy with one that
// waits for a message and then panics while panics is set: the workflow
// fails with the join still pending, a's failure recorded in it.
var heldJoin = rivet.Actor[heldJoinState]{
	Name: "heldjoin",
	Run: func(ctx *workflow.Ctx[heldJoinState]) error {
		out, err := workflow.Join(ctx, "j", workflow.Branches[heldJoinState, int]{
			"a": func(c *workflow.Ctx[heldJoinState]) (int, error) {
				return workflow.StepOpts(c, workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(*workflow.StepCtx[heldJoinState]) (int, error) {
					if !heldJoinHealthy.Load() {
						return 0, errors.New("a is down")
					}
					return 1, nil
				})
			},
			"b": func(c *workflow.Ctx[heldJoinState]) (int, error) {
				m, err := workflow.Next[int](c, "wait", workflow.NextOptions{Names: []string{"go"}})
				if err != nil {
					return 0, err
				}
				if heldJoinPanics.Load() {
					panic("b broke")
				}
				return m.Body, nil
			},
		})
		if err != nil {
			return err
		}
		return ctx.Step("after", func(s *workflow.StepCtx[heldJoinState]) error {
			s.State.Sum = out["a"] + out["b"]
			return nil
		})
	},
	Queues:  rivet.Queues{"go": rivet.QueueOf[int]()},
	Actions: rivet.Actions[heldJoinState]{"getState": rivet.Query(func(c *rivet.ActionCtx[heldJoinState]) (heldJoinState, error) { return *c.State, nil })},
}

// A workflow that failed (a panic in b) while a join was pending, with
// a's failure held (in an entry of its own, j/~held/a, or, as a Host
// keeps it by default and a node until every node reads storage format 4,
// in the join's record), is retried from a's failed step: the retry
// deletes that entry or puts a back to pending in the join's record, so a
// runs again instead of being held failed, and the join completes. (The
// unit tests of retryTrees, TestRetryTreesUnholdsBranchesOfAPendingJoinOrRace
// and TestRetryTreesUnholdsBranchesHeldApart, do not show that the node's
// replay takes the history so.)
func TestRetryFromAHeldBranchOfAPendingJoin(t *testing.T) {
	t.Parallel()
	removed := map[bool]int{}
	for _, apart := range []bool{true, false} {
		t.Run(map[bool]string{true: "apart", false: "in-record"}[apart], func(t *testing.T) {
			heldJoinHealthy.Store(false)
			heldJoinPanics.Store(true)
			e := newEnv(t, counterReg(t, heldJoin), nil)
			if apart {
				// Off by default: a node turns it on at storage format 4.
				e.host.SetWriteFormat(4)
			}
			ref := runtime.Ref{Name: "heldjoin", Key: []string{"k"}}
			if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
				t.Fatal(err)
			}
			// a's failure is committed in the pending join before the run
			// waits for b's message.
			held := false
			var heldRow runtime.HistoryEntry
			waitFor(t, "a to fail and the workflow to wait", 20*time.Second, func() bool {
				if inspect(t, e.host, "heldjoin", "k").WorkflowStatus != runtime.WorkflowSleeping {
					return false
				}
				hist, err := e.host.History(ctx(t), ref)
				if err != nil {
					t.Fatal(err)
				}
				failed := false
				held = false
				for _, en := range hist.Entries {
					switch en.Path {
					case "j/a/s":
						failed = en.Status == string(workflow.StatusExhausted)
					case "j/~held/a":
						held = en.Kind == string(workflow.KindHeldBranch)
						heldRow = en
					}
				}
				return failed
			})
			if held != apart {
				t.Fatalf("a held in an entry of its own: %v, want %v", held, apart)
			}
			if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`10`)}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
				return inspect(t, e.host, "heldjoin", "k").WorkflowStatus == runtime.WorkflowFailed
			})
			heldJoinHealthy.Store(true)
			heldJoinPanics.Store(false)
			if apart {
				// The history shows the held entry as the branch's
				// failure; a retry from it, which would delete b's
				// entries made after it as entries that followed it,
				// is refused, pointing at a's failed step.
				if heldRow.Status != string(workflow.StatusFailed) || !strings.Contains(heldRow.Error, "a is down") {
					t.Fatalf("the held entry's row %+v, want failed with a's error", heldRow)
				}
				_, err := e.host.RetryWorkflow(ctx(t), ref, "j/~held/a")
				if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), `"j/a/s"`) {
					t.Fatalf("retry --from j/~held/a: %v, want refused, naming j/a/s", err)
				}
				if st := inspect(t, e.host, "heldjoin", "k"); st.WorkflowStatus != runtime.WorkflowFailed {
					t.Fatalf("after the refused retry: %+v", st)
				}
			}
			n, err := e.host.RetryWorkflow(ctx(t), ref, "j/a/s")
			if err != nil {
				t.Fatalf("retry --from j/a/s: %v", err)
			}
			removed[apart] = n
			waitFor(t, "the retried workflow to end", 20*time.Second, func() bool {
				s := inspect(t, e.host, "heldjoin", "k").WorkflowStatus
				return s == runtime.WorkflowCompleted || s == runtime.WorkflowFailed
			})
			if st := inspect(t, e.host, "heldjoin", "k"); st.WorkflowStatus != runtime.WorkflowCompleted {
				t.Fatalf("after the retry: %+v", st)
			}
			if raw, _ := call(t, e.host, "heldjoin", "k", "getState", false); string(raw) != `{"sum":11}` {
				t.Fatalf("state after retry = %s, want 11", raw)
			}
		})
	}
	// The entries the workflow made, whichever way the join held a: its
	// held entry is the join's bookkeeping.
	if removed[true] != removed[false] || removed[true] == 0 {
		t.Fatalf("the retry removed %d entries with a held apart, %d with a held in the record", removed[true], removed[false])
	}
}
