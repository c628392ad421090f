package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	rivetv1 "github.com/rivet-go/rivet/gen/rivet/v1"
	"github.com/rivet-go/rivet/internal/rpcerr"
	"github.com/rivet-go/rivet/internal/tracing"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/server"
	"github.com/rivet-go/rivet/server/servertest"
)

// tracedCtx is ctx in a sampled trace whose context carries tracestate
// (joined members) and baggage as a client's call may: otelgrpc extracts
// both from the call's metadata, W3C allowing 32 tracestate members of up
// to 512 bytes and 8 KiB of baggage.
func tracedCtx(t *testing.T, ctx context.Context, tracestate string, bag int) (context.Context, trace.SpanContext) {
	t.Helper()
	ts, err := trace.ParseTraceState(tracestate)
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, byte(spanIDs.Add(1))},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true,
	})
	var members []baggage.Member
	for i := range bag {
		m, err := baggage.NewMember(fmt.Sprintf("b%d", i), strings.Repeat("v", 1000))
		if err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
	}
	b, err := baggage.New(members...)
	if err != nil {
		t.Fatal(err)
	}
	return baggage.ContextWithBaggage(trace.ContextWithSpanContext(ctx, sc), b), sc
}

// spanIDs tells tracedCtx's span contexts apart.
var spanIDs atomic.Uint32

// hugeTraceState is 32 members of about 450 bytes: some 14 KiB.
func hugeTraceState() string {
	var m []string
	for i := range 32 {
		m = append(m, fmt.Sprintf("k%02d%s=%s", i, strings.Repeat("a", 200), strings.Repeat("v", 250)))
	}
	return strings.Join(m, ",")
}

// A forwarded call whose caller's context holds all the tracestate and
// baggage a client may send still reaches the owner, in its trace, when
// its request is near the owner's bound: the request carries the
// traceparent and a short tracestate, no baggage, counted within the
// bound. Carried whole, some 22 KiB of them pushed the request over the
// owner's transport bound and broke the stream, failing the call and
// every other call on it.
func TestAForwardedCallCarriesABoundedTraceContext(t *testing.T) {
	f := servertest.NewFake()
	started, release := make(chan struct{}, 1), make(chan struct{})
	type seen struct {
		baggage, traceState int
		parent              trace.SpanContext
	}
	got := make(chan seen, 4)
	f.CallFunc = func(ctx context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		if req.Action == "block" {
			started <- struct{}{}
			<-release
			return []byte(`1`), nil
		}
		sc := trace.SpanContextFromContext(ctx)
		got <- seen{baggage.FromContext(ctx).Len(), len(sc.TraceState().String()), sc}
		return []byte(`1`), nil
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pc, ps := peerPair(t, f) // the peer's transport takes messages up to 4 MiB
	pc.CarryTraceContext()
	ps.Trace(tp)
	maxRequest := 4<<20 - 4<<10
	pc.LimitRequests(maxRequest)
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Call(ctx(t), &rivetv1.CallRequest{Actor: ref, Action: "block", Args: []byte(`[]`)})
		errc <- err
	}()
	<-started

	// A request 1 KiB under the bound: room for the bounded context.
	req := &rivetv1.CallRequest{Actor: ref, Action: "echo"}
	n := maxRequest - 1<<10
	req.Args = []byte(`["` + strings.Repeat("x", n) + `"]`)
	req.Args = []byte(`["` + strings.Repeat("x", n-(proto.Size(req)-n)) + `"]`)
	if proto.Size(req) != maxRequest-1<<10 {
		t.Fatalf("request of %d bytes, want %d", proto.Size(req), maxRequest-1<<10)
	}
	callCtx, caller := tracedCtx(t, ctx(t), hugeTraceState(), 8)
	if _, err := cl.Call(callCtx, req); err != nil {
		t.Fatalf("forwarded call near the bound with a huge trace context: %v, want its answer", err)
	}
	s := <-got
	if s.baggage != 0 || s.traceState != 0 || s.parent.TraceID() != caller.TraceID() {
		t.Errorf("owner's action saw baggage of %d members, tracestate of %d bytes, trace %v; want none, none, the caller's %v",
			s.baggage, s.traceState, s.parent.TraceID(), caller.TraceID())
	}

	// A short tracestate goes with the traceparent; still no baggage.
	short := "vendor=" + strings.Repeat("s", 100)
	callCtx, caller = tracedCtx(t, ctx(t), short, 2)
	if _, err := cl.Call(callCtx, &rivetv1.CallRequest{Actor: ref, Action: "echo", Args: []byte(`[]`)}); err != nil {
		t.Fatal(err)
	}
	s = <-got
	if s.baggage != 0 || s.traceState != len(short) || s.parent.TraceID() != caller.TraceID() {
		t.Errorf("owner's action saw baggage of %d members, tracestate of %d bytes, trace %v; want none, %d, the caller's %v",
			s.baggage, s.traceState, s.parent.TraceID(), len(short), caller.TraceID())
	}

	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("the call in flight beside it: %v, want its answer", err)
	}
}

// What a forwarded request carries of its caller's context is bounded
// whatever the caller's context holds, and is nothing outside a trace.
func TestInjectIsBounded(t *testing.T) {
	if tc := tracing.Inject(context.Background()); tc != nil {
		t.Errorf("outside a trace: %v, want nothing", tc)
	}
	c, _ := tracedCtx(t, context.Background(), "", 8)
	if tc := tracing.Inject(trace.ContextWithSpanContext(context.Background(), trace.SpanContext{})); tc != nil {
		t.Errorf("invalid span context: %v, want nothing", tc)
	}
	bagOnly := baggage.ContextWithBaggage(context.Background(), baggage.FromContext(c))
	if tc := tracing.Inject(bagOnly); tc != nil {
		t.Errorf("baggage, no span: %v, want nothing", tc)
	}
	for _, ts := range []string{"", "a=" + strings.Repeat("s", 250) + ",b=" + strings.Repeat("s", 250), hugeTraceState()} {
		c, _ := tracedCtx(t, context.Background(), ts, 8)
		tc := tracing.Inject(c)
		if _, ok := tc["traceparent"]; !ok || len(tc) > 2 || tracing.Size(tc) > tracing.MaxCarried {
			t.Errorf("tracestate of %d bytes: carried %d keys, %d bytes (max %d), want traceparent and at most tracestate",
				len(ts), len(tc), tracing.Size(tc), tracing.MaxCarried)
		}
		if want := len(ts) <= tracing.MaxTraceState && ts != ""; (tc["tracestate"] != "") != want {
			t.Errorf("tracestate of %d bytes carried: %v, want %v", len(ts), tc["tracestate"] != "", want)
		}
	}
}

// The owner's span of a forwarded call has the status otelgrpc gives the
// forwarding node's server span of it: an error only for the codes that
// say the server failed, not for an answer such as NotFound or an
// actor's FailedPrecondition; and its RPC attributes (rpc.method, the
// response's code), which it lacked, so that a trace backend's search by
// them missed the owner's half of every forwarded call.
func TestAForwardedSpansStatusIsAServerSpans(t *testing.T) {
	f := servertest.NewFake()
	f.CallFunc = func(_ context.Context, req runtime.CallRequest) (json.RawMessage, error) {
		switch req.Action {
		case "missing":
			return nil, status.Error(codes.NotFound, "no such thing")
		case "refuse":
			return nil, status.Error(codes.FailedPrecondition, "not now")
		case "break":
			return nil, status.Error(codes.Internal, "broken: "+strings.Repeat("x", 1<<20))
		}
		return []byte(`1`), nil
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pc, ps := peerPair(t, f)
	pc.CarryTraceContext()
	ps.Trace(tp)
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	for _, tc := range []struct {
		action string
		code   codes.Code
		status otelcodes.Code
	}{
		{"ok", codes.OK, otelcodes.Unset},
		{"missing", codes.NotFound, otelcodes.Unset},
		{"refuse", codes.FailedPrecondition, otelcodes.Unset},
		{"break", codes.Internal, otelcodes.Error},
	} {
		callCtx, caller := tracedCtx(t, ctx(t), "", 0)
		_, err := cl.Call(callCtx, &rivetv1.CallRequest{Actor: ref, Action: tc.action, Args: []byte(`[]`)})
		if status.Code(err) != tc.code {
			t.Fatalf("%s: %v, want %v", tc.action, err, tc.code)
		}
		var span sdktrace.ReadOnlySpan
		for _, s := range spans.Ended() {
			if s.Parent().SpanID() == caller.SpanID() {
				span = s
			}
		}
		if span == nil {
			t.Fatalf("%s: no span of the forwarded call", tc.action)
		}
		if st := span.Status(); st.Code != tc.status || len(st.Description) > tracing.MaxErrorText {
			t.Errorf("%s: span status %v (%d bytes of text), want %v", tc.action, st.Code, len(st.Description), tc.status)
		}
		// otelgrpc's attributes, as on the forwarding node's span.
		attrs := map[attribute.Key]string{}
		for _, kv := range span.Attributes() {
			attrs[kv.Key] = kv.Value.Emit()
		}
		want := map[attribute.Key]string{"rpc.system.name": "grpc", "rpc.method": "rivet.v1.ActorService/Call",
			"rpc.response.status_code": rpcerr.CodeName(tc.code), "rivet.forwarded": "true"}
		if !maps.Equal(attrs, want) {
			t.Errorf("%s: span attributes %v, want %v", tc.action, attrs, want)
		}
	}
}

// carriedStream records the trace context of each forwarded request its
// server stream receives.
type carriedStream struct {
	grpc.ServerStream
	mu      *sync.Mutex
	carried *[]map[string]string
}

func (s carriedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	var reqs []*rivetv1.ForwardRequest
	switch m := m.(type) {
	case *rivetv1.ForwardBatchesRequest:
		reqs = m.GetRequests()
	case *rivetv1.ForwardRequest:
		reqs = []*rivetv1.ForwardRequest{m}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reqs {
		if !r.GetCancel() {
			*s.carried = append(*s.carried, r.GetTraceContext())
		}
	}
	return err
}

// A call outside any trace (a node with tracing off, whose contexts hold
// no span) is forwarded with no trace context, even when its context
// holds baggage; one in a trace carries its traceparent. An owner whose
// PeerServer.Trace was given nil serves them both, untraced. A PeerConn
// not told to CarryTraceContext carries none.
func TestAForwardOutsideATraceCarriesNoTraceContext(t *testing.T) {
	var (
		mu      sync.Mutex
		carried []map[string]string
	)
	record := grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, carriedStream{ss, &mu, &carried})
	})
	f := servertest.NewFake()
	f.CallFunc = func(context.Context, runtime.CallRequest) (json.RawMessage, error) { return []byte(`1`), nil }
	srv := server.New(f)
	ps := server.NewPeerServer(srv).Trace(nil) // nil: no spans, as never calling Trace
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(record)
	srv.Register(gs)
	ps.Register(gs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	pc := server.NewPeerConn(conn).CarryTraceContext()
	t.Cleanup(func() {
		pc.Close()
		conn.Close()
		gs.Stop()
		<-done
	})
	cl := rivetv1.NewActorServiceClient(pc)
	ref := &rivetv1.ActorRef{Name: "counter", Key: []string{"a"}}
	traced, _ := tracedCtx(t, ctx(t), "", 2)
	untraced := baggage.ContextWithBaggage(ctx(t), baggage.FromContext(traced))
	for _, c := range []context.Context{untraced, traced} {
		if _, err := cl.Call(c, &rivetv1.CallRequest{Actor: ref, Action: "increment", Args: []byte(`[1]`)}); err != nil {
			t.Fatal(err)
		}
	}
	// A PeerConn not told to carry trace context (a node with tracing
	// off) does not look for one.
	plain := server.NewPeerConn(conn)
	defer plain.Close()
	if _, err := rivetv1.NewActorServiceClient(plain).Call(traced, &rivetv1.CallRequest{Actor: ref, Action: "increment", Args: []byte(`[1]`)}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(carried) != 3 || len(carried[0]) != 0 || carried[1]["traceparent"] == "" || len(carried[2]) != 0 {
		var keys []int
		for _, c := range carried {
			keys = append(keys, len(c))
		}
		t.Fatalf("carried contexts of %v keys, want nothing for the call outside a trace, then a traceparent, then nothing from the PeerConn that does not carry them", keys)
	}
}
