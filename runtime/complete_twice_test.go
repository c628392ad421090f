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

type twiceState = liveAndReplayed[[]string]

// twiceActor completes the message it takes twice, the second time
// through a copy, and records what each Complete said: once as it runs,
// once more after the test restarts the node and the run replays the
// completion from the history.
var twiceActor = rivet.Actor[twiceState]{
	Name:   "twice",
	Queues: rivet.Queues{"ask": rivet.QueueOf[int](), "go": rivet.QueueOf[struct{}]()},
	Run: func(ctx *workflow.Ctx[twiceState]) error {
		m, err := workflow.Next[int](ctx, "take", workflow.NextOptions{Names: []string{"ask"}, Completable: true})
		if err != nil {
			return err
		}
		kept := m
		var seen []string
		for _, err := range []error{m.Complete(m.Body * 2), m.Complete(-1), kept.Complete(-2)} {
			switch {
			case err == nil:
				seen = append(seen, "nil")
			case errors.Is(err, workflow.ErrInvalid):
				seen = append(seen, "invalid")
			default:
				return err // an eviction: returned unchanged, never recorded
			}
		}
		return recordLiveThenReplayed(ctx, seen)
	},
}

// On a node, a second Complete of a message fails with ErrInvalid and its
// response reaches no one (the waiting sender gets the first), live and
// when a restart replays the completion, whose first Complete returns
// nil again.
func TestASecondCompleteFailsOnANodeLiveAndOnReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, counterReg(t, twiceActor), nil)
	ref := runtime.Ref{Name: "twice", Key: []string{"t"}}
	res, err := e.host.Send(ctx(t), runtime.SendRequest{Ref: ref, Queue: "ask", Body: json.RawMessage(`21`), CreateIfMissing: true, Wait: true, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != runtime.SendCompleted || string(res.Response) != "42" {
		t.Fatalf("send: %+v, want completed with the first Complete's 42", res)
	}
	st := observeLiveThenReplayed[[]string](t, e, ref)
	want := []string{"nil", "invalid", "invalid"}
	for what, got := range map[string][]string{"live": st.Live, "on replay": st.Replayed} {
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("%s: the Completes said %v, want %v", what, got, want)
		}
	}
}
