package runtime_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/workflow"
)

// A Scheduler kept past its turn (an ActionCtx or StepCtx stored away)
// refuses to schedule, cancel or destroy: it would change the actor's
// calls without the gate, and no commit would carry the change.
func TestASchedulerKeptPastItsTurnRefuses(t *testing.T) {
	var (
		mu   sync.Mutex
		kept []rivet.Scheduler
	)
	keep := func(s rivet.Scheduler) {
		mu.Lock()
		kept = append(kept, s)
		mu.Unlock()
	}
	keeper := rivet.Actor[tickState]{
		Name:   "keeper",
		Queues: rivet.Queues{"go": rivet.QueueOf[int]()},
		Actions: rivet.Actions[tickState]{
			"keep": rivet.Action0(func(c *rivet.ActionCtx[tickState]) (int, error) {
				keep(c.Schedule())
				return 0, nil
			}),
			"noop": rivet.Action0(func(c *rivet.ActionCtx[tickState]) (int, error) { return 0, nil }),
			// churn changes the calls in its turn (and leaves none).
			"churn": rivet.Action0(func(c *rivet.ActionCtx[tickState]) (int, error) {
				id, err := c.Schedule().After(time.Hour, "noop")
				if err != nil {
					return 0, err
				}
				_, err = c.Schedule().Cancel(id)
				return 0, err
			}),
		},
		Run: func(ctx *workflow.Ctx[tickState]) error {
			return ctx.Loop("loop", func(lc *workflow.Ctx[tickState]) error {
				if _, err := workflow.Next[int](lc, "wait-go"); err != nil {
					return err
				}
				return lc.Step("keep", func(sc *workflow.StepCtx[tickState]) error {
					keep(sc.Schedule())
					return nil
				})
			})
		},
	}
	e := newEnv(t, counterReg(t, keeper), nil)
	callInt(t, e.host, "keeper", "k", "keep", true)
	send(t, e.host, "keeper", "k", "go", 1)
	waitFor(t, "the step to keep its Scheduler", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(kept) == 2
	})
	callInt(t, e.host, "keeper", "k", "noop", false) // a turn after the step's: that one has ended
	for i, s := range kept {
		_, err := s.After(time.Hour, "noop")
		if !errors.Is(err, rivet.ErrInternal) || !strings.Contains(err.Error(), "after its turn ended") {
			t.Fatalf("kept Scheduler %d: After = %v, want refused", i, err)
		}
		if _, err := s.Every("x", time.Hour, "noop"); !errors.Is(err, rivet.ErrInternal) {
			t.Fatalf("kept Scheduler %d: Every = %v, want refused", i, err)
		}
		if _, err := s.Cron("y", "@daily", "noop"); !errors.Is(err, rivet.ErrInternal) {
			t.Fatalf("kept Scheduler %d: Cron = %v, want refused", i, err)
		}
		if _, err := s.Cancel("x"); !errors.Is(err, rivet.ErrInternal) {
			t.Fatalf("kept Scheduler %d: Cancel = %v, want refused", i, err)
		}
		if l := s.List(); len(l) != 0 {
			t.Fatalf("kept Scheduler %d: List = %v, want nothing", i, l)
		}
	}
	// Kept Schedulers used while live turns change the calls: with the race
	// detector on, any write of theirs to the calls shows.
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 50 {
			for _, s := range kept {
				_, _ = s.Every("x", time.Hour, "noop")
				_, _ = s.After(time.Hour, "noop")
			}
		}
	})
	for range 20 {
		callInt(t, e.host, "keeper", "k", "churn", false)
	}
	wg.Wait()
	if in := inspect(t, e.host, "keeper", "k"); len(in.Schedules) != 0 {
		t.Fatalf("calls scheduled: %+v", in.Schedules)
	}
}
