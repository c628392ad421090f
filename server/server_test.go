package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/rivet-go/rivet"
	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// These tests talk to the server with the generated client, not package
// client, so that they see the raw status codes and details a client in
// any language gets.

func dial(t *testing.T, addr string) (rivetv1.ActorServiceClient, rivetv1.AdminServiceClient) {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rivetv1.NewActorServiceClient(conn), rivetv1.NewAdminServiceClient(conn)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func ref(name string, key ...string) *rivetv1.ActorRef {
	return &rivetv1.ActorRef{Name: name, Key: key}
}

// detail returns the ActorError of a status, failing the test if there is
// none: every error status must carry one.
func detail(t *testing.T, err error) (*status.Status, *rivetv1.ActorError) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || err == nil {
		t.Fatalf("want a status error, got %v", err)
	}
	for _, d := range st.Details() {
		if ae, ok := d.(*rivetv1.ActorError); ok {
			return st, ae
		}
	}
	t.Fatalf("status %v has no ActorError detail", st)
	return nil, nil
}

func TestErrorMapping(t *testing.T) {
	var next error
	f := servertest.NewFake()
	f.GetFunc = func(context.Context, runtime.Ref) (runtime.ActorInfo, error) { return runtime.ActorInfo{}, next }
	core, logs := observer.New(zapcore.DebugLevel)
	actors, _ := dial(t, servertest.Start(t, f, servertest.Config{Logger: zap.New(core)}))

	cases := []struct {
		err         error
		code        codes.Code
		group, name string
		msg         string
	}{
		{rivet.Errorf(rivet.ErrNotFound, "actor a [\"k\"] does not exist"), codes.NotFound, "actor", "not_found", `actor a ["k"] does not exist`},
		{rivet.Errorf(rivet.ErrUnknownActor, "no actor named a"), codes.NotFound, "actor", "unknown_actor", "no actor named a"},
		{rivet.Errorf(rivet.ErrUnknownAction, "no action x"), codes.NotFound, "actor", "unknown_action", "no action x"},
		{rivet.Errorf(rivet.ErrUnknownQueue, "no queue q"), codes.NotFound, "queue", "unknown_queue", "no queue q"},
		{rivet.Errorf(rivet.ErrUnknownEvent, "no event e"), codes.NotFound, "event", "unknown_event", "no event e"},
		{rivet.Errorf(rivet.ErrAlreadyExists, "exists"), codes.AlreadyExists, "actor", "duplicate_key", "exists"},
		{rivet.Errorf(rivet.ErrInvalidArgument, "bad"), codes.InvalidArgument, "request", "invalid_argument", "bad"},
		{rivet.Errorf(rivet.ErrTooLarge, "big"), codes.ResourceExhausted, "request", "too_large", "big"},
		{rivet.Errorf(rivet.ErrQueueFull, "full"), codes.ResourceExhausted, "queue", "full", "full"},
		{rivet.Errorf(rivet.ErrUnavailable, "moving"), codes.Unavailable, "actor", "unavailable", "moving"},
		{rivet.Errorf(rivet.ErrWorkflowFailed, "failed"), codes.FailedPrecondition, "workflow", "failed", "failed"},
		{rivet.Errorf(rivet.ErrFailedPrecondition, "no other node"), codes.FailedPrecondition, "request", "failed_precondition", "no other node"},
		{rivet.Errorf(rivet.ErrTimeout, "slow"), codes.DeadlineExceeded, "actor", "timed_out", "slow"},
		{rivet.Errorf(rivet.ErrUnauthenticated, "no token"), codes.Unauthenticated, "request", "unauthenticated", "no token"},
		{rivet.Errorf(rivet.ErrInternal, "broken invariant"), codes.Internal, "rivet", "internal_error", "broken invariant"},
		{rivet.UserError("insufficient_funds", "balance is 3", map[string]int{"balance": 3}), codes.Unknown, "user", "insufficient_funds", "balance is 3"},
		// Text that is not UTF-8 (an actor's, made of bytes), which the
		// detail's proto strings cannot hold, goes with U+FFFD for each bad
		// byte, as gRPC's status message has it: the detail, and so the
		// user's code, must not be left out.
		{rivet.UserError("no_\xffitem", "no item \xff\xfe here", nil), codes.Unknown, "user", "no_\uFFFDitem", "no item \uFFFD\uFFFD here"},
		// Not *rivet.Error, but wrapping a sentinel: keeps its kind and text.
		{fmt.Errorf("partition 7 is moving: %w", rivet.ErrUnavailable), codes.Unavailable, "actor", "unavailable", "partition 7 is moving: unavailable"},
		{fmt.Errorf("turn: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "actor", "timed_out", "turn: context deadline exceeded"},
		{context.Canceled, codes.Canceled, "rivet", "canceled", "context canceled"},
		// Anything else is masked.
		{errors.New("open /var/lib/secret: permission denied"), codes.Internal, "rivet", "internal_error", "internal error"},
	}
	for _, tc := range cases {
		t.Run(tc.group+"."+tc.name, func(t *testing.T) {
			next = tc.err
			_, err := actors.Get(ctx(t), &rivetv1.GetRequest{Actor: ref("a", "k")})
			st, ae := detail(t, err)
			if st.Code() != tc.code || ae.Group != tc.group || ae.Code != tc.name || ae.Message != tc.msg || st.Message() != tc.msg {
				t.Errorf("got %v %q, detail {%s %s %q}; want %v %q {%s %s}", st.Code(), st.Message(), ae.Group, ae.Code, ae.Message, tc.code, tc.msg, tc.group, tc.name)
			}
		})
	}

	// Every kind is covered.
	covered := map[error]bool{}
	for _, tc := range cases {
		var e *rivet.Error
		if errors.As(tc.err, &e) {
			covered[e.Kind] = true
		}
	}
	for _, k := range rivet.Kinds() {
		if !covered[k] {
			t.Errorf("kind %v has no case", k)
		}
	}

	// User metadata travels in the detail.
	next = rivet.UserError("insufficient_funds", "balance is 3", map[string]int{"balance": 3})
	_, err := actors.Get(ctx(t), &rivetv1.GetRequest{Actor: ref("a", "k")})
	if _, ae := detail(t, err); string(ae.Metadata) != `{"balance":3}` {
		t.Errorf("metadata = %s", ae.Metadata)
	}

	// The masked error is logged with its cause, once at error level.
	masked := logs.FilterMessage("internal error (masked for the client)").All()
	if len(masked) != 1 || !strings.Contains(fmt.Sprint(masked[0].ContextMap()["error"]), "permission denied") {
		t.Errorf("masked error logs: %+v", masked)
	}
	var errorLines int
	for _, e := range logs.All() {
		if e.Level == zapcore.ErrorLevel {
			errorLines++
		}
	}
	// One for the masked error, one for the deliberate ErrInternal.
	if errorLines != 2 {
		t.Errorf("%d error-level lines, want 2: %+v", errorLines, logs.All())
	}
	if n := logs.FilterMessage("grpc call").FilterField(zap.String("code", "NOT_FOUND")).Len(); n != 5 {
		t.Errorf("%d debug lines for NOT_FOUND calls, want 5", n)
	}
}

func TestValidation(t *testing.T) {
	f := servertest.NewFake()
	var calls int
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		calls++
		return json.RawMessage("1"), nil
	}
	actors, _ := dial(t, servertest.Start(t, f, servertest.Config{}))
	call := func(r *rivetv1.CallRequest) error {
		_, err := actors.Call(ctx(t), r)
		return err
	}
	longComponent := strings.Repeat("k", 2048)
	var manyComponents []string
	for range 20 {
		manyComponents = append(manyComponents, strings.Repeat("k", 100))
	}
	cases := []struct {
		name string
		req  *rivetv1.CallRequest
		code codes.Code
		msg  string
	}{
		{"empty actor name", &rivetv1.CallRequest{Actor: ref("", "k"), Action: "a"}, codes.InvalidArgument, "actor name is empty"},
		{"bad actor name", &rivetv1.CallRequest{Actor: ref("9lives", "k"), Action: "a"}, codes.InvalidArgument, "actor name \"9lives\""},
		{"no actor", &rivetv1.CallRequest{Action: "a"}, codes.InvalidArgument, "actor name is empty"},
		{"empty key", &rivetv1.CallRequest{Actor: ref("a"), Action: "a"}, codes.InvalidArgument, "actor key is empty"},
		{"2 KiB key component", &rivetv1.CallRequest{Actor: ref("a", longComponent), Action: "a"}, codes.InvalidArgument, "component 0 is 2048 bytes, the limit is 128"},
		{"2 KiB key", &rivetv1.CallRequest{Actor: ref("a", manyComponents...), Action: "a"}, codes.InvalidArgument, "actor key is 2000 bytes, the limit is 1024"},
		{"1025 empty key components", &rivetv1.CallRequest{Actor: ref("a", make([]string, 1025)...), Action: "a"}, codes.InvalidArgument, "actor key has 1025 components, the limit is 1024"},
		{"bad action name", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "do it"}, codes.InvalidArgument, "action name"},
		{"malformed args", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: []byte("[1,")}, codes.InvalidArgument, "action arguments are not valid JSON"},
		{"object args", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: []byte(`{"x":1}`)}, codes.InvalidArgument, "must be a JSON array, such as [5] or [], not an object"},
		{"number args", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: []byte(" 5")}, codes.InvalidArgument, "not a number"},
		{"string args", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: []byte(`"x"`)}, codes.InvalidArgument, "not a string"},
		{"malformed input", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Input: []byte("{")}, codes.InvalidArgument, "create input is not valid JSON"},
		{"malformed args, where", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: []byte("[1]x")}, codes.InvalidArgument,
			"action arguments are not valid JSON: invalid character 'x' after top-level value at byte 4"},
		{"args nested too deep", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: nested(10001)}, codes.InvalidArgument,
			"action arguments: arrays and objects nested deeper than the limit of 10000 levels (at byte 10001)"},
		{"input nested too deep", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Input: nested(10001)}, codes.InvalidArgument,
			"create input: arrays and objects nested deeper than the limit of 10000 levels"},
		// JSON that encoding/json takes, whose bytes an action would see
		// as U+FFFD.
		{"args not UTF-8", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: []byte("[\"caf\xe9\"]")}, codes.InvalidArgument,
			"action arguments are not valid UTF-8 (at byte 5): JSON text must be UTF-8"},
		{"input not UTF-8", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Input: []byte("\"\xff\"")}, codes.InvalidArgument,
			"create input is not valid UTF-8 (at byte 1)"},
		// A lone surrogate escape, which encoding/json decodes as U+FFFD:
		// I-JSON (RFC 7493) forbids it.
		{"args with a lone surrogate", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: []byte(`["x\ud800"]`)}, codes.InvalidArgument,
			`action arguments are not I-JSON (RFC 7493): \ud800 at byte 3 is a lone surrogate (half of a UTF-16 pair without its other half), which a decoder would turn into U+FFFD`},
		{"input with a lone low surrogate", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Input: []byte(`{"\\":"\udc00\ud83d\ude00"}`)}, codes.InvalidArgument,
			`create input is not I-JSON (RFC 7493): \udc00 at byte 7 is a lone surrogate`},
		{"5 MiB args", &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: bigArray(5 << 20)}, codes.ResourceExhausted,
			"action arguments too large: 5242880 bytes (5.0 MiB), the limit is 4194304 bytes (4.0 MiB)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, ae := detail(t, call(tc.req))
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) || ae.Message != st.Message() {
				t.Errorf("got %v %q; want %v containing %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
		})
	}
	if calls != 0 {
		t.Errorf("backend saw %d invalid calls", calls)
	}

	// What passes: no args, an empty array, spaces before the array; a
	// surrogate pair; an escaped backslash before "ud800", which is text.
	for _, args := range []string{"", "[]", " \n[1, \"x\"]", `["\ud83d\ude00", "\\ud800"]`} {
		if err := call(&rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: []byte(args)}); err != nil {
			t.Errorf("args %q: %v", args, err)
		}
	}
	// As many components as the limit, even empty ones.
	if err := call(&rivetv1.CallRequest{Actor: ref("a", make([]string, 1024)...), Action: "a"}); err != nil {
		t.Errorf("1024 empty key components: %v", err)
	}
	if calls != 5 {
		t.Errorf("backend saw %d valid calls, want 5", calls)
	}
}

// nested returns a JSON array of depth arrays, one in another: valid JSON
// that encoding/json refuses past 10000.
func nested(depth int) []byte {
	return []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
}

// bigArray returns a JSON array of exactly n bytes.
func bigArray(n int) []byte {
	b := make([]byte, n)
	b[0], b[1], b[n-2], b[n-1] = '[', '"', '"', ']'
	for i := 2; i < n-2; i++ {
		b[i] = 'x'
	}
	return b
}

func TestSendValidation(t *testing.T) {
	actors, _ := dial(t, servertest.Start(t, servertest.NewFake(), servertest.Config{}))
	cases := []struct {
		name string
		req  *rivetv1.SendRequest
		code codes.Code
		msg  string
	}{
		{"bad queue", &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "", Body: []byte("1")}, codes.InvalidArgument, "queue name is empty"},
		{"empty body", &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "q"}, codes.InvalidArgument, "message body is empty"},
		{"malformed body", &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "q", Body: []byte("{")}, codes.InvalidArgument, "message body is not valid JSON: unexpected end of JSON input at byte 1"},
		{"body nested too deep", &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "q", Body: nested(10001)}, codes.InvalidArgument,
			"message body: arrays and objects nested deeper than the limit of 10000 levels"},
		{"body not UTF-8", &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "q", Body: []byte("{\"t\":\"\xc3\"}")}, codes.InvalidArgument,
			"message body is not valid UTF-8 (at byte 6)"},
		{"body with a lone surrogate", &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "q", Body: []byte(`"\ud800x"`)}, codes.InvalidArgument,
			`message body is not I-JSON (RFC 7493): \ud800 at byte 1 is a lone surrogate`},
		{"body with a high surrogate twice", &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "q", Body: []byte(`"\ud83d\ud83d\ude00"`)}, codes.InvalidArgument,
			`message body is not I-JSON (RFC 7493): \ud83d at byte 1 is a lone surrogate`},
		{"65 KiB body", &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "q", Body: bigArray(65 << 10)}, codes.ResourceExhausted,
			"message body too large: 66560 bytes (65.0 KiB), the limit is 65536 bytes (64.0 KiB)"},
		{"negative timeout", &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "q", Body: []byte("1"), Wait: true, TimeoutMs: -1}, codes.InvalidArgument, "timeout_ms is negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := actors.Send(ctx(t), tc.req)
			st, _ := detail(t, err)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.msg) {
				t.Errorf("got %v %q; want %v containing %q", st.Code(), st.Message(), tc.code, tc.msg)
			}
		})
	}
	resp, err := actors.Send(ctx(t), &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "q", Body: bigArray(64 << 10), CreateIfMissing: true})
	if err != nil || resp.Status != runtime.SendEnqueued {
		t.Errorf("64 KiB body: %v %v", resp, err)
	}
}

func TestResultTooLarge(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) {
		return bigArray(2 << 10), nil
	}
	actors, _ := dial(t, servertest.Start(t, f, servertest.Config{Limits: serverLimits(1 << 10)}))
	_, err := actors.Call(ctx(t), &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "get"})
	st, _ := detail(t, err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "result of action get too large: 2048 bytes (2.0 KiB), the limit is 1024 bytes (1.0 KiB)") {
		t.Errorf("got %v", st)
	}
}

func TestTransportBound(t *testing.T) {
	// Past twice the largest limit plus 1 MiB, gRPC itself refuses the
	// request; it is still RESOURCE_EXHAUSTED.
	actors, _ := dial(t, servertest.Start(t, servertest.NewFake(), servertest.Config{}))
	_, err := actors.Call(ctx(t), &rivetv1.CallRequest{Actor: ref("a", "k"), Action: "a", Args: bigArray(10 << 20)})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("10 MiB args: %v", err)
	}
}

func TestActorServiceRoundTrip(t *testing.T) {
	f := servertest.NewFake()
	actors, admin := dial(t, servertest.Start(t, f, servertest.Config{}))
	c := ctx(t)

	cr, err := actors.Create(c, &rivetv1.CreateRequest{Actor: ref("counter", "a"), Input: []byte(`{"x":1}`)})
	if err != nil || cr.Actor.Actor.Name != "counter" || !cr.Actor.CreatedAt.AsTime().Equal(servertest.Created) || cr.Actor.Owner != "node-1" {
		t.Fatalf("create: %v %v", cr, err)
	}
	if _, err := actors.Create(c, &rivetv1.CreateRequest{Actor: ref("counter", "a")}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second create: %v", err)
	}
	gc, err := actors.GetOrCreate(c, &rivetv1.GetOrCreateRequest{Actor: ref("counter", "b")})
	if err != nil || !gc.Created {
		t.Errorf("getOrCreate: %v %v", gc, err)
	}
	res, err := actors.Call(c, &rivetv1.CallRequest{Actor: ref("counter", "a"), Action: "increment", Args: []byte("[5]")})
	if err != nil || string(res.Result) != "5" {
		t.Errorf("call: %v %v", res, err)
	}
	if _, err := actors.Send(c, &rivetv1.SendRequest{Actor: ref("counter", "a"), Queue: "q", Body: []byte(`"m"`)}); err != nil {
		t.Error(err)
	}
	in, err := actors.Inspect(c, &rivetv1.InspectRequest{Actor: ref("counter", "a")})
	if err != nil || string(in.State) != `{"count":5}` || len(in.Queues) != 1 || in.Queues[0].Depth != 1 {
		t.Errorf("inspect: %v %v", in, err)
	}
	list, err := actors.List(c, &rivetv1.ListRequest{Name: "counter", Limit: 1})
	if err != nil || len(list.Actors) != 1 || list.NextPageToken == "" {
		t.Errorf("list: %v %v", list, err)
	}
	if _, err := actors.List(c, &rivetv1.ListRequest{Name: "bad name"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("list bad name: %v", err)
	}
	if _, err := actors.Destroy(c, &rivetv1.DestroyRequest{Actor: ref("counter", "a")}); err != nil {
		t.Error(err)
	}
	if _, err := actors.Get(c, &rivetv1.GetRequest{Actor: ref("counter", "a")}); status.Code(err) != codes.NotFound {
		t.Errorf("get after destroy: %v", err)
	}

	ms, err := admin.Members(c, &rivetv1.MembersRequest{})
	if err != nil || len(ms.Members) != 1 || ms.Members[0].NodeId != "node-1" {
		t.Errorf("members: %v %v", ms, err)
	}
	ps, err := admin.Partitions(c, &rivetv1.PartitionsRequest{})
	if err != nil || ps.PartitionCount != 16 || len(ps.Partitions) != 16 || ps.Partitions[3].Token != 103 {
		t.Errorf("partitions: %v %v", ps, err)
	}
	st, err := admin.Stats(c, &rivetv1.StatsRequest{})
	if err != nil || st.Commits != 3 {
		t.Errorf("stats: %v %v", st, err)
	}
}

// A wait longer than a time.Duration holds (INT64_MAX milliseconds, a
// client's "as long as my deadline allows") is the longest wait, not a
// product that wrapped round to a negative (the default 30 s) or to
// under a millisecond (timed out at once).
func TestSendWaitTimeoutPastDurationRange(t *testing.T) {
	f := servertest.NewFake()
	got := make(chan time.Duration, 1)
	f.SendFunc = func(_ context.Context, req runtime.SendRequest) (runtime.SendResult, error) {
		got <- req.Timeout
		return runtime.SendResult{MessageID: 1, Status: runtime.SendCompleted, Response: req.Body}, nil
	}
	actors, _ := dial(t, servertest.Start(t, f, servertest.Config{}))
	// 18446744073710 ms is 2^64 ns and 448 µs: wrapped, under a millisecond.
	for _, ms := range []int64{math.MaxInt64, 18446744073710, math.MaxInt64 / int64(time.Millisecond)} {
		if _, err := actors.Send(ctx(t), &rivetv1.SendRequest{Actor: ref("a", "k"), Queue: "q", Body: []byte("1"), Wait: true, TimeoutMs: ms}); err != nil {
			t.Fatalf("timeout_ms %d: %v", ms, err)
		}
		if d := <-got; d < time.Duration(math.MaxInt64/int64(time.Millisecond))*time.Millisecond {
			t.Errorf("timeout_ms %d reached the backend as %v, want the longest wait", ms, d)
		}
	}
}

// An actor may hold up to rivet.MaxSchedules pending calls with arguments
// up to a queue message each, far more than one response may carry: its
// Inspect still answers, within what a peer stream carries (so the same on
// the owner as through another node), leaving out the largest arguments
// (empty: a call's arguments are a JSON array, never empty).
func TestInspectOfManyLargeScheduledCallsFits(t *testing.T) {
	f := servertest.NewFake()
	big := bigArray(60 << 10)
	f.InspectFunc = func(_ context.Context, ref runtime.Ref) (runtime.Inspection, error) {
		in := runtime.Inspection{Info: runtime.ActorInfo{Ref: ref}, State: json.RawMessage(`{"count":1}`)}
		for i := range 200 {
			args := big
			if i%2 == 1 {
				args = json.RawMessage(`[1]`)
			}
			in.Schedules = append(in.Schedules, rivet.ScheduledCall{ID: fmt.Sprint(i), Action: "later", Args: args, At: servertest.Created})
		}
		return in, nil
	}
	actors, _ := dial(t, servertest.Start(t, f, servertest.Config{}))
	resp, err := actors.Inspect(ctx(t), &rivetv1.InspectRequest{Actor: ref("a", "k")})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if n, bound := proto.Size(resp), server.DefaultLimits().MaxForwardedResponseBytes(); n > bound {
		t.Errorf("response of %d bytes, over a peer stream's bound %d", n, bound)
	}
	kept, omitted := 0, 0
	for i, sc := range resp.Schedules {
		switch {
		case i%2 == 1 && string(sc.Args) != "[1]":
			t.Errorf("schedule %d: small args %q were left out", i, sc.Args)
		case i%2 == 0 && len(sc.Args) == 0:
			omitted++
		case i%2 == 0:
			kept++
		}
	}
	if len(resp.Schedules) != 200 || omitted == 0 || kept == 0 {
		t.Errorf("%d schedules, %d large args kept, %d left out; want 200, some of each", len(resp.Schedules), kept, omitted)
	}
}

// historyBackend answers History with its entries.
type historyBackend struct {
	*servertest.Fake
	entries []runtime.HistoryEntry
}

func (b historyBackend) HistoryPage(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
	return runtime.History{WorkflowStatus: "running", Entries: b.entries}, nil
}

// A workflow's history holds many entries, each up to a transaction's
// size, far more than one response may carry: History still answers,
// within what a peer stream carries, leaving out the largest outputs and
// saying so.
func TestHistoryOfManyLargeOutputsFits(t *testing.T) {
	b := historyBackend{Fake: servertest.NewFake()}
	big := json.RawMessage(`"` + strings.Repeat("o", 1<<20) + `"`)
	for i := range 12 {
		out := big
		if i%2 == 1 {
			out = json.RawMessage(`1`)
		}
		b.entries = append(b.entries, runtime.HistoryEntry{Path: fmt.Sprintf("step-%d", i), Kind: "step", Status: "completed", Output: out})
	}
	actors, _ := dial(t, servertest.Start(t, b, servertest.Config{}))
	resp, err := actors.History(ctx(t), &rivetv1.HistoryRequest{Actor: ref("a", "k")})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	if n, bound := proto.Size(resp), server.DefaultLimits().MaxForwardedResponseBytes(); n > bound {
		t.Errorf("response of %d bytes, over a peer stream's bound %d", n, bound)
	}
	kept, omitted := 0, 0
	for i, e := range resp.Entries {
		switch {
		case i%2 == 1 && (string(e.Output) != "1" || e.OutputOmitted):
			t.Errorf("entry %d: small output %q left out", i, e.Output)
		case i%2 == 1:
		case i%2 == 0 && e.OutputOmitted && len(e.Output) == 0:
			omitted++
		case i%2 == 0 && !e.OutputOmitted && len(e.Output) == len(big):
			kept++
		default:
			t.Errorf("entry %d: output of %d bytes, omitted %v", i, len(e.Output), e.OutputOmitted)
		}
	}
	if len(resp.Entries) != 12 || omitted == 0 || kept == 0 {
		t.Errorf("%d entries, %d large outputs kept, %d left out; want 12, some of each", len(resp.Entries), kept, omitted)
	}
}

// Entries' errors are as unbounded as their outputs (a step's error is
// recorded whole, up to a transaction's size): a history of many failed
// steps with long errors still answers, their longest errors cut and
// saying so, rather than failing whole.
func TestHistoryOfManyLargeErrorsFits(t *testing.T) {
	b := historyBackend{Fake: servertest.NewFake()}
	long := strings.Repeat("e", 1<<20)
	for i := range 12 {
		b.entries = append(b.entries, runtime.HistoryEntry{Path: fmt.Sprintf("step-%d", i), Kind: "step", Status: "failed", Output: json.RawMessage(`1`), Error: long, ErrorCode: "boom"})
	}
	actors, _ := dial(t, servertest.Start(t, b, servertest.Config{}))
	resp, err := actors.History(ctx(t), &rivetv1.HistoryRequest{Actor: ref("a", "k")})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	if n, bound := proto.Size(resp), server.DefaultLimits().MaxForwardedResponseBytes(); n > bound {
		t.Errorf("response of %d bytes, over a peer stream's bound %d", n, bound)
	}
	cut := 0
	for i, e := range resp.Entries {
		if string(e.Output) != "1" || e.OutputOmitted || e.ErrorCode != "boom" {
			t.Errorf("entry %d: output %q (omitted %v), code %q; want 1 and boom kept", i, e.Output, e.OutputOmitted, e.ErrorCode)
		}
		switch {
		case e.Error == long:
		case strings.HasPrefix(e.Error, "eee") && strings.Contains(e.Error, fmt.Sprintf("(cut: %d bytes in all)", len(long))) && len(e.Error) < 2048:
			cut++
		default:
			t.Errorf("entry %d: error %.60q... of %d bytes: neither whole nor cut saying so", i, e.Error, len(e.Error))
		}
	}
	if len(resp.Entries) != 12 || cut == 0 {
		t.Errorf("%d entries, %d errors cut; want 12, some cut", len(resp.Entries), cut)
	}
}

// historyOf answers History with h.
type historyOf struct {
	*servertest.Fake
	h runtime.History
}

func (b historyOf) HistoryPage(context.Context, runtime.Ref, runtime.HistoryOptions) (runtime.History, error) {
	return b.h, nil
}

// Text an actor's code made, not all UTF-8 (an error's, an entry's name),
// reaches Inspect and History with its bad bytes as U+FFFD, as storage
// gives it back once JSON: as it was, the response did not marshal, and
// the actor could not be inspected at all (INTERNAL) while in memory.
func TestInspectAndHistoryOfTextNotUTF8(t *testing.T) {
	const bad, want = "failed: \xff", "failed: \uFFFD"
	b := historyOf{Fake: servertest.NewFake(), h: runtime.History{WorkflowStatus: "failed", WorkflowError: bad, Entries: []runtime.HistoryEntry{
		{Path: "race/\xffbranch", Kind: "race", Status: "completed", Winner: "\xffbranch"},
		{Path: "step", Kind: "step", Status: "exhausted", Error: bad, ErrorCode: "user.\xff"},
	}}}
	b.InspectFunc = func(_ context.Context, ref runtime.Ref) (runtime.Inspection, error) {
		return runtime.Inspection{Info: runtime.ActorInfo{Ref: ref, WorkflowError: bad}, WorkflowStatus: "failed", WorkflowError: bad,
			Schedules: []rivet.ScheduledCall{{ID: "every:tick", Action: "tick", Args: json.RawMessage(`[]`), Name: "tick", LastError: bad}}}, nil
	}
	actors, _ := dial(t, servertest.Start(t, b, servertest.Config{}))
	in, err := actors.Inspect(ctx(t), &rivetv1.InspectRequest{Actor: ref("a", "k")})
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if in.WorkflowError != want || in.Info.WorkflowError != want || in.Schedules[0].LastError != want {
		t.Errorf("inspect: errors %q, %q, %q; want %q", in.WorkflowError, in.Info.WorkflowError, in.Schedules[0].LastError, want)
	}
	h, err := actors.History(ctx(t), &rivetv1.HistoryRequest{Actor: ref("a", "k")})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	if e := h.Entries; h.WorkflowError != want || e[0].Path != "race/\uFFFDbranch" || e[0].Winner != "\uFFFDbranch" || e[1].Error != want || e[1].ErrorCode != "user.\uFFFD" {
		t.Errorf("history: %+v", h)
	}
}

// pagedHistory pages through its entries as runtime.Host.HistoryPage
// does, its tokens the entries' indexes, and records the limits asked.
type pagedHistory struct {
	*servertest.Fake
	entries []runtime.HistoryEntry
	limits  []int
}

func (b *pagedHistory) HistoryPage(_ context.Context, _ runtime.Ref, opts runtime.HistoryOptions) (runtime.History, error) {
	b.limits = append(b.limits, opts.Limit)
	start := 0
	if opts.PageToken != "" {
		n, err := strconv.Atoi(opts.PageToken)
		if err != nil {
			return runtime.History{}, rivet.Errorf(rivet.ErrInvalidArgument, "bad page token")
		}
		start = n + 1
	}
	end := len(b.entries)
	if opts.Limit > 0 {
		end = min(end, start+opts.Limit)
	}
	h := runtime.History{WorkflowStatus: "running", Entries: b.entries[start:end]}
	if opts.Limit > 0 {
		for i := start; i < end; i++ {
			h.PageTokens = append(h.PageTokens, strconv.Itoa(i))
		}
		if end < len(b.entries) {
			h.NextPageToken = h.PageTokens[len(h.PageTokens)-1]
		}
	}
	return h, nil
}

// A page of a history ends early rather than leave out outputs: it holds
// the entries that fit whole in a response, and its token resumes after
// the last of them. A page size over 1000 is served as 1000, as List's.
// Asked for whole (no limit, as before History paged), a history too long
// for one response is TOO_LARGE, saying to page it.
func TestHistoryPagesEndEarlyRatherThanLeaveOutOutputs(t *testing.T) {
	b := &pagedHistory{Fake: servertest.NewFake()}
	big := json.RawMessage(`"` + strings.Repeat("o", 1<<20) + `"`)
	for i := range 12 {
		b.entries = append(b.entries, runtime.HistoryEntry{Path: fmt.Sprintf("step-%d", i), Kind: "step", Status: "completed", Output: big})
	}
	actors, _ := dial(t, servertest.Start(t, b, servertest.Config{}))
	var got []string
	token, pages := "", 0
	for {
		resp, err := actors.History(ctx(t), &rivetv1.HistoryRequest{Actor: ref("a", "k"), Limit: 5000, PageToken: token})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if n, bound := proto.Size(resp), server.DefaultLimits().MaxForwardedResponseBytes(); n > bound || !resp.Paged || len(resp.Entries) == 0 {
			t.Fatalf("page %d: %d bytes (bound %d), %d entries, paged %v", pages, n, bound, len(resp.Entries), resp.Paged)
		}
		for _, e := range resp.Entries {
			if e.OutputOmitted || len(e.Output) != len(big) {
				t.Fatalf("entry %s: output of %d bytes, omitted %v; want it whole", e.Path, len(e.Output), e.OutputOmitted)
			}
			got = append(got, e.Path)
		}
		if token = resp.NextPageToken; token == "" {
			break
		}
	}
	if len(got) != 12 || got[0] != "step-0" || got[11] != "step-11" || pages < 3 {
		t.Fatalf("%d pages listed %v; want step-0 to step-11, in several pages", pages, got)
	}
	if b.limits[0] != 1000 {
		t.Errorf("a page size of 5000 reached the backend as %d, want 1000", b.limits[0])
	}
	// A bad token is the backend's INVALID_ARGUMENT.
	_, err := actors.History(ctx(t), &rivetv1.HistoryRequest{Actor: ref("a", "k"), Limit: 5, PageToken: "x"})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad token: %v, want INVALID_ARGUMENT", err)
	}
	// 100,000 entries without outputs do not fit whole.
	b.entries = nil
	for i := range 100000 {
		b.entries = append(b.entries, runtime.HistoryEntry{Path: fmt.Sprintf("a-rather-long-step-name-of-a-plain-go-loop-%d", i), Kind: "step", Status: "completed"})
	}
	_, err = actors.History(ctx(t), &rivetv1.HistoryRequest{Actor: ref("a", "k")})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "pages") {
		t.Errorf("a whole history of 100,000 entries: %v, want TOO_LARGE saying to page it", err)
	}
	resp, err := actors.History(ctx(t), &rivetv1.HistoryRequest{Actor: ref("a", "k"), Limit: 1000})
	if err != nil || len(resp.Entries) != 1000 || resp.NextPageToken != "999" {
		t.Errorf("a page of it: %v, next %q, %v", len(resp.GetEntries()), resp.GetNextPageToken(), err)
	}
}
