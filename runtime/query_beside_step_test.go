package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

type tellerState struct {
	Balance int `json:"balance"`
}

// tellerChans are a teller's hooks: the slow step's body signals entered
// and holds until release; the slow query signals queried and holds until
// answer; the step after the slow one closes after.
type tellerChans struct {
	entered, release, queried, answer, after chan struct{}
}

func newTellerChans() *tellerChans {
	return &tellerChans{make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})}
}

// teller's workflow commits a balance of 100, then runs a slow step that
// sets it to 999 (a payment service's call), then one that adds 1.
func teller(ch *tellerChans) rivet.Actor[tellerState] {
	var entered, queried, after sync.Once
	return rivet.Actor[tellerState]{
		Name: "teller",
		Run: func(c *workflow.Ctx[tellerState]) error {
			if err := c.Step("open", func(s *workflow.StepCtx[tellerState]) error {
				s.State.Balance = 100
				return nil
			}); err != nil {
				return err
			}
			if err := c.Step("slow", func(s *workflow.StepCtx[tellerState]) error {
				s.State.Balance = 999
				entered.Do(func() { close(ch.entered) })
				select {
				case <-ch.release:
					return nil
				case <-s.Context().Done():
					return s.Context().Err()
				}
			}); err != nil {
				return err
			}
			return c.Step("after", func(s *workflow.StepCtx[tellerState]) error {
				s.State.Balance++
				after.Do(func() { close(ch.after) })
				return nil
			})
		},
		Actions: rivet.Actions[tellerState]{
			"balance": rivet.Query(func(c *rivet.ActionCtx[tellerState]) (int, error) { return c.State.Balance, nil }),
			"bump": rivet.Action0(func(c *rivet.ActionCtx[tellerState]) (int, error) {
				c.State.Balance++
				return c.State.Balance, nil
			}),
			// Calls back into its own actor, as a query would to join
			// the answers of several.
			"balanceVia": rivet.Query(func(c *rivet.ActionCtx[tellerState]) (int, error) {
				return rivet.CallQuery[int](c.Context(), c.Client().Get("teller", c.Key()...), "balance")
			}),
			"bumpVia": rivet.Query(func(c *rivet.ActionCtx[tellerState]) (int, error) {
				return rivet.Call[int](c.Context(), c.Client().Get("teller", c.Key()...), "bump")
			}),
			"scheduled": rivet.Query(func(c *rivet.ActionCtx[tellerState]) (int, error) { return len(c.Schedule().List()), nil }),
			"slowBalance": rivet.Query(func(c *rivet.ActionCtx[tellerState]) (int, error) {
				queried.Do(func() { close(ch.queried) })
				select {
				case <-ch.answer:
					return c.State.Balance, nil
				case <-c.Context().Done():
					return 0, c.Context().Err()
				}
			}),
		},
	}
}

// startTeller creates a teller keyed key and waits for its slow step's
// body; release ends it (once).
func startTeller(t *testing.T, key string) (*env, runtime.Ref, *tellerChans, func()) {
	t.Helper()
	ch := newTellerChans()
	released := sync.OnceFunc(func() { close(ch.release) })
	e := newEnv(t, counterReg(t, teller(ch)), nil)
	t.Cleanup(released)
	ref := runtime.Ref{Name: "teller", Key: []string{key}}
	if _, err := e.host.Create(ctx(t), ref, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the slow step did not start")
	}
	return e, ref, ch, released
}

func query(ctx context.Context, h *runtime.Host, ref runtime.Ref, action string) (int, error) {
	raw, err := h.Call(ctx, runtime.CallRequest{Ref: ref, Action: action, ReadOnly: true})
	if err != nil {
		return 0, err
	}
	var n int
	err = json.Unmarshal(raw, &n)
	return n, err
}

// A query answers while a Step body runs, from the state as committed
// before the step (a trial's order answered its status only when its
// payment step ended; Temporal answers a query while an activity runs,
// and Rivet's actions run beside its workflow). State-changing actions
// still wait for the step; a query beside it may call its own actor's
// queries, and a state-changing call from it fails at once rather than
// wait for the step that waits for it.
func TestAQueryAnswersWhileAStepBodyRuns(t *testing.T) {
	t.Parallel()
	e, ref, ch, released := startTeller(t, "t1")
	// The step holds until released, which comes after these: each must
	// be answered while the body runs.
	qctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if n, err := query(qctx, e.host, ref, "balance"); err != nil || n != 100 {
		t.Fatalf("query while the step runs: %d, %v; want 100 (committed before the step; 999 is the body's, not committed)", n, err)
	}
	if n, err := query(qctx, e.host, ref, "balanceVia"); err != nil || n != 100 {
		t.Fatalf("query calling its own actor's query while the step runs: %d, %v; want 100", n, err)
	}
	if n, err := query(qctx, e.host, ref, "scheduled"); err != nil || n != 0 {
		t.Fatalf("query listing the actor's calls while the step runs: %d, %v; want 0", n, err)
	}
	_, err := query(qctx, e.host, ref, "bumpVia")
	var re *rivet.Error
	if !errors.As(err, &re) || re.Group != "actor" || re.Code != "deadlock" {
		t.Fatalf("query calling its own actor's state-changing action while the step runs: %v; want reason deadlock at once", err)
	}
	// A state-changing action waits for the step.
	bumped := make(chan error, 1)
	go func() {
		_, err := e.host.Call(qctx, runtime.CallRequest{Ref: ref, Action: "bump"})
		bumped <- err
	}()
	// Many queries at once, beside the step and each other.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			if n, err := query(qctx, e.host, ref, "balance"); err != nil || n != 100 {
				errs <- errors.Join(err, errors.New("concurrent query: wrong balance"))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	select {
	case err := <-bumped:
		t.Fatalf("a state-changing action ran while the step's body runs (%v)", err)
	default:
	}
	released()
	if err := <-bumped; err != nil {
		t.Fatalf("bump after the step: %v", err)
	}
	<-ch.after
	waitFor(t, "the workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "teller", "t1").WorkflowStatus == runtime.WorkflowCompleted
	})
	if n, err := query(qctx, e.host, ref, "balance"); err != nil || n != 1001 {
		t.Fatalf("query after the workflow: %d, %v; want 1001 (999, bumped, then the last step's 1)", n, err)
	}
}

// A query beside a Step body that is still running when the body returns
// holds the step's commit: nothing of the actor's runs beside a turn but
// a step's body, so the turns after the step (its next step here) wait.
func TestAStepWaitsForTheQueryBesideIt(t *testing.T) {
	t.Parallel()
	e, ref, ch, released := startTeller(t, "t2")
	qctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	answered := make(chan int, 1)
	go func() {
		n, err := query(qctx, e.host, ref, "slowBalance")
		if err != nil {
			t.Error(err)
		}
		answered <- n
	}()
	select {
	case <-ch.queried:
	case <-time.After(20 * time.Second):
		t.Fatal("the slow query did not start beside the step")
	}
	released()
	// The next step must not run while the query is beside the step.
	select {
	case <-ch.after:
		t.Fatal("the step after ran while a query was beside the slow step")
	case <-time.After(200 * time.Millisecond):
	}
	close(ch.answer)
	if n := <-answered; n != 100 {
		t.Fatalf("slow query answered %d, want 100 (the state before the slow step)", n)
	}
	select {
	case <-ch.after:
	case <-time.After(20 * time.Second):
		t.Fatal("the step after did not run once the query ended")
	}
}
