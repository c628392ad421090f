package workflowtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/internal/defaults"
)

// FakeClient is a caller.Client for workflow tests (Host.Client): the
// actors a workflow calls, as functions the test registers per actor name
// and action (Handle, HandleAction) and per actor name and queue (Queue),
// with a record of every call and send (Calls). It answers what a node
// answers where the test registered nothing, with the node's error kinds,
// so that a workflow's paths for them can be tested:
//
//   - a name with no action, queue, Create or HandleCreate:
//     rivet.ErrUnknownActor;
//   - an action or queue the name has not: rivet.ErrUnknownAction,
//     rivet.ErrUnknownQueue;
//   - arguments a HandleAction function does not take (their number, or
//     a value that does not decode as a node decodes it), an invalid actor
//     key (empty, too long): rivet.ErrInvalidArgument, and the actor is
//     not created;
//   - a call or send through Get (not GetOrCreate) of an actor that does
//     not exist: rivet.ErrNotFound. An actor exists once the test said so
//     (Create) or a call or send through GetOrCreate reached it, as on a
//     node.
//
// Each is a *rivet.Error, as a node's, so that a step's recorded failure
// keeps its code. An error an ActionFunc or QueueFunc returns reaches the
// caller as a node's would: a *rivet.Error as it is, so that a step's
// retries and their exhaustion can be tested, and an error that wraps one
// as that *rivet.Error alone (the wrapper's text and the other errors it
// wraps stay with the function); context.DeadlineExceeded as
// rivet.ErrTimeout; context.Canceled as it is; any other error as
// rivet.ErrInternal, whose message keeps the cause for the test (a node
// hides it: return a rivet.Error for the caller to see it).
//
// A *rivet.Error returned is what the node says, not what an action on it
// returned: rivet.UserError is an action's own refusal, and
// rivet.Errorf(rivet.ErrUnavailable, ...) is a node's "this did not run"
// (safe to retry). (A node rewrites an ErrUnavailable its action returns
// into one that may have run; the fake does not.) For an outcome the
// caller cannot know (a connection that broke mid-call, an action that
// ran and failed as unavailable: rivet.OutcomeUnknown true), return
// &rivet.Error{Kind: rivet.ErrUnavailable, Message: ...}, without a
// Group, as a node's client gets it; or rivet.Errorf(rivet.ErrTimeout,
// ...).
//
// The caller's ctx is honoured as a node's client honours it: a call or
// send with an ended ctx is refused and not recorded (rivet.ErrTimeout
// for a deadline, context.Canceled), and one whose ctx ends while its function runs
// answers so at once; the function goes on to its end, as an action on a
// node does, and its outcome stands (an idempotency key it succeeded with
// is kept). A function should return when its ctx ends: until it does,
// its goroutine runs (Wait waits for it). A function that panics, or
// calls runtime.Goexit (t.FailNow), is answered as a node answers an
// action that does: rivet.ErrInternal (with the panic and its stack), and
// an idempotency key it held is not kept, so a retry runs it again;
// FakeCall.Panic records the panic.
//
// Its handles implement what this module's handles do beyond
// caller.Handle (caller.OptionsCaller, caller.Querier, caller.Sender,
// caller.OnceSender), so rivet.CallWith, CallQuery, Enqueue, SendWait and
// SendWith work through them; the FakeClient itself implements
// caller.Creator, so rivet.Create and CreateWith do too (CreateWith says
// how, HandleCreate checks a create's input). Idempotency keys are kept as a node keeps
// them (without their limits of count and age): a call again with a key
// that a call of the same actor used (a send with a send's) gets the
// first one's result without running anything (FakeCall.Duplicate), so a
// test can crash a step after its call (Host.CrashAt) and check that the
// callee ran once; the same key with another call or message is
// rivet.ErrInvalidArgument; a call or send that failed keeps nothing. A
// call with a key that a call still running holds waits for it (as a
// node's second call waits for the actor's turn), then is its duplicate,
// or runs itself if the first failed; one that the function holding the
// key makes (through the ctx it got) is rivet.ErrFailedPrecondition at
// once, as a node refuses a call that re-enters its key.
//
// What differs from a node: it runs the functions of one actor
// concurrently (a node runs one turn of an actor at a time), so a
// function that changes the test's variables must guard them; neither a
// query's read-only promise nor the node's size limits nor an idempotency
// key's own limits are checked; there is no workflow behind a queue (a
// send's WorkflowStatus is what a QueueFunc's caller.SendResult says); a
// send with the key of one whose QueueFunc still runs waits for it (a
// node answers it at once from the key's record: the message is queued).
//
// It is safe for concurrent use: a join's or race's branches call through
// it at once.
type FakeClient struct {
	// mu guards the fields below; it is not held while an ActionFunc or
	// QueueFunc runs.
	mu       sync.Mutex
	actions  map[[2]string]actionReg // (name, action)
	queues   map[[2]string]QueueFunc // (name, queue); a nil func accepts
	names    map[string]bool         // the actor names the test gave anything
	existing map[string]bool         // actorID: what Get finds
	creates  map[string]CreateFunc   // name: checks a create's input; nil accepts
	made     map[string]*made        // actorID: a create's (CreateWith), once it began
	calls    []FakeCall
	nextID   map[string]uint64 // actorID: the last message ID it gave
	keys     map[string]*kept  // "call"/"send" + actorID + "\x00" + key
	running  int               // functions running (Wait)
	idle     chan struct{}     // closed when running drops to 0
}

// actionReg is a registered action: its function and what a node checks
// of its arguments before it creates the actor.
type actionReg struct {
	fn    ActionFunc
	arity int // -1: any number (Handle)
	check func([]json.RawMessage) error
}

// ActionFunc answers a call of an action: its result is marshalled to JSON
// (a json.RawMessage as it is, if it is valid JSON), its error returned to
// the caller as FakeClient's doc says. call says who was called with what
// (its outcome fields are empty); it is the function's own copy. ctx is
// the caller's: a step's, which its timeout ends (Host.Hang waits on it).
type ActionFunc func(ctx context.Context, call FakeCall) (any, error)

// QueueFunc receives a message sent to a queue (call.Queue, call.Body). Its
// error is the send's (the message is refused, and gets no ID). For a send
// that waits for the message's completion (call.Wait: rivet.SendWait), its
// response is the completion's (SendCompleted, Response marshalled); for
// any other send it is ignored. A caller.SendResult it returns is the
// send's result as it is (its MessageID the message's if zero).
//
// A waiting send waits for it as a node waits for a completion: up to
// call.Timeout (30 s if 0), in real time, cut short before the caller's
// deadline (a tenth of the time left, at most 250 ms); then it answers
// caller.SendResult{Status: caller.SendTimedOut, MessageState:
// caller.MessageTaken} with no error. Under Host, a step's timeout runs
// on the test's clock, not in real time: the step's ctx has no deadline
// to cut the wait, so a function that blocks makes the step wait out
// call.Timeout. To simulate a send that times out, give the queue a nil
// function (a waiting send then answers SendTimedOut with MessageQueued at
// once: nobody takes the message), or return caller.SendResult{Status:
// caller.SendTimedOut, MessageState: caller.MessageTaken} (taken, not
// completed in time).
type QueueFunc func(ctx context.Context, call FakeCall) (any, error)

// FakeCall is one call or send a FakeClient got, as Calls returns it.
type FakeCall struct {
	// Name and Key are the actor's.
	Name string
	Key  []string
	// CreateIfMissing is true for a handle of GetOrCreate, false for one
	// of Get.
	CreateIfMissing bool

	// Action is the action called; empty for a send.
	Action string
	// Args are the call's arguments, each as JSON.
	Args []json.RawMessage
	// ReadOnly is true for a query (caller.Querier, rivet.CallQuery).
	ReadOnly bool

	// Queue is the queue sent to; empty for a call.
	Queue string
	// Body is the message sent, as JSON.
	Body json.RawMessage
	// Wait and Timeout are a send's (rivet.SendWait, SendWith): whether
	// it waits for the message's completion, and for how long (0: the
	// default).
	Wait    bool
	Timeout time.Duration
	// RequireRunning is a send's caller.SendOptions.RequireRunning. The
	// FakeClient knows no workflow's status: a QueueFunc that plays an
	// ended one returns the node's refusal itself (rivet.ErrWorkflowFailed).
	RequireRunning bool

	// Create says that this was a create (rivet.Create, CreateWith):
	// Input is its input as JSON (nil for none), and CreateResult what it
	// answered (zero if it failed: Err). Action and Queue are empty.
	Create       bool
	Input        json.RawMessage
	CreateResult caller.CreateResult

	// IdempotencyKey is the call's, send's or create's key
	// (rivet.CallWith, SendWith, CreateWith); empty if none.
	IdempotencyKey string
	// Duplicate says that the key was used before: nothing ran, and the
	// caller got the first one's result.
	Duplicate bool

	// Done says that the caller got its answer, below. The function may
	// still run if the caller left (its ctx ended, a waiting send's wait
	// ran out): FakeClient.Wait waits for it.
	Done bool
	// Result is a call's result; SendResult a send's (its MessageID
	// counted from 1 per actor, over the messages it accepted).
	Result     json.RawMessage
	SendResult caller.SendResult
	// Err is the error the caller got.
	Err error
	// Panic is what the function panicked with, nil if it did not. The
	// caller got rivet.ErrInternal (with the stack), as from a node, or
	// had already left: Panic shows it then (check it after Wait).
	Panic any
}

// clone is c with memory of its own, so that neither a function that
// changes its call nor a test that changes what Calls returned changes
// the record.
func (c FakeCall) clone() FakeCall {
	c.Key = slices.Clone(c.Key)
	if c.Args != nil {
		args := make([]json.RawMessage, len(c.Args))
		for i, a := range c.Args {
			args[i] = bytes.Clone(a)
		}
		c.Args = args
	}
	c.Body, c.Result, c.Input = bytes.Clone(c.Body), bytes.Clone(c.Result), bytes.Clone(c.Input)
	c.CreateResult.Key = slices.Clone(c.CreateResult.Key)
	c.SendResult.Response = bytes.Clone(c.SendResult.Response)
	return c
}

// kept is what a call or send with an idempotency key left, or holds
// while it runs: the call (action and arguments) or message (queue and
// body), to refuse the key with another, and once done is closed, its
// result if ok. A failed one is removed before done closes, unless given
// (fc.mu guards it) says what its waiting send already answered, timed
// out with the message taken: the key then stays accepted with that
// answer, as a node's does.
type kept struct {
	what, input string
	done        chan struct{}
	ok          bool
	result      json.RawMessage
	send        caller.SendResult
	given       *caller.SendResult
}

var (
	_ caller.Client  = (*FakeClient)(nil)
	_ caller.Creator = (*FakeClient)(nil)
)

var (
	_ caller.Handle        = (*fakeHandle)(nil)
	_ caller.OptionsCaller = (*fakeHandle)(nil)
	_ caller.Querier       = (*fakeHandle)(nil)
	_ caller.Sender        = (*fakeHandle)(nil)
	_ caller.OnceSender    = (*fakeHandle)(nil)
)

// NewFakeClient returns a client of no actors: register them with Handle,
// HandleAction, Queue, HandleCreate and Create.
func NewFakeClient() *FakeClient {
	return &FakeClient{
		actions: map[[2]string]actionReg{}, queues: map[[2]string]QueueFunc{},
		names: map[string]bool{}, existing: map[string]bool{}, creates: map[string]CreateFunc{}, made: map[string]*made{},
		nextID: map[string]uint64{}, keys: map[string]*kept{},
	}
}

// Handle makes fn answer the calls of action of every actor named name
// (fn reads which from call.Key), replacing any function it had. It takes
// any number of arguments: fn checks them.
func (fc *FakeClient) Handle(name, action string, fn ActionFunc) {
	if fn == nil {
		panic("workflowtest: FakeClient.Handle with a nil function")
	}
	fc.handle(name, action, actionReg{fn: fn, arity: -1})
}

func (fc *FakeClient) handle(name, action string, reg actionReg) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.actions[[2]string{name, action}] = reg
	fc.names[name] = true
}

// HandleAction is Handle for an action of one argument, decoded into A as
// a node decodes it (rivet.Action's own check): a call with another number
// of arguments, or one that does not decode (a JSON null where A does not
// hold one included), is rivet.ErrInvalidArgument in a node's words, does
// not create the actor, and does not reach fn.
//
//	workflowtest.HandleAction(fc, "payments", "charge", func(ctx context.Context, key []string, cents int) (string, error) {
//		return "receipt-" + key[0], nil
//	})
func HandleAction[A, R any](fc *FakeClient, name, action string, fn func(ctx context.Context, key []string, arg A) (R, error)) {
	if fn == nil {
		panic("workflowtest: HandleAction with a nil function")
	}
	sp, err := rivet.Actor[struct{}]{Name: name, Actions: rivet.Actions[struct{}]{
		action: rivet.Action(func(*rivet.ActionCtx[struct{}], A) (R, error) { var r R; return r, nil }),
	}}.Spec()
	if err != nil {
		panic("workflowtest: HandleAction: " + err.Error())
	}
	as := sp.Actions[action]
	fc.handle(name, action, actionReg{arity: as.Arity, check: as.Check, fn: func(ctx context.Context, call FakeCall) (any, error) {
		var a A
		// check passed: this decodes as the node's decoder does.
		if err := json.Unmarshal(call.Args[0], &a); err != nil {
			return nil, rivet.Errorf(rivet.ErrInvalidArgument, "argument 1: %v", err)
		}
		r, err := fn(ctx, call.Key, a)
		if err != nil {
			return nil, err
		}
		return r, nil
	}})
}

// Queue gives every actor named name a queue named queue, whose messages
// fn receives; nil: they are accepted, and only recorded. It replaces any
// function the queue had.
func (fc *FakeClient) Queue(name, queue string, fn QueueFunc) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.queues[[2]string{name, queue}] = fn
	fc.names[name] = true
}

// Create makes the actor exist, so that calls and sends through Get find
// it (those through GetOrCreate do without). It panics on a name or key a
// node refuses.
func (fc *FakeClient) Create(name string, key ...string) {
	if err := rivet.ValidateName("actor name", name); err != nil {
		panic("workflowtest: FakeClient.Create: " + err.Error())
	}
	if err := rivet.ValidateKey(key); err != nil {
		panic("workflowtest: FakeClient.Create: " + err.Error())
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.names[name] = true
	fc.existing[actorID(name, key)] = true
}

// Calls returns every call, send and create made so far, in the order
// they came (that of a join's branches is the goroutines' own): copies,
// which the test may change.
func (fc *FakeClient) Calls() []FakeCall {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	out := make([]FakeCall, len(fc.calls))
	for i, c := range fc.calls {
		out[i] = c.clone()
	}
	return out
}

// GetOrCreate implements caller.Client.
func (fc *FakeClient) GetOrCreate(name string, key ...string) caller.Handle {
	return &fakeHandle{fc: fc, name: name, key: normKey(key), create: true}
}

// Get implements caller.Client: calls and sends of an actor that does not
// exist fail with rivet.ErrNotFound.
func (fc *FakeClient) Get(name string, key ...string) caller.Handle {
	return &fakeHandle{fc: fc, name: name, key: normKey(key)}
}

// normKey is a copy of key, never nil: a nil key and an empty one are the
// same (invalid) key, as on a node.
func normKey(key []string) []string {
	return append([]string{}, key...)
}

// actorID names an actor in FakeClient's maps.
func actorID(name string, key []string) string {
	k, _ := json.Marshal(normKey(key))
	return name + " " + string(k)
}

type fakeHandle struct {
	fc     *FakeClient
	name   string
	key    []string
	create bool
}

func (h *fakeHandle) id() string { return actorID(h.name, h.key) }

func (h *fakeHandle) Call(ctx context.Context, action string, args ...any) (json.RawMessage, error) {
	return h.call(ctx, action, false, "", args)
}

// CallWith implements caller.OptionsCaller.
func (h *fakeHandle) CallWith(ctx context.Context, action string, opts caller.CallOptions, args ...any) (json.RawMessage, error) {
	return h.call(ctx, action, false, opts.IdempotencyKey, args)
}

// Query implements caller.Querier.
func (h *fakeHandle) Query(ctx context.Context, action string, args ...any) (json.RawMessage, error) {
	return h.call(ctx, action, true, "", args)
}

func (h *fakeHandle) Send(ctx context.Context, queue string, body any) error {
	_, err := h.send(ctx, queue, body, caller.SendOptions{})
	return err
}

// Enqueue implements caller.Sender.
func (h *fakeHandle) Enqueue(ctx context.Context, queue string, body any) (caller.SendResult, error) {
	return h.send(ctx, queue, body, caller.SendOptions{})
}

// SendWait implements caller.Sender.
func (h *fakeHandle) SendWait(ctx context.Context, queue string, body any, timeout time.Duration) (caller.SendResult, error) {
	return h.SendWith(ctx, queue, body, caller.SendOptions{Wait: true, Timeout: timeout})
}

// SendWith implements caller.OnceSender.
func (h *fakeHandle) SendWith(ctx context.Context, queue string, body any, opts caller.SendOptions) (caller.SendResult, error) {
	return h.send(ctx, queue, body, opts)
}

// record appends a copy of rec to the calls and returns its index; fc.mu
// is held.
func (fc *FakeClient) record(rec FakeCall) int {
	fc.calls = append(fc.calls, rec.clone())
	return len(fc.calls) - 1
}

// finish fills in what call i's caller got (copies of it).
func (fc *FakeClient) finish(i int, dup bool, result json.RawMessage, send caller.SendResult, err error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	send.Response = bytes.Clone(send.Response)
	c := &fc.calls[i]
	c.Done, c.Duplicate, c.Result, c.SendResult, c.Err = true, dup, bytes.Clone(result), send, err
}

// knownLocked names the actors the test gave anything, for an error.
func (fc *FakeClient) knownLocked() []string {
	return slices.Sorted(maps.Keys(fc.names))
}

// ofLocked lists what name has of one kind (its actions, or its queues),
// as a node's error does.
func ofLocked[F any](m map[[2]string]F, name string) string {
	var out []string
	for k := range m {
		if k[0] == name {
			out = append(out, k[1])
		}
	}
	if len(out) == 0 {
		return "none"
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// find refuses what a node refuses before it runs anything, in the node's
// order (runtime Host.call and Send): an unknown actor, an unknown action
// or queue (what says it is not: ErrUnknownAction or ErrUnknownQueue),
// arguments the action does not take (args, nil for a send), an invalid
// name or key, an actor that a Get does not find. Only what passes it all
// creates the actor.
func (h *fakeHandle) find(has bool, unknown error, action string, reg actionReg, args []json.RawMessage) error {
	fc := h.fc
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if !fc.names[h.name] {
		return rivet.Errorf(rivet.ErrUnknownActor, "no actor named %q is registered (known: %v); workflowtest.FakeClient: give it actions (Handle) or queues (Queue)", h.name, fc.knownLocked())
	}
	if !has {
		return unknown
	}
	if reg.arity >= 0 && len(args) != reg.arity {
		return rivet.Errorf(rivet.ErrInvalidArgument, "action %s takes %d argument(s), got %d", action, reg.arity, len(args))
	}
	// A node decodes the arguments before it creates the actor, or in the
	// turn of one that exists: a Get of one that does not is not found.
	// The decoder is the test's code (an UnmarshalJSON): run without
	// fc.mu, its panic answered as a node answers it.
	if reg.check != nil && (h.create || fc.existing[h.id()]) {
		fc.mu.Unlock()
		err := checkArgs(reg.check, action, h.id(), args)
		fc.mu.Lock()
		if err != nil {
			return err
		}
	}
	if err := rivet.ValidateName("actor name", h.name); err != nil {
		return err
	}
	if err := rivet.ValidateKey(h.key); err != nil {
		return err
	}
	if !h.create && !fc.existing[h.id()] {
		return rivet.Errorf(rivet.ErrNotFound, "actor %s does not exist (workflowtest.FakeClient: Create it, or reach it through GetOrCreate first)", h.id())
	}
	fc.existing[h.id()] = true // GetOrCreate created it
	return nil
}

// checkArgs runs check on args, a panic in it (a decoder's) being
// rivet.ErrInternal, as on a node.
func checkArgs(check func([]json.RawMessage) error, action, id string, args []json.RawMessage) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = rivet.Errorf(rivet.ErrInternal, "the arguments' decoder of action %s of %s panicked: %v\n%s", action, id, p, debug.Stack())
		}
	}()
	return check(args)
}

// heldKey, in the ctx a function runs with, says that its call holds the
// idempotency key (a "call " kk), so that a call it makes with the same
// key is refused rather than waiting for itself.
type heldKey string

// reserve takes idempotency key kk for a call or send of what (action or
// queue) with input (arguments or body): fresh, the caller runs it and
// must release k; a duplicate, k is the first one's, done and ok; k nil,
// the key was used with another call or message (the caller refuses it).
// A key that a call still running holds is waited for (ctx bounds the
// wait): its duplicate if it succeeded, the caller's own if it failed.
func (fc *FakeClient) reserve(ctx context.Context, kk, what, input string) (k *kept, fresh bool, err error) {
	for range 1000 { // each round, another caller with the key failed
		fc.mu.Lock()
		k, ok := fc.keys[kk]
		if !ok {
			k = &kept{what: what, input: input, done: make(chan struct{})}
			fc.keys[kk] = k
			fc.mu.Unlock()
			return k, true, nil
		}
		fc.mu.Unlock()
		if k.what != what || k.input != input {
			return nil, false, nil
		}
		select {
		case <-k.done:
		case <-ctx.Done():
			return nil, false, ctxError(ctx)
		}
		if k.ok {
			return k, false, nil
		}
	}
	return nil, false, rivet.Errorf(rivet.ErrUnavailable, "idempotency key %s: every call with it failed, 1000 times", kk)
}

// release ends k, kept under kk if ok, and wakes who waits for it.
func (fc *FakeClient) release(kk string, k *kept, ok bool, result json.RawMessage, send caller.SendResult) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	switch {
	case ok:
		k.ok, k.result, k.send = true, bytes.Clone(result), send
		k.send.Response = bytes.Clone(send.Response)
	case k.given != nil:
		k.ok, k.send = true, *k.given
	default:
		delete(fc.keys, kk)
	}
	close(k.done)
}

// give records that the waiting send holding k (kk) answered r, timed out
// with its message taken, so that the key stays accepted with it whatever
// the function ends with. A function that failed meanwhile dropped the
// key: it is kept again as r, unless another send took it since.
func (fc *FakeClient) give(kk string, k *kept, r caller.SendResult) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	select {
	case <-k.done:
		if _, taken := fc.keys[kk]; !k.ok && !taken {
			done := make(chan struct{})
			close(done)
			fc.keys[kk] = &kept{what: k.what, input: k.input, done: done, ok: true, send: r}
		}
	default:
		k.given = &r
	}
}

// outcome is what a function's goroutine ends with.
type outcome struct {
	res  json.RawMessage
	send caller.SendResult
	err  error
}

// run runs body, the function of call i (what, e.g. "action charge", of
// actor id), on a goroutine of its own, as a node's CallLocal runs the
// called action: the caller waits for it or for its ctx, whichever ends
// first; body goes on to its end meanwhile, and the goroutine ends with
// it (Wait waits for it). k, if not nil, is the idempotency key (kk) it
// holds: kept as a success only if body returned without an error.
//
// A panic in body, or its runtime.Goexit (a t.FailNow), is answered as a
// node answers an action's: rivet.ErrInternal, and the key is not kept,
// so that a retry runs it again. The panic is recorded (FakeCall.Panic),
// so that it shows when the caller has left.
//
// counted says that the caller counted it running already (fc.started),
// as one that starts run on a goroutine of its own must: counted there,
// a Wait after the caller left could see nothing running before that
// goroutine is scheduled.
func (fc *FakeClient) run(ctx context.Context, i int, what, id string, kk string, k *kept, counted bool, body func() outcome) (outcome, bool) {
	done := make(chan outcome, 1)
	if !counted {
		fc.started()
	}
	go func() {
		defer fc.ended()
		var o outcome
		returned := false
		defer func() {
			if !returned {
				p := recover()
				if p != nil {
					o = outcome{err: rivet.Errorf(rivet.ErrInternal, "%s of %s panicked: %v\n%s", what, id, p, debug.Stack())}
					fc.mu.Lock()
					fc.calls[i].Panic = p
					fc.mu.Unlock()
				} else {
					o = outcome{err: rivet.Errorf(rivet.ErrInternal, "%s of %s called runtime.Goexit (t.FailNow?): the call got no reply", what, id)}
				}
			}
			if k != nil {
				fc.release(kk, k, returned && o.err == nil, o.res, o.send)
			}
			done <- o
		}()
		o = body()
		returned = true
	}()
	return await(ctx, done, nil)
}

// started and ended count the functions running, for Wait.
func (fc *FakeClient) started() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.running == 0 {
		fc.idle = make(chan struct{})
	}
	fc.running++
}

func (fc *FakeClient) ended() {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.running--
	if fc.running == 0 {
		close(fc.idle)
	}
}

// Wait waits until no ActionFunc, QueueFunc or CreateFunc runs, ctx
// bounding the wait (its error if it ends first). A function goes on after
// its caller left (its ctx ended, a waiting send's wait ran out), as an
// action on a node does; a test that checks what the functions did, or
// that must not end while they run, waits for them.
func (fc *FakeClient) Wait(ctx context.Context) error {
	for range 1000 { // each round, more functions started
		fc.mu.Lock()
		if fc.running == 0 {
			fc.mu.Unlock()
			return nil
		}
		idle := fc.idle
		fc.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.New("workflowtest: FakeClient.Wait: functions kept starting")
}

// await waits for done, or for ctx (ok false) or cut (a closed channel,
// ok false) to end the wait; both ready, done's answer is the caller's.
func await(ctx context.Context, done <-chan outcome, cut <-chan time.Time) (outcome, bool) {
	select {
	case o := <-done:
		return o, true
	case <-ctx.Done():
	case <-cut:
	}
	select {
	case o := <-done:
		return o, true
	default:
		return outcome{}, false
	}
}

// ctxError is the error of a call whose ctx ended, as a node's
// (runtime's ctxError): ErrTimeout for a deadline, ctx.Err() otherwise.
func ctxError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return rivet.Errorf(rivet.ErrTimeout, "deadline exceeded")
	}
	return ctx.Err()
}

// funcError is the error a caller gets for what a function returned, as
// a node's (runtime's actionError and codeError), except that an error
// the node hides keeps its cause here (what, e.g. "action charge").
func funcError(what, id string, err error) error {
	var re *rivet.Error
	switch {
	case errors.As(err, &re):
		// The rivet error alone, as a node gives it (runtime's
		// actionError): a test of a caller that read the wrapper's text
		// or its other errors passed here and failed on a node.
		return re
	case errors.Is(err, context.DeadlineExceeded):
		return rivet.Errorf(rivet.ErrTimeout, "%s of %s timed out", what, id)
	case errors.Is(err, context.Canceled):
		return err
	}
	return rivet.Errorf(rivet.ErrInternal, "%s of %s: %v (a node hides this as internal error; return a rivet.UserError for the caller to see it)", what, id, err)
}

func (h *fakeHandle) call(ctx context.Context, action string, readOnly bool, key string, args []any) (json.RawMessage, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx)
	}
	fc := h.fc
	rec := FakeCall{Name: h.name, Key: slices.Clone(h.key), CreateIfMissing: h.create, Action: action, ReadOnly: readOnly, IdempotencyKey: key}
	raw, err := rivet.MarshalArgs(args...)
	if err == nil && len(args) > 0 {
		if err = json.Unmarshal(raw, &rec.Args); err != nil {
			err = rivet.Errorf(rivet.ErrInvalidArgument, "arguments: %v", err)
		}
	}
	fc.mu.Lock()
	i := fc.record(rec)
	reg, has := fc.actions[[2]string{h.name, action}]
	var unknown error
	if !has {
		unknown = rivet.Errorf(rivet.ErrUnknownAction, "actor %s has no action %q (it has %s); workflowtest.FakeClient: give it one with Handle", h.name, action, ofLocked(fc.actions, h.name))
	}
	fc.mu.Unlock()
	if err == nil {
		err = h.find(has, unknown, action, reg, rec.Args)
	}
	if err != nil {
		fc.finish(i, false, nil, caller.SendResult{}, err)
		return nil, err
	}

	// A read-only action changes nothing: it needs no key to run once.
	var k *kept
	kk := "call " + h.id() + "\x00" + key
	if key != "" && !readOnly {
		var fresh bool
		if ctx.Value(heldKey(kk)) != nil {
			// As a node answers it (it would otherwise wait for itself).
			err = rivet.Errorf(rivet.ErrFailedPrecondition, "a call with idempotency key %q of %s is running, and this one re-enters it: give the inner call a key of its own", key, h.id())
		} else {
			k, fresh, err = fc.reserve(ctx, kk, action, string(raw))
		}
		if k == nil && err == nil {
			err = rivet.Errorf(rivet.ErrInvalidArgument, "idempotency key %q of %s was used for another call (a different action or arguments): use a new key for a new call", key, h.id())
		}
		if err != nil || !fresh {
			var res json.RawMessage
			if err == nil {
				res = bytes.Clone(k.result)
			}
			fc.finish(i, err == nil, res, caller.SendResult{}, err)
			return res, err
		}
	}
	return h.runCall(ctx, i, action, reg, rec, kk, k)
}

// runCall runs call i's function and answers what the caller gets; k, if
// not nil, is the key it holds, released once the function ends.
func (h *fakeHandle) runCall(ctx context.Context, i int, action string, reg actionReg, rec FakeCall, kk string, k *kept) (json.RawMessage, error) {
	fc := h.fc
	fctx := ctx
	if k != nil {
		fctx = context.WithValue(ctx, heldKey(kk), true)
	}
	o, ok := fc.run(ctx, i, "action "+action, h.id(), kk, k, false, func() outcome {
		v, err := reg.fn(fctx, rec.clone())
		if err != nil {
			return outcome{err: funcError("action "+action, h.id(), err)}
		}
		res, err := marshalResult(v)
		if err != nil {
			return outcome{err: rivet.Errorf(rivet.ErrInternal, "the result of action %s of %s is not JSON: %v", action, h.id(), err)}
		}
		return outcome{res: res}
	})
	if !ok {
		o.err = ctxError(ctx)
	}
	fc.finish(i, false, o.res, caller.SendResult{}, o.err)
	return o.res, o.err
}

// marshalResult is v as JSON: a json.RawMessage as it is (a copy), if it
// is JSON.
func marshalResult(v any) (json.RawMessage, error) {
	if r, ok := v.(json.RawMessage); ok && r != nil {
		if !json.Valid(r) {
			return nil, fmt.Errorf("json.RawMessage %q is not valid JSON", r)
		}
		return bytes.Clone(r), nil
	}
	return json.Marshal(v)
}

func (h *fakeHandle) send(ctx context.Context, queue string, body any, opts caller.SendOptions) (caller.SendResult, error) {
	if ctx.Err() != nil {
		return caller.SendResult{}, ctxError(ctx)
	}
	fc := h.fc
	rec := FakeCall{Name: h.name, Key: slices.Clone(h.key), CreateIfMissing: h.create, Queue: queue, Wait: opts.Wait, Timeout: opts.Timeout, RequireRunning: opts.RequireRunning, IdempotencyKey: opts.IdempotencyKey}
	b, err := json.Marshal(body)
	if err != nil {
		err = rivet.Errorf(rivet.ErrInvalidArgument, "message body does not marshal to JSON: %v", err)
	} else if opts.Timeout < 0 {
		err = rivet.Errorf(rivet.ErrInvalidArgument, "timeout must not be negative, not %s", opts.Timeout)
	}
	rec.Body = b
	fc.mu.Lock()
	i := fc.record(rec)
	fn, has := fc.queues[[2]string{h.name, queue}]
	var unknown error
	if !has {
		unknown = rivet.Errorf(rivet.ErrUnknownQueue, "actor %s has no queue %q (it has %s); workflowtest.FakeClient: give it one with Queue", h.name, queue, ofLocked(fc.queues, h.name))
	}
	fc.mu.Unlock()
	if err == nil {
		err = h.find(has, unknown, "", actionReg{arity: -1}, nil)
	}
	if err != nil {
		fc.finish(i, false, nil, caller.SendResult{}, err)
		return caller.SendResult{}, err
	}

	var k *kept
	kk := "send " + h.id() + "\x00" + opts.IdempotencyKey
	if opts.IdempotencyKey != "" {
		var fresh bool
		k, fresh, err = fc.reserve(ctx, kk, queue, string(b))
		if k == nil && err == nil {
			err = rivet.Errorf(rivet.ErrInvalidArgument, "idempotency key %q of %s was used for another message (a different queue or body): use a new key for a new message", opts.IdempotencyKey, h.id())
		}
		if err != nil || !fresh {
			var res caller.SendResult
			if err == nil {
				res = k.send
				res.Response = bytes.Clone(res.Response)
				if !opts.Wait {
					// A node answers a send that does not wait from the
					// key's record: the message, queued.
					res = caller.SendResult{MessageID: res.MessageID, Status: caller.SendEnqueued, WorkflowStatus: res.WorkflowStatus}
				}
				res.Duplicate = true
			}
			fc.finish(i, err == nil, nil, res, err)
			return res, err
		}
	}

	// id is the message's ID, given once the message is accepted (its
	// function returned without an error, or its sender stopped waiting
	// for it); fc.mu guards it.
	var id uint64
	msgID := func() uint64 {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		if id == 0 {
			fc.nextID[h.id()]++
			id = fc.nextID[h.id()]
		}
		return id
	}
	deliver := func() outcome {
		var v any
		var err error
		if fn != nil {
			v, err = fn(ctx, rec.clone())
		}
		if err != nil {
			return outcome{err: funcError("queue "+queue, h.id(), err)}
		}
		r, isResult := v.(caller.SendResult)
		switch {
		case isResult:
			if r.MessageID == 0 {
				r.MessageID = msgID()
			}
			r.Response = bytes.Clone(r.Response)
		case opts.Wait && fn == nil:
			// Nothing takes it: the wait runs out, the message stays.
			r = caller.SendResult{MessageID: msgID(), Status: caller.SendTimedOut, MessageState: caller.MessageQueued}
		case opts.Wait:
			resp, err := marshalResult(v)
			if err != nil {
				return outcome{err: rivet.Errorf(rivet.ErrInternal, "the completion of a message of %s is not JSON: %v", h.id(), err)}
			}
			r = caller.SendResult{MessageID: msgID(), Status: caller.SendCompleted, Response: resp}
		default:
			r = caller.SendResult{MessageID: msgID(), Status: caller.SendEnqueued}
		}
		return outcome{send: r}
	}

	var (
		o  outcome
		ok bool
	)
	if opts.Wait {
		timer := time.NewTimer(defaults.SendWaitWithin(ctx, opts.Timeout))
		defer timer.Stop()
		done := make(chan outcome, 1)
		fc.started() // before the goroutine: Wait must see it from now on
		go func() {
			o, _ := fc.run(context.Background(), i, "queue "+queue, h.id(), kk, k, true, deliver)
			done <- o
		}()
		o, ok = await(ctx, done, timer.C)
		if o.err != nil && ctx.Err() != nil {
			ok = false // the function gave up with the caller: the wait did
		}
		if !ok && !errors.Is(ctx.Err(), context.Canceled) {
			// The wait ran out (its timeout, or cut before the caller's
			// deadline): the message is the function's, taken.
			o, ok = outcome{send: caller.SendResult{MessageID: msgID(), Status: caller.SendTimedOut, MessageState: caller.MessageTaken}}, true
			if k != nil {
				fc.give(kk, k, o.send)
			}
		}
	} else {
		o, ok = fc.run(ctx, i, "queue "+queue, h.id(), kk, k, false, deliver)
	}
	if !ok {
		o.err = ctxError(ctx)
	}
	fc.finish(i, false, nil, o.send, o.err)
	return o.send, o.err
}

// String says what c was, for a test's failure message.
func (c FakeCall) String() string {
	k, _ := json.Marshal(normKey(c.Key))
	var what string
	send := c.Action == "" && !c.Create
	switch {
	case c.Create:
		what = fmt.Sprintf("create of %s %s with %s", c.Name, k, c.Input)
	case send:
		what = fmt.Sprintf("send to %s %s queue %q: %s", c.Name, k, c.Queue, c.Body)
	default:
		args, _ := json.Marshal(append([]json.RawMessage{}, c.Args...))
		what = fmt.Sprintf("call of %s %s action %q with %s", c.Name, k, c.Action, args)
	}
	switch {
	case !c.Done:
		return what + ": running"
	case c.Err != nil:
		return what + ": error: " + c.Err.Error()
	case send:
		return fmt.Sprintf("%s: %+v", what, c.SendResult)
	case c.Create:
		return fmt.Sprintf("%s: duplicate %v", what, c.Duplicate)
	default:
		return fmt.Sprintf("%s: %s", what, c.Result)
	}
}
