package workflowtest

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/internal/optjson"
)

// CreateFunc checks the input of a create (call.Input, JSON; nil for
// none) of an actor named call.Name, as the actor's CreateState does: an
// error fails the create, which makes nothing, and reaches the caller as
// a node answers a CreateState's error: rivet.ErrInvalidArgument with its
// message, whatever its kind (a *rivet.Error's kind too is not passed
// on).
type CreateFunc func(ctx context.Context, call FakeCall) error

// made is a create's (CreateWith) record of the actor it makes: its
// idempotency key and input, and once done is closed, whether it made it.
type made struct {
	key   string
	input json.RawMessage
	done  chan struct{}
	ok    bool // fc.mu guards it; read after done
}

// HandleCreate makes fn check the input of every create (rivet.Create,
// CreateWith) of an actor named name, replacing any function it had; nil
// accepts any input, as an actor whose CreateState takes any does (a node
// refuses a non-null input to an actor without CreateState, as
// INVALID_ARGUMENT: the fake cannot know that the actor has none, so give
// such an actor a fn that refuses a non-null call.Input). A create of a name the test gave anything (actions,
// queues, HandleCreate, Create) is served; one of any other name is
// rivet.ErrUnknownActor, as on a node.
func (fc *FakeClient) HandleCreate(name string, fn CreateFunc) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	fc.creates[name] = fn
	fc.names[name] = true
}

// CreateWith implements caller.Creator (rivet.Create, rivet.CreateWith),
// as a node's create: the actor must not exist (rivet.ErrAlreadyExists if
// it does: made by Create, a GetOrCreate call or send, or another
// create), unless a create with the same idempotency key and input made
// it (then the result says Duplicate, and the CreateFunc does not run
// again); the same key with another input (compared as JSON values) is
// rivet.ErrInvalidArgument. A create that the CreateFunc failed makes
// nothing. A create of an actor whose create still runs waits for it
// (ctx bounds the wait). Each create is recorded (FakeCall.Create). The
// result's ActorInfo has the actor's name and key only (no node, no
// clock).
func (fc *FakeClient) CreateWith(ctx context.Context, name string, key []string, input any, opts caller.CreateOptions) (caller.CreateResult, error) {
	if ctx.Err() != nil {
		return caller.CreateResult{}, ctxError(ctx)
	}
	h := &fakeHandle{fc: fc, name: name, key: normKey(key)}
	rec := FakeCall{Name: name, Key: slices.Clone(h.key), Create: true, IdempotencyKey: opts.IdempotencyKey}
	in, err := optjson.Marshal("create input", input)
	rec.Input = in
	fc.mu.Lock()
	i := fc.record(rec)
	fn := fc.creates[name]
	if err == nil && !fc.names[name] {
		err = rivet.Errorf(rivet.ErrUnknownActor, "no actor named %q is registered (known: %v); workflowtest.FakeClient: give it a HandleCreate (or actions, or queues)", name, fc.knownLocked())
	}
	fc.mu.Unlock()
	if err == nil {
		err = rivet.ValidateName("actor name", name)
	}
	if err == nil {
		err = rivet.ValidateKey(h.key)
	}
	if err != nil {
		fc.finishCreate(i, caller.CreateResult{}, err)
		return caller.CreateResult{}, err
	}
	res := caller.CreateResult{ActorInfo: caller.ActorInfo{Name: name, Key: slices.Clone(h.key)}}
	for range 1000 { // each round, a create of the actor failed
		fc.mu.Lock()
		m := fc.made[h.id()]
		if m == nil && !fc.existing[h.id()] {
			m = &made{key: opts.IdempotencyKey, input: in, done: make(chan struct{})}
			fc.made[h.id()] = m
			fc.mu.Unlock()
			return fc.runCreate(ctx, i, h, m, fn, rec, res)
		}
		fc.mu.Unlock()
		if m == nil {
			return fc.refuseCreate(i, rivet.Errorf(rivet.ErrAlreadyExists, "actor %s already exists", h.id()))
		}
		select {
		case <-m.done:
		case <-ctx.Done():
			return fc.refuseCreate(i, ctxError(ctx))
		}
		fc.mu.Lock()
		ok := m.ok
		fc.mu.Unlock()
		switch {
		case !ok:
			continue
		case opts.IdempotencyKey == "" || m.key != opts.IdempotencyKey:
			return fc.refuseCreate(i, rivet.Errorf(rivet.ErrAlreadyExists, "actor %s already exists", h.id()))
		case !optjson.Same(m.input, in):
			return fc.refuseCreate(i, rivet.Errorf(rivet.ErrInvalidArgument, "actor %s was created with idempotency key %q and another input: a key names one create (send the same input, or use another key)", h.id(), opts.IdempotencyKey))
		}
		res.Duplicate = true
		fc.finishCreate(i, res, nil)
		return res, nil
	}
	return fc.refuseCreate(i, rivet.Errorf(rivet.ErrUnavailable, "every create of %s failed, 1000 times", h.id()))
}

// runCreate runs the CreateFunc of create i, which m records, as run runs
// an action's: the actor exists once it returns nil, whether or not the
// caller waited for it.
func (fc *FakeClient) runCreate(ctx context.Context, i int, h *fakeHandle, m *made, fn CreateFunc, rec FakeCall, res caller.CreateResult) (caller.CreateResult, error) {
	o, ok := fc.run(ctx, i, "create", h.id(), "", nil, false, func() (o outcome) {
		created := false
		defer func() {
			// Deferred: a panic or a Goexit in fn makes nothing.
			fc.mu.Lock()
			defer fc.mu.Unlock()
			if created {
				m.ok, fc.existing[h.id()] = true, true
			} else {
				delete(fc.made, h.id())
			}
			close(m.done)
		}()
		if fn != nil {
			if err := fn(ctx, rec.clone()); err != nil {
				return outcome{err: rivet.Errorf(rivet.ErrInvalidArgument, "create %s: %v", h.name, err)}
			}
		}
		created = true
		return outcome{}
	})
	if !ok {
		o.err = ctxError(ctx)
	}
	if o.err != nil {
		fc.finishCreate(i, caller.CreateResult{}, o.err)
		return caller.CreateResult{}, o.err
	}
	fc.finishCreate(i, res, nil)
	return res, nil
}

// refuseCreate answers create i with err.
func (fc *FakeClient) refuseCreate(i int, err error) (caller.CreateResult, error) {
	fc.finishCreate(i, caller.CreateResult{}, err)
	return caller.CreateResult{}, err
}

// finishCreate fills in what create i's caller got.
func (fc *FakeClient) finishCreate(i int, res caller.CreateResult, err error) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	c := &fc.calls[i]
	res.Key = slices.Clone(res.Key)
	c.Done, c.Duplicate, c.CreateResult, c.Err = true, res.Duplicate, res, err
}
