package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/rivet-go/rivet"
	"github.com/rivet-go/rivet/client"
	"github.com/rivet-go/rivet/internal/tracing"
	"github.com/rivet-go/rivet/runtime"
	"github.com/rivet-go/rivet/storage/etcdstore/etcdtest"
	"github.com/rivet-go/rivet/workflow"
)

type traceState struct{ N int }

// tracedCounter is called by clients, and by tracedFlow's step.
var tracedCounter = rivet.Actor[traceState]{
	Name: "tcounter",
	Actions: rivet.Actions[traceState]{
		"add": rivet.Action(func(c *rivet.ActionCtx[traceState], by int) (int, error) {
			c.State.N += by
			return c.State.N, nil
		}),
		"fail": rivet.Action(func(c *rivet.ActionCtx[traceState], _ int) (int, error) {
			return 0, rivet.Errorf(rivet.ErrFailedPrecondition, "refused on purpose")
		}),
	},
}

// tracedInbox takes messages, one at a time.
var tracedInbox = rivet.Actor[traceState]{
	Name:   "tinbox",
	Queues: rivet.Queues{"q": rivet.QueueOf[int]()},
	Run: func(ctx *workflow.Ctx[traceState]) error {
		return ctx.Loop("take", func(c *workflow.Ctx[traceState]) error {
			_, err := workflow.Next[int](c, "next")
			return err
		})
	},
}

// tracedFlow's one step calls the counter keyed "t-" + its own key.
var tracedFlow = rivet.Actor[traceState]{
	Name: "tflow",
	Run: func(ctx *workflow.Ctx[traceState]) error {
		target := "t-" + ctx.Key()[0]
		return ctx.Step("charge", func(s *workflow.StepCtx[traceState]) error {
			_, err := rivet.Call[int](s.Context(), s.Client().GetOrCreate("tcounter", target), "add", 1)
			return err
		})
	},
}

// recorder is an in-memory TracerProvider and what it recorded.
type recorder struct {
	tp    *sdktrace.TracerProvider
	spans *tracetest.SpanRecorder
}

func newRecorder(t *testing.T) recorder {
	r := recorder{spans: tracetest.NewSpanRecorder()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() { _ = r.tp.Shutdown(context.Background()) })
	return r
}

// await returns the first ended span that match accepts, once there is
// one.
func (r recorder) await(t *testing.T, ctx context.Context, what string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	// Spans end as their calls answer, or a moment after (a server's
	// ends once its reply is sent): seconds are plenty.
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var found sdktrace.ReadOnlySpan
	awaitCond(t, ctx, what, func() bool {
		for _, s := range r.spans.Ended() {
			if match(s) {
				found = s
				return true
			}
		}
		return false
	})
	return found
}

func named(name string) func(sdktrace.ReadOnlySpan) bool {
	return func(s sdktrace.ReadOnlySpan) bool { return s.Name() == name }
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// childOf fails t unless child's parent is parent, in parent's trace.
func childOf(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.SpanContext().TraceID() != parent.SpanContext().TraceID() || child.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %q (trace %s, parent %s) is not a child of %q (trace %s, span %s)", child.Name(), child.SpanContext().TraceID(), child.Parent().SpanID(),
			parent.Name(), parent.SpanContext().TraceID(), parent.SpanContext().SpanID())
	}
}

// tracedNodes starts nodes a and b, each sending its spans to a recorder
// of its own (off: no tracing, and no recorders).
func tracedNodes(t *testing.T, prefix string, on bool) (context.Context, *Node, *Node, recorder, recorder) {
	t.Helper()
	const parts = 8
	reg, err := rivet.Setup(tracedCounter, tracedFlow, tracedInbox)
	if err != nil {
		t.Fatal(err)
	}
	endpoints := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	var ra, rb recorder
	cfgA := ClusterConfigForTest(t, "a", endpoints, prefix, parts, nil)
	if on {
		ra, rb = newRecorder(t), newRecorder(t)
		cfgA.TracerProvider = ra.tp
	}
	a := StartForTest(t, ctx, cfgA, reg)
	cfgB := ClusterConfigForTest(t, "b", endpoints, prefix, parts, []string{a.GossipAddr()})
	if on {
		cfgB.TracerProvider = rb.tp
	}
	b := StartForTest(t, ctx, cfgB, reg)
	awaitCond(t, ctx, "a and b to share the partitions", sharing(parts, a, b))
	return ctx, a, b, ra, rb
}

// A client's call sent to a node that does not own the actor, which
// forwards it on its peer stream, is one trace: the client's span, the
// forwarding node's server span, the owner's span of the forwarded
// request, and the owner's span of the action run, each the child of the
// one before, with the actor's name, key and action; an action's error is
// its span's. A workflow step's attempt is a span naming its path and
// attempt, and a call its body makes to an actor of another node is its
// child, through the hop.
func TestTracingFollowsCallsAcrossTheForwardingHop(t *testing.T) {
	ctx, a, b, ra, rb := tracedNodes(t, "/tracing-test/", true)
	rc := newRecorder(t)
	c, err := client.New(a.GRPCAddr(), client.WithTracing(rc.tp))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	t.Run("client call", func(t *testing.T) {
		ref, _ := ownedRef(t, b, "tcounter", "k")
		if n, err := rivet.Call[int](ctx, c.GetOrCreate("tcounter", ref.Key...), "add", 2); err != nil || n != 2 {
			t.Fatalf("add = %d, %v", n, err)
		}
		const method = "rivet.v1.ActorService/Call"
		cspan := rc.await(t, ctx, "the client's span", named(method))
		fwd := ra.await(t, ctx, "a's server span", named(method))
		owner := rb.await(t, ctx, "b's span of the forwarded request", named(method))
		action := rb.await(t, ctx, "b's action span", named("rivet.action tcounter.add"))
		if cspan.SpanKind() != trace.SpanKindClient || fwd.SpanKind() != trace.SpanKindServer || owner.SpanKind() != trace.SpanKindServer {
			t.Errorf("kinds: client %v, a %v, b %v", cspan.SpanKind(), fwd.SpanKind(), owner.SpanKind())
		}
		childOf(t, fwd, cspan)
		childOf(t, owner, fwd)
		childOf(t, action, owner)
		if !attrOf(owner, tracing.Forwarded).AsBool() {
			t.Errorf("b's span of the forwarded request lacks %s", tracing.Forwarded)
		}
		if got := attrOf(action, tracing.ActorName).AsString(); got != "tcounter" {
			t.Errorf("action span's actor name %q", got)
		}
		if got := attrOf(action, tracing.ActorKey).AsStringSlice(); !slices.Equal(got, ref.Key) {
			t.Errorf("action span's key %q, want %q", got, ref.Key)
		}
		if got := attrOf(action, tracing.Action).AsString(); got != "add" {
			t.Errorf("action span's action %q", got)
		}
		for _, s := range ra.spans.Ended() {
			if s.Name() == "rivet.action tcounter.add" {
				t.Errorf("the forwarding node a ran the action too (span %v)", s.SpanContext().SpanID())
			}
		}

		_, err := rivet.Call[int](ctx, c.GetOrCreate("tcounter", ref.Key...), "fail", 0)
		if !errors.Is(err, rivet.ErrFailedPrecondition) {
			t.Fatalf("fail = %v", err)
		}
		failed := rb.await(t, ctx, "b's span of the failed action", named("rivet.action tcounter.fail"))
		if failed.Status().Code != otelcodes.Error || failed.Status().Description == "" {
			t.Errorf("failed action's span status %+v, want an error", failed.Status())
		}

		inbox, _ := ownedRef(t, b, "tinbox", "i")
		if _, err := rivet.Enqueue(ctx, c.GetOrCreate("tinbox", inbox.Key...), "q", 7); err != nil {
			t.Fatal(err)
		}
		sent := rb.await(t, ctx, "b's span of the forwarded send", named("rivet.v1.ActorService/Send"))
		enqueued := rb.await(t, ctx, "b's span of the message's enqueue", named("rivet.enqueue tinbox.q"))
		childOf(t, enqueued, sent)
		if got := attrOf(enqueued, tracing.Queue).AsString(); got != "q" || enqueued.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("enqueue span's queue %q, kind %v", got, enqueued.SpanKind())
		}
	})

	t.Run("workflow step", func(t *testing.T) {
		// A flow on a whose step calls a counter on b.
		key := crossKey(t, a, b)
		if _, err := c.Create(ctx, "tflow", []string{key}, nil); err != nil {
			t.Fatal(err)
		}
		isFlows := func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "rivet.step tflow" && slices.Equal(attrOf(s, tracing.ActorKey).AsStringSlice(), []string{key})
		}
		step := ra.await(t, ctx, "the step's span", isFlows)
		if got := attrOf(step, tracing.StepPath).AsString(); got != "charge" {
			t.Errorf("step span's path %q, want charge", got)
		}
		if got := attrOf(step, tracing.Attempt).AsInt64(); got != 1 {
			t.Errorf("step span's attempt %d, want 1", got)
		}
		if got := attrOf(step, tracing.ActorName).AsString(); got != "tflow" {
			t.Errorf("step span's actor %q", got)
		}
		call := ra.await(t, ctx, "the step's call's span", func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "rivet.call tcounter.add" && s.SpanContext().TraceID() == step.SpanContext().TraceID()
		})
		childOf(t, call, step)
		if call.SpanKind() != trace.SpanKindClient {
			t.Errorf("call span kind %v", call.SpanKind())
		}
		owner := rb.await(t, ctx, "b's span of the step's call", func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "rivet.v1.ActorService/Call" && s.SpanContext().TraceID() == step.SpanContext().TraceID()
		})
		childOf(t, owner, call)
		action := rb.await(t, ctx, "b's span of the called action", func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == "rivet.action tcounter.add" && s.SpanContext().TraceID() == step.SpanContext().TraceID()
		})
		childOf(t, action, owner)
		if got := attrOf(action, tracing.ActorKey).AsStringSlice(); !slices.Equal(got, []string{"t-" + key}) {
			t.Errorf("called action's key %q", got)
		}
	})
}

// crossKey is the key of a tflow on a whose step's counter is on b.
func crossKey(t *testing.T, a, b *Node) string {
	t.Helper()
	for i := range 10_000 {
		k := fmt.Sprint("f", i)
		if owns(t, a, "tflow", k) && owns(t, b, "tcounter", "t-"+k) {
			return k
		}
	}
	t.Fatal("no flow key on a whose counter is on b")
	return ""
}

// owns says whether n owns the partition of actor name, key.
func owns(t *testing.T, n *Node, name, key string) bool {
	t.Helper()
	p, err := n.host.PartitionOf(runtime.Ref{Name: name, Key: []string{key}})
	if err != nil {
		t.Fatal(err)
	}
	return n.host.Owns(p)
}

// Off, a node installs nothing of tracing: no provider, no stats handler
// (so not otel's global provider either, which a program may have set for
// other reasons), no span of its own, and a forwarded call carries
// nothing; the client's call, traced on its side, is served as ever.
func TestTracingOffMakesNoSpans(t *testing.T) {
	global := newRecorder(t)
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(global.tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	ctx, a, b, _, _ := tracedNodes(t, "/tracing-off-test/", false)
	for _, n := range []*Node{a, b} {
		if n.tracer != nil || n.stopTracing != nil {
			t.Fatalf("node %s has tracing on", n.ID())
		}
	}
	rc := newRecorder(t)
	c, err := client.New(a.GRPCAddr(), client.WithTracing(rc.tp))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ref, _ := ownedRef(t, b, "tcounter", "k")
	if n, err := rivet.Call[int](ctx, c.GetOrCreate("tcounter", ref.Key...), "add", 3); err != nil || n != 3 {
		t.Fatalf("add = %d, %v", n, err)
	}
	rc.await(t, ctx, "the client's span", named("rivet.v1.ActorService/Call"))
	key := crossKey(t, a, b)
	if _, err := c.Create(ctx, "tflow", []string{key}, nil); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, ctx, "the flow's step", func() bool {
		n, err := rivet.Call[int](ctx, c.Get("tcounter", "t-"+key), "add", 0)
		return err == nil && n == 1
	})
	if spans := global.spans.Ended(); len(spans) > 0 {
		t.Fatalf("nodes with tracing off made %d spans, the first %q", len(spans), spans[0].Name())
	}
}

// otlpCollector is an OTLP/gRPC trace collector that keeps what it is sent.
type otlpCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.ResourceSpans
}

func (c *otlpCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, req.GetResourceSpans()...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// With --otlp-endpoint, a node exports its spans to the collector there,
// as service rivet-node with its node ID and build, and flushes what its
// batches still hold as it stops: a call's spans reach the collector
// though the node stopped right after it.
//
// OTEL_RESOURCE_ATTRIBUTES with a pair that does not parse labels the
// spans with the pairs that do, rather than fail the node's start.
func TestTracingExportsToAnOTLPCollectorAndFlushesOnStop(t *testing.T) {
	clearOTelEnv(t)
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,broken")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &otlpCollector{}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-served })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, c := nodeExportingTo(t, ctx, lis.Addr().String())
	if got, err := rivet.Call[int](ctx, c.GetOrCreate("tcounter", "x"), "add", 1); err != nil || got != 1 {
		t.Fatalf("add = %d, %v", got, err)
	}
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	var names []string
	for _, rs := range col.spans {
		attrs := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		if attrs["service.name"] != "rivet-node" || attrs["service.instance.id"] != "traced" || attrs["rivet.node.id"] != "traced" || attrs["service.version"] == "" || attrs["deployment.environment"] != "test" {
			t.Errorf("resource %v, want service rivet-node of node traced with its build, in deployment.environment test", attrs)
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				names = append(names, s.GetName())
			}
		}
	}
	if !slices.Contains(names, "rivet.action tcounter.add") || !slices.Contains(names, "rivet.v1.ActorService/Call") {
		t.Fatalf("the collector got spans %q, want the call's and its action's", names)
	}
}

// clearOTelEnv unsets the OTEL_* variables for t (a developer's or CI's
// sampler, headers or service name would change what the node exports).
func clearOTelEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
			os.Unsetenv(k) // t.Setenv puts it back after the test
		}
	}
}

// An export in flight as the node stops, to a collector that takes the
// connection and never answers, ends within the flush timeout of the
// stop, not the exporter's 10 s later.
func TestAnExportToADeadCollectorEndsWithTheStop(t *testing.T) {
	clearOTelEnv(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: the batch goes out at once
	prev := tracingFlushTimeout
	tracingFlushTimeout = time.Second
	t.Cleanup(func() { tracingFlushTimeout = prev })
	// Takes connections, reads nothing, answers nothing.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-accepted
		for _, c := range conns {
			c.Close()
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, c := nodeExportingTo(t, ctx, lis.Addr().String())
	if _, err := rivet.Call[int](ctx, c.GetOrCreate("tcounter", "x"), "add", 1); err != nil {
		t.Fatal(err)
	}
	exporting := func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:goruntime.Stack(buf, true)]), "otlptracegrpc.(*client).UploadTraces")
	}
	awaitCond(t, ctx, "an export in flight", exporting)
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for exporting() {
		if time.Since(stopped) > 3*time.Second {
			t.Fatal("an export to the dead collector still runs 3 s after the stop")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nodeExportingTo starts a node of tracedCounter whose spans go to the
// OTLP collector at addr, and a client of it (closed by the test's end).
func nodeExportingTo(t *testing.T, ctx context.Context, addr string) (*Node, *client.Client) {
	t.Helper()
	reg, err := rivet.Setup(tracedCounter)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLocalConfig(t.TempDir())
	cfg.NodeID, cfg.HTTPAddr, cfg.GossipAddr, cfg.Logger = "traced", "-", "-", zap.NewNop()
	cfg.OTLPEndpoint = addr
	n := StartForTest(t, ctx, cfg, reg)
	c, err := client.New(n.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return n, c
}
