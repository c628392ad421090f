package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
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
	// scheduling: the slow step's body schedules calls until released,
	// counting them in scheduled.
	scheduling bool
	scheduled  atomic.Int64
}

func newTellerChans() *tellerChans {
	return &tellerChans{entered: make(chan struct{}), release: make(chan struct{}), queried: make(chan struct{}), answer: make(chan struct{}), after: make(chan struct{})}
}

// teller's workflow commits a balance of 100, then runs a slow step that
// sets it to 999 (a payment service's call), then one that adds 1.
func teller(ch *tellerChans) rivet.Actor[tellerState] {
	var entered, queried, after sync.Once
	return rivet.Actor[tellerState]{
		Name:   "teller",
		Queues: rivet.Queues{"asks": rivet.QueueOf[int]()},
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
				for {
					if ch.scheduling {
						if _, err := s.Schedule().After(time.Hour, "bump"); err != nil {
							return err
						}
						ch.scheduled.Add(1)
					}
					select {
					case <-ch.release:
						return nil
					case <-s.Context().Done():
						return s.Context().Err()
					case <-time.After(time.Millisecond):
						if !ch.scheduling {
							continue
						}
					}
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
			// A query's mistake: it cannot schedule (nor replace a
			// recurring call, which touched the calls first).
			"every": rivet.Query(func(c *rivet.ActionCtx[tellerState]) (int, error) {
				_, err := c.Schedule().Every("tick", time.Minute, "bump")
				return 0, err
			}),
			// Waits for its own workflow to take a message, which it
			// does only after the step the query is beside.
			"askSelf": rivet.Query(func(c *rivet.ActionCtx[tellerState]) (rivet.SendResult, error) {
				return rivet.SendWait(c.Context(), c.Client().Get("teller", c.Key()...), "asks", 1, 10*time.Second)
			}),
			"viaRelay": rivet.Query(func(c *rivet.ActionCtx[tellerState]) (int, error) {
				return rivet.CallQuery[int](c.Context(), c.Client().GetOrCreate("tellerRelay", c.Key()...), "get")
			}),
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

// relay's poke calls a teller's state-changing action from a turn of its
// own; get is a query.
var tellerRelay = rivet.Actor[tellerState]{
	Name: "tellerRelay",
	Actions: rivet.Actions[tellerState]{
		"get": rivet.Query(func(c *rivet.ActionCtx[tellerState]) (int, error) { return c.State.Balance, nil }),
		"poke": rivet.Action0(func(c *rivet.ActionCtx[tellerState]) (int, error) {
			return rivet.Call[int](c.Context(), c.Client().Get("teller", c.Key()...), "bump")
		}),
	},
}

// startTeller creates a teller keyed key and waits for its slow step's
// body; release ends it (once). scheduling: the body schedules calls.
func startTeller(t *testing.T, key string, scheduling ...bool) (*env, runtime.Ref, *tellerChans, func()) {
	t.Helper()
	ch := newTellerChans()
	ch.scheduling = len(scheduling) > 0 && scheduling[0]
	released := sync.OnceFunc(func() { close(ch.release) })
	e := newEnv(t, counterReg(t, teller(ch), tellerRelay), nil)
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

// A query beside a step that tries to schedule (a recurring call, which
// replaces one of its name) fails and leaves the actor's calls alone: the
// body scheduling beside it loses none.
func TestAQueryBesideAStepSchedulesNothing(t *testing.T) {
	t.Parallel()
	e, ref, ch, released := startTeller(t, "t3", true)
	qctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 100 {
		if _, err := query(qctx, e.host, ref, "every"); err == nil || !strings.Contains(err.Error(), "cannot schedule") {
			t.Fatalf("a query scheduling beside a step: %v, want refused", err)
		}
	}
	released()
	waitFor(t, "the workflow to complete", 20*time.Second, func() bool {
		return inspect(t, e.host, "teller", "t3").WorkflowStatus == runtime.WorkflowCompleted
	})
	if got, want := len(inspect(t, e.host, "teller", "t3").Schedules), ch.scheduled.Load(); int64(got) != want {
		t.Fatalf("the actor has %d scheduled calls, its step's body scheduled %d", got, want)
	}
}

// A query beside a step that waits, through another actor, for a turn
// waiting for the step closes a cycle (the step ends only after the
// query): found at once, not waited out until the deadline. Relay's poke
// holds relay and waits for the teller's step to call bump; the query
// beside the step calls relay.
func TestACycleThroughAQueryBesideAStepIsFound(t *testing.T) {
	t.Parallel()
	e, ref, _, released := startTeller(t, "t4")
	rel := runtime.Ref{Name: "tellerRelay", Key: []string{"t4"}}
	if _, err := e.host.Create(ctx(t), rel, nil); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	poked := make(chan error, 1)
	go func() {
		_, err := e.host.Call(cctx, runtime.CallRequest{Ref: rel, Action: "poke"})
		poked <- err
	}()
	waitFor(t, "poke to wait for the teller's step", 20*time.Second, func() bool { return e.host.GateWaiters(ref) == 1 })
	t0 := time.Now()
	_, err := query(cctx, e.host, ref, "viaRelay")
	var re *rivet.Error
	if !errors.As(err, &re) || re.Code != "deadlock" {
		t.Fatalf("a query beside the step calling relay, whose turn waits for the step: %v after %v; want reason deadlock at once", err, time.Since(t0))
	}
	released()
	if err := <-poked; err != nil {
		t.Fatalf("poke once the step ended: %v", err)
	}
}

// A query beside a step that sends to its own actor and waits for its
// workflow to take the message (which it can only after the step, which
// waits for the query) is refused at once, as the same call from a turn
// of the actor is.
func TestAQueryBesideAStepCannotWaitForItsOwnWorkflow(t *testing.T) {
	t.Parallel()
	e, ref, _, _ := startTeller(t, "t5")
	cctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	t0 := time.Now()
	_, err := e.host.Call(cctx, runtime.CallRequest{Ref: ref, Action: "askSelf", ReadOnly: true})
	if !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Fatalf("a query beside the step waiting for its own workflow: %v after %v; want INVALID_ARGUMENT at once", err, time.Since(t0))
	}
}
