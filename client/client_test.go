package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/caller"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server/servertest"
)

func newClient(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestTypedCall(t *testing.T) {
	c := newClient(t, servertest.Start(t, servertest.NewFake(), servertest.Config{}))
	var rc caller.Client = c // what actions get inside a node
	for want := 5; want <= 10; want += 5 {
		n, err := rivet.Call[int](ctx(t), rc.GetOrCreate("counter", "main"), "increment", 5)
		if err != nil || n != want {
			t.Fatalf("increment: %d, %v; want %d", n, err, want)
		}
	}
	st, err := c.Actor("counter", "main").State(ctx(t))
	if err != nil || string(st) != `{"count":10}` {
		t.Errorf("state: %s %v", st, err)
	}
	_, err = rivet.Call[int](ctx(t), c.Get("counter", "nope"), "getCount")
	if !errors.Is(err, rivet.ErrNotFound) || err.Error() != `actor counter ["nope"] does not exist` {
		t.Errorf("get of a missing actor: %v", err)
	}
}

func TestErrorsRoundTrip(t *testing.T) {
	var next error
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) { return nil, next }
	c := newClient(t, servertest.Start(t, f, servertest.Config{}), client.WithRetry(time.Millisecond, 0))

	for _, kind := range rivet.Kinds() {
		t.Run(kind.Error(), func(t *testing.T) {
			sent := rivet.Errorf(kind, "something about %v", kind)
			if kind == rivet.ErrUser {
				sent = rivet.UserError("out_of_stock", "sku a1 is out of stock", map[string]string{"sku": "a1"})
			}
			next = sent
			_, err := c.Actor("a", "k").Call(ctx(t), "x")
			if !errors.Is(err, kind) {
				t.Fatalf("errors.Is(%v, %v) is false", err, kind)
			}
			var got *rivet.Error
			if !errors.As(err, &got) {
				t.Fatalf("%T is not a *rivet.Error", err)
			}
			if got.Group != sent.Group || got.Code != sent.Code || got.Message != sent.Message || string(got.Metadata) != string(sent.Metadata) {
				t.Errorf("got %+v, want %+v", got, sent)
			}
			for _, other := range rivet.Kinds() {
				if other != kind && errors.Is(err, other) {
					t.Errorf("%v also matches %v", err, other)
				}
			}
		})
	}

	next = errors.New("disk on fire")
	_, err := c.Actor("a", "k").Call(ctx(t), "x")
	if !errors.Is(err, rivet.ErrInternal) || err.Error() != "internal error" {
		t.Errorf("masked: %v", err)
	}
	if client.Code(err) != codes.Internal {
		t.Errorf("Code = %v", client.Code(err))
	}
}

func TestDeadline(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(ctx context.Context, _ runtime.CallRequest) (json.RawMessage, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c := newClient(t, servertest.Start(t, f, servertest.Config{}))
	cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Actor("a", "k").Call(cctx, "slow")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, rivet.ErrTimeout) {
		t.Errorf("got %v; want both context.DeadlineExceeded and rivet.ErrTimeout", err)
	}
	var e *rivet.Error
	if !errors.As(err, &e) {
		t.Errorf("%T is not a *rivet.Error", err)
	}

	cctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := c.Actor("a", "k").Call(cctx, "slow"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestRawArgsPassThrough(t *testing.T) {
	f := servertest.NewFake()
	var got atomic.Value
	f.CallFunc = func(_ context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		got.Store(string(req.Args))
		return json.RawMessage(`{"ok":true}`), nil
	}
	c := newClient(t, servertest.Start(t, f, servertest.Config{}))
	res, err := c.Actor("a", "k").Call(ctx(t), "x", json.RawMessage(`{"a":[1,2]}`), 5, "s")
	if err != nil || string(res) != `{"ok":true}` {
		t.Fatalf("call: %s %v", res, err)
	}
	if got.Load() != `[{"a":[1,2]},5,"s"]` {
		t.Errorf("args = %v", got.Load())
	}
	if _, err := c.Actor("a", "k").Call(ctx(t), "x", json.RawMessage(`{`)); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("malformed raw arg: %v", err)
	}
	if _, err := c.Actor("a", "k").Call(ctx(t), "x", func() {}); !errors.Is(err, rivet.ErrInvalidArgument) {
		t.Errorf("unmarshallable arg: %v", err)
	}
}

func TestTooLarge(t *testing.T) {
	c := newClient(t, servertest.Start(t, servertest.NewFake(), servertest.Config{}))
	big := strings.Repeat("x", 5<<20)
	_, err := c.Actor("counter", "k").Call(ctx(t), "increment", big)
	if !errors.Is(err, rivet.ErrTooLarge) || client.Code(err) != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), "action arguments too large: 5242884 bytes (5.0 MiB), the limit is 4194304 bytes (4.0 MiB)") {
		t.Errorf("5 MiB arg: %v", err)
	}
	err = c.Actor("counter", "k").Send(ctx(t), "q", strings.Repeat("x", 70<<10))
	if !errors.Is(err, rivet.ErrTooLarge) || !strings.Contains(err.Error(), "message body too large") {
		t.Errorf("70 KiB message: %v", err)
	}
	_, err = c.Actor("counter", strings.Repeat("k", 2<<10)).Call(ctx(t), "getCount")
	if !errors.Is(err, rivet.ErrInvalidArgument) || client.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "the limit is 128") {
		t.Errorf("2 KiB key: %v", err)
	}
}

func TestRetryUnavailable(t *testing.T) {
	f := servertest.NewFake()
	var calls atomic.Int32
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		if calls.Add(1) <= 2 {
			return nil, rivet.Errorf(rivet.ErrUnavailable, "partition 3 is moving")
		}
		return json.RawMessage("42"), nil
	}
	c := newClient(t, servertest.Start(t, f, servertest.Config{}))
	start := time.Now()
	n, err := rivet.Call[int](ctx(t), c.GetOrCreate("a", "k"), "x")
	if err != nil || n != 42 || calls.Load() != 3 {
		t.Fatalf("got %d, %v after %d calls; want 42 after 3", n, err, calls.Load())
	}
	// Two waits of at most 50 and 100 ms.
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("retries took %v", d)
	}
}

func TestRetryGivesUp(t *testing.T) {
	// Each part has its own server and count: a late attempt of one part
	// must not count in the next.
	moving := func() (*servertest.Fake, *atomic.Int32) {
		f := servertest.NewFake()
		var calls atomic.Int32
		f.CallFunc = func(_ context.Context, req runtime.CallRequest) (json.RawMessage, error) {
			if req.Action == "warm" {
				return json.RawMessage("null"), nil
			}
			calls.Add(1)
			return nil, rivet.Errorf(rivet.ErrUnavailable, "partition 3 is moving")
		}
		return f, &calls
	}
	f, calls := moving()
	c := newClient(t, servertest.Start(t, f, servertest.Config{}), client.WithRetry(10*time.Millisecond, time.Second))
	// The budget runs from the first failure (it ran from the call's
	// start, dial included, which the warm call kept out of it). It leaves
	// room for a few attempts on a loaded machine; waits of at least 5,
	// 10, 20 ... ms still allow no more than about 8 attempts in it.
	if _, err := c.Actor("a", "k").Call(ctx(t), "warm"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Actor("a", "k").Call(ctx(t), "x")
	if !errors.Is(err, rivet.ErrUnavailable) || err.Error() != "partition 3 is moving" {
		t.Errorf("got %v", err)
	}
	if n := calls.Load(); n < 3 || n > 20 {
		t.Errorf("%d attempts in a 1 s budget from 10 ms doubling", n)
	}

	// The context's deadline bounds retries too: the last error, or the
	// deadline's if it ran out during an attempt.
	f2, _ := moving()
	c2 := newClient(t, servertest.Start(t, f2, servertest.Config{}))
	cctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c2.Actor("a", "k").Call(cctx, "x")
	if !errors.Is(err, rivet.ErrUnavailable) && !errors.Is(err, rivet.ErrTimeout) {
		t.Errorf("got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("retried for %v past a 300 ms deadline", d)
	}

	// No retries when turned off.
	f3, calls := moving()
	c3 := newClient(t, servertest.Start(t, f3, servertest.Config{}), client.WithRetry(0, 0))
	if _, err := c3.Actor("a", "k").Call(ctx(t), "x"); !errors.Is(err, rivet.ErrUnavailable) || calls.Load() != 1 || rivet.OutcomeUnknown(err) {
		t.Errorf("no retry: %v after %d calls (a node's UNAVAILABLE says it did not run the call)", err, calls.Load())
	}
}

// A bare UNAVAILABLE (no ActorError: a broken connection, a proxy) may
// come after the node ran the request, so only idempotent RPCs retry it.
func TestRetryBareUnavailable(t *testing.T) {
	var failures atomic.Int32
	flaky := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if failures.Add(-1) >= 0 {
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return h(ctx, req)
	})
	f := servertest.NewFake()
	c := newClient(t, servertest.Start(t, f, servertest.Config{GRPCOptions: []grpc.ServerOption{flaky}}))

	failures.Store(2)
	if _, err := c.Actor("counter", "k").Info(ctx(t)); err != nil {
		t.Errorf("getOrCreate after 2 bare UNAVAILABLE: %v", err)
	}
	failures.Store(1)
	_, err := c.Actor("counter", "k").Call(ctx(t), "increment", 1)
	var e *rivet.Error
	if !errors.Is(err, rivet.ErrUnavailable) || !errors.As(err, &e) || e.Group != "" || !strings.HasPrefix(e.Message, "the call to the node at ") || !strings.HasSuffix(e.Message, "failed after it was sent, and may have run (its outcome is unknown): connection reset") {
		t.Errorf("call after a bare UNAVAILABLE: %v (%+v)", err, e)
	}
	if !rivet.OutcomeUnknown(err) {
		t.Errorf("a bare UNAVAILABLE may come after the call ran: OutcomeUnknown(%v) = false", err)
	}
	if n, _ := rivet.Call[int](ctx(t), c.Get("counter", "k"), "getCount"); n != 0 {
		t.Errorf("the failed call ran: count %d", n)
	}
	// A read-only call changes nothing, and is retried as a read.
	failures.Store(2)
	if n, err := rivet.CallQuery[int](ctx(t), c.Get("counter", "k"), "getCount"); err != nil || n != 0 {
		t.Errorf("a read-only call after 2 bare UNAVAILABLE: %d, %v; want 0, retried", n, err)
	}
}

// A read-only call is not retried after an UNAVAILABLE the node marked of
// unknown outcome: the query ran and passed on what a call of its own
// got, whose effect on another actor stands.
func TestAReadOnlyCallIsNotRetriedAfterAnOutcomeUnknown(t *testing.T) {
	f := servertest.NewFake()
	var calls atomic.Int32
	f.CallFunc = func(_ context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		calls.Add(1)
		return nil, &rivet.Error{Kind: rivet.ErrUnavailable, Message: "the stream to the actor's owner broke during the forwarded call"}
	}
	c := newClient(t, servertest.Start(t, f, servertest.Config{}))
	_, err := c.Actor("counter", "k").Query(ctx(t), "getCount")
	if !errors.Is(err, rivet.ErrUnavailable) || !rivet.OutcomeUnknown(err) || calls.Load() != 1 {
		t.Errorf("a query answered outcome unknown: %v after %d attempts; want that answer after one", err, calls.Load())
	}
}

func TestActorOperations(t *testing.T) {
	c := newClient(t, servertest.Start(t, servertest.NewFake(), servertest.Config{}))
	cx := ctx(t)

	info, err := c.Create(cx, "counter", []string{"eu", "a"}, map[string]int{"start": 1})
	if err != nil || info.Name != "counter" || len(info.Key) != 2 || !info.CreatedAt.Equal(servertest.Created) || info.Owner != "node-1" {
		t.Fatalf("create: %+v %v", info, err)
	}
	if _, err := c.Create(cx, "counter", []string{"eu", "a"}, nil); !errors.Is(err, rivet.ErrAlreadyExists) {
		t.Errorf("second create: %v", err)
	}
	h := c.Actor("counter", "eu", "a")
	if got, err := h.NoCreate().Info(cx); err != nil || !reflect.DeepEqual(got, info) {
		t.Errorf("info: %+v %v", got, err)
	}
	if _, err := c.Actor("counter", "b").NoCreate().Info(cx); !errors.Is(err, rivet.ErrNotFound) {
		t.Errorf("info of a missing actor: %v", err)
	}
	if _, err := c.Actor("counter", "b").WithInput(json.RawMessage(`{"start":2}`)).Info(cx); err != nil {
		t.Errorf("getOrCreate info: %v", err)
	}

	if err := h.Send(cx, "inbox", map[string]string{"text": "hi"}); err != nil {
		t.Fatal(err)
	}
	res, err := h.SendWait(cx, "inbox", "done?", time.Second)
	if err != nil || res.Status != client.SendCompleted || string(res.Response) != `"done?"` || res.MessageID == 0 {
		t.Errorf("sendWait: %+v %v", res, err)
	}
	in, err := h.Inspect(cx)
	if err != nil || !in.Active || len(in.Queues) != 1 || in.Queues[0] != (client.QueueDepth{Queue: "inbox", Depth: 1}) || string(in.State) != `{"count":0}` {
		t.Errorf("inspect: %+v %v", in, err)
	}

	list, err := c.List(cx, "counter", client.ListOptions{Limit: 1})
	if err != nil || len(list.Actors) != 1 || list.NextPageToken == "" {
		t.Errorf("list page: %+v %v", list, err)
	}
	all, err := c.ListAll(cx, "")
	if err != nil || len(all) != 2 {
		t.Errorf("list all: %+v %v", all, err)
	}

	if err := h.Destroy(cx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.State(cx); !errors.Is(err, rivet.ErrNotFound) {
		t.Errorf("state after destroy: %v", err)
	}
	if err := h.Destroy(cx); !errors.Is(err, rivet.ErrNotFound) {
		t.Errorf("second destroy: %v", err)
	}
}

func TestAdmin(t *testing.T) {
	c := newClient(t, servertest.Start(t, servertest.NewFake(), servertest.Config{}))
	ms, err := c.Members(ctx(t))
	if err != nil || len(ms) != 1 || ms[0].NodeID != "node-1" || !ms[0].StartedAt.Equal(servertest.Created) {
		t.Errorf("members: %+v %v", ms, err)
	}
	pt, err := c.Partitions(ctx(t))
	if err != nil || pt.Count != 16 || len(pt.Owners) != 16 || pt.Owners[15] != (client.PartitionOwner{Partition: 15, Owner: "node-1", Token: 115}) {
		t.Errorf("partitions: %+v %v", pt, err)
	}
	st, err := c.Stats(ctx(t))
	if err != nil || st.NodeID != "node-1" || st.CommitBatches != 1 {
		t.Errorf("stats: %+v %v", st, err)
	}
}

func TestEndpointFromEnv(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	t.Setenv(client.EndpointEnv, addr)
	c := newClient(t, "")
	if _, err := c.Members(ctx(t)); err != nil {
		t.Errorf("client from $%s: %v", client.EndpointEnv, err)
	}
}

// A health check of a node that does not answer fails like every other
// call: a *rivet.Error of kind UNAVAILABLE, not a raw gRPC error.
func TestHealthyOfANodeThatIsNotThereIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ok, err := newClient(t, addr).Healthy(ctx(t))
	var re *rivet.Error
	if ok || !errors.Is(err, rivet.ErrUnavailable) || !errors.As(err, &re) {
		t.Fatalf("Healthy = %v, %v (%T); want a *rivet.Error of kind UNAVAILABLE", ok, err, err)
	}
}

// A wait under a millisecond is sent as one millisecond: a timeout of 0
// asks for the node's default wait, 30 s.
func TestASendWaitUnderAMillisecondIsNotTheDefault(t *testing.T) {
	f := servertest.NewFake()
	var sent atomic.Int64
	f.SendFunc = func(_ context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
		sent.Store(int64(req.Timeout))
		return runtime.SendResult{MessageID: 1, Status: runtime.SendTimedOut, MessageState: runtime.MessageQueued}, nil
	}
	h := newClient(t, servertest.Start(t, f, servertest.Config{})).Actor("mailbox", "alice")
	for _, c := range []struct{ wait, want time.Duration }{
		{500 * time.Microsecond, time.Millisecond},
		{0, 0}, // the node's default
		{1500 * time.Millisecond, 1500 * time.Millisecond},
	} {
		if _, err := h.SendWait(ctx(t), "inbox", 1, c.wait); err != nil {
			t.Fatal(err)
		}
		if got := time.Duration(sent.Load()); got != c.want {
			t.Errorf("SendWait(%s) asked the node to wait %s, want %s", c.wait, got, c.want)
		}
	}
}

// An address gRPC would misread is refused by New, as one of several
// addresses is: without a port gRPC dials HTTPS's 443, not a node's port,
// and a URL's scheme reads as a resolver's; so is a port no dial can use
// (gRPC finds it only when it dials, as an UNAVAILABLE that reads as a node
// down). A gRPC target still works.
func TestNewRefusesAnAddressWithoutAUsablePortOrAURL(t *testing.T) {
	addr := servertest.Start(t, servertest.NewFake(), servertest.Config{})
	host, _, _ := net.SplitHostPort(addr)
	for _, c := range []struct{ addr, want string }{
		{host, `rivet client: node address "` + host + `" has no port (host:port, such as ` + host + `:6420)`},
		{"localhost", `rivet client: node address "localhost" has no port (host:port, such as localhost:6420)`},
		{"http://" + addr, `rivet client: node address "http://` + addr + `" is a URL: give host:port (` + addr + `)`},
		{"https://" + addr + "/", `rivet client: node address "https://` + addr + `/" is a URL: give host:port (` + addr + `)`},
		{host + "," + addr, `rivet client: node address "` + host + `" has no port (host:port, such as ` + host + `:6420)`},
		{"http://" + addr + "," + addr, `rivet client: node address "http://` + addr + `" is a URL: give host:port (` + addr + `)`},
		{host + ":99999", `rivet client: node address "` + host + `:99999": port 99999 is not a port (1-65535)`},
		{host + ":0", `rivet client: node address "` + host + `:0": port 0 is not a port (1-65535)`},
		{host + ":abc", `rivet client: node address "` + host + `:abc": port "abc" is not a port (a number, 1-65535)`},
	} {
		c2, err := client.New(c.addr)
		if err == nil {
			_, err = c2.Members(ctx(t))
			c2.Close()
			t.Errorf("New(%q) took it (a call then: %v); want %q", c.addr, err, c.want)
			continue
		}
		if err.Error() != c.want {
			t.Errorf("New(%q): %v; want %q", c.addr, err, c.want)
		}
	}
	if _, err := newClient(t, "dns:///"+addr).Members(ctx(t)); err != nil {
		t.Errorf("a gRPC target: %v", err)
	}
}

// Subscribe to a node that is not there gives up as a call does: with the
// UNAVAILABLE that stopped it, before a deadline no retry could beat, and
// not as if its caller had cancelled it (which a caller that stops on
// context.Canceled would take for its own shutdown).
func TestSubscribeToANodeThatIsNotThereFailsAsACallDoes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	// The first retry's wait (1 to 2 s) would end past the 1 s deadline:
	// the client must give up after the first attempt, long before the
	// deadline. (With the default policy a wait could end a hair before
	// the deadline, and the attempt after it end just past it: the test
	// failed about 1 run in 50 under -race.)
	c := newClient(t, addr, client.WithRetry(2*time.Second, 10*time.Second))
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, callErr := c.Actor("counter", "main").Call(sctx, "increment", 1)
	sctx, cancel = context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Actor("counter", "main").NoCreate().Subscribe(sctx)
	took := time.Since(start)
	if !errors.Is(err, rivet.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Subscribe: %v; want UNAVAILABLE saying the connection was refused", err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(callErr, context.Canceled) {
		t.Errorf("Subscribe: %v (call: %v); want neither to match context.Canceled", err, callErr)
	}
	if errors.Is(err, context.DeadlineExceeded) != errors.Is(callErr, context.DeadlineExceeded) {
		t.Errorf("Subscribe: %v, call: %v; want both to match context.DeadlineExceeded or neither", err, callErr)
	}
	if took >= time.Second {
		t.Errorf("Subscribe took %s: it waited out its deadline", took)
	}
}

// cancelOnce is a node whose workflow and one scheduled call can each be
// cancelled once; after that a cancel finds them cancelled.
type cancelOnce struct {
	*servertest.Fake
	wfCancelled, callCancelled atomic.Bool
}

func (c *cancelOnce) CancelWorkflow(context.Context, runtime.Ref, string) (string, error) {
	if c.wfCancelled.Swap(true) {
		return "cancelled", nil
	}
	return "running", nil
}

// A cancel the client retried after a connection that broke once the node
// had run it (the answer lost) finds its own cancel done: that is success,
// not "already cancelled" or "no pending call". A first attempt that finds
// them cancelled still says so.
func TestARetriedCancelThatRanBeforeIsASuccess(t *testing.T) {
	var breakNext, refuseNext atomic.Bool
	refused, _ := rpcerr.ToStatus(rivet.Errorf(rivet.ErrUnavailable, "partition 3 is moving"))
	broken := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if refuseNext.Swap(false) {
			return nil, refused.Err() // a node's own answer: not run
		}
		resp, err := h(ctx, req)
		if breakNext.Swap(false) {
			// Ran, and the answer is lost as a broken connection loses it.
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return resp, err
	})
	b := &cancelOnce{Fake: servertest.NewFake()}
	b.CancelScheduledCallFunc = func(_ runtime.Ref, id string) (bool, error) {
		return id == "x" && !b.callCancelled.Swap(true), nil
	}
	c := newClient(t, servertest.Start(t, b, servertest.Config{GRPCOptions: []grpc.ServerOption{broken}}))
	h := c.Actor("charger", "main").NoCreate()

	breakNext.Store(true)
	if prev, err := h.CancelWorkflow(ctx(t), "stop"); err != nil || prev != "" {
		t.Errorf("retried cancel: %q, %v; want \"\" (the status before is not known), no error", prev, err)
	}
	if prev, err := h.CancelWorkflow(ctx(t), "stop"); err != nil || prev != "cancelled" {
		t.Errorf("second cancel: %q, %v; want cancelled", prev, err)
	}

	breakNext.Store(true)
	if ok, err := h.CancelScheduledCall(ctx(t), "x"); err != nil || !ok {
		t.Errorf("retried cancel of a call: %v, %v; want true", ok, err)
	}
	if ok, err := h.CancelScheduledCall(ctx(t), "x"); err != nil || ok {
		t.Errorf("second cancel of a call: %v, %v; want false", ok, err)
	}
	// A node's own UNAVAILABLE says the request did not run: a retry that
	// finds nothing is the truth.
	refuseNext.Store(true)
	if ok, err := h.CancelScheduledCall(ctx(t), "y"); err != nil || ok {
		t.Errorf("cancel of no call: %v, %v; want false", ok, err)
	}
}

// A send with an idempotency key carries it to the node, and is retried
// after a connection that broke once the node had queued it (a send
// without one is not: it may have run); the retry's answer is the node's
// duplicate, the first message's.
func TestASendWithAnIdempotencyKeyIsRetriedAfterABrokenConnection(t *testing.T) {
	var breakNext atomic.Bool
	broken := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if breakNext.Swap(false) {
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return resp, err
	})
	f := servertest.NewFake()
	var mu sync.Mutex
	sent := map[string]uint64{}
	var queued atomic.Int32
	f.SendFunc = func(_ context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
		mu.Lock()
		defer mu.Unlock()
		if id, ok := sent[req.IdempotencyKey]; ok && req.IdempotencyKey != "" {
			return runtime.SendResult{MessageID: id, Status: runtime.SendEnqueued, Duplicate: true}, nil
		}
		id := uint64(queued.Add(1))
		sent[req.IdempotencyKey] = id
		return runtime.SendResult{MessageID: id, Status: runtime.SendEnqueued}, nil
	}
	c := newClient(t, servertest.Start(t, f, servertest.Config{GRPCOptions: []grpc.ServerOption{broken}}))
	h := c.Actor("inbox", "k")

	breakNext.Store(true)
	res, err := h.SendWith(ctx(t), "q", 7, client.SendOptions{IdempotencyKey: "order-1"})
	if err != nil || !res.Duplicate || res.MessageID != 1 || queued.Load() != 1 {
		t.Errorf("keyed send after a broken connection: %+v, %v, %d queued; want the duplicate of message 1, queued once", res, err, queued.Load())
	}
	breakNext.Store(true)
	if _, err := h.Enqueue(ctx(t), "q", 7); !rivet.OutcomeUnknown(err) || queued.Load() != 2 {
		t.Errorf("send without a key after a broken connection: %v, %d queued; want outcome unknown, not retried", err, queued.Load())
	}
}

// A request gRPC cannot encode (a string that is not UTF-8) is the
// caller's bad input, INVALID_ARGUMENT as a node says of one that does not
// decode: gRPC's own status for it is INTERNAL, a node's failure.
func TestARequestThatDoesNotEncodeIsInvalid(t *testing.T) {
	f := servertest.NewFake()
	c := newClient(t, servertest.Start(t, f, servertest.Config{}))
	for name, call := range map[string]func() error{
		"key": func() error {
			_, err := rivet.Call[int](ctx(t), c.GetOrCreate("counter", "\xff"), "getCount")
			return err
		},
		"action": func() error {
			_, err := rivet.Call[int](ctx(t), c.GetOrCreate("counter", "main"), "get\xff")
			return err
		},
		"reason": func() error { _, err := c.Actor("counter", "main").CancelWorkflow(ctx(t), "\xff"); return err },
	} {
		err := call()
		if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "must be UTF-8") {
			t.Errorf("%s not UTF-8: %v, want INVALID_ARGUMENT saying it must be UTF-8", name, err)
		}
	}
}

// A call whose connection never became ready never reached a node, so it
// did not run, whatever gRPC's error says: a port that closes connections
// as they come (a TLS-only node dialed in plaintext fails so), or one that
// accepts and never speaks (its deadline then ends the call while
// connecting). Such a call is retried like a refused dial, even with side
// effects, and its error is not of an unknown outcome: sending it again
// cannot apply it twice.
func TestACallWhoseConnectionNeverBecameReadyDidNotRun(t *testing.T) {
	listen := func(serve func(net.Conn)) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		t.Cleanup(func() { l.Close(); wg.Wait() })
		wg.Go(func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				wg.Go(func() { serve(conn) })
			}
		})
		return l.Addr().String()
	}
	closing := listen(func(c net.Conn) { c.Close() })
	silent := listen(func(c net.Conn) {
		defer c.Close()
		_, _ = c.Read(make([]byte, 1<<16)) // the client's preface; never an answer
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Read(make([]byte, 1))
	})
	for _, tc := range []struct {
		name, addr string
		timeout    time.Duration
	}{
		{"a port that closes at once", closing, 10 * time.Second},
		{"a port that never speaks", silent, 300 * time.Millisecond},
	} {
		c := newClient(t, tc.addr, client.WithRetry(10*time.Millisecond, 300*time.Millisecond))
		cctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
		_, err := c.Actor("counter", "k").Call(cctx, "increment", 1)
		cancel()
		if err == nil || rivet.OutcomeUnknown(err) {
			t.Errorf("%s: %v (outcome unknown: %v), want an error of a call that did not run", tc.name, err, rivet.OutcomeUnknown(err))
		}
	}
}

// A negative wait is refused before anything is sent, as an actor's own
// SendWith refuses it (caller.OnceSender is one interface): under a
// millisecond it went as 0, the node's default wait of 30 s, and beyond
// that the node refused it naming its wire field (timeout_ms). A send
// that does not wait has no timeout, negative or not, as an actor's.
func TestASendWithANegativeWaitIsRefusedBeforeItIsSent(t *testing.T) {
	f := servertest.NewFake()
	var sends atomic.Int32
	f.SendFunc = func(_ context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
		sends.Add(1)
		return runtime.SendResult{MessageID: 1, Status: runtime.SendEnqueued}, nil
	}
	h := newClient(t, servertest.Start(t, f, servertest.Config{})).Actor("mailbox", "alice")
	for _, wait := range []time.Duration{-500 * time.Microsecond, -5 * time.Second} {
		_, err := h.SendWait(ctx(t), "inbox", 1, wait)
		if !errors.Is(err, rivet.ErrInvalidArgument) || !strings.Contains(err.Error(), "timeout must not be negative, not "+wait.String()) {
			t.Errorf("SendWait(%s): %v, want ErrInvalidArgument naming the timeout", wait, err)
		}
	}
	if n := sends.Load(); n != 0 {
		t.Errorf("%d sends reached the node, want none", n)
	}
	if _, err := h.SendWith(ctx(t), "inbox", 1, client.SendOptions{Timeout: -time.Second}); err != nil {
		t.Errorf("a send without wait, with a negative timeout: %v", err)
	}
	if n := sends.Load(); n != 1 {
		t.Errorf("%d sends reached the node, want 1", n)
	}
}

// A client of several nodes spreads its calls over them (round_robin):
// with pick_first every client sent all its calls to its first node, which
// forwarded most of them, and a kill of that node failed the calls in
// flight of every client (a trial).
func TestAClientOfSeveralNodesSpreadsItsCalls(t *testing.T) {
	var onA, onB atomic.Int32
	a, b := servertest.NewFake(), servertest.NewFake()
	a.GetFunc = func(_ context.Context, ref runtime.Ref) (runtime.ActorInfo, error) {
		onA.Add(1)
		return runtime.ActorInfo{Ref: ref}, nil
	}
	b.GetFunc = func(_ context.Context, ref runtime.Ref) (runtime.ActorInfo, error) {
		onB.Add(1)
		return runtime.ActorInfo{Ref: ref}, nil
	}
	c := newClient(t, servertest.Start(t, a, servertest.Config{})+","+servertest.Start(t, b, servertest.Config{}))
	// Both connections become ready soon; the calls before go to the one
	// that is.
	for i := 0; i < 1000 && (onA.Load() < 10 || onB.Load() < 10); i++ {
		if _, err := c.Actor("counter", "k").NoCreate().Info(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if onA.Load() < 10 || onB.Load() < 10 {
		t.Fatalf("calls on the first node %d, on the second %d; want both used", onA.Load(), onB.Load())
	}
}

// Close ends at once a call that waits to be retried (the node refused it,
// UNAVAILABLE): the call fails as closed, not run. It held its caller until
// its backoff ended (up to a second by default, here 2.5 s or more), and
// with it whatever waited for that caller in a shutdown.
func TestCloseEndsACallWaitingToBeRetried(t *testing.T) {
	f := servertest.NewFake()
	var calls atomic.Int64
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		calls.Add(1)
		return nil, rivet.Reasonf(rivet.ErrUnavailable, "actor", "overloaded", "counter is overloaded: retry with backoff")
	}
	c, err := client.New(servertest.Start(t, f, servertest.Config{}), client.WithRetry(5*time.Second, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Actor("counter", "main").Call(ctx(t), "increment", 1)
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); calls.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call never reached the node")
		}
	}
	start := time.Now()
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "Client.Close") || rivet.OutcomeUnknown(err) {
			t.Fatalf("the call in its backoff: %v (outcome unknown %v); want Canceled by the client's Close, not run", err, rivet.OutcomeUnknown(err))
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("the call ended %v after Close; want at once", took)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the call still waited 2 s after Close (its backoff is 2.5-5 s)")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d attempts; want the one before Close", n)
	}
}

// A keyed send retried after a connection that broke once the node had
// queued it, whose retry waited in vain for the actor's turn (a timeout
// with reason actor.busy: that attempt did not run), is of unknown
// outcome: the first attempt's message stands. The retry's "did not run"
// alone read as the whole call's.
func TestABusyAnswerAfterAnAttemptThatMayHaveRunIsOfUnknownOutcome(t *testing.T) {
	var attempts atomic.Int32
	broken := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if attempts.Add(1) == 1 {
			h(ctx, req) // queued, and the answer lost as a broken connection loses it
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return h(ctx, req)
	})
	f := servertest.NewFake()
	var queued atomic.Int32
	f.SendFunc = func(context.Context, runtime.SendRequest) (runtime.SendResult, error) {
		if queued.Load() == 0 {
			return runtime.SendResult{MessageID: uint64(queued.Add(1)), Status: runtime.SendEnqueued}, nil
		}
		return runtime.SendResult{}, rivet.Reasonf(rivet.ErrTimeout, "actor", "busy", "waited until the deadline for the turn of inbox [\"k\"]: this call did not run")
	}
	c := newClient(t, servertest.Start(t, f, servertest.Config{GRPCOptions: []grpc.ServerOption{broken}}))
	_, err := c.Actor("inbox", "k").SendWith(ctx(t), "q", 7, client.SendOptions{IdempotencyKey: "order-1"})
	var re *rivet.Error
	if !errors.Is(err, rivet.ErrTimeout) || !errors.As(err, &re) || re.Code != "busy" || !rivet.OutcomeUnknown(err) || attempts.Load() != 2 {
		t.Fatalf("keyed send, queued by a broken attempt, then busy: %v (outcome unknown %v, %d attempts); want actor.busy of unknown outcome after 2 attempts", err, rivet.OutcomeUnknown(err), attempts.Load())
	}
}
