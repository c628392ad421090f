package runtime_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/workflow"
)

// A retry --from an entry after a step whose compensation failed for good
// keeps that step, but not its handler's outcome: the operator retried
// (the service behind the compensation fixed), so when the run fails and
// rolls back again the handler runs again, from its first attempt, rather
// than the rollback stopping there at once with the old error. A
// compensation that succeeded stays done: its step is not run again, so
// it is not undone twice.
func TestRetryFromAfterAFailedCompensationRunsItsHandlerAgain(t *testing.T) {
	t.Parallel()
	s := newFixableSaga(t, workflow.StepOptions{Name: "hotel", MaxRetries: 1, RetryBackoffBase: 10 * time.Millisecond, RetryBackoffMax: 10 * time.Millisecond})
	createUntilFailed(t, s.e, s.ref)
	if he := s.entry("hotel"); he.RollbackError != "hotel service down" || he.RollbackAttempts != 2 {
		t.Fatalf("hotel after the rollback = %+v, want its compensation failed after 2 attempts", he)
	}
	s.retryFromPayWithTheHotelUp()
	msg := inspect(t, s.e.host, "fixsaga", "f").WorkflowError
	if !strings.Contains(msg, "payment refused") || strings.Contains(msg, "rollback of step") {
		t.Fatalf("workflow error %q after the retry, want the payment's alone (the rollback done)", msg)
	}
	// car was compensated by the first rollback and not run again: once.
	if raw, err := call(t, s.e.host, "fixsaga", "f", "getState", false); err != nil || string(raw) != `{"undone":3}` {
		t.Fatalf("state %s %v, want flight, hotel and car each undone once", raw, err)
	}
}

// A plain retry after a rollback that stopped at a failed compensation
// runs again from the first step whose compensation succeeded (car), not
// from the failed one's (hotel): the hotel's booking was never undone, so
// running its step again would book it twice. The hotel's handler runs
// again, afresh, when the retried run rolls back.
func TestAPlainRetryAfterAFailedCompensationKeepsItsStep(t *testing.T) {
	t.Parallel()
	s := newFixableSaga(t, workflow.StepOptions{Name: "hotel", MaxRetries: 1, RetryBackoffBase: 10 * time.Millisecond, RetryBackoffMax: 10 * time.Millisecond})
	createUntilFailed(t, s.e, s.ref)
	if he := s.entry("hotel"); he.RollbackError != "hotel service down" || !s.entry("car").RollbackDone {
		t.Fatalf("hotel after the rollback = %+v, want its compensation failed after the car's was done", he)
	}
	s.hotelUp.Store(true)
	s.hotelAttempt.Store(0)
	removed, err := s.e.host.RetryWorkflow(ctx(t), s.ref, "")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried workflow to roll back", 20*time.Second, func() bool {
		return inspect(t, s.e.host, "fixsaga", "f").WorkflowStatus == runtime.WorkflowFailed
	})
	if n := s.hotelBooked.Load(); n != 1 {
		t.Fatalf("the hotel's step ran %d times (the retry removed %d entries), want once: its booking was never undone", n, removed)
	}
	if he := s.entry("hotel"); !he.RollbackDone || he.RollbackAttempts != 1 || s.hotelAttempt.Load() != 1 {
		t.Fatalf("hotel after the retried run's rollback = %+v, handler's last attempt %d; want it run again and rolled back at its first attempt", he, s.hotelAttempt.Load())
	}
	// car twice (it ran twice), hotel and flight once each.
	if raw, err := call(t, s.e.host, "fixsaga", "f", "getState", false); err != nil || string(raw) != `{"undone":4}` {
		t.Fatalf("state %s %v, want car undone twice, hotel and flight once", raw, err)
	}
}

// The same for a handler cut off while it waited to be retried, by a
// cancel: its attempts do not carry over into the retried run, which would
// otherwise wait out the old backoff (an hour here) and go on counting.
func TestRetryFromAfterARollbackCancelledInItsBackoffStartsTheHandlerAfresh(t *testing.T) {
	t.Parallel()
	s := newFixableSaga(t, workflow.StepOptions{Name: "hotel", MaxRetries: 3, RetryBackoffBase: time.Hour, RetryBackoffMax: time.Hour})
	if _, _, err := s.e.host.GetOrCreate(ctx(t), s.ref, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the hotel's handler to fail once", 20*time.Second, func() bool { return s.entry("hotel").RollbackAttempts == 1 })
	if _, err := s.e.host.CancelWorkflow(ctx(t), s.ref, "hotel down for the day"); err != nil {
		t.Fatal(err)
	}
	h, err := s.e.host.History(ctx(t), s.ref)
	if err != nil {
		t.Fatal(err)
	}
	if he := s.entry("hotel"); h.WorkflowStatus != runtime.WorkflowCancelled || he.RollbackDone || he.RollbackError != "" || he.RollbackRetryError != "hotel service down" {
		t.Fatalf("after the cancel: workflow %s, hotel %+v; want cancelled, the handler's attempt failed and not retried", h.WorkflowStatus, he)
	}
	s.retryFromPayWithTheHotelUp()
}

// fixableSaga is a saga (flight, hotel, car, each compensated, then a
// payment that always fails) whose hotel compensation fails until the
// hotel is up.
type fixableSaga struct {
	t       *testing.T
	e       *env
	ref     runtime.Ref
	hotelUp atomic.Bool
	// hotelAttempt is the attempt number of the hotel handler's last run.
	hotelAttempt atomic.Int32
	// hotelBooked counts the runs of the hotel's step body.
	hotelBooked atomic.Int32
}

func newFixableSaga(t *testing.T, hotel workflow.StepOptions) *fixableSaga {
	s := &fixableSaga{t: t, ref: runtime.Ref{Name: "fixsaga", Key: []string{"f"}}}
	reserve := func(c *workflow.Ctx[retrySagaState], opts workflow.StepOptions, book func(*workflow.StepCtx[retrySagaState]), undo func(*workflow.StepCtx[retrySagaState]) error) error {
		_, err := workflow.StepWithRollback(c, opts,
			func(sc *workflow.StepCtx[retrySagaState]) (int, error) { book(sc); return 1, nil },
			func(sc *workflow.StepCtx[retrySagaState], _ int) error {
				if err := undo(sc); err != nil {
					return err
				}
				sc.State.Undone++
				return nil
			})
		return err
	}
	ok := func(*workflow.StepCtx[retrySagaState]) error { return nil }
	booked := func(*workflow.StepCtx[retrySagaState]) {}
	saga := rivet.Actor[retrySagaState]{
		Name: "fixsaga",
		Run: func(ctx *workflow.Ctx[retrySagaState]) error {
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if err := reserve(ctx, workflow.StepOptions{Name: "flight"}, booked, ok); err != nil {
				return err
			}
			if err := reserve(ctx, hotel, func(*workflow.StepCtx[retrySagaState]) { s.hotelBooked.Add(1) }, func(sc *workflow.StepCtx[retrySagaState]) error {
				s.hotelAttempt.Store(int32(sc.Attempt()))
				if !s.hotelUp.Load() {
					return rivet.UserError("hotel.down", "hotel service down", nil)
				}
				return nil
			}); err != nil {
				return err
			}
			if err := reserve(ctx, workflow.StepOptions{Name: "car"}, booked, ok); err != nil {
				return err
			}
			return ctx.Step("pay", func(*workflow.StepCtx[retrySagaState]) error {
				return workflow.Rollback(errors.New("payment refused"))
			})
		},
		Actions: rivet.Actions[retrySagaState]{"getState": rivet.Query(func(c *rivet.ActionCtx[retrySagaState]) (retrySagaState, error) { return *c.State, nil })},
	}
	s.e = newEnv(t, counterReg(t, saga), nil)
	return s
}

func (s *fixableSaga) entry(path string) runtime.HistoryEntry {
	s.t.Helper()
	h, err := s.e.host.History(ctx(s.t), s.ref)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, he := range h.Entries {
		if he.Path == path {
			return he
		}
	}
	return runtime.HistoryEntry{}
}

// retryFromPayWithTheHotelUp brings the hotel up, retries the workflow
// from its payment (after the hotel's step, which the retry keeps) and
// checks that the run that fails again rolls back whole: the hotel's
// handler ran again, from its first attempt, and the flight's after it.
func (s *fixableSaga) retryFromPayWithTheHotelUp() {
	t := s.t
	t.Helper()
	s.hotelUp.Store(true)
	s.hotelAttempt.Store(0)
	if _, err := s.e.host.RetryWorkflow(ctx(t), s.ref, "pay"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retried workflow to roll back", 20*time.Second, func() bool {
		return inspect(t, s.e.host, "fixsaga", "f").WorkflowStatus == runtime.WorkflowFailed
	})
	if he := s.entry("hotel"); !he.RollbackDone || he.RollbackError != "" || he.RollbackRetryError != "" || he.RollbackAttempts != 1 || s.hotelAttempt.Load() != 1 {
		t.Fatalf("hotel after the retried run's rollback = %+v, handler's last attempt %d; want it run again and rolled back at its first attempt", he, s.hotelAttempt.Load())
	}
	if he := s.entry("flight"); !he.RollbackDone {
		t.Fatalf("flight after the retried run's rollback = %+v, want rolled back", he)
	}
}

type bookedState struct {
	Booked int `json:"booked"`
}

// The entry a retry rewrites to clear its step's failed compensation
// (freshRollbacks) may be the one that carries the actor's newest state
// (the state lives in the history entries): rewritten, it keeps it, across
// a restart after a retry --from and after a plain one.
func TestARetryThatClearsAFailedCompensationKeepsTheStateItsStepSet(t *testing.T) {
	a := rivet.Actor[bookedState]{
		Name: "booked",
		Run: func(ctx *workflow.Ctx[bookedState]) error {
			if err := ctx.RollbackCheckpoint("cp"); err != nil {
				return err
			}
			if _, err := workflow.StepWithRollback(ctx, workflow.StepOptions{Name: "book", MaxRetries: workflow.NoRetries},
				func(s *workflow.StepCtx[bookedState]) (int, error) { s.State.Booked = 7; return 1, nil },
				func(s *workflow.StepCtx[bookedState], _ int) error { return errors.New("down") }); err != nil {
				return err
			}
			return ctx.Step("pay", func(*workflow.StepCtx[bookedState]) error { return workflow.Rollback(errors.New("refused")) })
		},
		Actions: rivet.Actions[bookedState]{"getState": rivet.Query(func(c *rivet.ActionCtx[bookedState]) (bookedState, error) { return *c.State, nil })},
	}
	e := newEnv(t, counterReg(t, a), nil)
	ref := runtime.Ref{Name: "booked", Key: []string{"p"}}
	createUntilFailed(t, e, ref)
	raw, err := call(t, e.host, "booked", "p", "getState", false)
	if string(raw) != `{"booked":7}` {
		t.Fatalf("state %s %v, want booked 7", raw, err)
	}
	for _, from := range []string{"pay", ""} {
		if _, err := e.host.RetryWorkflow(ctx(t), ref, from); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the retried workflow to fail again", 20*time.Second, func() bool {
			return inspect(t, e.host, "booked", "p").WorkflowStatus == runtime.WorkflowFailed
		})
		e.restart()
		if raw, err := call(t, e.host, "booked", "p", "getState", false); string(raw) != `{"booked":7}` {
			t.Fatalf("after a retry from %q and a restart: state %s %v, want booked 7", from, raw, err)
		}
	}
}
