package runtime_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type ordersState struct {
	Log []string `json:"log"`
}

// effects counts the side effects of step bodies (a card charged), which
// the state cannot show when a body runs again.
var (
	effectsMu sync.Mutex
	effects   = map[string]int{}
)

func effect(name string) {
	effectsMu.Lock()
	effects[name]++
	effectsMu.Unlock()
}

func effectCounts() map[string]int {
	effectsMu.Lock()
	defer effectsMu.Unlock()
	out := make(map[string]int, len(effects))
	for k, v := range effects {
		out[k] = v
	}
	return out
}

// ordersActor handles one order per loop iteration: charge, then ship.
// version 1 is the code the instance started on; 2 adds an audit step
// without a gate (a divergence for the iterations v1 ran); 3 gates it.
func ordersActor(version int) rivet.Actor[ordersState] {
	return rivet.Actor[ordersState]{
		Name:   "orders",
		Queues: rivet.Queues{"orders": rivet.QueueOf[int]()},
		Run: func(ctx *workflow.Ctx[ordersState]) error {
			if err := ctx.Step("open", func(s *workflow.StepCtx[ordersState]) error {
				effect("open")
				s.State.Log = append(s.State.Log, "open")
				return nil
			}); err != nil {
				return err
			}
			return ctx.Loop("orders", func(c *workflow.Ctx[ordersState]) error {
				m, err := workflow.Next[int](c, "take", workflow.NextOptions{Names: []string{"orders"}})
				if err != nil {
					return err
				}
				n := m.Body
				if err := c.Step("charge", func(s *workflow.StepCtx[ordersState]) error {
					effect(fmt.Sprint("charge ", n))
					s.State.Log = append(s.State.Log, fmt.Sprint("charge ", n))
					return nil
				}); err != nil {
					return err
				}
				audit := version == 2
				if version == 3 {
					v, err := c.GetVersion("audit-gate", 2)
					if err != nil {
						return err
					}
					audit = v == 2
				}
				if audit {
					if err := c.Step("audit", func(s *workflow.StepCtx[ordersState]) error {
						effect(fmt.Sprint("audit ", n))
						s.State.Log = append(s.State.Log, fmt.Sprint("audit ", n))
						return nil
					}); err != nil {
						return err
					}
				}
				return c.Step("ship", func(s *workflow.StepCtx[ordersState]) error {
					effect(fmt.Sprint("ship ", n))
					s.State.Log = append(s.State.Log, fmt.Sprint("ship ", n))
					return nil
				})
			})
		},
		Actions: rivet.Actions[ordersState]{"getState": rivet.Query(func(c *rivet.ActionCtx[ordersState]) (ordersState, error) { return *c.State, nil })},
	}
}

// A deploy that breaks running workflows, then the fix, then a retry: the
// workflow resumes where it was, no committed step's effect runs twice,
// the iterations the old code ran take the old path and the new orders
// the new one.
func TestADeployThatDivergesThenItsFixAndARetryRedoNoStep(t *testing.T) {
	effectsMu.Lock()
	clear(effects)
	effectsMu.Unlock()
	e := newEnv(t, counterReg(t, ordersActor(1)), nil)
	ref := runtime.Ref{Name: "orders", Key: []string{"o"}}
	send := func(n int) {
		t.Helper()
		if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "orders", Body: json.RawMessage(fmt.Sprint(n)), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
	}
	state := func() string {
		t.Helper()
		raw, err := call(t, e.host, "orders", "o", "getState", false)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	send(1)
	send(2)
	waitFor(t, "v1 to ship 2 orders", 10*time.Second, func() bool { return strings.Contains(state(), "ship 2") })

	e.reg = counterReg(t, ordersActor(2))
	e.restart()
	send(3)
	waitFor(t, "v2 to diverge", 10*time.Second, func() bool {
		return inspect(t, e.host, "orders", "o").WorkflowStatus == runtime.WorkflowFailed
	})
	if msg := inspect(t, e.host, "orders", "o").WorkflowError; !strings.Contains(msg, "orders/~0/audit") || !strings.Contains(msg, "diverged") {
		t.Fatalf("workflow error %q, want a divergence naming orders/~0/audit", msg)
	}
	// Actions keep working.
	if s := state(); s != `{"log":["open","charge 1","ship 1","charge 2","ship 2"]}` {
		t.Fatalf("state after the divergence %s", s)
	}
	// A dry run of the retry says it would be refused: the code deployed
	// still diverges (a trial's dry run said "would retry").
	if _, err := e.host.RetryWorkflowWith(ctx(t), ref, runtime.RetryOptions{DryRun: true}); !errors.Is(err, rivet.ErrWorkflowFailed) || !strings.Contains(err.Error(), "diverged") {
		t.Fatalf("a dry run of the retry on the diverging code: %v; want the divergence", err)
	}

	e.reg = counterReg(t, ordersActor(3))
	e.restart()
	// With the fix, the dry run passes, and changes nothing.
	if _, err := e.host.RetryWorkflowWith(ctx(t), ref, runtime.RetryOptions{DryRun: true}); err != nil {
		t.Fatalf("a dry run of the retry on the fixed code: %v", err)
	}
	if st := inspect(t, e.host, "orders", "o").WorkflowStatus; st != runtime.WorkflowFailed {
		t.Fatalf("after a dry run the workflow is %s, want still failed", st)
	}
	removed, err := e.host.RetryWorkflow(ctx(t), ref, "")
	if err != nil || removed != 0 {
		t.Fatalf("retry: removed %d, %v", removed, err)
	}
	send(4)
	want := `{"log":["open","charge 1","ship 1","charge 2","ship 2","charge 3","audit 3","ship 3","charge 4","audit 4","ship 4"]}`
	waitFor(t, "v3 to handle orders 3 and 4", 10*time.Second, func() bool { return strings.Contains(state(), "ship 4") })
	if s := state(); s != want {
		t.Fatalf("state %s\nwant  %s", s, want)
	}
	for k, n := range effectCounts() {
		if n != 1 {
			t.Fatalf("effect %q ran %d times (all: %v)", k, n, effectCounts())
		}
	}
	if st := inspect(t, e.host, "orders", "o").WorkflowStatus; st == runtime.WorkflowFailed {
		t.Fatalf("workflow %s: %s", st, inspect(t, e.host, "orders", "o").WorkflowError)
	}
}

type tripState struct {
	Held []string `json:"held"`
}

var (
	tripMu     sync.Mutex
	tripUndone []string // the handlers that ran to their end, in order
	// tripBlocking holds the hotel's handler until its run is stopped.
	tripBlocking atomic.Bool
	tripEntered  = make(chan struct{}, 10)
)

// tripActor books a flight, a hotel and a car, each with a compensation,
// then the payment asks for a rollback.
func tripActor() rivet.Actor[tripState] {
	book := func(c *workflow.Ctx[tripState], what string) error {
		_, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: what},
			func(s *workflow.StepCtx[tripState]) (string, error) {
				s.State.Held = append(s.State.Held, what)
				return what, nil
			},
			func(s *workflow.StepCtx[tripState], v string) error {
				if v == "hotel" && tripBlocking.Load() {
					tripEntered <- struct{}{}
					<-s.Context().Done()
					return s.Context().Err()
				}
				tripMu.Lock()
				tripUndone = append(tripUndone, v)
				tripMu.Unlock()
				s.State.Held = s.State.Held[:len(s.State.Held)-1]
				return nil
			})
		return err
	}
	return rivet.Actor[tripState]{
		Name: "trip",
		Run: func(ctx *workflow.Ctx[tripState]) error {
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			for _, w := range []string{"flight", "hotel", "car"} {
				if err := book(ctx, w); err != nil {
					return err
				}
			}
			return ctx.Step("pay", func(*workflow.StepCtx[tripState]) error {
				return workflow.Rollback(errors.New("card refused"))
			})
		},
		Actions: rivet.Actions[tripState]{"getState": rivet.Query(func(c *rivet.ActionCtx[tripState]) (tripState, error) { return *c.State, nil })},
	}
}

// A node stopped in the middle of a rollback (the hotel's handler running,
// the car's committed): the next run goes on with the handlers not done
// yet, in reverse order of the bookings, and the car's does not run again.
func TestARollbackStoppedByARestartGoesOnWhereItStopped(t *testing.T) {
	tripMu.Lock()
	tripUndone = nil
	tripMu.Unlock()
	tripBlocking.Store(true)
	e := newEnv(t, counterReg(t, tripActor()), nil)
	ref := runtime.Ref{Name: "trip", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tripEntered:
	case <-time.After(20 * time.Second):
		t.Fatal("the hotel's rollback never ran")
	}
	e.restart()
	tripBlocking.Store(false)
	if _, err := call(t, e.host, "trip", "k", "getState", false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "trip", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	tripMu.Lock()
	got := strings.Join(tripUndone, ",")
	tripMu.Unlock()
	if got != "car,hotel,flight" {
		t.Fatalf("undone %s, want car,hotel,flight", got)
	}
	raw, err := call(t, e.host, "trip", "k", "getState", false)
	if err != nil || string(raw) != `{"held":[]}` {
		t.Fatalf("state %s %v", raw, err)
	}
	if msg := inspect(t, e.host, "trip", "k").WorkflowError; !strings.Contains(msg, "card refused") {
		t.Fatalf("error %q", msg)
	}
}
