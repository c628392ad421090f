package runtime_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type payState struct {
	N int `json:"n"`
}

// slowPay's workflow runs one step that sets n to 99 and then waits for
// payRelease (a payment service that takes its time).
var (
	payEntered chan struct{}
	payRelease chan struct{}
	slowPay    = rivet.Actor[payState]{
		Name: "slowpay",
		Run: func(c *workflow.Ctx[payState]) error {
			_, err := workflow.Step(c, "charge", func(s *workflow.StepCtx[payState]) (int, error) {
				s.State.N = 99
				select {
				case payEntered <- struct{}{}:
				default:
				}
				select {
				case <-payRelease:
				case <-s.Context().Done():
				}
				return s.State.N, nil
			})
			return err
		},
		Actions: rivet.Actions[payState]{
			"get": rivet.Query(func(c *rivet.ActionCtx[payState]) (int, error) { return c.State.N, nil }),
		},
	}
)

// While a Step body holds its actor's turn, Inspect, State and Get answer
// at once with what the actor committed (the step's change is not), and
// say its workflow runs: they waited for the step to end (a trial's order
// answered Inspect only when its payment step did).
func TestAnActorsCommittedStateIsReadWhileAStepHoldsItsTurn(t *testing.T) {
	payEntered, payRelease = make(chan struct{}, 1), make(chan struct{}) // not parallel: -count N runs it again
	e := newEnv(t, counterReg(t, slowPay), nil)
	ref := runtime.Ref{Name: "slowpay", Key: []string{"k"}}
	if _, err := e.host.Create(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-payEntered:
	case <-time.After(20 * time.Second):
		t.Fatal("the step did not start")
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(payRelease)
		}
	}
	defer release()

	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ins, err := e.host.Inspect(wctx, ref)
	if err != nil {
		t.Fatalf("inspect while the step runs: %v", err)
	}
	var st payState
	if err := json.Unmarshal(ins.State, &st); err != nil || st.N != 0 || !ins.Active || ins.WorkflowStatus != runtime.WorkflowRunning {
		t.Fatalf("inspect while the step runs: state %s, active %v, workflow %q; want n 0 (committed), active, running", ins.State, ins.Active, ins.WorkflowStatus)
	}
	if _, err := e.host.Get(wctx, ref); err != nil {
		t.Fatalf("get while the step runs: %v", err)
	}

	release()
	waitFor(t, "the step's commit", 20*time.Second, func() bool {
		ins := inspect(t, e.host, "slowpay", "k")
		return ins.WorkflowStatus == runtime.WorkflowCompleted && string(ins.State) == `{"n":99}`
	})
}
