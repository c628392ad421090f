package runtime_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type kindsState struct {
	Live     map[string]bool `json:"live,omitempty"`
	Replayed map[string]bool `json:"replayed,omitempty"`
}

// kindsActor's workflow catches the failure of a step whose body calls an
// action the counter does not have, and of one that returns a user error,
// and joins a branch that fails as the first: it records what errors.Is
// says of them, once as they happen and once more after the test restarts
// the node, when they come back from the history.
var kindsActor = rivet.Actor[kindsState]{
	Name:   "kinds",
	Queues: rivet.Queues{"go": rivet.QueueOf[struct{}]()},
	Run: func(ctx *workflow.Ctx[kindsState]) error {
		callUnknown := func(s *workflow.StepCtx[kindsState]) (int, error) {
			return rivet.Call[int](s.Context(), s.Client().GetOrCreate("counter", "k"), "nope")
		}
		noRetries := func(name string) workflow.StepOptions {
			return workflow.StepOptions{Name: name, MaxRetries: workflow.NoRetries}
		}
		_, unknown, err := workflow.TryStepOpts(ctx, noRetries("call-unknown"), callUnknown)
		if err != nil {
			return err
		}
		_, user, err := workflow.TryStepOpts(ctx, noRetries("user"), func(*workflow.StepCtx[kindsState]) (int, error) {
			return 0, rivet.UserError("card_declined", "the card was declined", nil)
		})
		if err != nil {
			return err
		}
		_, joinErr := workflow.Join(ctx, "fan", workflow.Branches[kindsState, int]{
			"a": func(bc *workflow.Ctx[kindsState]) (int, error) {
				return workflow.StepOpts(bc, noRetries("call"), callUnknown)
			},
		})
		var je *workflow.JoinError
		if joinErr != nil && !errors.As(joinErr, &je) {
			return joinErr // not a branch's failure: eviction, and the like
		}
		var code interface{ ErrorCode() string }
		seen := map[string]bool{
			"failure is unknown action":      unknown != nil && errors.Is(unknown, rivet.ErrUnknownAction),
			"recorded is unknown action":     unknown != nil && errors.Is(unknown.Err, rivet.ErrUnknownAction),
			"recorded keeps its code":        unknown != nil && errors.As(unknown.Err, &code) && code.ErrorCode() == "unknown_action",
			"unknown action is not internal": unknown != nil && !errors.Is(unknown, rivet.ErrInternal),
			"user error is ErrUser":          user != nil && errors.Is(user, rivet.ErrUser),
			"user error is not unknown":      user != nil && !errors.Is(user, rivet.ErrUnknownAction),
			"user error keeps its code":      user != nil && errors.As(user.Err, &code) && code.ErrorCode() == "card_declined",
			"join error is unknown action":   je != nil && errors.Is(je, rivet.ErrUnknownAction),
		}
		if err := ctx.Step("live", func(s *workflow.StepCtx[kindsState]) error {
			s.State.Live = seen
			return nil
		}); err != nil {
			return err
		}
		if _, err := workflow.Next[struct{}](ctx, "wait-go"); err != nil {
			return err
		}
		return ctx.Step("replayed", func(s *workflow.StepCtx[kindsState]) error {
			s.State.Replayed = seen
			return nil
		})
	},
}

// A step's failure that a call to another actor caused matches the call
// error's kind (rivet.ErrUnknownAction), as a *workflow.RecordedError,
// caught by TryStep or in a JoinError, live and after a restart replays
// it from the history; a user error matches ErrUser, and both keep their
// codes.
func TestRecordedErrorMatchesItsRivetKindLiveAndOnReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, kindsActor), nil)
	ref := runtime.Ref{Name: "kinds", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	var st kindsState
	read := func() kindsState {
		var s kindsState
		if err := json.Unmarshal(inspect(t, e.host, "kinds", "k").State, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	waitFor(t, "the live observations", 10*time.Second, func() bool { st = read(); return st.Live != nil })
	// Restarted, the node runs the workflow again from its history: the
	// failures come back from their records.
	e.restart()
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to complete", 10*time.Second, func() bool {
		return inspect(t, e.host, "kinds", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	st = read()
	for what, seen := range map[string]map[string]bool{"live": st.Live, "on replay": st.Replayed} {
		if len(seen) != 8 {
			t.Fatalf("%s: %d observations, want 8: %v", what, len(seen), seen)
		}
		for k, ok := range seen {
			if !ok {
				t.Errorf("%s: not so: %s", what, k)
			}
		}
	}
}
