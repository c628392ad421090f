package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// The defaults of the original engine.
const (
	DefaultMaxRetries           = 3
	DefaultRetryBackoffBase     = 100 * time.Millisecond
	DefaultRetryBackoffMax      = 30 * time.Second
	DefaultStepTimeout          = 30 * time.Second
	DefaultHistoryPruneInterval = 20
)

// NoTimeout disables a step's timeout (StepOptions.Timeout), NoRetries its
// retries (StepOptions.MaxRetries) and NoPrune a loop's pruning
// (LoopOptions.HistoryPruneInterval): their zero values mean the defaults.
const NoTimeout time.Duration = -1

// See NoTimeout.
const (
	NoRetries = -1
	NoPrune   = -1
)

// StepOptions configure a step. Zero values take the defaults.
type StepOptions struct {
	// Name is the step's history entry name, unique in its scope.
	Name string
	// Timeout bounds one attempt: its context is cancelled and the
	// attempt fails with kind FailureTimeout, which is critical unless
	// RetryOnTimeout. 0: 30 s. NoTimeout (any negative value): none. The
	// attempt's context has it as its deadline, so that what the body
	// calls plans by it (a send that waits for its completion ends in time
	// to say it timed out). The body is not stopped: one that does not
	// return when its context is done holds the run (a Step's, the
	// actor's turn) until it returns; a host that implements
	// OverrunReporter (a node logs a WARN) hears of each attempt that
	// returned a quarter of a second or more after its timeout.
	Timeout time.Duration
	// MaxRetries is the number of retries after the first attempt. 0: 3
	// (4 attempts in all). NoRetries (any negative value): one attempt.
	MaxRetries int
	// RetryBackoffBase and RetryBackoffMax shape the wait before retry n
	// (n = failed attempts so far, from 1): min(max, base·2^n), no jitter,
	// so replays compute the same wait. The first retry thus waits
	// 2·base, not base (a base of 200 ms: 400 ms, 800 ms, 1.6 s, ...).
	// 0: 100 ms and 30 s (200 ms, 400 ms, 800 ms, ...). The wait counts
	// from the failed attempt's start, as the original engine's
	// (lastAttemptAt), not from its end as Temporal's retry interval
	// does: an attempt that ran longer than its wait (a 3 s payment call,
	// a backoff of 1 s) is retried as soon as it failed. Give a slow step
	// a base of about its own duration to space its attempts.
	RetryBackoffBase time.Duration
	RetryBackoffMax  time.Duration
	// RetryOnTimeout makes a timeout an ordinary, retried failure.
	RetryOnTimeout bool
	// NonRetryable, if set, is asked about the error of each failed
	// attempt of the body (not of its rollback handler, which retries its
	// compensation as before): true fails the step at once, with kind
	// FailureCritical, as if the body had returned Critical(err), as
	// Temporal's NonRetryableErrorTypes do. A timeout never reaches it
	// (RetryOnTimeout decides); a panic of the body does, as an error. For
	// errors a retry cannot change that the body does not wrap itself,
	// e.g. a call to an actor type or action that does not exist:
	//
	//	NonRetryable: func(err error) bool {
	//		return errors.Is(err, rivet.ErrUnknownAction) || errors.Is(err, rivet.ErrInvalidArgument)
	//	},
	//
	// Its answer is recorded with the attempt: changing it changes only
	// attempts to come. A panic in it fails the step, critical. A function
	// field makes StepOptions values incomparable with ==.
	NonRetryable func(error) bool
	// Ephemeral lets the host delay this step's commit until the next
	// commit of the workflow (fewer commits for cheap steps). A crash in
	// between re-runs the step.
	Ephemeral bool
	// Catch is for TryStep and TryStepOpts only (other steps ignore it):
	// the failure kinds they catch, the original's catch list. Empty:
	// FailureCritical, FailureTimeout and FailureExhausted. List
	// FailureRollback to catch a Rollback failure too (the workflow then
	// goes on instead of rolling back); a kind not listed is returned as
	// the error.
	Catch []FailureKind
}

type retryPolicy struct {
	maxRetries     int
	base, max      time.Duration
	timeout        time.Duration // 0: none
	retryOnTimeout bool
	nonRetryable   func(error) bool
}

func policyOf(o StepOptions) retryPolicy {
	p := retryPolicy{maxRetries: o.MaxRetries, base: o.RetryBackoffBase, max: o.RetryBackoffMax, timeout: o.Timeout, retryOnTimeout: o.RetryOnTimeout, nonRetryable: o.NonRetryable}
	switch {
	case p.maxRetries == 0:
		p.maxRetries = DefaultMaxRetries
	case p.maxRetries < 0:
		p.maxRetries = 0
	}
	if p.base <= 0 {
		p.base = DefaultRetryBackoffBase
	}
	if p.max <= 0 {
		p.max = DefaultRetryBackoffMax
	}
	switch {
	case p.timeout == 0:
		p.timeout = DefaultStepTimeout
	case p.timeout < 0:
		p.timeout = 0
	}
	return p
}

// Backoff is the wait before retrying a step that failed attempts times
// (1 after its first attempt): min(max, base·2^attempts), so the first
// retry waits 2·base. With the defaults: 200 ms, 400 ms, 800 ms.
func Backoff(attempts int, base, max time.Duration) time.Duration {
	if attempts < 0 {
		attempts = 0
	}
	d := base
	for i := 0; i < attempts; i++ {
		if d > max/2 { // doubling would pass max (or overflow)
			return max
		}
		d *= 2
	}
	return min(d, max)
}

type stepAction int

const (
	stepRun    stepAction = iota // run attempt .attempt now
	stepWait                     // wait until .at, then plan again
	stepReplay                   // return the recorded output
	stepFail                     // return the recorded failure
)

type stepPlan struct {
	action  stepAction
	attempt int
	at      time.Time
}

// planStep decides what a step does given its entry (nil if new) and the
// time.
func planStep(e *Entry, p retryPolicy, now time.Time) stepPlan {
	switch {
	case e == nil || e.Status == StatusPending:
		return stepPlan{action: stepRun, attempt: 1}
	case e.Status == StatusCompleted:
		return stepPlan{action: stepReplay}
	case e.Status == StatusExhausted:
		return stepPlan{action: stepFail}
	}
	// Failed: retry after the backoff, unless the code now allows fewer
	// retries than were already used.
	if e.Attempts > p.maxRetries {
		return stepPlan{action: stepFail}
	}
	at := e.LastAttemptAt.Add(Backoff(e.Attempts, p.base, p.max))
	if now.Before(at) {
		return stepPlan{action: stepWait, at: at}
	}
	return stepPlan{action: stepRun, attempt: e.Attempts + 1}
}

type attemptResult struct {
	start, end time.Time
	output     json.RawMessage
	err        error
	timedOut   bool
}

// recordAttempt returns the entry that records attempt n of the step at
// path. A failed attempt's state changes stay (roll-forward), so the
// failure is recorded with them.
func recordAttempt(path string, n int, r attemptResult, p retryPolicy) *Entry {
	e := &Entry{Path: path, Kind: KindStep, Attempts: n, LastAttemptAt: r.start, Time: r.end}
	if !r.timedOut && r.err == nil {
		e.Status = StatusCompleted
		e.Output = r.output
		return e
	}
	var kind FailureKind
	e.Error, kind = classify("step", r, p)
	switch {
	case kind != "":
	case n > p.maxRetries:
		kind = FailureExhausted
	default:
		e.Status = StatusFailed
		return e
	}
	e.Status, e.Failure = StatusExhausted, kind
	return e
}

// classify records a failed attempt of a step's body, or of its rollback
// handler (what names which, for a timeout's message), and returns the
// kind of a failure that no retry would change (a timeout unless
// p.retryOnTimeout, a Rollback, Critical or misuse error), or "" for one
// that p's retries may.
func classify(what string, r attemptResult, p retryPolicy) (*RecordedError, FailureKind) {
	var ce *CriticalError
	var rb *RollbackError
	switch {
	case r.timedOut:
		rec := &RecordedError{Message: fmt.Sprintf("%s timed out after %s", what, p.timeout)}
		var d *discardedError
		if errors.As(r.err, &d) {
			// Its changes would have been kept (roll-forward): say why
			// they were not.
			rec.Message += " (" + capMessage(d.why.Error()) + ")"
		}
		if p.retryOnTimeout {
			return rec, ""
		}
		return rec, FailureTimeout
	case errors.As(r.err, &rb):
		return record(r.err), FailureRollback
	case errors.As(r.err, &ce), misuse(r.err):
		if errors.Is(r.err, Break) {
			// "workflow: break" alone read as the engine's own failure
			// (a user trial): say where Break does what the code meant.
			hint := ""
			if what == "step" {
				hint = "; return it from the loop's body after the step"
			}
			return record(fmt.Errorf("%w (returned by a %s's body: Break ends only the Loop or LoopWith whose own body returns it%s)", r.err, what, hint)), FailureCritical
		}
		return record(r.err), FailureCritical
	case r.err != nil && p.nonRetryable != nil:
		if stop, perr := askNonRetryable(p.nonRetryable, r.err); perr != nil {
			return record(fmt.Errorf("%w (StepOptions.NonRetryable panicked on it: %v)", r.err, perr)), FailureCritical
		} else if stop {
			return record(r.err), FailureCritical
		}
	}
	return record(r.err), ""
}

// askNonRetryable asks the step's NonRetryable about err; a panic in it
// is its answer that no retry is to be made (the step fails, critical,
// saying why), not a crash of the run that would run the body again.
func askNonRetryable(f func(error) bool, err error) (stop bool, panicked any) {
	defer func() {
		if r := recover(); r != nil {
			stop, panicked = true, r
		}
	}()
	return f(err), nil
}

// planRollback decides what the rollback handler of the step recorded by
// e does next, as planStep does for the step: attempts that failed are
// counted in e, and retried after their backoff while p allows. e's
// handler is neither done nor failed for good.
func planRollback(e *Entry, p retryPolicy, now time.Time) stepPlan {
	switch {
	case e.RollbackAttempts == 0:
		return stepPlan{action: stepRun, attempt: 1}
	case e.RollbackAttempts > p.maxRetries:
		// The code now allows fewer retries than were already used.
		return stepPlan{action: stepFail}
	}
	at := e.RollbackAttemptAt.Add(Backoff(e.RollbackAttempts, p.base, p.max))
	if now.Before(at) {
		return stepPlan{action: stepWait, at: at}
	}
	return stepPlan{action: stepRun, attempt: e.RollbackAttempts + 1}
}

// misuse reports an error of the engine's that says the step's body
// misused the workflow API (a primitive called on the workflow's Ctx, a bad
// name) or returned Break, which ends loops: another attempt would fail
// the same way, so the step fails at once, as with a Critical error.
func misuse(err error) bool {
	return errors.Is(err, ErrEntryInProgress) || errors.Is(err, ErrInvalid) || errors.Is(err, Break)
}

func stepErrorOf(e *Entry) *StepError {
	var err error = e.Error
	if e.Error == nil {
		err = &RecordedError{Message: "unknown error"}
	}
	kind := e.Failure
	if kind == "" {
		kind = FailureExhausted
	}
	return &StepError{Path: e.Path, Kind: kind, Attempts: e.Attempts, Err: err}
}

// prunePlan returns the iteration trees of loop to delete once next
// iterations are done, keeping the last size, and the new PrunedBefore.
func prunePlan(loop string, prunedBefore, next, size int) ([]string, int) {
	keepFrom := max(0, next-size)
	var trees []string
	for i := prunedBefore; i < keepFrom; i++ {
		trees = append(trees, iterationPath(loop, i))
	}
	return trees, max(prunedBefore, keepFrom)
}

// resolveVersion is GetVersion's rule: an instance whose scope still holds
// recorded entries it has not reached started under old code, so it keeps
// the old path (version 1); anything else takes the latest.
func resolveVersion(unvisitedInScope bool, latest int) int {
	if unvisitedInScope {
		return 1
	}
	return latest
}

// AppendWrites appends ws to batch and returns it, keeping the batch minimal
// and valid for a store like etcd, which refuses a transaction that writes
// one key twice or puts a key under a range it deletes: a put replaces an
// earlier put of the same path, and a tree delete drops the earlier writes it
// covers (a requeue, which writes no history, stays). The engine builds
// every batch with it; a host that merges batches (deferred ephemeral steps
// with the next commit) must merge with it too.
func AppendWrites(batch []HistoryWrite, ws ...HistoryWrite) []HistoryWrite {
	for _, w := range ws {
		switch {
		case w.Put != nil:
			batch = slices.DeleteFunc(batch, func(o HistoryWrite) bool { return o.Put != nil && o.Put.Path == w.Put.Path })
		case w.DeleteTree != "":
			batch = slices.DeleteFunc(batch, func(o HistoryWrite) bool {
				if o.Put != nil {
					return Under(o.Put.Path, w.DeleteTree)
				}
				return Under(o.DeleteTree, w.DeleteTree)
			})
		}
		batch = append(batch, w)
	}
	return batch
}

// Wake says when a yielded or waiting workflow can make progress.
type Wake struct {
	// At is the earliest deadline (sleep, receive timeout, retry backoff);
	// zero if none.
	At time.Time
	// AtReason says what At is the deadline of: WakeSleep, WakeReceive or
	// WakeRetry; empty if At is zero or none of them (a run stopped in
	// the middle, which must run again at once).
	AtReason string
	// Queues lists the queues whose messages would wake it, sorted;
	// AnyQueue is set when any message would.
	Queues   []string
	AnyQueue bool
}

// What a Wake's At is the deadline of (Wake.AtReason).
const (
	// WakeSleep is a sleep's end (Ctx.Sleep, Ctx.SleepUntil).
	WakeSleep = "sleep"
	// WakeReceive is a receive's timeout: a message on its queues wakes
	// the workflow before it.
	WakeReceive = "receive"
	// WakeRetry is a step's (or a rollback handler's) next attempt, after
	// the backoff of a failed one.
	WakeRetry = "retry"
)

// IsZero reports whether nothing would wake the workflow.
func (w Wake) IsZero() bool { return w.At.IsZero() && len(w.Queues) == 0 && !w.AnyQueue }

// wakeReasonRank orders the reasons of equal deadlines, so that which one a
// merge keeps does not depend on the order the threads waited in (a retry
// first: the step is what runs then).
func wakeReasonRank(r string) int {
	switch r {
	case WakeRetry:
		return 0
	case WakeReceive:
		return 1
	case WakeSleep:
		return 2
	}
	return 3
}

// mergeWake returns the wake that fires when either a or b would.
func mergeWake(a, b Wake) Wake {
	out := Wake{At: a.At, AtReason: a.AtReason, AnyQueue: a.AnyQueue || b.AnyQueue}
	if out.At.IsZero() || (!b.At.IsZero() && b.At.Before(out.At)) ||
		(b.At.Equal(out.At) && wakeReasonRank(b.AtReason) < wakeReasonRank(out.AtReason)) {
		out.At, out.AtReason = b.At, b.AtReason
	}
	if !out.AnyQueue {
		seen := map[string]struct{}{}
		for _, q := range append(append([]string(nil), a.Queues...), b.Queues...) {
			if _, ok := seen[q]; !ok {
				seen[q] = struct{}{}
				out.Queues = append(out.Queues, q)
			}
		}
		sort.Strings(out.Queues)
	}
	return out
}

type raceCandidate struct {
	branch int
	at     time.Time // the branch's workflow time when it finished
}

// pickWinner chooses among branches that finished: the one holding the
// race's message claim if any (the branch that took a message handles it;
// as a loser it would only put it back, to be delivered again), else the
// earliest in workflow time, then the first
// declared, so that branches finishing together during a replay pick the
// same winner every time.
func pickWinner(cands []raceCandidate, claim int) int {
	best := -1
	for i, c := range cands {
		if c.branch == claim {
			return c.branch
		}
		if best < 0 || c.at.Before(cands[best].at) || (c.at.Equal(cands[best].at) && c.branch < cands[best].branch) {
			best = i
		}
	}
	if best < 0 {
		return -1
	}
	return cands[best].branch
}
