package workflowtest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
)

// FakeClient is a caller.Client for workflow tests (Host.Client): the
// actors a workflow calls, as functions the test registers per actor name
// and action (Handle, HandleAction) and per actor name and queue (Queue),
// with a record of every call and send (Calls). It answers what a node
// answers where the test registered nothing, with the node's error kinds,
// so that a workflow's paths for them can be tested:
//
//   - a name with no action, queue or Create: rivet.ErrUnknownActor;
//   - an action or queue the name has not: rivet.ErrUnknownAction,
//     rivet.ErrUnknownQueue;
//   - a call or send through Get (not GetOrCreate) of an actor that does
//     not exist: rivet.ErrNotFound. An actor exists once the test said so
//     (Create) or a call or send through GetOrCreate reached it, as on a
//     node.
//
// Each is a *rivet.Error, as a node's, so that a step's recorded failure
// keeps its code. An error an ActionFunc or QueueFunc returns reaches the
// caller as it is (so that a step's retries and their exhaustion can be
// tested): return what a node would, a rivet.UserError for an action's own
// refusal, rivet.Errorf(rivet.ErrUnavailable, ...) for a node's.
//
// Its handles implement what this module's handles do beyond
// caller.Handle (caller.OptionsCaller, caller.Querier, caller.Sender,
// caller.OnceSender), so rivet.CallWith, CallQuery, Enqueue, SendWait and
// SendWith work through them. Idempotency keys are kept as a node keeps
// them (without their limits of count and age): a call again with a key
// that a call of the same actor used (a send with a send's) gets the
// first one's result without running anything (FakeCall.Duplicate), so a
// test can crash a step after its call (Host.CrashAt) and check that the
// callee ran once; the same key with another call or message is
// rivet.ErrInvalidArgument; a call or send that failed keeps nothing.
// Neither a query's read-only promise nor the node's size limits are
// checked.
//
// It is safe for concurrent use: a join's or race's branches call through
// it at once. Unlike a node, which runs one turn of an actor at a time, it
// runs the functions of one actor concurrently too; a function that
// changes the test's variables must guard them.
type FakeClient struct {
	// mu guards the fields below; it is not held while an ActionFunc or
	// QueueFunc runs.
	mu       sync.Mutex
	actions  map[[2]string]ActionFunc // (name, action)
	queues   map[[2]string]QueueFunc  // (name, queue); a nil func accepts
	names    map[string]bool          // the actor names the test gave anything
	existing map[string]bool          // actorID: what Get finds
	calls    []FakeCall
	nextID   uint64              // the last message ID given
	callKeys map[string]keptCall // actorID + "\x00" + key
	sendKeys map[string]keptSend // actorID + "\x00" + key
}

// ActionFunc answers a call of an action: its result is marshalled to JSON
// (a json.RawMessage as it is), its error returned to the caller as it is.
// call says who was called with what (its outcome fields are empty). ctx
// is the caller's: a step's, which its timeout ends (Host.Hang waits on
// it).
type ActionFunc func(ctx context.Context, call FakeCall) (any, error)

// QueueFunc receives a message sent to a queue (call.Queue, call.Body). Its
// error is the send's. For a send that waits for the message's completion
// (call.Wait: rivet.SendWait), its response is the completion's
// (SendCompleted, Response marshalled); for any other send it is ignored.
// A caller.SendResult it returns is the send's result as it is (its
// MessageID the message's if zero): a waiting send that times out is
// caller.SendResult{Status: caller.SendTimedOut, MessageState:
// caller.MessageQueued}.
type QueueFunc func(ctx context.Context, call FakeCall) (any, error)

// FakeCall is one call or send a FakeClient got, as Calls returns it.
type FakeCall struct {
	// Name and Key are the actor's.
	Name string
	Key  []string
	// Create is true for a handle of GetOrCreate, false for one of Get.
	Create bool

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

	// IdempotencyKey is the call's or send's key (rivet.CallWith,
	// SendWith); empty if none.
	IdempotencyKey string
	// Duplicate says that the key was used before: nothing ran, and the
	// caller got the first one's result.
	Duplicate bool

	// Done says that the caller got its answer, below; false while the
	// ActionFunc or QueueFunc runs.
	Done bool
	// Result is a call's result; SendResult a send's (its MessageID
	// counted from 1 across the client's sends).
	Result     json.RawMessage
	SendResult caller.SendResult
	// Err is the error the caller got.
	Err error
}

// keptCall is what a call with an idempotency key left: the call, to
// refuse the key with another, and its result.
type keptCall struct {
	action string
	args   string
	result json.RawMessage
}

// keptSend is what a send with an idempotency key left.
type keptSend struct {
	queue  string
	body   string
	result caller.SendResult
}

var _ caller.Client = (*FakeClient)(nil)

var (
	_ caller.Handle        = (*fakeHandle)(nil)
	_ caller.OptionsCaller = (*fakeHandle)(nil)
	_ caller.Querier       = (*fakeHandle)(nil)
	_ caller.Sender        = (*fakeHandle)(nil)
	_ caller.OnceSender    = (*fakeHandle)(nil)
)

// NewFakeClient returns a client of no actors: register them with Handle,
// HandleAction, Queue and Create.
func NewFakeClient() *FakeClient {
	return &FakeClient{
		actions: map[[2]string]ActionFunc{}, queues: map[[2]string]QueueFunc{},
		names: map[string]bool{}, existing: map[string]bool{},
		callKeys: map[string]keptCall{}, sendKeys: map[string]keptSend{},
	}
}

// Handle makes fn answer the calls of action of every actor named name
// (fn reads which from call.Key), replacing any function it had.
func (fc *FakeClient) Handle(name, action string, fn ActionFunc) {
	if fn == nil {
		panic("workflowtest: FakeClient.Handle with a nil function")
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.actions[[2]string{name, action}] = fn
	fc.names[name] = true
}

// HandleAction is Handle for an action of one argument, decoded into A as
// a node decodes it (rivet.Action): a call with another number of
// arguments, or one that does not decode, is rivet.ErrInvalidArgument and
// does not reach fn.
//
//	workflowtest.HandleAction(fc, "payments", "charge", func(ctx context.Context, key []string, cents int) (string, error) {
//		return "receipt-" + key[0], nil
//	})
func HandleAction[A, R any](fc *FakeClient, name, action string, fn func(ctx context.Context, key []string, arg A) (R, error)) {
	fc.Handle(name, action, func(ctx context.Context, call FakeCall) (any, error) {
		if len(call.Args) != 1 {
			return nil, rivet.Errorf(rivet.ErrInvalidArgument, "action %s takes 1 argument(s), got %d", action, len(call.Args))
		}
		var a A
		if err := json.Unmarshal(call.Args[0], &a); err != nil {
			return nil, rivet.Errorf(rivet.ErrInvalidArgument, "argument 1: %v", err)
		}
		r, err := fn(ctx, call.Key, a)
		if err != nil {
			return nil, err
		}
		return r, nil
	})
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
// it (those through GetOrCreate do without).
func (fc *FakeClient) Create(name string, key ...string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.names[name] = true
	fc.existing[actorID(name, key)] = true
}

// Calls returns every call and send made so far, in the order they came
// (that of a join's branches is the goroutines' own): copies, which the
// test may change.
func (fc *FakeClient) Calls() []FakeCall {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	out := slices.Clone(fc.calls)
	for i := range out {
		out[i].Key, out[i].Args = slices.Clone(out[i].Key), slices.Clone(out[i].Args)
	}
	return out
}

// GetOrCreate implements caller.Client.
func (fc *FakeClient) GetOrCreate(name string, key ...string) caller.Handle {
	return &fakeHandle{fc: fc, name: name, key: slices.Clone(key), create: true}
}

// Get implements caller.Client: calls and sends of an actor that does not
// exist fail with rivet.ErrNotFound.
func (fc *FakeClient) Get(name string, key ...string) caller.Handle {
	return &fakeHandle{fc: fc, name: name, key: slices.Clone(key)}
}

// actorID names an actor in FakeClient's maps.
func actorID(name string, key []string) string {
	k, _ := json.Marshal(key)
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

// record appends rec to the calls and returns its index; fc.mu is held.
func (fc *FakeClient) record(rec FakeCall) int {
	fc.calls = append(fc.calls, rec)
	return len(fc.calls) - 1
}

// finish fills in what call i's caller got.
func (fc *FakeClient) finish(i int, result json.RawMessage, send caller.SendResult, err error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	c := &fc.calls[i]
	c.Done, c.Result, c.SendResult, c.Err = true, result, send, err
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

// findLocked refuses what a node refuses before it runs anything, in the
// node's order: an unknown actor, an unknown action or queue (what says
// it is not: ErrUnknownAction or ErrUnknownQueue), an actor that a Get
// does not find.
func (h *fakeHandle) findLocked(has bool, unknown error) error {
	fc := h.fc
	if !fc.names[h.name] {
		return rivet.Errorf(rivet.ErrUnknownActor, "no actor named %q is registered (known: %v); workflowtest.FakeClient: give it actions (Handle) or queues (Queue)", h.name, fc.knownLocked())
	}
	if !has {
		return unknown
	}
	if !h.create && !fc.existing[h.id()] {
		return rivet.Errorf(rivet.ErrNotFound, "actor %s does not exist (workflowtest.FakeClient: Create it, or reach it through GetOrCreate first)", h.id())
	}
	fc.existing[h.id()] = true // GetOrCreate created it
	return nil
}

func (h *fakeHandle) call(ctx context.Context, action string, readOnly bool, key string, args []any) (json.RawMessage, error) {
	fc := h.fc
	rec := FakeCall{Name: h.name, Key: slices.Clone(h.key), Create: h.create, Action: action, ReadOnly: readOnly, IdempotencyKey: key}
	raw, err := rivet.MarshalArgs(args...)
	if err == nil && len(args) > 0 {
		if err = json.Unmarshal(raw, &rec.Args); err != nil {
			err = rivet.Errorf(rivet.ErrInvalidArgument, "arguments: %v", err)
		}
	}
	fc.mu.Lock()
	i := fc.record(rec)
	if err != nil {
		fc.mu.Unlock()
		fc.finish(i, nil, caller.SendResult{}, err)
		return nil, err
	}
	fn, has := fc.actions[[2]string{h.name, action}]
	err = h.findLocked(has, rivet.Errorf(rivet.ErrUnknownAction, "actor %s has no action %q (it has %s); workflowtest.FakeClient: give it one with Handle", h.name, action, ofLocked(fc.actions, h.name)))
	kk := h.id() + "\x00" + key
	if err == nil && key != "" && !readOnly {
		if kept, ok := fc.callKeys[kk]; ok {
			var res json.RawMessage
			if kept.action != action || kept.args != string(raw) {
				err = rivet.Errorf(rivet.ErrInvalidArgument, "idempotency key %q of %s was used for another call (a different action or arguments): use a new key for a new call", key, h.id())
			} else {
				res = kept.result
				fc.calls[i].Duplicate = true
			}
			fc.mu.Unlock()
			fc.finish(i, res, caller.SendResult{}, err)
			return res, err
		}
	}
	fc.mu.Unlock()
	if err != nil {
		fc.finish(i, nil, caller.SendResult{}, err)
		return nil, err
	}

	v, err := fn(ctx, rec)
	var res json.RawMessage
	if err == nil {
		if res, err = marshalResult(v); err != nil {
			err = rivet.Errorf(rivet.ErrInternal, "the result of action %s of %s does not marshal to JSON: %v", action, h.id(), err)
		}
	}
	if err == nil && key != "" && !readOnly {
		fc.mu.Lock()
		if _, ok := fc.callKeys[kk]; !ok { // a concurrent call with the key kept its own
			fc.callKeys[kk] = keptCall{action: action, args: string(raw), result: res}
		}
		fc.mu.Unlock()
	}
	fc.finish(i, res, caller.SendResult{}, err)
	return res, err
}

// marshalResult is v as JSON: a json.RawMessage as it is.
func marshalResult(v any) (json.RawMessage, error) {
	if r, ok := v.(json.RawMessage); ok && r != nil {
		return r, nil
	}
	return json.Marshal(v)
}

func (h *fakeHandle) send(ctx context.Context, queue string, body any, opts caller.SendOptions) (caller.SendResult, error) {
	fc := h.fc
	rec := FakeCall{Name: h.name, Key: slices.Clone(h.key), Create: h.create, Queue: queue, Wait: opts.Wait, Timeout: opts.Timeout, IdempotencyKey: opts.IdempotencyKey}
	b, err := json.Marshal(body)
	if err != nil {
		err = rivet.Errorf(rivet.ErrInvalidArgument, "message body does not marshal to JSON: %v", err)
	} else if opts.Timeout < 0 {
		err = rivet.Errorf(rivet.ErrInvalidArgument, "timeout must not be negative, not %s", opts.Timeout)
	}
	rec.Body = b
	fc.mu.Lock()
	i := fc.record(rec)
	if err != nil {
		fc.mu.Unlock()
		fc.finish(i, nil, caller.SendResult{}, err)
		return caller.SendResult{}, err
	}
	fn, has := fc.queues[[2]string{h.name, queue}]
	err = h.findLocked(has, rivet.Errorf(rivet.ErrUnknownQueue, "actor %s has no queue %q (it has %s); workflowtest.FakeClient: give it one with Queue", h.name, queue, ofLocked(fc.queues, h.name)))
	kk := h.id() + "\x00" + opts.IdempotencyKey
	if err == nil && opts.IdempotencyKey != "" {
		if kept, ok := fc.sendKeys[kk]; ok {
			var res caller.SendResult
			if kept.queue != queue || kept.body != string(b) {
				err = rivet.Errorf(rivet.ErrInvalidArgument, "idempotency key %q of %s was used for another message (message %d, a different queue or body): use a new key for a new message", opts.IdempotencyKey, h.id(), kept.result.MessageID)
			} else {
				res = kept.result
				res.Duplicate = true
				fc.calls[i].Duplicate = true
			}
			fc.mu.Unlock()
			fc.finish(i, nil, res, err)
			return res, err
		}
	}
	var id uint64
	if err == nil {
		fc.nextID++
		id = fc.nextID
	}
	fc.mu.Unlock()
	if err != nil {
		fc.finish(i, nil, caller.SendResult{}, err)
		return caller.SendResult{}, err
	}

	res := caller.SendResult{MessageID: id, Status: caller.SendEnqueued}
	var v any
	if fn != nil {
		v, err = fn(ctx, rec)
	}
	switch r, ok := v.(caller.SendResult); {
	case err != nil:
		res = caller.SendResult{}
	case ok:
		res = r
		if res.MessageID == 0 {
			res.MessageID = id
		}
	case opts.Wait && fn == nil:
		// Nothing completes it: the wait runs out, the message stays.
		res.Status, res.MessageState = caller.SendTimedOut, caller.MessageQueued
	case opts.Wait:
		res.Status = caller.SendCompleted
		if res.Response, err = marshalResult(v); err != nil {
			res = caller.SendResult{}
			err = rivet.Errorf(rivet.ErrInternal, "the completion of message %d of %s does not marshal to JSON: %v", id, h.id(), err)
		}
	}
	if err == nil && opts.IdempotencyKey != "" {
		fc.mu.Lock()
		if _, ok := fc.sendKeys[kk]; !ok {
			fc.sendKeys[kk] = keptSend{queue: queue, body: string(b), result: res}
		}
		fc.mu.Unlock()
	}
	fc.finish(i, nil, res, err)
	return res, err
}

// String says what c was, for a test's failure message.
func (c FakeCall) String() string {
	k, _ := json.Marshal(c.Key)
	var what string
	send := c.Action == ""
	if send {
		what = fmt.Sprintf("send to %s %s queue %q: %s", c.Name, k, c.Queue, c.Body)
	} else {
		args, _ := json.Marshal(c.Args)
		what = fmt.Sprintf("call of %s %s action %q%s", c.Name, k, c.Action, args)
	}
	switch {
	case !c.Done:
		return what + ": running"
	case c.Err != nil:
		return what + ": error: " + c.Err.Error()
	case send:
		return fmt.Sprintf("%s: %+v", what, c.SendResult)
	default:
		return fmt.Sprintf("%s: %s", what, c.Result)
	}
}
