package workflow_test

// The deterministic simulation: one workflow that uses every primitive is
// run crash-free, then crashed at every one of its commits (before and
// after the commit applies) and at random sets of commits, with random
// evictions, and replayed from what was committed until it ends. Every run
// must end exactly like the crash-free one: same outcome, same state, same
// history, every committed step's effect once, every message processed once
// and answered once. Step bodies that block until their timeout tell the
// simulation so (workflowtest.Host.Hang), which moves the clock to the
// timeout: a run blocked in a step body does not count as waiting. A crash
// that loses such an attempt's record runs the attempt again, with a
// timeout of its own, so that run ends later by that timeout, and only
// there may its times differ from the crash-free run's (compareSim).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rivet-go/rivet/workflow"
	"github.com/rivet-go/rivet/workflow/internal/hosthook"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

type simState struct {
	// Log has one line per committed step body run (failed attempts
	// included: their changes roll forward).
	Log []string `json:"log"`
	// Fan counts the step runs of the join's branches, which run in any
	// order.
	Fan map[string]int `json:"fan"`
	// Processed are the ids of the messages processed, in order.
	Processed []uint64 `json:"processed"`
	Total     int      `json:"total"`
}

func fan(s *simStep, what string) {
	if s.State.Fan == nil {
		s.State.Fan = map[string]int{}
	}
	s.State.Fan[what]++
}

type simCtx = workflow.Ctx[simState]
type simStep = workflow.StepCtx[simState]

func logf(s *simStep, format string, args ...any) {
	s.State.Log = append(s.State.Log, fmt.Sprintf(format, args...))
}

// simWorkflow is the simulated workflow; hang blocks a step body until its
// context ends (workflowtest.Host.Hang), timeout being the step's.
func simWorkflow(failAtEnd bool, hang func(ctx context.Context, timeout time.Duration)) func(c *simCtx) error {
	return func(c *simCtx) error {
		if err := c.RollbackCheckpoint("cp"); err != nil {
			return err
		}
		reserved, err := workflow.StepWithRollback(c, workflow.StepOptions{Name: "reserve"},
			func(s *simStep) (int, error) {
				logf(s, "reserve attempt %d", s.Attempt())
				if s.Attempt() < 3 {
					return 0, errors.New("inventory busy")
				}
				return 7, nil
			},
			func(s *simStep, v int) error { logf(s, "unreserve %d", v); return nil })
		if err != nil {
			return err
		}
		if err := c.StepWith(workflow.StepOptions{Name: "cheap", Ephemeral: true}, func(s *simStep) error {
			logf(s, "cheap")
			return nil
		}); err != nil {
			return err
		}
		version, err := c.GetVersion("v2", 2)
		if err != nil {
			return err
		}
		if err := c.Removed("legacy", workflow.KindStep); err != nil {
			return err
		}
		if err := c.Sleep("nap", time.Minute); err != nil {
			return err
		}

		// A stateful, pruned loop over completable jobs.
		sum, err := workflow.LoopWith(c, workflow.LoopOptions[[2]int]{Name: "jobs", HistoryPruneInterval: 2, HistorySize: 1},
			func(c *simCtx, st [2]int) ([2]int, error) {
				m, err := workflow.Next[job](c, "wait-job", workflow.NextOptions{Names: []string{"jobs"}, Completable: true})
				if err != nil {
					return st, err
				}
				doubled, err := workflow.Step(c, "process", func(s *simStep) (int, error) {
					s.State.Processed = append(s.State.Processed, m.ID)
					logf(s, "job %d", m.Body.N)
					return m.Body.N * 2, nil
				})
				if err != nil {
					return st, err
				}
				if err := m.Complete(doubled); err != nil {
					return st, err
				}
				st = [2]int{st[0] + 1, st[1] + doubled}
				if st[0] == 5 {
					return st, workflow.Break
				}
				return st, nil
			})
		if err != nil {
			return err
		}

		// Batches: 3 of the 4 queued, then the last one, then a timeout.
		for i, opts := range []workflow.NextOptions{
			{Names: []string{"batch"}, Count: 3},
			{Names: []string{"batch"}, Count: 3, Timeout: time.Second},
			{Names: []string{"batch"}, Count: 3, Timeout: 10 * time.Second},
		} {
			ms, err := workflow.NextBatch[job](c, fmt.Sprint("batch-", i), opts)
			if err != nil {
				return err
			}
			if err := c.Step(fmt.Sprint("batch-rec-", i), func(s *simStep) error {
				for _, m := range ms {
					s.State.Processed = append(s.State.Processed, m.ID)
				}
				logf(s, "batch %d of %d at +%v", i, len(ms), c.Now().Sub(t0))
				return nil
			}); err != nil {
				return err
			}
		}

		joined, err := workflow.Join(c, "fan-out", workflow.Branches[simState, int]{
			"users": func(c *simCtx) (int, error) {
				return workflow.Step(c, "fetch-users", func(s *simStep) (int, error) { fan(s, "users"); return 3, nil })
			},
			"orders": func(c *simCtx) (int, error) {
				if err := c.Sleep("rate-limit", 5*time.Second); err != nil {
					return 0, err
				}
				return workflow.Step(c, "fetch-orders", func(s *simStep) (int, error) { fan(s, "orders"); return 4, nil })
			},
			"invoices": func(c *simCtx) (int, error) {
				return workflow.Step(c, "fetch-invoices", func(s *simStep) (int, error) {
					fan(s, fmt.Sprint("invoices attempt ", s.Attempt()))
					if s.Attempt() == 1 {
						return 0, errors.New("flaky")
					}
					return 5, nil
				})
			},
		})
		if err != nil {
			return err
		}

		bidder, amount, err := workflow.Race(c, "bid-or-expire", []workflow.RaceBranch[simState, int]{
			{Name: "bid", Run: func(c *simCtx) (int, error) {
				m, err := workflow.Next[job](c, "wait-bid", workflow.NextOptions{Names: []string{"bids"}})
				if err != nil {
					return 0, err
				}
				return m.Body.N, c.Step("take-bid", func(s *simStep) error {
					s.State.Processed = append(s.State.Processed, m.ID)
					return nil
				})
			}},
			{Name: "expire", Run: func(c *simCtx) (int, error) { return 0, c.Sleep("auction-timeout", 24*time.Hour) }},
		})
		if err != nil {
			return err
		}
		// A branch that takes a message and fails loses to a sleep: the
		// message goes back to its queue with the decision, and is taken
		// again after the race.
		if _, _, err := workflow.Race(c, "offer-or-wait", []workflow.RaceBranch[simState, int]{
			{Name: "flaky-offer", Run: func(c *simCtx) (int, error) {
				if _, err := workflow.Next[job](c, "wait-offer", workflow.NextOptions{Names: []string{"offers"}}); err != nil {
					return 0, err
				}
				return 0, errors.New("offer desk down")
			}},
			{Name: "wait", Run: func(c *simCtx) (int, error) { return 0, c.Sleep("offer-timeout", time.Second) }},
		}); err != nil {
			return err
		}
		offer, err := workflow.Next[job](c, "retake-offer", workflow.NextOptions{Names: []string{"offers"}})
		if err != nil {
			return err
		}
		if err := c.Step("take-offer", func(s *simStep) error {
			s.State.Processed = append(s.State.Processed, offer.ID)
			return nil
		}); err != nil {
			return err
		}
		source, _, err := workflow.Race(c, "primary-vs-timeout", []workflow.RaceBranch[simState, string]{
			{Name: "primary", Run: func(c *simCtx) (string, error) {
				if err := c.Sleep("slow-call", time.Second); err != nil {
					return "", err
				}
				return workflow.Step(c, "call-primary", func(s *simStep) (string, error) { logf(s, "primary"); return "primary", nil })
			}},
			{Name: "timeout", Run: func(c *simCtx) (string, error) {
				return "timeout", c.Sleep("primary-timeout", 200*time.Millisecond)
			}},
		})
		if err != nil {
			return err
		}

		failure, err := c.Try("risky", func(c *simCtx) error {
			return c.StepWith(workflow.StepOptions{Name: "charge", MaxRetries: 1, RetryBackoffBase: time.Second}, func(s *simStep) error {
				logf(s, "charge attempt %d", s.Attempt())
				return codedErr{}
			})
		})
		if err != nil {
			return err
		}
		_, critical, err := workflow.TryStep(c, "validate", func(s *simStep) (int, error) {
			logf(s, "validate")
			return 0, workflow.Critical(errors.New("bad input"))
		})
		if err != nil {
			return err
		}

		// A step whose first attempt times out and is retried, and one
		// whose timeout is critical, caught.
		slow, err := workflow.StepOpts(c, workflow.StepOptions{Name: "slow-call", Timeout: 3 * time.Second, RetryOnTimeout: true, RetryBackoffBase: 500 * time.Millisecond},
			func(s *simStep) (int, error) {
				logf(s, "slow attempt %d", s.Attempt())
				if s.Attempt() == 1 {
					hang(s.Context(), 3*time.Second)
					return 0, s.Context().Err()
				}
				return 4, nil
			})
		if err != nil {
			return err
		}
		_, hung, err := workflow.TryStepOpts(c, workflow.StepOptions{Name: "hung-call", Timeout: 1500 * time.Millisecond},
			func(s *simStep) (int, error) {
				logf(s, "hung attempt %d", s.Attempt())
				hang(s.Context(), 1500*time.Millisecond)
				return 0, s.Context().Err()
			})
		if err != nil {
			return err
		}

		// A stateless step (Do), outside the actor's turn.
		rate, err := workflow.Do(c, "fetch-rate", func(d *workflow.DoCtx) (int, error) { return 2, nil })
		if err != nil {
			return err
		}
		// A sleep to an absolute time (recorded once), and a receive that
		// times out.
		if err := c.SleepUntil("until", c.Now().Add(3*time.Second)); err != nil {
			return err
		}
		if _, err := workflow.Next[job](c, "wait-never", workflow.NextOptions{Names: []string{"never"}, Timeout: 2 * time.Second}); !errors.Is(err, workflow.ErrTimeout) {
			return fmt.Errorf("wait-never: %v, want ErrTimeout", err)
		}
		// A join with a failing branch and a race nested in another,
		// caught by Try.
		joinFailure, err := c.Try("risky-join", func(c *simCtx) error {
			_, err := workflow.Join(c, "fan-fail", workflow.Branches[simState, int]{
				"ok": func(c *simCtx) (int, error) {
					return workflow.Step(c, "ok-step", func(s *simStep) (int, error) { fan(s, "ok"); return 1, nil })
				},
				"bad": func(c *simCtx) (int, error) {
					return workflow.StepOpts(c, workflow.StepOptions{Name: "bad-step", MaxRetries: workflow.NoRetries}, func(s *simStep) (int, error) {
						fan(s, "bad")
						return 0, errors.New("refused")
					})
				},
				"raced": func(c *simCtx) (int, error) {
					_, v, err := workflow.Race(c, "inner-race", []workflow.RaceBranch[simState, int]{
						{Name: "quick", Run: func(c *simCtx) (int, error) { return 1, c.Sleep("quick-nap", time.Second) }},
						{Name: "slow", Run: func(c *simCtx) (int, error) { return 2, c.Sleep("slow-nap", time.Hour) }},
					})
					return v, err
				},
			})
			return err
		})
		if err != nil {
			return err
		}

		if err := c.Step("summary", func(s *simStep) error {
			s.State.Total = reserved + sum[1] + joined["users"] + joined["orders"] + joined["invoices"] + amount + rate + slow
			logf(s, "v%d %s won %d, %s won; caught %s/%s, %s, %s and %s at +%v",
				version, bidder, amount, source, failure.Source, failure.Kind, critical.Kind, hung.Kind, joinFailure.Source, c.Now().Sub(t0))
			return nil
		}); err != nil {
			return err
		}
		if failAtEnd {
			return errors.New("business failure")
		}
		return nil
	}
}

// simResult is everything a run must reproduce.
type simResult struct {
	status      workflow.RunStatus
	err         string
	state       simState
	history     string
	queue       []workflow.RawMessage
	completions map[uint64]int
	// hung is the time step bodies spent hanging until their timeout.
	hung time.Duration
}

// simRun runs the simulation on a fresh host with the given crashes and
// eviction policy. It also returns the ids of the completable messages, the
// number of activations and the number of commits.
func simRun(t *testing.T, failAtEnd bool, crashes map[int]bool, evict func(workflow.Wake) bool) (simResult, []uint64, int, int) {
	t.Helper()
	h := workflowtest.NewHost(simState{}, workflowtest.NewClock(t0))
	hosthook.NoAttemptMarkers(h) // compared with the crash-free run (newHost)
	var completable []uint64
	for i := 1; i <= 5; i++ {
		id, _ := h.SendWait("jobs", job{i})
		completable = append(completable, id)
	}
	for i := 1; i <= 4; i++ {
		h.Send("batch", job{10 * i})
	}
	h.Send("bids", job{100})
	h.Send("offers", job{1000})
	for n, after := range crashes {
		h.CrashAt(n, after)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var hung time.Duration
	hang := func(ctx context.Context, timeout time.Duration) {
		hung += timeout // step bodies run one at a time
		h.Hang(ctx)
	}
	out, activations := h.Drive(ctx, simWorkflow(failAtEnd, hang), workflowtest.DriveOptions{Evict: evict})
	if ctx.Err() != nil {
		t.Fatalf("crashes %v: the workflow did not finish: %+v", crashes, out)
	}
	res := simResult{status: out.Status, state: h.State(), history: h.HistoryJSON(), queue: h.Queue(), completions: h.Completions(), hung: hung}
	if out.Err != nil {
		res.err = out.Err.Error()
	}
	return res, completable, activations, h.Commits()
}

func compareSim(t *testing.T, what string, want, got simResult) {
	t.Helper()
	if shift := got.hung - want.hung; shift != 0 {
		// A crash lost the record of an attempt that timed out: it ran
		// again, as long, and everything after it happened that much
		// later. Every time must be the crash-free run's, or that much
		// later; the rest the same.
		if shift < 0 {
			t.Fatalf("%s: bodies hung %v, less than the crash-free run's %v", what, got.hung, want.hung)
		}
		wantEnd, gotEnd := endTime(t, want), endTime(t, got)
		if gotEnd-wantEnd != shift {
			t.Fatalf("%s: the run ended at +%v, want +%v (the crash-free +%v and %v of a lost attempt run again)", what, gotEnd, wantEnd+shift, wantEnd, shift)
		}
		checkShifted(t, what, want, got, shift)
		want, got = timeless(t, want), timeless(t, got)
	}
	if got.status != want.status || got.err != want.err {
		t.Fatalf("%s: outcome %s %q, want %s %q", what, got.status, got.err, want.status, want.err)
	}
	if !reflect.DeepEqual(got.state, want.state) {
		t.Fatalf("%s: state\n%+v\nwant\n%+v", what, got.state, want.state)
	}
	if got.history != want.history {
		t.Fatalf("%s: history\n%s\nwant\n%s", what, got.history, want.history)
	}
	if !reflect.DeepEqual(got.queue, want.queue) || !reflect.DeepEqual(got.completions, want.completions) {
		t.Fatalf("%s: queue %v completions %v, want %v %v", what, got.queue, got.completions, want.queue, want.completions)
	}
}

func TestSimulationCrashAtEveryCommit(t *testing.T) {
	for _, failAtEnd := range []bool{false, true} {
		t.Run(fmt.Sprintf("failAtEnd=%v", failAtEnd), func(t *testing.T) {
			base, completable, _, commits := simRun(t, failAtEnd, nil, nil)
			checkBaseline(t, base, completable, failAtEnd)
			// A crash makes a run commit more (it redoes what was lost),
			// and a race loser may or may not commit before it is
			// cancelled: go a little past the crash-free count.
			crashed := 0
			for k := 1; k <= commits+2; k++ {
				for _, after := range []bool{false, true} {
					got, _, activations, _ := simRun(t, failAtEnd, map[int]bool{k: after}, nil)
					compareSim(t, fmt.Sprintf("crash at commit %d (after=%v)", k, after), base, got)
					if activations > 1 {
						crashed++
					}
				}
			}
			// Every commit but the last one or two (the loser of the
			// bid race may not commit at all) must have crashed a run.
			if crashed < 2*(commits-2) {
				t.Fatalf("only %d of %d runs crashed", crashed, 2*(commits+2))
			}
			t.Logf("%d commits crash-free; %d runs crashed at one of them, before or after it applied: every run equal", commits, crashed)
		})
	}
}

// endTime is the workflow time the summary step logged.
func endTime(t *testing.T, r simResult) time.Duration {
	t.Helper()
	for _, l := range r.state.Log {
		if i := strings.LastIndex(l, " at +"); i >= 0 && strings.HasPrefix(l, "v") {
			d, err := time.ParseDuration(l[i+len(" at +"):])
			if err != nil {
				t.Fatalf("summary line %q: %v", l, err)
			}
			return d
		}
	}
	t.Fatalf("no summary line in %q", r.state.Log)
	return 0
}

// checkShifted fails unless every time of got (the log's "at" and the
// history's time fields) is want's, or want's and shift.
func checkShifted(t *testing.T, what string, want, got simResult, shift time.Duration) {
	t.Helper()
	ok := func(w, g time.Duration) bool { return g == w || g == w+shift }
	if len(got.state.Log) == len(want.state.Log) {
		for i, l := range got.state.Log {
			j, k := strings.LastIndex(l, " at +"), strings.LastIndex(want.state.Log[i], " at +")
			if j < 0 || k < 0 {
				continue
			}
			g, gerr := time.ParseDuration(l[j+len(" at +"):])
			w, werr := time.ParseDuration(want.state.Log[i][k+len(" at +"):])
			if gerr != nil || werr != nil || !ok(w, g) {
				t.Fatalf("%s: log line %q, want %q or %v later", what, l, want.state.Log[i], shift)
			}
		}
	}
	var we, ge []map[string]any
	if err := json.Unmarshal([]byte(want.history), &we); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(got.history), &ge); err != nil {
		t.Fatal(err)
	}
	if len(we) != len(ge) {
		return // the comparison of the rest says how
	}
	for i := range ge {
		for _, f := range []string{"time", "last_attempt_at", "rollback_attempt_at", "deadline"} {
			gs, _ := ge[i][f].(string)
			ws, _ := we[i][f].(string)
			if gs == ws {
				continue
			}
			g, gerr := time.Parse(time.RFC3339Nano, gs)
			w, werr := time.Parse(time.RFC3339Nano, ws)
			if gerr != nil || werr != nil || !g.Equal(w.Add(shift)) {
				t.Fatalf("%s: %s of %v is %q, want %q or %v later", what, f, ge[i]["path"], gs, ws, shift)
			}
		}
	}
}

// timeless returns r without its times: the log's "at" suffixes and the
// history entries' time fields.
func timeless(t *testing.T, r simResult) simResult {
	t.Helper()
	r.state.Log = slices.Clone(r.state.Log)
	for i, l := range r.state.Log {
		if j := strings.LastIndex(l, " at +"); j >= 0 {
			r.state.Log[i] = l[:j]
		}
	}
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.history), &entries); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		delete(e, "time")
		delete(e, "last_attempt_at")
		delete(e, "rollback_attempt_at")
		delete(e, "deadline")
	}
	b, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	r.history = string(b)
	return r
}

// TestSimulationRandomCrashesAndEvictions crashes each run at several
// random commits and evicts it at random when it blocks, with seeded
// randomness so that a failure is reproducible from its seed.
func TestSimulationRandomCrashesAndEvictions(t *testing.T) {
	base, _, _, commits := simRun(t, false, nil, nil)
	total := 0
	for seed := int64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewSource(seed))
		crashes := map[int]bool{}
		for i := 0; i < 1+rng.Intn(5); i++ {
			crashes[1+rng.Intn(commits+10)] = rng.Intn(2) == 0
		}
		got, _, activations, _ := simRun(t, false, crashes, func(workflow.Wake) bool { return rng.Intn(2) == 0 })
		compareSim(t, fmt.Sprintf("seed %d, crashes %v", seed, crashes), base, got)
		total += activations
	}
	// Crashes and evictions happened: far more activations than runs.
	if total < 40*4 {
		t.Fatalf("%d activations in 40 runs", total)
	}
	t.Logf("40 runs, %d activations, all equal to the crash-free run", total)
}

// checkBaseline checks the crash-free run against the semantics, so that
// "equal to the baseline" means "right".
func checkBaseline(t *testing.T, base simResult, completable []uint64, failAtEnd bool) {
	t.Helper()
	wantStatus := workflow.RunCompleted
	if failAtEnd {
		wantStatus = workflow.RunFailed
	}
	if base.status != wantStatus {
		t.Fatalf("baseline outcome %s %s", base.status, base.err)
	}
	if len(base.queue) != 0 {
		t.Fatalf("messages left: %v", base.queue)
	}
	seen := map[uint64]int{}
	for _, id := range base.state.Processed {
		seen[id]++
	}
	if len(seen) != 11 || len(base.state.Processed) != 11 {
		t.Fatalf("processed %v: want each of the 11 messages once", base.state.Processed)
	}
	for _, id := range completable {
		if base.completions[id] != 1 {
			t.Fatalf("completions %v", base.completions)
		}
	}
	// 7 reserved + (2+4+6+8+10) + 3+4+5 + 100 + 4 (the slow call) + 2 (the
	// Do step).
	if base.state.Total != 155 {
		t.Fatalf("total %d", base.state.Total)
	}
	want := []string{
		"reserve attempt 1", "reserve attempt 2", "reserve attempt 3", "cheap",
		"job 1", "job 2", "job 3", "job 4", "job 5",
		// The retries took 600 ms, the nap a minute, the last batch its
		// 10 s timeout.
		"batch 0 of 3 at +1m0.6s", "batch 1 of 1 at +1m0.6s", "batch 2 of 0 at +1m10.6s",
		"charge attempt 1", "charge attempt 2", "validate",
		// The slow call's second attempt runs at once: its backoff (1 s from
		// the start of its first attempt) passed while that one hung.
		"slow attempt 1", "slow attempt 2", "hung attempt 1",
		// 5 s of rate limit in the join, the offer race's 1 s, the 200 ms
		// timeout, a 2 s backoff, 3 s and 1.5 s of steps timing out, 3 s to
		// the absolute time, 2 s of a receive timing out, and the inner
		// race's 1 s.
		"v2 bid won 100, timeout won; caught step/exhausted, critical, timeout and join at +1m29.3s",
	}
	if failAtEnd {
		want = append(want, "unreserve 7")
	}
	if !reflect.DeepEqual(base.state.Log, want) {
		t.Fatalf("log %q\nwant %q", base.state.Log, want)
	}
	if want := map[string]int{"users": 1, "orders": 1, "invoices attempt 1": 1, "invoices attempt 2": 1, "ok": 1, "bad": 1}; !reflect.DeepEqual(base.state.Fan, want) {
		t.Fatalf("fan-out %v", base.state.Fan)
	}
}
