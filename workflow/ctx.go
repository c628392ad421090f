package workflow

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rivet-go/rivet/caller"
)

// Ctx is the orchestration context of a workflow on actors with state S. It
// gives no access to the state: only step bodies (StepCtx) have it, so that
// every change to the state is recorded with the step that made it.
//
// A Ctx is valid in the function it was given to; loop, join, race and try
// bodies get their own and must use it, not the outer one. A primitive
// called on a Ctx whose function returned fails with ErrInvalid, as does
// the run if one (from a goroutine) still runs on it when it returns:
// its entry would be recorded in a scope that ended.
type Ctx[S any] struct{ x *cx }

// StepCtx is what a step body sees. It lives for one attempt.
type StepCtx[S any] struct {
	// State is the actor's state. The body may change it; the change is
	// committed with the step's record, even when the attempt fails. The
	// pointer is valid for this attempt only: a change made through it
	// later (kept in a variable the workflow reads on) is not recorded,
	// actions see it uncommitted, and the next commit writes it.
	State *S

	// ctx is the attempt's context, kept as http.Request keeps its own
	// because a StepCtx is itself request-scoped.
	ctx      context.Context
	client   caller.Client
	events   Broadcaster
	vars     any
	destroy  func() error
	schedule caller.Scheduler
	enqueue  Enqueuer
	tasks    KeepAwaker
	attempt  int
	path     string
	r        *run // the actor's name and key
}

// KeepAwake runs fn on a goroutine the actor owns once the attempt's
// commit is queued, as an action's KeepAwake does (work that should not
// hold up the workflow: a notification, a cache warmed): the actor stays
// in memory until fn returns, and ctx ends when the actor must leave. It
// goes as the attempt's events go: a failed attempt's too (its changes
// are committed), not an abandoned one's (its context cancelled). A step
// replayed from its history does not run, so it starts nothing again; a
// step run again after a crash before its commit does. fn is not part of
// the workflow: nothing records what it did.
func (s *StepCtx[S]) KeepAwake(fn func(ctx context.Context, client caller.Client)) error {
	if s.tasks == nil {
		return errors.New("workflow: KeepAwake is not available in this step (its host offers none)")
	}
	return s.tasks.KeepAwake(fn)
}

// Context is cancelled when the attempt times out, its race branch loses,
// or the run is evicted. A body that ignores it holds the actor's turn until
// it returns.
func (s *StepCtx[S]) Context() context.Context { return s.ctx }

// Client calls other actors (or this one, re-entrantly).
func (s *StepCtx[S]) Client() caller.Client { return s.client }

// Broadcast publishes an event to the clients subscribed to the actor, as
// an action's Broadcast does, once the attempt's commit is durable: a
// failed attempt's events too, as its changes to the state are committed
// (roll-forward); an attempt abandoned (its context cancelled) commits and
// publishes nothing. A step replayed from its history does not run, so it
// does not broadcast again; a step run again after a crash before its
// commit does.
func (s *StepCtx[S]) Broadcast(name string, data any) error {
	if s.events == nil {
		// Critical: no retry makes a host publish (a user trial's
		// step ran four times on a test host for it).
		return Critical(errors.New("workflow: this host publishes no events"))
	}
	return s.events.Broadcast(name, data)
}

// Vars returns the actor's vars (rivet.Actor.CreateVars) of the
// activation running the step, nil if it has none. They are not recorded:
// a step replayed from its history does not run, and the next activation
// has vars of its own.
func (s *StepCtx[S]) Vars() any { return s.vars }

// Schedule is the actor's durable timers (rivet.Scheduler), as an action's
// ActionCtx.Schedule: calls of the actor's own actions at later times. What
// the attempt schedules or cancels commits with its record, so a step
// replayed from its history, which does not run, schedules nothing again,
// and a crash between the two cannot happen; a failed attempt's changes
// commit too, as its changes to the state do (roll-forward), and an
// abandoned attempt's are dropped. (The workflow itself waits with Sleep;
// Schedule is for what an action must do later.)
func (s *StepCtx[S]) Schedule() caller.Scheduler {
	if s.schedule == nil {
		return noScheduler{}
	}
	return s.schedule
}

// noScheduler is the Schedule of a host that offers none: every change
// fails.
type noScheduler struct{}

// Critical: no retry gives the host a scheduler (workflowtest.Host has
// none: schedules are tested on a node, nodetest).
var errNoScheduler = Critical(errors.New("workflow: this host keeps no scheduled calls (workflowtest.Host keeps none: test schedules with nodetest)"))

func (noScheduler) After(time.Duration, string, ...any) (string, error) { return "", errNoScheduler }
func (noScheduler) At(time.Time, string, ...any) (string, error)        { return "", errNoScheduler }
func (noScheduler) Every(string, time.Duration, string, ...any) (string, error) {
	return "", errNoScheduler
}
func (noScheduler) Cron(string, string, string, ...any) (string, error) { return "", errNoScheduler }
func (noScheduler) Get(string) (caller.ScheduledCall, bool)             { return caller.ScheduledCall{}, false }
func (noScheduler) List() []caller.ScheduledCall                        { return nil }
func (noScheduler) Cancel(string) (bool, error)                         { return false, errNoScheduler }

// Destroy destroys the actor once the attempt's commit is durable, as
// rivet.ActionCtx.Destroy does (Rivet's destroy in a step): the workflow
// runs no step after this one, OnDestroy runs and everything stored is
// deleted. The request commits with the attempt's record, a failed
// attempt's too, as its changes to the state do (roll-forward); an
// abandoned attempt asks for nothing. A step replayed from its history
// does not run, and the request is stored already.
func (s *StepCtx[S]) Destroy() error {
	if s.destroy == nil {
		return errors.New("workflow: this host cannot destroy the actor")
	}
	return s.destroy()
}

// Enqueue queues body as a message of the actor's own queue, as
// rivet.ActionCtx.Enqueue does: checked at the call (ErrUnknownQueue,
// ErrInvalidArgument, ErrTooLarge, ErrQueueFull, as a Send's), written in
// the transaction of the attempt's record. It follows the attempt's state
// changes: a failed attempt's messages are queued too (roll-forward: its
// state commits, and a body that marks in the state that it enqueued must
// find the message queued), an abandoned attempt's or one whose writes
// are refused are not. A step replayed from its history does not run, so
// it does not enqueue again; each attempt that runs and commits does.
// The workflow takes them with Next, later in the run (not from inside a
// step). A rollback handler may enqueue as well, its messages committed
// with its record as a step's, but the run is failing then and takes no
// more: they wait in the queue for a retry of the run (rivetctl workflow
// retry). A re-entrant action (not a query) that
// the body's call chain runs on the actor and that succeeds commits what the body changed
// and enqueued so far with its own changes, as it does the state. A
// workflow that has ended takes none (the message stays queued; Enqueue
// returns nil).
func (s *StepCtx[S]) Enqueue(queue string, body any) error {
	if s.enqueue == nil {
		return errNoEnqueue
	}
	return s.enqueue.Enqueue(queue, body)
}

// Critical, as errNoScheduler: no retry gives the host a queue. (A node
// and workflowtest.Host both enqueue; a Host of the user's own may not.)
var errNoEnqueue = Critical(errors.New("workflow: this host cannot enqueue messages (its StepEnv has no Enqueue)"))

// Attempt is the attempt's number, from 1. It counts the attempts
// recorded, and, on a host that marks attempts (workflow.AttemptMarker; a
// node does, and so does workflowtest.Host, whose Crash is the node dying
// in the body), an attempt whose node crashed while its body ran (or that
// ended but whose record the node could not write) if that body was one
// its run marked: the first it started since the workflow was loaded, and
// the Do bodies started beside it. The step's next run is then attempt
// n+1, and the lost attempt counts against its retries. A body its node
// abandons on a graceful stop, drain or handoff (its StepGrace ran out) is
// not counted: it runs again on the next owner with the same number. A
// crash in a later body of a run is not counted; run again after the
// restart, that body is the first and is counted from then on.
func (s *StepCtx[S]) Attempt() int { return s.attempt }

// IdempotencyKey is a key for the calls and sends the step's body makes
// (rivet.CallOptions, caller.SendOptions), named by name within the step
// (two calls of one step need two names): the same for every attempt of
// this step at this point of the workflow (each iteration of a loop has
// its own) and for its run again after a crash or a move, and unlike any
// other step's (a rollback handler's too) of any actor, one destroyed and
// created again under the same key included. So a call made with it runs
// once however often the step runs: the callee answers a repeat from its
// record (for 24 hours, its last 1024 keys):
//
//	rivet.CallWith[Receipt](s.Context(), s.Client().Get("payments", id), "charge",
//		rivet.CallOptions{IdempotencyKey: s.IdempotencyKey("charge")}, amount)
//
// A workflow retry --from that runs the step again gets the same key, and
// the callee's answer from the first time; add something of your own to
// the key to make the call again.
func (s *StepCtx[S]) IdempotencyKey(name string) string { return stepKey(s.r, s.path, name) }

// stepKey digests what names a step's call: the actor, the step's path
// and the caller's name for the call. Bounded (a key may not exceed 256
// bytes; an actor's key and a path may), and opaque.
func stepKey(r *run, path, name string) string {
	h := sha256.New()
	key, _ := json.Marshal(r.key)
	var n [8]byte
	for _, part := range [][]byte{[]byte(r.name), key, []byte(r.incarnation), []byte(path), []byte(name)} {
		// Length-prefixed: a name may hold any byte, a NUL included.
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return "step-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Name is the actor's type name (rivet.ActionCtx.Name), not the step's.
func (s *StepCtx[S]) Name() string { return s.r.name }

// Key is the actor's key (rivet.ActionCtx.Key): a copy of its own, which
// the body may keep or change without changing the actor it addresses.
func (s *StepCtx[S]) Key() []string { return append([]string(nil), s.r.key...) }

// Name is the actor's type name (rivet.ActionCtx.Name). It never changes,
// so reading it records nothing and replays see the same.
func (c *Ctx[S]) Name() string { return c.x.t.r.name }

// Key is the actor's key (rivet.ActionCtx.Key): a copy of its own, which
// the workflow may keep or change without changing the actor it
// addresses. It never changes, so reading it records nothing and replays
// see the same (Temporal's workflow.GetInfo(ctx).WorkflowExecution.ID).
func (c *Ctx[S]) Key() []string { return append([]string(nil), c.x.t.r.key...) }

// Now is the workflow's time: the time recorded by the entry the code
// passed last, so replays see the time the first run saw. Before the
// first entry that records a time (a step, sleep, receive, join or race;
// not GetVersion, Removed, RollbackCheckpoint, nor a loop or try block
// entered) it is when the workflow started, which its top-level entries
// record (Entry.StartedAt): the start of the run that committed its first
// entry. A retry that deletes every top-level entry (a plain retry of a
// failed first step, or --from the first entry) starts it again; one that
// keeps one keeps it. A history recorded before that was kept reads the
// host's clock there, as it did. Use it instead of time.Now outside
// steps.
func (c *Ctx[S]) Now() time.Time {
	if t := c.x.t.now; !t.IsZero() {
		return t
	}
	if t := c.x.t.r.started; !t.IsZero() {
		return t
	}
	return c.x.t.r.now()
}

// Context is done when the run is evicted or the race branch that runs this
// code lost. Primitives watch it already; use it for your own waits, if
// any.
func (c *Ctx[S]) Context() context.Context { return c.x.t.ctx }

// Step runs fn once as the step name and returns its value, or replays the
// recorded value: S and T are inferred from fn. Retries, backoff and timeout
// take their defaults (StepOpts sets them). T must marshal to JSON and
// decode back: the value returned is the one decoded from its JSON, live
// as on replay, and a value that does not (a MarshalJSON that writes what
// its UnmarshalJSON rejects) fails the step as critical when it is made,
// rather than leave a record no replay reads. A recorded value that T no
// longer reads (T changed since) fails the run with a *DecodeError.
//
// fn may change the actor's state, so on a node it runs as a turn of the
// actor: the actor's state-changing actions wait for it to return, while
// queries run beside it on the state as committed before the step
// (rivet.Query), and messages sent to the actor are queued at once, beside
// it (the workflow receives them after the step). Slow I/O goes in Do, whose body holds no
// turn. An attempt that times out is not retried unless the step's options
// set RetryOnTimeout (the original engine's default; Temporal retries an
// activity's timeout): its error reaches the workflow's code.
func Step[S, T any](c *Ctx[S], name string, fn func(*StepCtx[S]) (T, error)) (T, error) {
	return StepOpts(c, StepOptions{Name: name}, fn)
}

// StepOpts is Step with options.
func StepOpts[S, T any](c *Ctx[S], opts StepOptions, fn func(*StepCtx[S]) (T, error)) (T, error) {
	return runStep[S, T](c, opts, fn, nil)
}

// StepWithRollback is StepOpts with a compensation: if the workflow later
// fails (not diverges, not evicted), rollback runs with the step's value,
// the handlers of all completed steps in reverse order of completion. A
// RollbackCheckpoint must come first. A handler that fails is retried
// under opts, as the step is (retries, backoff, timeout per attempt; a
// Critical error, or a timeout without RetryOnTimeout, is not), each
// attempt recorded, and its StepCtx.Attempt counts them; one that fails
// for good stops the rollback (*RollbackFailedError). Like a step body, a
// handler may run more than once: make it idempotent. A step in a race
// branch that loses is never compensated: a loser's history is dropped
// with it when the race is decided (the race's rule), its handlers with
// it; run what must be undone if it loses after the race instead. Nor is
// a step that failed for good, whatever its body did: a call to another
// actor whose step timed out (a timeout is not retried without
// RetryOnTimeout) may have run there all the same, and the rollback leaves
// it in place. Give such a step RetryOnTimeout and an idempotency key for
// its call (StepCtx.IdempotencyKey): a later attempt gets the call's
// recorded result and the step completes, its handler with it. A workflow
// that failed so with a keyed call (no RetryOnTimeout, or its retries ran
// out) is retried from the step's entry, which gets that result too while
// the callee keeps it.
func StepWithRollback[S, T any](c *Ctx[S], opts StepOptions, fn func(*StepCtx[S]) (T, error), rollback func(s *StepCtx[S], value T) error) (T, error) {
	return runStep(c, opts, fn, rollback)
}

// TryStep is Step that catches the step's terminal failure (kinds
// critical, timeout and exhausted, or those StepOptions.Catch lists) and
// returns it as a *Failure instead of an error: the error is then only
// what must stop the workflow (eviction, divergence, a Rollback failure
// unless caught).
func TryStep[S, T any](c *Ctx[S], name string, fn func(*StepCtx[S]) (T, error)) (T, *Failure, error) {
	return TryStepOpts(c, StepOptions{Name: name}, fn)
}

// TryStepOpts is TryStep with options.
func TryStepOpts[S, T any](c *Ctx[S], opts StepOptions, fn func(*StepCtx[S]) (T, error)) (T, *Failure, error) {
	v, err := StepOpts(c, opts, fn)
	if err == nil {
		return v, nil, nil
	}
	var se *StepError
	if errors.As(err, &se) && catches(opts.Catch, se.Kind) {
		return v, stepFailure(se), nil
	}
	return v, nil, err
}

// catches reports whether a TryStep with catch list catch catches a
// failure of kind k (StepOptions.Catch).
func catches(catch []FailureKind, k FailureKind) bool {
	if len(catch) == 0 {
		return k != FailureRollback
	}
	return slices.Contains(catch, k)
}

// DoCtx is what the body of a Do step sees: no state, by construction.
type DoCtx struct {
	ctx     context.Context
	client  caller.Client
	attempt int
	path    string
	r       *run // the actor's name and key
}

// IdempotencyKey is StepCtx.IdempotencyKey, for the calls and sends a Do
// step's body (or its rollback handler) makes.
func (d *DoCtx) IdempotencyKey(name string) string { return stepKey(d.r, d.path, name) }

// Name is the actor's type name (rivet.ActionCtx.Name), not the step's.
func (d *DoCtx) Name() string { return d.r.name }

// Key is the actor's key (rivet.ActionCtx.Key): a copy of its own, which
// the body may keep or change without changing the actor it addresses.
func (d *DoCtx) Key() []string { return append([]string(nil), d.r.key...) }

// Context is cancelled when the attempt times out, its race branch loses,
// or the run is evicted.
func (d *DoCtx) Context() context.Context { return d.ctx }

// Client calls other actors.
func (d *DoCtx) Client() caller.Client { return d.client }

// Attempt is the attempt's number, from 1, counted as StepCtx.Attempt
// counts (an attempt whose node crashed while it ran included, if it was
// marked).
func (d *DoCtx) Attempt() int { return d.attempt }

// Do runs fn as the step name, like Step, for a body that does not touch
// the actor's state (it cannot: DoCtx has none). Because it needs no turn,
// it runs while other steps and actions run: the Do steps of the branches of
// one Join (the seed's fetch-users, fetch-orders, ...) do their I/O at the
// same time, where Step bodies take the actor's turn one after another. It
// is recorded, retried and replayed as a step.
func Do[S, T any](c *Ctx[S], name string, fn func(*DoCtx) (T, error)) (T, error) {
	return DoOpts(c, StepOptions{Name: name}, fn)
}

// DoOpts is Do with options (Ephemeral is ignored: a Do step's record
// always commits at once).
func DoOpts[S, T any](c *Ctx[S], opts StepOptions, fn func(*DoCtx) (T, error)) (T, error) {
	return runDo(c, opts, fn, nil)
}

// DoWithRollback is DoOpts with a compensation, as StepWithRollback is
// StepOpts with one: a saga's steps that call other services at once (the
// branches of a Join) are Do steps, and their compensations need no state
// either. The handler runs, and is retried, as StepWithRollback's: in the
// rollback, in reverse order of completion with every other step's, after
// a RollbackCheckpoint; make it idempotent. One in a race branch that
// loses is never compensated, as StepWithRollback's.
func DoWithRollback[S, T any](c *Ctx[S], opts StepOptions, fn func(*DoCtx) (T, error), rollback func(d *DoCtx, value T) error) (T, error) {
	return runDo(c, opts, fn, rollback)
}

func runDo[S, T any](c *Ctx[S], opts StepOptions, fn func(*DoCtx) (T, error), rollback func(*DoCtx, T) error) (T, error) {
	var zero T
	sp := stepSpec{opts: opts, pol: policyOf(opts), stateless: true}
	sv := newStepValue[T]()
	sp.body = bodyFunc(func(env StepEnv, ctx context.Context, attempt int) (json.RawMessage, error) {
		sv.attempt()
		val, err := fn(&DoCtx{ctx: ctx, client: env.Client, attempt: attempt, path: env.Path, r: c.x.t.r})
		if err != nil {
			return nil, err
		}
		return sv.record(val)
	})
	if rollback != nil {
		sp.rollback = func(env StepEnv, ctx context.Context, out json.RawMessage, attempt int) error {
			v, err := recordedValue[T](out)
			if err != nil {
				return err
			}
			return rollback(&DoCtx{ctx: ctx, client: env.Client, attempt: attempt, path: env.Path, r: c.x.t.r}, v)
		}
	}
	out, path, err := c.x.step(sp)
	if err != nil {
		return zero, err
	}
	return sv.value(path, out)
}

// stepValue is the value a step returns, decoded from its record: by the
// body that made it (fresh: the last attempt's, which completed the step
// if the step returns no error), or from the history. A nil *stepValue is
// a step without one (none), which reads nothing back. A Step's lives in
// its stepBody; a Do's is one allocation, made only for a Do with a value.
type stepValue[T any] struct {
	v     T
	fresh bool
}

// newStepValue returns the stepValue of a step whose value is a T: nil
// for a step without one.
func newStepValue[T any]() *stepValue[T] {
	if _, ok := any((*T)(nil)).(*none); ok {
		return nil
	}
	return new(stepValue[T])
}

// attempt starts an attempt of the body: no value of its own yet.
func (sv *stepValue[T]) attempt() {
	if sv != nil {
		sv.fresh = false
	}
}

// record returns val as the step records it, and keeps the value decoded
// from that record (roundTrip) for the step to return.
func (sv *stepValue[T]) record(val T) (json.RawMessage, error) {
	if sv == nil {
		return encodeStepValue(val)
	}
	b, err := roundTrip(val, &sv.v)
	sv.fresh = err == nil
	return b, err
}

// value is what the step returns once completed with out recorded at path.
func (sv *stepValue[T]) value(path string, out json.RawMessage) (T, error) {
	var zero T
	if sv == nil {
		return zero, nil // none reads any value, as decodeInto does
	}
	if sv.fresh {
		return sv.v, nil
	}
	if err := decodeInto(path, out, &sv.v); err != nil {
		return zero, err
	}
	return sv.v, nil
}

// roundTrip returns v as its step records it (encodeStepValue), and
// decodes that record into *back, as a replay will: a value that does not
// decode back fails the attempt as critical (the same value would not
// decode on a retry either) when it is made, naming its type, rather than
// the run failing on every replay, or at once with the step recorded as
// completed. *back is then the value the step returns, live as on replay.
// (A step without a value, of type none, has no stepValue and does not get
// here: see stepValue.record.)
func roundTrip[T any](v T, back *T) (json.RawMessage, error) {
	if b, _ := encodeIntState(nil, &v); b != nil {
		// An int or int64 (a count, an ID), as a loop's state: its JSON
		// without encoding/json's reflection, and it decodes back as it
		// is.
		*back = v
		return b, nil
	}
	b, err := encodeStepValue(v)
	if err != nil {
		return nil, err
	}
	raw := b
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	var zero T
	*back = zero
	if err := json.Unmarshal(raw, back); err != nil {
		return nil, Critical(fmt.Errorf("workflow: step value of type %T does not decode back from its JSON, so no replay could read it: %w", v, err))
	}
	return b, nil
}

// encodeStepValue is a step's value as recorded: JSON, with null recorded
// as no output at all. A value that does not marshal is a critical error:
// retrying would not change it.
func encodeStepValue(v any) (json.RawMessage, error) {
	if _, ok := v.(none); ok {
		// What json.Marshal would say, without its reflection and its
		// compaction of MarshalJSON's output, on every Step.
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, Critical(fmt.Errorf("workflow: step value does not marshal to JSON: %w", err))
	}
	if string(b) == "null" {
		return nil, nil
	}
	return b, nil
}

// Step runs a step that returns no value.
func (c *Ctx[S]) Step(name string, fn func(*StepCtx[S]) error) error {
	return c.StepWith(StepOptions{Name: name}, fn)
}

// StepWith runs a step that returns no value, with options.
func (c *Ctx[S]) StepWith(opts StepOptions, fn func(*StepCtx[S]) error) error {
	// fn goes in the body as it is: wrapped in a closure returning none,
	// it cost every such step an allocation.
	_, err := runStepBody(c, opts, &stepBody[S, none]{c: c, noValue: fn}, nil)
	return err
}

// none is the value of a step without one: recorded as no output at all.
type none struct{}

func (none) MarshalJSON() ([]byte, error) { return []byte("null"), nil }
func (*none) UnmarshalJSON([]byte) error  { return nil }

// recordedValue decodes a completed step's recorded value for its
// rollback handler.
func recordedValue[T any](out json.RawMessage) (T, error) {
	var v T
	if len(out) == 0 {
		// A null value (a nil slice, map or pointer) is recorded as no
		// output at all (encodeStepValue).
		out = json.RawMessage("null")
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return v, fmt.Errorf("workflow: recorded step value does not decode into %T: %w", v, err)
	}
	return v, nil
}

func runStep[S, T any](c *Ctx[S], opts StepOptions, fn func(*StepCtx[S]) (T, error), rollback func(*StepCtx[S], T) error) (T, error) {
	return runStepBody(c, opts, &stepBody[S, T]{c: c, fn: fn}, rollback)
}

// stepBody is a Step's body: the user's function, the value it returns
// and the StepCtx and attemptVars of its first attempt in this call, in
// one allocation (a closure, the StepCtx, the value and the attempt's
// variables were one each, on every step).
type stepBody[S, T any] struct {
	c  *Ctx[S]
	fn func(*StepCtx[S]) (T, error)
	// noValue is StepWith's function (T is none), fn's in its place.
	noValue func(*StepCtx[S]) error
	sv      *stepValue[T] // &val, or nil for a step without a value
	val     stepValue[T]
	// first is the StepCtx of the first attempt run here, firstVars its
	// attemptVars; a later one gets its own, as a body may keep its
	// StepCtx and its context.
	first     StepCtx[S]
	firstUsed bool
	firstVars attemptVars
	varsUsed  bool
}

func (b *stepBody[S, T]) vars() *attemptVars {
	if b.varsUsed {
		return new(attemptVars)
	}
	b.varsUsed = true
	return &b.firstVars
}

func (b *stepBody[S, T]) run(env StepEnv, ctx context.Context, attempt int) (json.RawMessage, error) {
	b.sv.attempt()
	st, ok := env.State.(*S)
	if !ok {
		return nil, Critical(fmt.Errorf("workflow: the host passed a state of type %T, the workflow wants %T", env.State, st))
	}
	sc := &b.first
	if b.firstUsed {
		sc = new(StepCtx[S])
	}
	b.firstUsed = true
	*sc = StepCtx[S]{State: st, ctx: ctx, client: env.Client, events: env.Events, vars: env.Vars, destroy: env.Destroy, schedule: env.Schedule, enqueue: env.Enqueue, tasks: env.Tasks, attempt: attempt, path: env.Path, r: b.c.x.t.r}
	if b.noValue != nil {
		if err := b.noValue(sc); err != nil {
			return nil, err
		}
		var v T
		return b.sv.record(v)
	}
	val, err := b.fn(sc)
	if err != nil {
		return nil, err
	}
	return b.sv.record(val)
}

func runStepBody[S, T any](c *Ctx[S], opts StepOptions, b *stepBody[S, T], rollback func(*StepCtx[S], T) error) (T, error) {
	var zero T
	sp := stepSpec{opts: opts, pol: policyOf(opts), body: b}
	if _, ok := any((*T)(nil)).(*none); !ok {
		b.sv = &b.val
	}
	if rollback != nil {
		sp.rollback = func(env StepEnv, ctx context.Context, out json.RawMessage, attempt int) error {
			st, ok := env.State.(*S)
			if !ok {
				return fmt.Errorf("workflow: the host passed a state of type %T, the workflow wants %T", env.State, st)
			}
			v, err := recordedValue[T](out)
			if err != nil {
				return err
			}
			return rollback(&StepCtx[S]{State: st, ctx: ctx, client: env.Client, events: env.Events, vars: env.Vars, destroy: env.Destroy, schedule: env.Schedule, enqueue: env.Enqueue, tasks: env.Tasks, attempt: attempt, path: env.Path, r: c.x.t.r}, v)
		}
	}
	out, path, err := c.x.step(sp)
	if err != nil {
		return zero, err
	}
	return b.sv.value(path, out)
}
