package workflow_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

type rst struct{ N int }

// SleepUntil of the zero time is a deadline long past: the sleep ends at
// once, rather than blocking with no deadline to wake it.
func TestSleepUntilTheZeroTimeEndsAtOnce(t *testing.T) {
	h := newHost(rst{})
	out := drive(t, h, func(c *workflow.Ctx[rst]) error {
		if err := c.SleepUntil("z", time.Time{}); err != nil {
			return err
		}
		return c.Step("s", func(s *workflow.StepCtx[rst]) error { s.State.N++; return nil })
	})
	if out.Status != workflow.RunCompleted || h.State().N != 1 {
		t.Fatalf("outcome %+v, state %+v", out, h.State())
	}
}

// A version gate in a try block new to an instance in flight takes the old
// path: the block stands in its enclosing scope, which still holds entries
// the run has not reached.
func TestAVersionGateInATryBlockNewToAnInstanceTakesTheOldPath(t *testing.T) {
	h := inFlight(t, func(c *logCtx) error {
		if err := note(c, "a"); err != nil {
			return err
		}
		return wait(c, "w")
	})
	h.Send("q", job{1})
	var got []int
	out := drive(t, h, func(c *logCtx) error {
		if _, err := c.Try("t", func(c *logCtx) error {
			v, err := c.GetVersion("gate", 2)
			if err != nil {
				return err
			}
			got = append(got, v)
			if v == 2 {
				return note(c, "new")
			}
			return nil
		}); err != nil {
			return err
		}
		if err := note(c, "a"); err != nil {
			return err
		}
		return wait(c, "w")
	})
	if out.Status != workflow.RunCompleted || len(got) == 0 || got[0] != 1 {
		t.Fatalf("outcome %+v, versions %v, log %v", out, got, h.State().Log)
	}
}

// A race loser's attempt cut off mid-body is abandoned: it commits nothing,
// its changes to the state included, as with the runtime's host; the test
// host must not let them ride with the winner's next commit.
func TestTheTestHostDropsAnAbandonedAttemptsState(t *testing.T) {
	h := newHost(rst{})
	out := drive(t, h, func(c *workflow.Ctx[rst]) error {
		_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[rst, int]{
			{Name: "slow", Run: func(c *workflow.Ctx[rst]) (int, error) {
				return workflow.Step(c, "s", func(s *workflow.StepCtx[rst]) (int, error) {
					s.State.N += 100
					// Hang once the fast branch sleeps too (two timers: its
					// sleep and this step's timeout): seeing the body hang
					// before, the driver would move the clock to the
					// timeout, and the timed-out attempt's state would
					// roll forward.
					if err := h.Clock.WaitTimers(s.Context(), 2); err != nil {
						return 0, err
					}
					h.Hang(s.Context()) // until it loses
					return 0, s.Context().Err()
				})
			}},
			{Name: "fast", Run: func(c *workflow.Ctx[rst]) (int, error) { return 1, c.Sleep("z", time.Second) }},
		})
		if err != nil {
			return err
		}
		return c.Step("after", func(s *workflow.StepCtx[rst]) error { s.State.N++; return nil })
	})
	if out.Status != workflow.RunCompleted || h.State().N != 1 {
		t.Fatalf("outcome %+v, state %+v, want N=1", out, h.State())
	}
}

// An ephemeral step's record waits for the next commit; an eviction (not a
// crash) before one must not lose it: the original engine flushes on
// eviction, and the runtime defers nothing, so the step runs once.
func TestTheTestHostCommitsEphemeralStepsOnEviction(t *testing.T) {
	h := newHost(rst{})
	runs := 0
	wf := func(c *workflow.Ctx[rst]) error {
		if err := c.StepWith(workflow.StepOptions{Name: "e", Ephemeral: true}, func(s *workflow.StepCtx[rst]) error {
			runs++
			s.State.N++
			return nil
		}); err != nil {
			return err
		}
		_, err := workflow.Next[job](c, "w")
		return err
	}
	if out := drive(t, h, wf); out.Status != workflow.RunYielded || h.State().N != 1 {
		t.Fatalf("evicted waiting for the message: %+v, state %+v", out, h.State())
	}
	h.Send("q", job{1})
	if out := drive(t, h, wf); out.Status != workflow.RunCompleted || runs != 1 || h.State().N != 1 {
		t.Fatalf("outcome %+v, state %+v, step runs %d, want 1", out, h.State(), runs)
	}
}

// A step whose value is null (a nil slice) records no output; its rollback
// handler still gets the value (nil), rather than fail the rollback on
// decoding nothing.
func TestTheRollbackOfAStepWithANullValueGetsIt(t *testing.T) {
	h := newHost(rst{})
	undone := 0
	out := drive(t, h, func(c *workflow.Ctx[rst]) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		if _, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "s"},
			func(*workflow.StepCtx[rst]) ([]string, error) { return nil, nil },
			func(_ *workflow.StepCtx[rst], v []string) error { undone++; return nil }); err != nil {
			return err
		}
		return errors.New("fail")
	})
	var rf *workflow.RollbackFailedError
	if out.Status != workflow.RunFailed || errors.As(out.Err, &rf) || undone != 1 {
		t.Fatalf("outcome %+v, handler ran %d times", out, undone)
	}
}

// A negative message count is a mistake, refused alike by Next and
// NextBatch (Next took it for one).
func TestANegativeMessageCountIsRefused(t *testing.T) {
	for name, recv := range map[string]func(*workflow.Ctx[rst]) error{
		"Next": func(c *workflow.Ctx[rst]) error {
			_, err := workflow.Next[int](c, "r", workflow.NextOptions{Count: -1})
			return err
		},
		"NextBatch": func(c *workflow.Ctx[rst]) error {
			_, err := workflow.NextBatch[int](c, "r", workflow.NextOptions{Count: -1})
			return err
		},
	} {
		out := drive(t, newHost(rst{}), recv)
		if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrInvalid) {
			t.Errorf("%s: outcome %s (%v), want failed with ErrInvalid", name, out.Status, out.Err)
		}
	}
}

// A deadline that history cannot record (after the year 9999) is refused as
// invalid, naming it, rather than failing the workflow on recording it.
func TestSleepUntilAnUnrecordableTimeIsRefused(t *testing.T) {
	out := drive(t, newHost(rst{}), func(c *workflow.Ctx[rst]) error {
		return c.SleepUntil("far", time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC))
	})
	if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrInvalid) || !strings.Contains(out.Err.Error(), "12000") {
		t.Fatalf("outcome %s (%v), want failed with ErrInvalid naming the time", out.Status, out.Err)
	}
}

// A deadline in a zone history cannot record (an offset of a day or more,
// which RFC 3339 cannot write) is refused as invalid too, rather than
// failing the workflow on recording it.
func TestSleepUntilATimeInAnUnrecordableZoneIsRefused(t *testing.T) {
	far := time.FixedZone("far", 25*3600)
	out := drive(t, newHost(rst{}), func(c *workflow.Ctx[rst]) error {
		return c.SleepUntil("z", time.Now().Add(time.Hour).In(far))
	})
	if out.Status != workflow.RunFailed || !errors.Is(out.Err, workflow.ErrInvalid) {
		t.Fatalf("outcome %s (%v), want failed with ErrInvalid naming the time", out.Status, out.Err)
	}
}
