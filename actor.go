package rivet

import (
	"bytes"
	"context"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/internal/jsonnull"
	"github.com/rivet-go/rivet/workflow"
)

// Client finds actors; Handle calls one. See package caller.
type (
	Client = caller.Client
	Handle = caller.Handle
)

// Actor defines an actor type with state S. S must marshal to and from JSON:
// that is how it is stored and how Inspect shows it.
type Actor[S any] struct {
	// Name addresses the actor type: letters, digits, '_' and '-', starting
	// with a letter, at most 64 bytes.
	Name string
	// State is the initial state of a new actor (copied, never shared).
	// Ignored if CreateState is set.
	State S
	// CreateState, if set, makes the initial state from the create input
	// (JSON; empty if none was given). An error fails the create with
	// ErrInvalidArgument, a panic with ErrInternal. Without it, a create
	// that carries an input (other than null) fails with
	// ErrInvalidArgument: nothing would read the input.
	CreateState func(input json.RawMessage) (S, error)
	// Queues are the actor's typed queues, by name. Only the Run workflow
	// takes their messages: an actor without Run declares none.
	Queues Queues
	// Actions are what callers can run, by name. An action's rivet error
	// reaches remote callers with its message cut to about 1 KiB and its
	// metadata left out if it does not fit beside it (see UserError).
	Actions Actions[S]
	// Events are what the actor may broadcast to subscribed clients
	// (ActionCtx.Broadcast), by name.
	Events Events
	// Run, if set, is the actor's durable workflow. It starts when the
	// actor is created and runs until it returns; every step, sleep, queue
	// receive, join and race is recorded, and after a crash, a restart or a
	// move it replays from the history and continues where it stopped.
	// See package workflow for the rules workflow code must follow.
	Run func(ctx *workflow.Ctx[S]) error

	// CreateVars makes the actor's vars each time it comes into memory,
	// before OnWake: what it needs while awake and must not store, such
	// as a connection, a cache or a channel (Rivet's createVars, the
	// fields of an Orleans grain). Actions, hooks and workflow steps read
	// them with Vars. They are never stored: the next activation, on this
	// node or another, makes its own. If the value is an io.Closer, it is
	// closed once the activation has left memory for whatever reason (an
	// orderly sleep after OnSleep, an eviction, a lost partition, a
	// destroy), when no turn runs (an error or a panic of Close is
	// logged). An error fails the activation as OnWake's does; a value
	// returned with the error (what it opened before it failed) is closed
	// at once if it is an io.Closer other than a nil pointer.
	CreateVars func(c *ActionCtx[S]) (any, error)
	// OnWake runs each time the actor comes into memory on a node: when it
	// is created, and when it is loaded again after a sleep, a restart, a
	// crash or a move. It runs as a turn of its own before any action,
	// scheduled call or workflow code of that activation, so it sees the
	// state as stored and may change it, schedule calls and broadcast, all
	// committed as an action's are. Because its changes commit together,
	// a one-time setup with effects is made exactly once by checking and
	// setting a field of the state in it. An error (or a panic, or a
	// change that leaves the state over the node's limit) fails the
	// activation: the request that woke the actor gets ErrInternal (with
	// the message of a rivet error, or of the limit), and the next request, or the wakeup
	// of a sleeping workflow or a scheduled call, tries again. A create is
	// all or nothing: one whose CreateVars or OnWake fails creates no
	// actor (what CreateVars wrote goes too, and its workflow never
	// starts), and the same create, retried, may succeed. What the hook
	// did to other actors before it failed stands.
	OnWake func(c *ActionCtx[S]) error
	// OnSleep runs when the node takes the actor out of memory in an
	// orderly way: idle for its IdleTimeout, shed past the node's bound on
	// actors in memory, its partition handed to another node (a join, a
	// drain), or the node stopping. It runs after the workflow has
	// stopped, as a turn whose state changes, schedules and events commit
	// before the actor leaves memory; it gets at most SleepTimeout. It
	// cannot run after a crash, a kill or a lost partition claim (nothing
	// may be written then): work that must happen belongs in actions,
	// steps and scheduled calls. An error is logged and the actor sleeps
	// all the same. While its node stops, calls it makes to actors of that
	// node fail (UNAVAILABLE), as do calls to actors of its partition
	// while that is handed off (its own actor excepted) and calls to an
	// actor whose OnSleep runs too.
	OnSleep func(c *ActionCtx[S]) error
	// OnDestroy runs when the actor is destroyed, after its workflow has
	// stopped and before its records are deleted: to tell other actors or
	// release what it holds outside. What it changes in the state is
	// deleted with the rest. An error is logged and the actor is destroyed
	// all the same. If the delete itself fails, the actor stays and a
	// retried Destroy runs OnDestroy again: make it idempotent.
	OnDestroy func(c *ActionCtx[S]) error

	// Options tune the runtime for this actor type.
	Options Options
}

// Options tune how the runtime hosts an actor type. The zero value takes the
// node's defaults.
type Options struct {
	// IdleTimeout is how long an actor stays in memory without a turn
	// before it is deactivated (its state is already durable). 0: the
	// node's default (30 s). A negative one is refused (Setup): it
	// meant the default without a word; no value means "never" (a
	// KeepAwake task keeps an actor in memory).
	IdleTimeout time.Duration
	// SleepTimeout bounds OnSleep (its context ends then). 0: 10 s.
	SleepTimeout time.Duration
}

// Actions maps action names to handlers made with Action, Query and their
// variants.
type Actions[S any] map[string]Handler[S]

// Handler is one action. Make it with Action, Action0, Action2, Query or
// QueryArg.
type Handler[S any] struct {
	readOnly bool
	arity    int
	invoke   func(c *ActionCtx[S], args []json.RawMessage) (any, error)
	// check decodes the arguments as invoke would, without running the
	// action (nil: there are none).
	check func(args []json.RawMessage) error
}

// ActionCtx is what an action sees. It lives for one turn: do not keep it.
type ActionCtx[S any] struct {
	// State is the actor's state. An action changes it in place; the
	// change is committed before the reply leaves the node. If the action
	// returns an error, its changes are discarded.
	State *S

	// ctx is the turn's context. Kept in the struct, as http.Request does,
	// because the ActionCtx is itself request-scoped.
	ctx      context.Context
	name     string
	key      []string
	client   Client
	schedule Scheduler
	events   Broadcaster
	fired    *ScheduledCall
	vars     any
	destroy  func() error
	tasks    interface {
		KeepAwake(fn func(ctx context.Context, c Client)) error
	}
	enqueue interface {
		Enqueue(queue string, body any) error
	}
}

// Context is the turn's context: cancelled when the caller gives up or the
// actor is stopped.
func (c *ActionCtx[S]) Context() context.Context { return c.ctx }

// Name is the actor's type name.
func (c *ActionCtx[S]) Name() string { return c.name }

// Key is the actor's key: a copy of its own, which the action may keep or
// change without changing the actor it addresses.
func (c *ActionCtx[S]) Key() []string { return append([]string(nil), c.key...) }

// Client calls other actors (or this one, re-entrantly) from inside a turn.
func (c *ActionCtx[S]) Client() Client { return c.client }

// Schedule is the actor's durable timers: calls of its own actions at a
// later time (see Scheduler).
func (c *ActionCtx[S]) Schedule() Scheduler { return c.schedule }

// Broadcast publishes an event to the clients subscribed to this actor,
// once the turn's writes are durable (see Broadcaster).
func (c *ActionCtx[S]) Broadcast(name string, data any) error {
	if c.events == nil {
		return Errorf(ErrInternal, "actor %s: no broadcaster in this context", c.name)
	}
	return c.events.Broadcast(name, data)
}

// Destroy destroys the actor once this turn's writes are durable (Rivet's
// c.destroy()): from then on calls and messages get ErrNotFound and the
// workflow runs no more steps; then OnDestroy runs and everything stored
// for it is deleted. The request is stored with the turn, as a scheduled
// call is (an operator's inspect lists it as the call of "$destroy", which
// cannot be cancelled; Scheduler.List does not), so a crash or a
// move does not lose it: whichever node serves the actor then destroys it
// as soon as it can, even if its hooks fail. A turn that fails asks for
// nothing; a read-only action cannot ask (ErrInternal).
func (c *ActionCtx[S]) Destroy() error {
	if c.destroy == nil {
		return Errorf(ErrInternal, "actor %s: Destroy is not available in this context", c.name)
	}
	return c.destroy()
}

// Enqueue queues body as a message of the actor's own queue, for its Run
// workflow (Rivet's c.queue.send from an action): the message is written
// in the same transaction as the turn's changes to the state, so it is
// queued if and only if they are. An action that fails or panics, a
// change refused (the state too large) and a commit that fails queue
// nothing, except what a re-entrant action committed first (below); once
// the action's reply is sent (its commit durable), the workflow's Next
// takes the message, woken at once. A workflow that has ended takes none:
// the message is written and stays queued, and Enqueue returns nil (so
// does a client's Send: rivet.Enqueue and SendWith say it in
// SendResult.WorkflowStatus). Messages get their IDs
// when the turn's changes are written, in the order they were enqueued,
// after those of the sends queued before (a Send to the actor's own
// handle during the turn is queued at once, so it comes first). A
// re-entrant action (not a query) that the turn's call chain runs on the
// actor and that succeeds writes
// what the outer turn changed and enqueued so far with its own changes,
// as it does the state: an outer action that enqueued, called its own
// actor, and then failed has its state so far committed by that call, and
// the messages it enqueued before the call queued with it.
//
// The body is checked as a Send's is, at the call: a queue the actor does
// not declare is ErrUnknownQueue, a body that does not marshal or does
// not decode into the queue's type ErrInvalidArgument, a body over the
// node's limit ErrTooLarge, a queue full (with what the turn enqueued)
// ErrQueueFull. A turn enqueues at most 32 messages, counted with the calls
// it schedules and cancels (64 in all), whose bodies share a
// turn's 256 KiB with the arguments of the calls it schedules
// (ErrTooLarge). A read-only action (rivet.Query) cannot enqueue
// (ErrInternal): it commits nothing.
//
// Use it rather than c.Client().GetOrCreate(c.Name(), c.Key()...).Send,
// whose message is a write of its own: durable when Send returns, whatever
// the action then does.
func (c *ActionCtx[S]) Enqueue(queue string, body any) error {
	if c.enqueue == nil {
		return Errorf(ErrInternal, "actor %s: Enqueue is not available in this context", c.name)
	}
	return c.enqueue.Enqueue(queue, body)
}

// KeepAwake runs fn in the background, on a goroutine the actor owns
// (Rivet's c.keepAwake and c.waitUntil; a plain go statement would leave it
// without one). Until fn returns the actor stays in memory: it does not go
// to sleep when idle (its idle timeout starts again when the last such
// function returns), and its vars stay open.
//
// fn holds no turn, so it must not touch c.State or keep c: it reaches the
// actor as any client does, through client, whose calls (to this actor
// too) each wait for the gate like a caller's, and see only durable state
// (they wait for the actor's pending writes, as a turn's calls do). fn
// starts when the turn ends, if its changes are kept: a turn that fails, a
// re-entrant query whose outer turn fails, and a wake whose CreateVars or
// OnWake fails start none. It does not wait for the turn's writes to be
// durable: work that must follow the commit belongs in a scheduled call
// (c.Schedule().After(0, ...)).
//
// ctx ends when the actor must leave memory: its partition moves, its node
// stops, it is destroyed, or its claim is lost. A move or a stop then waits
// for fn to return, up to the actor's SleepTimeout, before OnSleep runs;
// a destroy and a lost claim do not wait. KeepAwake fails (UNAVAILABLE)
// once the actor is leaving memory, e.g. in OnSleep and OnDestroy. A panic
// in fn is logged and ends only fn.
func (c *ActionCtx[S]) KeepAwake(fn func(ctx context.Context, client Client)) error {
	if c.tasks == nil {
		return Errorf(ErrInternal, "actor %s: KeepAwake is not available in this context", c.name)
	}
	return c.tasks.KeepAwake(fn)
}

// Vars returns the actor's vars, as CreateVars made them for this
// activation (nil without CreateVars). Assert their type:
// c.Vars().(*myVars). A query (rivet.Query) may run beside a workflow's
// Step body, which gets the same vars: what a step body changes in them
// must be safe for concurrent use. They are not part of the turn: a turn
// that fails or panics has its state changes discarded but keeps what it
// did to the vars, and a panic does not make them again (an Akka restart
// would make its fields again).
func (c *ActionCtx[S]) Vars() any { return c.vars }

// Fired returns the scheduled call this turn runs, if a Scheduler's timer,
// not a caller, started it (Rivet passes the same as a ScheduledFireInfo).
func (c *ActionCtx[S]) Fired() (ScheduledCall, bool) {
	if c.fired == nil {
		return ScheduledCall{}, false
	}
	return *c.fired, true
}

// Action makes a state-changing action with one argument of type A. A JSON
// null is an argument only where A holds it (see QueueOf).
func Action[S, A, R any](fn func(c *ActionCtx[S], arg A) (R, error)) Handler[S] {
	decode := func(args []json.RawMessage) (a A, err error) {
		err = decodeArg(args[0], &a, 0)
		return a, err
	}
	return Handler[S]{arity: 1, invoke: func(c *ActionCtx[S], args []json.RawMessage) (any, error) {
		a, err := decode(args)
		if err != nil {
			return nil, err
		}
		return fn(c, a)
	}, check: func(args []json.RawMessage) error {
		_, err := decode(args)
		return err
	}}
}

// Action0 makes a state-changing action without arguments.
func Action0[S, R any](fn func(c *ActionCtx[S]) (R, error)) Handler[S] {
	return Handler[S]{invoke: func(c *ActionCtx[S], _ []json.RawMessage) (any, error) { return fn(c) }}
}

// Action2 makes a state-changing action with two arguments.
func Action2[S, A, B, R any](fn func(c *ActionCtx[S], a A, b B) (R, error)) Handler[S] {
	decode := func(args []json.RawMessage) (a A, b B, err error) {
		if err = decodeArg(args[0], &a, 0); err == nil {
			err = decodeArg(args[1], &b, 1)
		}
		return a, b, err
	}
	return Handler[S]{arity: 2, invoke: func(c *ActionCtx[S], args []json.RawMessage) (any, error) {
		a, b, err := decode(args)
		if err != nil {
			return nil, err
		}
		return fn(c, a, b)
	}, check: func(args []json.RawMessage) error {
		_, _, err := decode(args)
		return err
	}}
}

// Query makes a read-only action without arguments. It must not change the
// state: the runtime neither looks for a change nor undoes one (that would
// cost every query an encoding of the state), so a change a query makes
// anyway stays in memory, where later calls see it, until the next
// action's commit writes it with its own, an action that fails puts the
// state back as stored, or the actor leaves memory (idle, a move, a
// restart) and loses it. A node run with --check-queries
// (runtime.Config.CheckQueries; node/nodetest turns it on) fails such a
// query instead, rivet.ErrInternal reason actor.query_changed_state, and
// undoes its change: tests catch the mistake.
//
// While the actor's workflow runs a Step body, a query runs beside it, on
// a copy of the state as committed before the step (the body's changes
// are not, yet) and the scheduled calls as saved: a status query answers
// during a slow step, as a Temporal query does during an activity. Two
// things follow. The query shares the actor's Vars with the body, which
// runs at the same time: vars that a step body changes must be safe for
// concurrent use (or read under their own lock); a query that must not
// run beside a step is declared with Action instead. And the step commits
// only once the queries beside it have returned, so a query beside a step
// must not wait for what only the step's end brings: a state-changing
// call back into its actor, or a SendWait to it, fails at once
// (rivet.ErrFailedPrecondition, reason actor.deadlock; SendWait
// rivet.ErrInvalidArgument, as from any turn of the actor), and so does a
// call through other actors whose turns wait for this one, when they are
// on the same node (across nodes it waits until its deadline). It may
// call its own actor's queries and send to its queues.
func Query[S, R any](fn func(c *ActionCtx[S]) (R, error)) Handler[S] {
	return Handler[S]{readOnly: true, invoke: func(c *ActionCtx[S], _ []json.RawMessage) (any, error) { return fn(c) }}
}

// QueryArg makes a read-only action with one argument.
func QueryArg[S, A, R any](fn func(c *ActionCtx[S], arg A) (R, error)) Handler[S] {
	h := Action(fn)
	h.readOnly = true
	return h
}

// decodeArg decodes the i-th argument (from 0), naming it from 1 in its
// error, as rivetctl and the client do. into is a pointer.
func decodeArg(raw json.RawMessage, into any, i int) error {
	if msg, ok := jsonnull.Refuse(raw, reflect.TypeOf(into).Elem()); !ok {
		return Errorf(ErrInvalidArgument, "argument %d: %s", i+1, msg)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		return Errorf(ErrInvalidArgument, "argument %d: %s", i+1, describeJSONError(err))
	}
	return nil
}

// describeJSONError says what was wrong with a JSON value in the caller's
// terms (JSON types), not Go's ("cannot unmarshal string into Go value of
// type int"), where it can tell for sure: a plain type mismatch, or a
// number where an integer was expected that is not whole or out of range.
// Anything else (a type with its own decoding, a map key, an error of the
// actor's own wrapping one) keeps its message.
func describeJSONError(err error) string {
	te, ok := err.(*json.UnmarshalTypeError)
	if !ok || te.Type == nil {
		return err.Error()
	}
	t := te.Type
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return err.Error()
	}
	want, ok := jsonnull.Kind(t)
	where := ""
	if te.Field != "" {
		// Its last name only: the path before it names Go's fields (an
		// embedded struct), which the JSON may not have.
		where = " at field " + te.Field[strings.LastIndexByte(te.Field, '.')+1:]
	}
	// "number <literal>": a number that did not fit an integer type (or
	// a ,string field's, or a map key: "the value", and only if it reads
	// as a JSON number).
	if lit, isNum := strings.CutPrefix(te.Value, "number "); isNum && want == "an integer" &&
		lit != "" && (lit[0] == '-' || lit[0] >= '0' && lit[0] <= '9') && json.Valid([]byte(lit)) {
		if strings.ContainsAny(lit, ".eE") {
			return fmt.Sprintf("the value %s%s where an integer (no fraction or exponent) was expected", lit, where)
		}
		kind := fmt.Sprintf("a %d-bit integer", t.Bits())
		if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uintptr {
			kind = fmt.Sprintf("an unsigned %d-bit integer", t.Bits())
		} else if t.Bits() == 8 {
			kind = "an 8-bit integer"
		}
		return fmt.Sprintf("the value %s%s is out of range for %s", lit, where, kind)
	}
	switch te.Value {
	case "string", "bool", "array", "object":
	case "number":
		if want == "a number" {
			return err.Error() // a float out of range
		}
	default: // a map key, a ,string field's value...
		return err.Error()
	}
	if !ok {
		return err.Error()
	}
	return fmt.Sprintf("a JSON %s%s where %s was expected", te.Value, where, want)
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	jsonMarshaler   = reflect.TypeFor[json.Marshaler]()
)

// Queues maps queue names to queue types made with QueueOf.
type Queues map[string]QueueType

// QueueType is a queue's message type.
type QueueType struct {
	validate func(body json.RawMessage) error
	typ      reflect.Type
}

// Types returns each queue's message type: for workflowtest.Host's
// QueueTypes, so that a test's receives take from the queues a node's
// would.
func (q Queues) Types() map[string]reflect.Type {
	out := make(map[string]reflect.Type, len(q))
	for name, qt := range q {
		out[name] = qt.typ
	}
	return out
}

// QueueOf declares a queue whose messages are of type T: a Send whose body
// does not decode into T is refused with ErrInvalidArgument, before anything
// is queued. So is a body of JSON null, unless T holds it: a pointer, an
// interface, a slice, a map, or a type with its own UnmarshalJSON (null
// would otherwise reach the workflow as T's zero value, which nobody sent).
func QueueOf[T any]() QueueType {
	return QueueType{validate: func(body json.RawMessage) error {
		if msg, ok := jsonnull.Refuse(body, reflect.TypeFor[T]()); !ok {
			return Errorf(ErrInvalidArgument, "message body: %s", msg)
		}
		var v T
		if err := json.Unmarshal(body, &v); err != nil {
			return Errorf(ErrInvalidArgument, "message body: %s", describeJSONError(err))
		}
		return nil
	}, typ: reflect.TypeFor[T]()}
}

// Spec is the type-erased form of an actor definition that the runtime
// hosts. States are *S behind an any.
type Spec struct {
	Name        string
	IdleTimeout time.Duration
	// NewState makes the initial state from the create input.
	NewState func(input json.RawMessage) (any, error)
	// DecodeState makes a state from its stored JSON.
	DecodeState func(data []byte) (any, error)
	// UnknownStateFields lists the fields of a stored state's JSON that
	// the state's type does not declare, nested ones by path
	// ("items[].sku"), top-level ones first: DecodeState skips them, and
	// the actor's next commit drops them (nil if the type decodes itself,
	// has a MarshalJSON, or is not a struct; a nested value of such a
	// type is not looked into).
	UnknownStateFields func(data []byte) []string
	// ResetState sets the state dst (a *S) to the one data holds, in
	// place: a turn that is discarded while an outer turn of the same
	// call chain holds dst (a re-entrant call) must not leave that turn
	// a stale pointer. Nil: the runtime decodes a new state instead.
	ResetState func(dst any, data []byte) error
	Actions    map[string]ActionSpec
	Queues     map[string]QueueSpec
	// QueueTypes is each queue's message type (nil for a QueueType not
	// made by QueueOf: any body), for workflow.QueueTyper.
	QueueTypes map[string]reflect.Type
	Events     map[string]EventSpec
	// SleepTimeout bounds Sleep (0: the runtime's default).
	SleepTimeout time.Duration
	// CreateVars, Wake, Sleep and Destroy are the actor's hooks
	// (Actor.CreateVars, OnWake, OnSleep, OnDestroy) on its state (a *S),
	// nil if it has none.
	CreateVars func(env Env, state any) (any, error)
	Wake       func(env Env, state any) error
	Sleep      func(env Env, state any) error
	Destroy    func(env Env, state any) error
	// Run runs the actor's workflow once against its history (nil if the
	// actor has none); see workflow.Run. Start, set whenever Run is, is
	// Run on a goroutine of its own, calling done with the outcome (see
	// workflow.Start): the runtime runs workflows with it, one goroutine
	// per running workflow, not two.
	Run   func(ctx context.Context, host workflow.Host, history []workflow.Entry) workflow.Outcome
	Start func(ctx context.Context, host workflow.Host, history []workflow.Entry, done func(workflow.Outcome))
}

// ActionSpec is one type-erased action.
type ActionSpec struct {
	ReadOnly bool
	// Arity is the number of arguments the action takes.
	Arity int
	// Invoke runs the action on state (a *S) with the decoded argument
	// array, whose length the runtime has checked against Arity.
	Invoke func(env Env, state any, args []json.RawMessage) (any, error)
	// Check returns the error Invoke would for arguments that do not
	// decode, without running the action (nil for an action without
	// arguments): a call that would create the actor checks first, so
	// that bad input creates nothing.
	Check func(args []json.RawMessage) error
}

// QueueSpec is one type-erased queue.
type QueueSpec struct {
	// Validate returns ErrInvalidArgument if body is not a message of the
	// queue's type.
	Validate func(body json.RawMessage) error
}

// Env is what the runtime gives an action besides its state.
type Env struct {
	Ctx  context.Context
	Name string
	// Key is the actor's own key, which the runtime goes on using to
	// address it: read it, never modify it (ActionCtx.Key hands out
	// copies).
	Key      []string
	Client   Client
	Schedule Scheduler
	Events   Broadcaster
	// Fired is the scheduled call the turn runs (nil for a caller's).
	Fired *ScheduledCall
	// Vars is the activation's vars (Actor.CreateVars).
	Vars any
	// Destroy asks for the actor's destruction after the turn
	// (ActionCtx.Destroy); nil where the runtime offers none.
	Destroy func() error
	// Tasks starts the actor's background functions
	// (ActionCtx.KeepAwake); nil where the runtime offers none.
	Tasks interface {
		KeepAwake(fn func(ctx context.Context, c Client)) error
	}
	// Enqueue stages a message on one of the actor's own queues, written
	// with the turn's changes (ActionCtx.Enqueue); nil where the runtime
	// offers none. An interface, not a func: the runtime passes the
	// pointer it has, where a method value would cost an allocation per
	// turn.
	Enqueue interface {
		Enqueue(queue string, body any) error
	}
}

func newActionCtx[S any](env Env, state any) *ActionCtx[S] {
	return &ActionCtx[S]{State: state.(*S), ctx: env.Ctx, name: env.Name, key: env.Key, client: env.Client, schedule: env.Schedule, events: env.Events, fired: env.Fired, vars: env.Vars, destroy: env.Destroy, tasks: env.Tasks, enqueue: env.Enqueue}
}

// hook erases the type of a lifecycle hook (nil stays nil).
func hook[S any](fn func(c *ActionCtx[S]) error) func(env Env, state any) error {
	if fn == nil {
		return nil
	}
	return func(env Env, state any) error { return fn(newActionCtx[S](env, state)) }
}

// Definition is anything a Registry can host: an Actor[S] of any S.
type Definition interface {
	Spec() (*Spec, error)
}

// Spec returns the type-erased form of the actor, or an error if the
// definition is invalid.
func (a Actor[S]) Spec() (*Spec, error) {
	if err := ValidateName("actor name", a.Name); err != nil {
		return nil, err
	}
	if a.Options.IdleTimeout < 0 {
		// It meant the node's default without a word.
		return nil, fmt.Errorf("actor %s: Options.IdleTimeout is negative (%v): give a positive duration, or 0 for the node's (--idle-timeout); no value means never (a KeepAwake task keeps an actor in memory)", a.Name, a.Options.IdleTimeout)
	}
	initial, err := json.Marshal(a.State)
	if err != nil {
		return nil, fmt.Errorf("actor %s: initial state does not marshal to JSON: %w", a.Name, err)
	}
	sp := &Spec{
		Name:         a.Name,
		IdleTimeout:  a.Options.IdleTimeout,
		SleepTimeout: a.Options.SleepTimeout,
		Actions:      map[string]ActionSpec{},
		Queues:       map[string]QueueSpec{},
		Events:       map[string]EventSpec{},
	}
	create := a.CreateState
	sp.NewState = func(input json.RawMessage) (any, error) {
		s := new(S)
		if create != nil {
			v, err := create(input)
			if err != nil {
				return nil, Errorf(ErrInvalidArgument, "create %s: %s", a.Name, describeJSONError(err))
			}
			*s = v
			return s, nil
		}
		if in := bytes.TrimSpace(input); len(in) > 0 && !bytes.Equal(in, []byte("null")) {
			// Nothing would read it: a create input given to an actor
			// that takes none is a mistake the caller should hear of.
			return nil, Errorf(ErrInvalidArgument, "create %s: this actor takes no create input (it has no CreateState)", a.Name)
		}
		// A JSON round trip copies the initial value, so that no two actors
		// share a slice or map of it.
		if err := json.Unmarshal(initial, s); err != nil {
			return nil, err
		}
		return s, nil
	}
	sp.ResetState = func(dst any, data []byte) error {
		s := new(S)
		if err := json.Unmarshal(data, s); err != nil {
			return fmt.Errorf("actor %s: state does not decode: %w", a.Name, err)
		}
		*dst.(*S) = *s
		return nil
	}
	sp.UnknownStateFields = stateFields(reflect.TypeFor[S]())
	sp.DecodeState = func(data []byte) (any, error) {
		s := new(S)
		if err := json.Unmarshal(data, s); err != nil {
			return nil, fmt.Errorf("actor %s: stored state does not decode: %w", a.Name, err)
		}
		return s, nil
	}
	if a.Run != nil {
		fn := a.Run
		sp.Run = func(ctx context.Context, host workflow.Host, history []workflow.Entry) workflow.Outcome {
			return workflow.Run(ctx, fn, host, history)
		}
		sp.Start = func(ctx context.Context, host workflow.Host, history []workflow.Entry, done func(workflow.Outcome)) {
			workflow.Start(ctx, fn, host, history, done)
		}
	}
	for name, h := range a.Actions {
		if err := ValidateName("action name", name); err != nil {
			return nil, fmt.Errorf("actor %s: %w", a.Name, err)
		}
		if h.invoke == nil {
			return nil, fmt.Errorf("actor %s: action %s has no handler (make it with rivet.Action or rivet.Query)", a.Name, name)
		}
		h := h
		sp.Actions[name] = ActionSpec{ReadOnly: h.readOnly, Arity: h.arity, Check: h.check, Invoke: func(env Env, state any, args []json.RawMessage) (any, error) {
			return h.invoke(newActionCtx[S](env, state), args)
		}}
	}
	if fn := a.CreateVars; fn != nil {
		sp.CreateVars = func(env Env, state any) (any, error) { return fn(newActionCtx[S](env, state)) }
	}
	sp.Wake, sp.Sleep, sp.Destroy = hook(a.OnWake), hook(a.OnSleep), hook(a.OnDestroy)
	for name, ev := range a.Events {
		if err := ValidateName("event name", name); err != nil {
			return nil, fmt.Errorf("actor %s: %w", a.Name, err)
		}
		sp.Events[name] = ev.spec(a.Name, name)
	}
	if len(a.Queues) > 0 && a.Run == nil {
		// Only a workflow takes queue messages: the queues would accept
		// messages until full and never deliver one.
		return nil, fmt.Errorf("actor %s: declares queues but has no Run workflow to take their messages", a.Name)
	}
	for name, q := range a.Queues {
		if err := ValidateName("queue name", name); err != nil {
			return nil, fmt.Errorf("actor %s: %w", a.Name, err)
		}
		v := q.validate
		if v == nil {
			v = func(json.RawMessage) error { return nil }
		}
		sp.Queues[name] = QueueSpec{Validate: v}
		if sp.QueueTypes == nil {
			sp.QueueTypes = map[string]reflect.Type{}
		}
		sp.QueueTypes[name] = q.typ
	}
	return sp, nil
}
