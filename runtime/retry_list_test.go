package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage"
	"github.com/rivet-go/rivet/workflow"
)

type rfState struct {
	Done bool `json:"done"`
}

func retryFlaky(healthy *atomic.Bool) rivet.Actor[rfState] {
	return rivet.Actor[rfState]{
		Name: "rflaky",
		Run: func(ctx *workflow.Ctx[rfState]) error {
			_, err := workflow.StepOpts(ctx, workflow.StepOptions{Name: "call", MaxRetries: workflow.NoRetries},
				func(s *workflow.StepCtx[rfState]) (int, error) {
					if !healthy.Load() {
						return 0, errors.New("api down")
					}
					s.State.Done = true
					return 1, nil
				})
			return err
		},
	}
}

// A RetryWorkflow whose caller gives up while its commit is in flight: the
// commit lands (status, failed-index entry and failed history entries
// deleted, wakeup written), and the workflow must run from there. The
// activation kept "failed" in memory and never started the run: the failed
// index said "not failed", Inspect "failed", a second retry was refused
// (the failures were gone), and nothing ran the workflow.
func TestARetryWhoseCallerGaveUpStillRunsTheWorkflow(t *testing.T) {
	t.Parallel()
	e, ref := failedRetryable(t)

	e.store.holdGate, e.store.holdEntered = make(chan struct{}), make(chan struct{})
	e.store.holdCommitSub.Store(storage.FailedPrefix + "rflaky/")
	// The caller gives up once the retry's commit is in flight.
	rctx, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() {
		_, err := e.host.RetryWorkflow(rctx, ref, "")
		done <- err
	}()
	select {
	case <-e.store.holdEntered:
	case err := <-done:
		t.Fatalf("the retry ended (%v) before its commit", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the retry's commit did not start within 20 s")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("retry returned nil while its commit was held")
	}
	close(e.store.holdGate)
	// The retry's commit lands after its caller left.
	waitFor(t, "the retry's commit to land", 20*time.Second, func() bool {
		res, err := e.host.List(ctx(t), runtime.ListOptions{FailedWorkflows: true})
		return err == nil && len(res.Actors) == 0
	})
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "rflaky", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
}

// A page token of one listing used in another is refused: an index token
// in the failed mode gave an empty last page, and a failed-index token in
// the index mode restarted the listing from its first page.
func TestAPageTokenOfAnotherListingIsRefused(t *testing.T) {
	var healthy atomic.Bool
	e := newEnv(t, counterReg(t, retryFlaky(&healthy)), nil)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := call(t, e.host, "counter", k, "increment", true, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"x", "y"} {
		if _, _, err := e.host.GetOrCreate(ctx(t), runtime.Ref{Name: "rflaky", Key: []string{k}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "two failed workflows", 20*time.Second, func() bool {
		res, err := e.host.List(ctx(t), runtime.ListOptions{FailedWorkflows: true})
		return err == nil && len(res.Actors) == 2
	})
	fp, err := e.host.List(ctx(t), runtime.ListOptions{FailedWorkflows: true, Limit: 1})
	if err != nil || fp.NextPageToken == "" {
		t.Fatal(fp, err)
	}
	if ip, err := e.host.List(ctx(t), runtime.ListOptions{PageToken: fp.NextPageToken, Limit: 2}); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("a failed-mode token in index mode: %+v, %v; want INVALID_ARGUMENT", ip, err)
	}
	ix, err := e.host.List(ctx(t), runtime.ListOptions{Limit: 1})
	if err != nil || ix.NextPageToken == "" {
		t.Fatal(ix, err)
	}
	if fp2, err := e.host.List(ctx(t), runtime.ListOptions{FailedWorkflows: true, PageToken: ix.NextPageToken}); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("an index token in failed mode: %+v, %v; want INVALID_ARGUMENT", fp2, err)
	}
	// The tokens of each listing still page through it.
	if next, err := e.host.List(ctx(t), runtime.ListOptions{FailedWorkflows: true, PageToken: fp.NextPageToken}); err != nil || len(next.Actors) != 1 || next.Actors[0].Ref.Key[0] == fp.Actors[0].Ref.Key[0] {
		t.Errorf("the failed listing's second page: %+v, %v", next, err)
	}
}

// RetryWorkflow's commit applied, then the history read after it failed:
// the retry is done, and the caller hears so; it heard UNAVAILABLE ("not
// done, retry"), and a client that retried got FAILED_PRECONDITION or, if
// the re-run had failed again meanwhile, deleted its failures and ran its
// steps once more.
func TestARetryThatAppliedIsReportedDoneEvenIfTheReadAfterItFails(t *testing.T) {
	t.Parallel()
	e, ref := failedRetryable(t)
	e.store.holdGate, e.store.holdEntered = make(chan struct{}), make(chan struct{})
	e.store.holdCommitSub.Store(storage.FailedPrefix + "rflaky/")
	errc := make(chan error, 1)
	go func() { _, err := e.host.RetryWorkflow(ctx(t), ref, ""); errc <- err }()
	select {
	case <-e.store.holdEntered:
	case <-time.After(20 * time.Second):
		t.Fatal("the retry's commit never came")
	}
	// The read after the commit fails once.
	e.store.failGetSub.Store(storage.WorkflowStatusSuffix)
	close(e.store.holdGate)
	err := <-errc
	waitFor(t, "the retried workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "rflaky", "k").WorkflowStatus == runtime.WorkflowCompleted
	})
	if err != nil {
		t.Errorf("RetryWorkflow said %v, yet the retry applied and the workflow completed", err)
	}
}

// failedRetryable returns an env with rflaky/k, whose workflow has failed
// and would now succeed if retried.
func failedRetryable(t *testing.T) (*env, runtime.Ref) {
	t.Helper()
	var healthy atomic.Bool
	e := newEnv(t, counterReg(t, retryFlaky(&healthy)), nil)
	ref := runtime.Ref{Name: "rflaky", Key: []string{"k"}}
	if _, _, err := e.host.GetOrCreate(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the workflow to fail", 20*time.Second, func() bool {
		return inspect(t, e.host, "rflaky", "k").WorkflowStatus == runtime.WorkflowFailed
	})
	healthy.Store(true)
	return e, ref
}

// A call whose arguments do not decode fails without creating its actor:
// bad input changes nothing.
func TestACallWithBadArgumentsCreatesNoActor(t *testing.T) {
	var healthy atomic.Bool
	e := newEnv(t, counterReg(t, retryFlaky(&healthy)), nil)
	ref := runtime.Ref{Name: "counter", Key: []string{"bad"}}
	_, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "increment", Args: json.RawMessage(`["x"]`), CreateIfMissing: true})
	if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "argument 1: a JSON string where an integer was expected") {
		t.Fatalf("call with a string for an int: %v, want INVALID_ARGUMENT naming argument 1", err)
	}
	if _, err := e.host.Get(ctx(t), ref); !errors.Is(err, rivet.ErrNotFound) {
		t.Fatalf("after the refused call, Get = %v; want NOT_FOUND (nothing created)", err)
	}
	if raw, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "increment", Args: json.RawMessage(`[2]`), CreateIfMissing: true}); err != nil || string(raw) != "2" {
		t.Fatalf("a good call then = %s, %v", raw, err)
	}
}

var argDecodes atomic.Int64

// countedArg counts its decodes.
type countedArg struct{ N int }

func (c *countedArg) UnmarshalJSON(b []byte) error {
	argDecodes.Add(1)
	return json.Unmarshal(b, &c.N)
}

type summerState struct{ Sum int }

// A get-or-create call (the Go client's and rivetctl's default) to an
// actor in memory decodes its arguments once: the check that keeps bad
// arguments from creating an actor runs only when the call might create.
func TestACallToALoadedActorDecodesItsArgumentsOnce(t *testing.T) {
	t.Parallel()
	def := rivet.Actor[summerState]{Name: "summer", Actions: rivet.Actions[summerState]{
		"add": rivet.Action(func(c *rivet.ActionCtx[summerState], a countedArg) (int, error) {
			c.State.Sum += a.N
			return c.State.Sum, nil
		}),
	}}
	e := newEnv(t, counterReg(t, def), nil)
	ref := runtime.Ref{Name: "summer", Key: []string{"k"}}
	for i := 0; i < 3; i++ {
		before := argDecodes.Load()
		if _, err := e.host.Call(ctx(t), runtime.CallRequest{Ref: ref, Action: "add", Args: json.RawMessage(`[1]`), CreateIfMissing: true}); err != nil {
			t.Fatal(err)
		}
		if n := argDecodes.Load() - before; i > 0 && n != 1 {
			t.Errorf("call %d, to an actor in memory, decoded its argument %d times", i+1, n)
		}
	}
}
