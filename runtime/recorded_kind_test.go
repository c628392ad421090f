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

type kindsState = liveAndReplayed[map[string]bool]

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
		var rec *workflow.RecordedError
		seen := map[string]bool{
			"failure is unknown action":      unknown != nil && errors.Is(unknown, rivet.ErrUnknownAction),
			"recorded is unknown action":     unknown != nil && errors.As(unknown, &rec) && errors.Is(rec, rivet.ErrUnknownAction),
			"recorded keeps its code":        unknown != nil && errors.As(unknown.Err, &code) && code.ErrorCode() == "unknown_action",
			"unknown action is not internal": unknown != nil && !errors.Is(unknown, rivet.ErrInternal),
			"user error is ErrUser":          user != nil && errors.Is(user, rivet.ErrUser),
			"user error is not unknown":      user != nil && !errors.Is(user, rivet.ErrUnknownAction),
			"user error keeps its code":      user != nil && errors.As(user.Err, &code) && code.ErrorCode() == "card_declined",
			"join error is unknown action":   je != nil && errors.Is(je, rivet.ErrUnknownAction),
		}
		return recordLiveThenReplayed(ctx, seen)
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
	st := observeLiveThenReplayed[map[string]bool](t, e, ref)
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

// liveAndReplayed is the state of a workflow that records what it observed
// twice: as it ran, and in the run a restart replays from its history.
type liveAndReplayed[T any] struct {
	Live     T `json:"live,omitempty"`
	Replayed T `json:"replayed,omitempty"`
}

// recordLiveThenReplayed records seen as the live observations, waits for
// a message on "go" (sent once the test has restarted the node), and
// records seen again: in the replayed run, "live" comes back from its
// record and seen is what the replay observed.
func recordLiveThenReplayed[T any](ctx *workflow.Ctx[liveAndReplayed[T]], seen T) error {
	if err := ctx.Step("live", func(s *workflow.StepCtx[liveAndReplayed[T]]) error {
		s.State.Live = seen
		return nil
	}); err != nil {
		return err
	}
	if _, err := workflow.Next[struct{}](ctx, "wait-go", workflow.NextOptions{Names: []string{"go"}}); err != nil {
		return err
	}
	return ctx.Step("replayed", func(s *workflow.StepCtx[liveAndReplayed[T]]) error {
		s.State.Replayed = seen
		return nil
	})
}

// observeLiveThenReplayed waits for ref's workflow (recordLiveThenReplayed)
// to record its live observations, restarts the node, so that the run
// replays from its history, lets it go on, and returns its state once the
// workflow completed.
func observeLiveThenReplayed[T any](t *testing.T, e *env, ref runtime.Ref) liveAndReplayed[T] {
	t.Helper()
	state := func() json.RawMessage { return inspect(t, e.host, ref.Name, ref.Key[0]).State }
	waitFor(t, "the live observations", 10*time.Second, func() bool {
		var s struct {
			Live json.RawMessage `json:"live"`
		}
		return json.Unmarshal(state(), &s) == nil && len(s.Live) > 0
	})
	e.restart()
	if _, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "go", Body: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to complete", 10*time.Second, func() bool {
		return inspect(t, e.host, ref.Name, ref.Key[0]).WorkflowStatus == runtime.WorkflowCompleted
	})
	var st liveAndReplayed[T]
	if err := json.Unmarshal(state(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}
