package workflow_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
)

func fetch(name string, v int) func(c *logCtx) (int, error) {
	return func(c *logCtx) (int, error) {
		return workflow.Step(c, "fetch-"+name, func(*logStep) (int, error) { return v, nil })
	}
}

func TestJoinCollectsValues(t *testing.T) {
	h := newHost(log{})
	var branchRuns atomic.Int32
	wf := func(c *logCtx) error {
		joined, err := workflow.Join(c, "fetch-summary", workflow.Branches[log, int]{
			"users":   func(c *logCtx) (int, error) { branchRuns.Add(1); return fetch("users", 3)(c) },
			"orders":  func(c *logCtx) (int, error) { branchRuns.Add(1); return fetch("orders", 4)(c) },
			"revenue": func(c *logCtx) (int, error) { branchRuns.Add(1); return fetch("revenue", 5)(c) },
		})
		if err != nil {
			return err
		}
		return c.Step("save-summary", func(s *logStep) error {
			s.State.N = joined["users"]*100 + joined["orders"]*10 + joined["revenue"]
			return nil
		})
	}
	out := drive(t, h, wf)
	if out.Status != workflow.RunCompleted || h.State().N != 345 {
		t.Fatalf("outcome %+v n=%d", out, h.State().N)
	}
	for _, p := range []string{"fetch-summary/users/fetch-users", "fetch-summary/orders/fetch-orders", "fetch-summary/revenue/fetch-revenue"} {
		entryAt(t, h.History(), p)
	}
	// Settled: replayed from its record.
	if out := drive(t, h, wf); out.Status != workflow.RunCompleted || branchRuns.Load() != 3 {
		t.Fatalf("replay ran branches again: %d", branchRuns.Load())
	}
}

// TestJoinFailureDoesNotCancelSiblings: one branch fails at once, the other
// sleeps and then completes; the join waits for both and reports the
// failure by branch.
func TestJoinFailureDoesNotCancelSiblings(t *testing.T) {
	h := newHost(log{})
	out := drive(t, h, func(c *logCtx) error {
		_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
			"bad": func(c *logCtx) (int, error) {
				return workflow.StepOpts(c, workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(*logStep) (int, error) {
					return 0, codedErr{}
				})
			},
			"slow": func(c *logCtx) (int, error) {
				if err := c.Sleep("wait", time.Hour); err != nil {
					return 0, err
				}
				return 1, c.Step("s", func(s *logStep) error { s.State.N = 1; return nil })
			},
		})
		return err
	})
	je := failedWith[*workflow.JoinError](t, out)
	var coder interface{ ErrorCode() string }
	if len(je.Errors) != 1 || !errors.As(je.Errors["bad"], &coder) || coder.ErrorCode() != "card_declined" {
		t.Fatalf("join error %+v", je)
	}
	if h.State().N != 1 {
		t.Fatal("the slow branch was cancelled")
	}
	e := entryAt(t, h.History(), "j")
	if e.Status != workflow.StatusFailed || e.Branches["slow"].Status != workflow.StatusCompleted || e.Branches["bad"].Status != workflow.StatusFailed {
		t.Fatalf("join entry %+v", e)
	}
}

// TestJoinBranchesRunConcurrently: while one branch waits for a message and
// the other sleeps, the run reports both waits at once.
func TestJoinBranchesRunConcurrently(t *testing.T) {
	h := newHost(log{})
	done := make(chan workflow.Outcome, 1)
	go func() {
		done <- h.Run(context.Background(), func(c *logCtx) error {
			_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
				"msg": func(c *logCtx) (int, error) {
					m, err := workflow.Next[job](c, "wait", workflow.NextOptions{Names: []string{"jobs"}})
					return m.Body.N, err
				},
				"timer": func(c *logCtx) (int, error) { return 0, c.Sleep("nap", time.Minute) },
			})
			return err
		})
	}()
	w := <-h.Wakes()
	if !w.At.Equal(t0.Add(time.Minute)) || !reflect.DeepEqual(w.Queues, []string{"jobs"}) {
		t.Fatalf("waiting for %+v", w)
	}
	h.Send("jobs", job{1})
	w = <-h.Wakes()
	if !w.At.Equal(t0.Add(time.Minute)) || len(w.Queues) != 0 {
		t.Fatalf("then waiting for %+v", w)
	}
	h.Clock.Set(w.At)
	if out := <-done; out.Status != workflow.RunCompleted {
		t.Fatalf("outcome %+v", out)
	}
}

func TestRaceFirstSuccessWins(t *testing.T) {
	auction := func(c *logCtx) error {
		winner, amount, err := workflow.Race(c, "bid-or-expire", []workflow.RaceBranch[log, int]{
			{Name: "bid", Run: func(c *logCtx) (int, error) {
				bid, err := workflow.Next[job](c, "wait-bid")
				return bid.Body.N, err
			}},
			{Name: "expire", Run: func(c *logCtx) (int, error) {
				return 0, c.Sleep("auction-timeout", 24*time.Hour)
			}},
		})
		if err != nil {
			return err
		}
		return c.Step("finalize", func(s *logStep) error {
			s.State.Log = append(s.State.Log, winner)
			s.State.N = amount
			return nil
		})
	}
	t.Run("bid", func(t *testing.T) {
		h := newHost(log{})
		h.Send("bids", job{100})
		out := drive(t, h, auction)
		if out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"bid"}) || h.State().N != 100 {
			t.Fatalf("outcome %+v state %+v", out, h.State())
		}
		e := entryAt(t, h.History(), "bid-or-expire")
		if e.Winner != "bid" || e.Branches["expire"].Status != workflow.StatusCancelled {
			t.Fatalf("race entry %+v", e)
		}
		for _, e := range h.History() {
			if strings.HasPrefix(e.Path, "bid-or-expire/expire/") {
				t.Fatalf("loser history kept: %+v", e)
			}
		}
	})
	t.Run("expire", func(t *testing.T) {
		h := newHost(log{})
		out := drive(t, h, auction)
		if out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"expire"}) {
			t.Fatalf("outcome %+v state %+v", out, h.State())
		}
		if !h.Clock.Now().Equal(t0.Add(24 * time.Hour)) {
			t.Fatalf("expired at %v", h.Clock.Now())
		}
		entryAt(t, h.History(), "bid-or-expire/expire/auction-timeout")
		// The bid that comes later stays queued for whoever wants it.
		h.Send("bids", job{5})
		if out := drive(t, h, auction); out.Status != workflow.RunCompleted || len(h.Queue()) != 1 {
			t.Fatalf("replay %+v, queue %v", out, h.Queue())
		}
	})
}

// TestRaceCancelsLosers: the loser is in a step when the other branch wins;
// its context is cancelled, it stops, and nothing of it stays.
func TestRaceCancelsLosers(t *testing.T) {
	h := newHost(log{})
	var sawCancel atomic.Bool
	out := drive(t, h, func(c *logCtx) error {
		if err := c.Sleep("warm-up", time.Second); err != nil {
			return err
		}
		winner, value, err := workflow.Race(c, "primary-vs-timeout", []workflow.RaceBranch[log, string]{
			{Name: "primary", Run: func(c *logCtx) (string, error) {
				return workflow.Step(c, "call-primary", func(s *logStep) (string, error) {
					// The slow call: time passes once the other branch
					// sleeps (2 timers: its sleep and this step's timeout).
					if err := h.Clock.WaitTimers(s.Context(), 2); err != nil {
						return "", err
					}
					h.Clock.Advance(200 * time.Millisecond)
					<-s.Context().Done()
					sawCancel.Store(true)
					return "", s.Context().Err()
				})
			}},
			{Name: "timeout", Run: func(c *logCtx) (string, error) {
				if err := c.Sleep("primary-timeout", 200*time.Millisecond); err != nil {
					return "", err
				}
				return "timeout", nil
			}},
		})
		if err != nil {
			return err
		}
		return c.Step("record-choice", func(s *logStep) error {
			s.State.Log = append(s.State.Log, winner+"="+value)
			return nil
		})
	})
	if out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"timeout=timeout"}) || !sawCancel.Load() {
		t.Fatalf("outcome %+v log %v cancelled=%v", out, h.State().Log, sawCancel.Load())
	}
	for _, e := range h.History() {
		if strings.HasPrefix(e.Path, "primary-vs-timeout/primary") {
			t.Fatalf("loser history kept: %+v", e)
		}
	}
}

func TestRaceAllFail(t *testing.T) {
	h := newHost(log{})
	fail := func(c *logCtx) (int, error) {
		return workflow.StepOpts(c, workflow.StepOptions{Name: "s", MaxRetries: workflow.NoRetries}, func(*logStep) (int, error) {
			return 0, errors.New("no")
		})
	}
	out := drive(t, h, func(c *logCtx) error {
		_, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{{Name: "a", Run: fail}, {Name: "b", Run: fail}})
		return err
	})
	re := failedWith[*workflow.RaceError](t, out)
	if len(re.Errors) != 2 || re.Errors[0].Name != "a" || re.Errors[1].Name != "b" {
		t.Fatalf("race error %+v", re)
	}
}

// TestRaceBranchWithMessageWins: a branch that took a message wins when it
// finishes, even though another branch finished first, so that the message
// is not dropped with a loser's history.
func TestRaceBranchWithMessageWins(t *testing.T) {
	h := newHost(log{})
	h.Send("q", job{9})
	out := drive(t, h, func(c *logCtx) error {
		winner, v, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
			{Name: "consumer", Run: func(c *logCtx) (int, error) {
				m, err := workflow.Next[job](c, "take")
				if err != nil {
					return 0, err
				}
				return m.Body.N, c.Sleep("process", 10*time.Second)
			}},
			{Name: "quick", Run: func(c *logCtx) (int, error) { return -1, c.Sleep("nap", 5*time.Second) }},
		})
		if err != nil {
			return err
		}
		return c.Step("rec", func(s *logStep) error { s.State.Log = []string{winner}; s.State.N = v; return nil })
	})
	if out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"consumer"}) || h.State().N != 9 {
		t.Fatalf("outcome %+v state %+v", out, h.State())
	}
}

// TestRaceReplayPicksTheSameWinner: a crash after a branch's last commit but
// before the race recorded its winner, then a restart an hour later when the
// other branch's sleep is due too. The branch that finishes from its
// recorded history, earlier in workflow time, wins again.
func TestRaceReplayPicksTheSameWinner(t *testing.T) {
	for i := 0; i < 20; i++ {
		h := newHost(log{})
		wf := func(c *logCtx) error {
			winner, _, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
				{Name: "late", Run: func(c *logCtx) (int, error) { return 0, c.Sleep("nap", 10*time.Second) }},
				{Name: "work", Run: func(c *logCtx) (int, error) {
					return workflow.Step(c, "s", func(*logStep) (int, error) { return 1, nil })
				}},
			})
			if err != nil {
				return err
			}
			return c.Step("rec", func(s *logStep) error { s.State.Log = append(s.State.Log, winner); return nil })
		}
		// Commits: 1 race entry, 2 late's sleep deadline and 3 work's step
		// in either order, 4 the decision.
		h.CrashAt(4, false)
		out := h.Run(context.Background(), wf)
		if out.Status != workflow.RunYielded {
			t.Fatalf("crash run %+v", out)
		}
		h.Clock.Advance(time.Hour)
		out = drive(t, h, wf)
		if out.Status != workflow.RunCompleted || !reflect.DeepEqual(h.State().Log, []string{"work"}) {
			t.Fatalf("run %d: outcome %+v log %v", i, out, h.State().Log)
		}
	}
}

func TestJoinAndRaceRecordedBranchesMustMatch(t *testing.T) {
	h := newHost(log{})
	v1 := func(c *logCtx) error {
		_, err := workflow.Join(c, "j", workflow.Branches[log, int]{
			"a": func(c *logCtx) (int, error) { return 0, nil },
			"b": func(c *logCtx) (int, error) { m, err := workflow.Next[job](c, "wait"); return m.Body.N, err },
		})
		return err
	}
	if out := drive(t, h, v1); out.Status != workflow.RunYielded {
		t.Fatalf("v1 %+v", out)
	}
	for name, branches := range map[string]workflow.Branches[log, int]{
		"removed": {"a": func(*logCtx) (int, error) { return 0, nil }},
		"added": {
			"a": func(*logCtx) (int, error) { return 0, nil }, "b": func(*logCtx) (int, error) { return 0, nil },
			"c": func(*logCtx) (int, error) { return 0, nil },
		},
	} {
		out := drive(t, h, func(c *logCtx) error { _, err := workflow.Join(c, "j", branches); return err })
		de := failedWith[*workflow.DivergenceError](t, out)
		if want := map[string]string{"removed": "j/b", "added": "j/c"}[name]; de.Path != want {
			t.Fatalf("%s: divergence %+v", name, de)
		}
	}
}

// TestRaceReceiveTimesOutWhileAnotherBranchHoldsMessages: a branch cannot
// take messages while another branch holds them, but its receive timeout
// still fires.
func TestRaceReceiveTimesOutWhileAnotherBranchHoldsMessages(t *testing.T) {
	h := newHost(log{})
	h.Send("q", job{1})
	h.Send("q", job{2})
	out := drive(t, h, func(c *logCtx) error {
		winner, v, err := workflow.Race(c, "r", []workflow.RaceBranch[log, int]{
			{Name: "a", Run: func(c *logCtx) (int, error) {
				m, err := workflow.Next[job](c, "take")
				if err != nil {
					return 0, err
				}
				return m.Body.N, c.Sleep("process", time.Hour)
			}},
			{Name: "b", Run: func(c *logCtx) (int, error) {
				// Waits for a's claim: a took the first message first.
				if err := c.Sleep("let-a-start", time.Millisecond); err != nil {
					return 0, err
				}
				_, err := workflow.Next[job](c, "take", workflow.NextOptions{Timeout: 10 * time.Second})
				if errors.Is(err, workflow.ErrTimeout) {
					err = c.Step("timed-out", func(s *logStep) error {
						s.State.Times = append(s.State.Times, h.Clock.Now())
						return nil
					})
				}
				return -1, errors.Join(err, errors.New("b gives up"))
			}},
		})
		if err != nil {
			return err
		}
		return c.Step("rec", func(s *logStep) error { s.State.Log = []string{winner}; s.State.N = v; return nil })
	})
	want := []time.Time{t0.Add(10*time.Second + time.Millisecond)}
	if out.Status != workflow.RunCompleted || h.State().N != 1 || !reflect.DeepEqual(h.State().Times, want) {
		t.Fatalf("outcome %+v state %+v", out, h.State())
	}
	if q := h.Queue(); len(q) != 1 || q[0].ID != 2 {
		t.Fatalf("queue %v", q)
	}
}
