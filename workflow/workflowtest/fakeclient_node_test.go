package workflowtest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/workflow/workflowtest"
)

// waitFor waits until cond holds, bounded in time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A function's error reaches the caller as a node's would: a rivet error
// as it is (alone, if wrapped), a deadline as a timeout, a cancellation as it is, anything
// else as an internal error (whose cause the fake keeps in its message).
func TestFakeClientFunctionErrorsAsANodeAnswersThem(t *testing.T) {
	ctx := context.Background()
	fc := workflowtest.NewFakeClient()
	var give error
	fc.Handle("svc", "do", func(context.Context, workflowtest.FakeCall) (any, error) { return nil, give })
	fc.Queue("svc", "in", func(context.Context, workflowtest.FakeCall) (any, error) { return nil, give })
	h := fc.GetOrCreate("svc", "a")
	for _, tc := range []struct {
		give     error
		want     error
		code, in string
	}{
		{rivet.UserError("overloaded", "too busy", nil), rivet.ErrUser, "overloaded", "too busy"},
		{rivet.Errorf(rivet.ErrUnavailable, "restarting"), rivet.ErrUnavailable, "", "restarting"},
		{errors.New("disk on fire"), rivet.ErrInternal, "", "disk on fire"},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), rivet.ErrTimeout, "", "timed out"},
		{context.Canceled, context.Canceled, "", "canceled"},
	} {
		give = tc.give
		_, callErr := h.Call(ctx, "do")
		sendErr := h.Send(ctx, "in", 1)
		for what, err := range map[string]error{"call": callErr, "send": sendErr} {
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("%s, function's error %v: got %v, want %v saying %q", what, tc.give, err, tc.want, tc.in)
			}
			if tc.want == context.Canceled {
				continue
			}
			var re *rivet.Error
			if !errors.As(err, &re) || tc.code != "" && re.Code != tc.code {
				t.Errorf("%s, function's error %v: got %#v, want a *rivet.Error (code %q)", what, tc.give, err, tc.code)
			}
		}
	}
	// An error that wraps a rivet error reaches the caller as that rivet
	// error alone, as from a node: the wrapper's text and the errors it
	// wraps besides stay with the function.
	secret := &net.OpError{Op: "dial", Err: errors.New("pg://secret")}
	outOfStock := rivet.UserError("out_of_stock", "out of stock", nil)
	give = fmt.Errorf("reserve (%w): %w", secret, outOfStock)
	_, callErr := h.Call(ctx, "do")
	sendErr := h.Send(ctx, "in", 1)
	for what, err := range map[string]error{"call": callErr, "send": sendErr} {
		var oe *net.OpError
		if err != outOfStock || errors.As(err, &oe) {
			t.Errorf("%s, function's error %v: got %#v (a *net.OpError in it: %v), want the rivet error alone", what, give, err, oe != nil)
		}
	}
	// A rivet error is what the node says: ErrUnavailable from Errorf did
	// not run; one without a Group is an outcome unknown.
	for _, tc := range []struct {
		give    error
		unknown bool
	}{
		{rivet.Errorf(rivet.ErrUnavailable, "moving"), false},
		{&rivet.Error{Kind: rivet.ErrUnavailable, Message: "connection broke"}, true},
	} {
		give = tc.give
		if _, err := h.Call(ctx, "do"); !errors.Is(err, rivet.ErrUnavailable) || rivet.OutcomeUnknown(err) != tc.unknown {
			t.Errorf("function's error %#v: got %v (outcome unknown %v), want it as it is", tc.give, err, rivet.OutcomeUnknown(err))
		}
	}
}

// Names and keys are checked as a node checks them, after the actor and
// action are found and before the actor is created; a nil key and an
// empty one are the same (refused) key.
func TestFakeClientRefusesInvalidKeys(t *testing.T) {
	fc := workflowtest.NewFakeClient()
	fc.Handle("svc", "do", func(context.Context, workflowtest.FakeCall) (any, error) { return 1, nil })
	fc.Queue("svc", "in", nil)
	for _, tc := range []struct {
		what string
		err  error
		want error
	}{
		{"no key", callErr(fc.GetOrCreate("svc"), "do"), rivet.ErrInvalidArgument},
		{"an empty key", callErr(fc.GetOrCreate("svc", []string{}...), "do"), rivet.ErrInvalidArgument},
		{"a key not UTF-8", callErr(fc.GetOrCreate("svc", "\xff"), "do"), rivet.ErrInvalidArgument},
		{"a key component too long", callErr(fc.GetOrCreate("svc", strings.Repeat("k", 200)), "do"), rivet.ErrInvalidArgument},
		{"send with no key", fc.GetOrCreate("svc").Send(context.Background(), "in", 1), rivet.ErrInvalidArgument},
		{"unknown action first", callErr(fc.GetOrCreate("svc"), "nope"), rivet.ErrUnknownAction},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, tc.err, tc.want)
		}
	}
	for _, key := range [][]string{nil, {}, {"\xff"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Create with key %q did not panic", key)
				}
			}()
			fc.Create("svc", key...)
		}()
	}
	if c := fc.Calls()[0]; c.Key == nil || len(c.Key) != 0 {
		t.Errorf("recorded key %#v, want an empty (not nil) key", c.Key)
	}
}

// A function gets a call of its own: what it changes in it is neither in
// the record nor a data race with Calls (run with -race), and what Calls
// returns is the test's to change.
func TestFakeClientFunctionsOwnTheirCall(t *testing.T) {
	fc := workflowtest.NewFakeClient()
	fc.Handle("svc", "do", func(_ context.Context, c workflowtest.FakeCall) (any, error) {
		for range 200 {
			c.Key[0] = "changed"
			c.Args[0][0] = ' '
		}
		return json.RawMessage(`{"ok":true}`), nil
	})
	fc.Queue("svc", "in", func(_ context.Context, c workflowtest.FakeCall) (any, error) {
		for range 200 {
			c.Body[0] = ' '
		}
		return nil, nil
	})
	stop := make(chan struct{})
	var reader sync.WaitGroup
	reader.Add(1)
	go func() {
		defer reader.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, c := range fc.Calls() {
				_ = c.String()
			}
		}
	}()
	h := fc.GetOrCreate("svc", "a")
	for range 20 {
		if _, err := h.Call(context.Background(), "do", 7); err != nil {
			t.Fatal(err)
		}
		if err := h.Send(context.Background(), "in", 8); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	reader.Wait()
	calls := fc.Calls()
	calls[0].Args[0][0], calls[0].Result[0] = 'x', 'x'
	for _, c := range fc.Calls() {
		if c.Key[0] != "a" || c.Action != "" && string(c.Args[0]) != "7" || c.Action != "" && string(c.Result) != `{"ok":true}` || c.Queue != "" && string(c.Body) != "8" {
			t.Fatalf("record changed by the function or the test: %v", c)
		}
	}
}

// HandleAction's arguments are checked as a node checks them (a JSON null
// is no int, in the node's words), before the actor is created.
func TestFakeClientHandleActionChecksArgumentsAsANode(t *testing.T) {
	fc := workflowtest.NewFakeClient()
	ran := 0
	workflowtest.HandleAction(fc, "payments", "charge", func(context.Context, []string, int) (int, error) { ran++; return 0, nil })
	for _, tc := range []struct {
		key  string
		args []any
		want string
	}{
		{"a", []any{nil}, "argument 1:"},
		{"b", []any{"ten"}, "argument 1:"},
		{"c", []any{1, 2}, "action charge takes 1 argument(s), got 2"},
		{"d", nil, "action charge takes 1 argument(s), got 0"},
	} {
		err := callErr(fc.GetOrCreate("payments", tc.key), "charge", tc.args...)
		if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "Go value") {
			t.Errorf("args %v: %v, want ErrInvalidArgument saying %q, in a node's words", tc.args, err, tc.want)
		}
		if err := callErr(fc.Get("payments", tc.key), "charge", 1); !errors.Is(err, rivet.ErrNotFound) {
			t.Errorf("args %v created the actor: a Get of it then got %v", tc.args, err)
		}
	}
	// As on a node, a Get decodes nothing for an actor that is not there.
	if err := callErr(fc.Get("payments", "e"), "charge", "ten"); !errors.Is(err, rivet.ErrNotFound) {
		t.Errorf("Get of an actor that does not exist, with arguments that do not decode: %v, want ErrNotFound", err)
	}
	fc.Create("payments", "e")
	if err := callErr(fc.Get("payments", "e"), "charge", "ten"); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("Get of an actor that exists, with arguments that do not decode: %v, want ErrInvalidArgument", err)
	}
	if ran != 0 {
		t.Fatalf("the function ran %d times, want never", ran)
	}
}

// The caller's ctx: an ended one is refused without running anything; one
// that ends while the function runs answers at once, while the function
// goes on to its end (its goroutine then ends), and its outcome stands.
func TestFakeClientHonoursTheCallersContext(t *testing.T) {
	bound, cancelBound := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelBound()
	fc := workflowtest.NewFakeClient()
	release, returned := make(chan struct{}), make(chan struct{})
	closeRelease := sync.OnceFunc(func() { close(release) })
	t.Cleanup(closeRelease)
	var runs atomic.Int32
	fc.Handle("svc", "slow", func(context.Context, workflowtest.FakeCall) (any, error) {
		runs.Add(1)
		<-release // ignores its ctx, as a careless action does
		defer close(returned)
		return "done", nil
	})
	h := fc.GetOrCreate("svc", "a")
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.Call(ended, "slow"); !errors.Is(err, context.Canceled) || runs.Load() != 0 {
		t.Fatalf("call with an ended ctx: %v (ran %d), want context.Canceled without running", err, runs.Load())
	}
	ctx, cancel := context.WithTimeout(bound, 100*time.Millisecond)
	defer cancel()
	var err error
	within(t, 10*time.Second, "a call whose deadline passes", func() {
		_, err = rivet.CallWith[string](ctx, h, "slow", rivet.CallOptions{IdempotencyKey: "k"})
	})
	if !errors.Is(err, rivet.ErrTimeout) {
		t.Fatalf("call whose deadline passed while it ran: %v, want ErrTimeout", err)
	}
	if c := fc.Calls()[0]; !c.Done || !errors.Is(c.Err, rivet.ErrTimeout) {
		t.Fatalf("recorded %v, want the timeout", c)
	}
	closeRelease()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the function did not return in 10 s after its release")
	}
	var res json.RawMessage
	within(t, 10*time.Second, "the call again", func() {
		res, err = h.(caller.OptionsCaller).CallWith(bound, "slow", caller.CallOptions{IdempotencyKey: "k"})
	})
	if err != nil || string(res) != `"done"` || runs.Load() != 1 {
		t.Fatalf("call again with the key: %s %v (ran %d), want the first's outcome, which stood", res, err, runs.Load())
	}
}

// A waiting send waits as a node's does: up to its timeout, cut before
// the caller's deadline, then timed out with the message taken, and no
// error; a send that does not wait, again with a waiting send's key, is
// its duplicate, enqueued.
func TestFakeClientWaitingSendsAsANode(t *testing.T) {
	bound, cancelBound := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelBound()
	fc := workflowtest.NewFakeClient()
	release := make(chan struct{})
	t.Cleanup(sync.OnceFunc(func() { close(release) }))
	fc.Queue("svc", "hang", func(ctx context.Context, _ workflowtest.FakeCall) (any, error) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-release:
			return "late", nil
		}
	})
	fc.Queue("svc", "echo", func(_ context.Context, c workflowtest.FakeCall) (any, error) { return c.Body, nil })
	h := fc.GetOrCreate("svc", "a")

	ctx, cancel := context.WithTimeout(bound, 300*time.Millisecond)
	defer cancel()
	var (
		res rivet.SendResult
		err error
	)
	within(t, 10*time.Second, "a SendWait whose caller's deadline comes", func() { res, err = rivet.SendWait(ctx, h, "hang", 1, 0) })
	if err != nil || res.Status != rivet.SendTimedOut || res.MessageState != rivet.MessageTaken || res.MessageID != 1 {
		t.Fatalf("SendWait whose caller's deadline came: %+v %v, want timed out, taken, message 1, no error", res, err)
	}
	// The wait's own timer ends it, not the caller's ctx (10 s): well
	// before a second, however loaded the machine.
	start := time.Now()
	within(t, 10*time.Second, "a SendWait past its timeout", func() { res, err = rivet.SendWait(bound, h, "hang", 2, 50*time.Millisecond) })
	if took := time.Since(start); took >= time.Second {
		t.Fatalf("SendWait with a timeout of 50ms took %s, want its timer to end it", took)
	}
	if err != nil || res.Status != rivet.SendTimedOut || res.MessageState != rivet.MessageTaken || res.MessageID != 2 {
		t.Fatalf("SendWait past its timeout: %+v %v, want timed out, taken, message 2, no error", res, err)
	}

	opts := rivet.SendOptions{Wait: true, IdempotencyKey: "k"}
	first, err := rivet.SendWith(bound, h, "echo", "hi", opts)
	if err != nil || first.Status != rivet.SendCompleted || string(first.Response) != `"hi"` {
		t.Fatalf("waiting SendWith: %+v %v", first, err)
	}
	again, err := rivet.SendWith(bound, h, "echo", "hi", rivet.SendOptions{IdempotencyKey: "k"})
	want := caller.SendResult{MessageID: first.MessageID, Status: caller.SendEnqueued, Duplicate: true}
	if err != nil || again.MessageID != want.MessageID || again.Status != want.Status || !again.Duplicate || again.Response != nil {
		t.Fatalf("SendWith again without waiting: %+v %v, want %+v", again, err, want)
	}
}

// Message IDs are an actor's own, counted over the messages it accepted.
func TestFakeClientMessageIDsPerActor(t *testing.T) {
	ctx := context.Background()
	fc := workflowtest.NewFakeClient()
	fc.Queue("svc", "in", func(_ context.Context, c workflowtest.FakeCall) (any, error) {
		if string(c.Body) == "-1" {
			return nil, rivet.Errorf(rivet.ErrQueueFull, "full")
		}
		return nil, nil
	})
	a, b := fc.GetOrCreate("svc", "a"), fc.GetOrCreate("svc", "b")
	var got []uint64
	for _, step := range []struct {
		h    caller.Handle
		body int
	}{{a, 1}, {b, 1}, {a, -1}, {a, 2}, {b, 2}} {
		res, err := rivet.Enqueue(ctx, step.h, "in", step.body)
		if (step.body < 0) != (err != nil) {
			t.Fatalf("send %d: %v", step.body, err)
		}
		got = append(got, res.MessageID)
	}
	if want := []uint64{1, 1, 0, 2, 2}; !slices.Equal(got, want) {
		t.Fatalf("message IDs %v, want %v", got, want)
	}
}

// Two calls at once with the same new key run the function once: the
// second waits for the first and is its duplicate; after a failed first,
// the waiting second runs itself.
func TestFakeClientConcurrentCallsWithOneKeyRunOnce(t *testing.T) {
	for _, firstFails := range []bool{false, true} {
		t.Run(fmt.Sprint("firstFails=", firstFails), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			fc := workflowtest.NewFakeClient()
			release := make(chan struct{})
			closeRelease := sync.OnceFunc(func() { close(release) })
			t.Cleanup(closeRelease)
			var runs atomic.Int32
			fc.Handle("svc", "do", func(context.Context, workflowtest.FakeCall) (any, error) {
				n := runs.Add(1)
				if n == 1 {
					<-release
					if firstFails {
						return nil, rivet.Errorf(rivet.ErrUnavailable, "first fails")
					}
				}
				return n, nil
			})
			h := fc.GetOrCreate("svc", "a")
			opts := caller.CallOptions{IdempotencyKey: "k"}
			type answer struct {
				res json.RawMessage
				err error
			}
			first, second := make(chan answer, 1), make(chan answer, 1)
			go func() {
				r, err := h.(caller.OptionsCaller).CallWith(ctx, "do", opts)
				first <- answer{r, err}
			}()
			waitFor(t, "the first call to run", func() bool { return runs.Load() == 1 })
			go func() {
				r, err := h.(caller.OptionsCaller).CallWith(ctx, "do", opts)
				second <- answer{r, err}
			}()
			waitFor(t, "the second call to come", func() bool { return len(fc.Calls()) == 2 })
			closeRelease()
			var a1, a2 answer
			for _, got := range []struct {
				ch  chan answer
				out *answer
			}{{first, &a1}, {second, &a2}} {
				select {
				case *got.out = <-got.ch:
				case <-time.After(10 * time.Second):
					t.Fatal("a call did not return in 10 s after the release")
				}
			}
			if firstFails {
				if a1.err == nil || a2.err != nil || string(a2.res) != "2" || runs.Load() != 2 {
					t.Fatalf("first %s %v, second %s %v, ran %d: want the second to run itself after the first failed", a1.res, a1.err, a2.res, a2.err, runs.Load())
				}
				return
			}
			if a1.err != nil || a2.err != nil || string(a1.res) != "1" || string(a2.res) != "1" || runs.Load() != 1 || !fc.Calls()[1].Duplicate {
				t.Fatalf("first %s %v, second %s %v, ran %d: want one run, the second its duplicate", a1.res, a1.err, a2.res, a2.err, runs.Load())
			}
		})
	}
}

// A json.RawMessage result that is not JSON is the function's error, not
// the caller's garbage; String prints a nil key and nil arguments as [].
func TestFakeClientSmallThings(t *testing.T) {
	fc := workflowtest.NewFakeClient()
	fc.Handle("svc", "bad", func(context.Context, workflowtest.FakeCall) (any, error) { return json.RawMessage("{not json"), nil })
	if err := callErr(fc.GetOrCreate("svc", "a"), "bad"); !errors.Is(err, rivet.ErrInternal) {
		t.Fatalf("a result that is not JSON: %v, want ErrInternal", err)
	}
	if s := (workflowtest.FakeCall{Name: "svc", Action: "do", Done: true}).String(); s != `call of svc [] action "do" with []: ` {
		t.Fatalf("String: %q", s)
	}
}

// A function that panics (or calls runtime.Goexit, as t.FailNow does)
// with an idempotency key answers rivet.ErrInternal, as a node's action,
// and leaves no key: a retry runs it again and gets its result. A panic
// whose caller had left shows in the record, and Wait waits for the
// functions that outlive their callers.
func TestFakeClientPanicsAsANodeAnswersThem(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fc := workflowtest.NewFakeClient()
	var calls, sends atomic.Int32
	fc.Handle("svc", "do", func(context.Context, workflowtest.FakeCall) (any, error) {
		switch calls.Add(1) {
		case 1:
			panic("boom")
		case 2:
			runtime.Goexit()
		}
		return "ran", nil
	})
	fc.Queue("svc", "in", func(context.Context, workflowtest.FakeCall) (any, error) {
		if sends.Add(1) == 1 {
			panic("bang")
		}
		return "took", nil
	})
	h := fc.GetOrCreate("svc", "a")
	for i, want := range []string{"panicked: boom", "runtime.Goexit", ""} {
		var res string
		var err error
		within(t, 10*time.Second, "a call", func() {
			res, err = rivet.CallWith[string](ctx, h, "do", rivet.CallOptions{IdempotencyKey: "k"})
		})
		if want != "" && (!errors.Is(err, rivet.ErrInternal) || !strings.Contains(err.Error(), want)) {
			t.Fatalf("call %d: %q %v, want ErrInternal saying %q", i+1, res, err, want)
		}
		if want == "" && (err != nil || res != "ran") {
			t.Fatalf("call again with the key after a panic and a Goexit: %q %v, want the function run again", res, err)
		}
	}
	if c := fc.Calls()[0]; c.Panic != "boom" || !strings.Contains(c.Err.Error(), "goroutine") {
		t.Fatalf("recorded %v (panic %v), want the panic and its stack", c, c.Panic)
	}
	opts := rivet.SendOptions{Wait: true, IdempotencyKey: "s"}
	for i, want := range []string{"panicked: bang", ""} {
		var res rivet.SendResult
		var err error
		within(t, 10*time.Second, "a waiting send", func() { res, err = rivet.SendWith(ctx, h, "in", 1, opts) })
		if want != "" && (!errors.Is(err, rivet.ErrInternal) || !strings.Contains(err.Error(), want)) {
			t.Fatalf("send %d: %+v %v, want ErrInternal saying %q", i+1, res, err, want)
		}
		if want == "" && (err != nil || res.Status != rivet.SendCompleted || string(res.Response) != `"took"` || res.Duplicate) {
			t.Fatalf("send again with the key after a panic: %+v %v, want the function run again", res, err)
		}
	}

	// The caller leaves; the function panics later.
	release := make(chan struct{})
	closeRelease := sync.OnceFunc(func() { close(release) })
	t.Cleanup(closeRelease)
	fc.Handle("svc", "late", func(context.Context, workflowtest.FakeCall) (any, error) {
		<-release
		panic("late")
	})
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err := h.Call(short, "late"); !errors.Is(err, rivet.ErrTimeout) {
		t.Fatalf("call whose caller left: %v, want ErrTimeout", err)
	}
	if err := fc.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait while a function runs, bounded by an ended ctx: %v, want its error", err)
	}
	closeRelease()
	if err := fc.Wait(ctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	recs := fc.Calls()
	if c := recs[len(recs)-1]; c.Panic != "late" || !errors.Is(c.Err, rivet.ErrTimeout) {
		t.Fatalf("recorded %v (panic %v), want the caller's timeout and the later panic", c, c.Panic)
	}
}

// within runs f, and fails the test if it does not return in d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return in %s", what, d)
	}
}

// panicky is an argument whose decoder panics on "boom".
type panicky struct{}

func (*panicky) UnmarshalJSON(b []byte) error {
	if string(b) == `"boom"` {
		panic("decoder boom")
	}
	return nil
}

// A decoder that panics is the caller's rivet.ErrInternal, as on a node,
// and leaves the fake usable; a call that re-enters the key its own call
// holds is refused at once, as a node refuses it, instead of waiting for
// itself.
func TestFakeClientDecoderPanicsAndReentrantKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fc := workflowtest.NewFakeClient()
	workflowtest.HandleAction(fc, "svc", "take", func(context.Context, []string, panicky) (string, error) { return "took", nil })
	h := fc.GetOrCreate("svc", "a")
	for _, arg := range []string{"boom", "fine"} {
		var err error
		within(t, 10*time.Second, "a call", func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("the call panicked: %v", p)
				}
			}()
			_, err = h.Call(ctx, "take", arg)
		})
		if want := arg == "boom"; want != errors.Is(err, rivet.ErrInternal) || !want && err != nil {
			t.Fatalf("call with %q: %v, want ErrInternal only for the decoder's panic", arg, err)
		}
	}

	fc.Handle("svc", "outer", func(ctx context.Context, _ workflowtest.FakeCall) (any, error) {
		_, err := rivet.CallWith[string](ctx, h, "take", rivet.CallOptions{IdempotencyKey: "k"}, "x")
		if !errors.Is(err, rivet.ErrFailedPrecondition) {
			return nil, fmt.Errorf("inner call with the outer's key: %v, want ErrFailedPrecondition", err)
		}
		// Another key is its own.
		return rivet.CallWith[string](ctx, h, "take", rivet.CallOptions{IdempotencyKey: "k2"}, "x")
	})
	var (
		res string
		err error
	)
	within(t, 10*time.Second, "a call whose function re-enters its key", func() {
		res, err = rivet.CallWith[string](ctx, h, "outer", rivet.CallOptions{IdempotencyKey: "k"})
	})
	if err != nil || res != "took" {
		t.Fatalf("outer call: %q %v", res, err)
	}
}

// endingCtx is a caller's context that ends as the call starts: its first
// Err says it has not ended, its Done is closed, and its Err after that
// says it was cancelled. So a waiting send passes its check of the ctx
// and finds its caller gone when it waits.
type endingCtx struct {
	context.Context
	asked atomic.Bool
}

var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (c *endingCtx) Done() <-chan struct{} { return closedDone }

func (c *endingCtx) Err() error {
	if c.asked.Swap(true) {
		return context.Canceled
	}
	return nil
}

// Wait waits for the function of a waiting send whose caller left before
// it started (the caller's ctx ended first): a test that waits for the
// fake's functions and then looks at what they did sees it done. Many
// rounds: the caller leaving first is the usual order, not the only one.
func TestFakeClientWaitWaitsForAWaitingSendsCallerLeft(t *testing.T) {
	fc := workflowtest.NewFakeClient()
	var ran atomic.Int64
	fc.Queue("svc", "in", func(context.Context, workflowtest.FakeCall) (any, error) {
		ran.Add(1)
		return nil, nil
	})
	h := fc.GetOrCreate("svc", "a")
	bound, cancelBound := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelBound()
	for i := range int64(200) {
		gone := &endingCtx{Context: context.Background()}
		if _, err := rivet.SendWait(gone, h, "in", i, 0); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: SendWait whose caller left: %v, want context.Canceled (or its answer)", i, err)
		}
		if err := fc.Wait(bound); err != nil {
			t.Fatalf("round %d: Wait: %v", i, err)
		}
		if got := ran.Load(); got != i+1 {
			t.Fatalf("round %d: Wait returned with the function run %d times, want %d: it returned before the function of the send its caller left", i, got, i+1)
		}
	}
}

// A waiting send that timed out told its caller the message was taken,
// with its ID: the key stays accepted, as a node's, even if the function
// fails later, so a send again with the key runs nothing and gets that ID.
func TestFakeClientKeyOfATimedOutSendStaysAccepted(t *testing.T) {
	bound, cancelBound := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancelBound()
	fc := workflowtest.NewFakeClient()
	release := make(chan struct{})
	var runs atomic.Int64
	fc.Queue("svc", "in", func(ctx context.Context, _ workflowtest.FakeCall) (any, error) {
		runs.Add(1)
		select {
		case <-release:
		case <-bound.Done():
		}
		return nil, errors.New("failed after its sender stopped waiting")
	})
	h := fc.GetOrCreate("svc", "a")
	opts := rivet.SendOptions{Wait: true, Timeout: 50 * time.Millisecond, IdempotencyKey: "k"}
	first, err := rivet.SendWith(bound, h, "in", 1, opts)
	if err != nil || first.Status != rivet.SendTimedOut || first.MessageState != rivet.MessageTaken || first.MessageID == 0 {
		t.Fatalf("SendWith past its timeout: %+v %v, want timed out, taken, an ID", first, err)
	}
	close(release)
	if err := fc.Wait(bound); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	again, err := rivet.SendWith(bound, h, "in", 1, opts)
	if err != nil || !again.Duplicate || again.MessageID != first.MessageID {
		t.Fatalf("SendWith again with the key: %+v %v, want a duplicate of message %d", again, err, first.MessageID)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the function ran %d times, want once", n)
	}
}
