// Package tracing holds what the node, the server, the runtime and the
// client share of OpenTelemetry tracing: the instrumentation's name, the
// propagator, the spans' attribute keys, the gRPC stats handlers, and the
// carrying of a trace context in a forwarded request (which travels on a
// long-lived peer stream, not as a call of its own with its own metadata).
//
// Tracing is off unless a node or client is given a TracerProvider: then
// nothing here runs on a call's path.
package tracing

import (
	"context"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"

	"github.com/rivet-go/rivet/internal/textcut"
)

// ScopeName names the tracer of the node's own spans.
const ScopeName = "github.com/rivet-go/rivet"

// Propagator carries W3C trace context and baggage. It is fixed rather
// than otel's global one, whose default propagates nothing: a program that
// never called otel.SetTextMapPropagator would start a new trace at every
// hop.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// The spans' attribute keys.
const (
	ActorName = attribute.Key("rivet.actor.name")
	ActorKey  = attribute.Key("rivet.actor.key")
	Action    = attribute.Key("rivet.action")
	Queue     = attribute.Key("rivet.queue")
	StepPath  = attribute.Key("rivet.workflow.step")
	Attempt   = attribute.Key("rivet.workflow.attempt")
	Forwarded = attribute.Key("rivet.forwarded")
	NodeID    = attribute.Key("rivet.node.id")
	// TurnWait is the attribute of a span's rivet.turn event: the
	// seconds its turn waited for the actor's gate.
	TurnWait = attribute.Key("rivet.turn.wait_seconds")
	// The RPC attributes otelgrpc gives a server span, which the owner's
	// span of a forwarded call has too.
	RPCSystem     = attribute.Key("rpc.system.name")
	RPCMethod     = attribute.Key("rpc.method")
	RPCStatusCode = attribute.Key("rpc.response.status_code")
)

// MaxErrorText bounds the error text a span's status keeps. An actor's
// error may carry megabytes of text, which a span would keep in memory
// until exported and send whole to the collector, for each call that
// failed with it.
const MaxErrorText = 1 << 10

// End ends span with err's status: an error status with its message (cut
// to MaxErrorText), or unset on success.
func End(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, ErrorText(err.Error()))
	}
	span.End()
}

// EndServer ends a server span with the gRPC status of err (nil: OK) as
// otelgrpc ends its server spans, after OpenTelemetry's conventions for
// RPC: an error status only for the codes that say the server failed
// (Unknown, DeadlineExceeded, Unimplemented, Internal, Unavailable,
// DataLoss), not for those that answer the caller (NotFound,
// InvalidArgument, an actor's FailedPrecondition): the forwarding node's
// span of the same call says the same.
func EndServer(span trace.Span, err error) {
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case grpccodes.Unknown, grpccodes.DeadlineExceeded, grpccodes.Unimplemented, grpccodes.Internal, grpccodes.Unavailable, grpccodes.DataLoss:
			span.SetStatus(codes.Error, ErrorText(st.Message()))
		}
	}
	span.End()
}

// ErrorText is msg as a span's status keeps it: at most MaxErrorText
// bytes, whole characters.
func ErrorText(msg string) string { return textcut.Prefix(msg, MaxErrorText) }

// forwarded is what a forwarded request carries of its caller's context:
// the W3C trace context, not baggage. Baggage is the client's, up to 8 KiB
// of it, and a forwarded request travels on a peer stream whose messages
// the owner's transport bounds: a client's baggage could push a request
// near the bound over it, and break the stream for every call on it.
var forwarded = propagation.TraceContext{}

// MaxTraceState bounds the tracestate a forwarded request carries; a
// longer one (W3C allows 32 members of up to 512 bytes) is dropped, the
// traceparent kept. Vendors' entries are short: a few hundred bytes is
// what the W3C recommends propagating.
const MaxTraceState = 512

// Inject returns ctx's trace context (traceparent, and tracestate up to
// MaxTraceState) for a forwarded request, nil if it has none: what a call
// outside any trace sends. At most Size(Inject(ctx)) <= MaxCarried.
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	forwarded.Inject(ctx, carrier)
	if len(carrier[traceStateHeader]) > MaxTraceState {
		delete(carrier, traceStateHeader)
	}
	if len(carrier) == 0 {
		return nil
	}
	return carrier
}

const traceStateHeader = "tracestate"

// Size is what carrier adds to a marshalled forwarded request, counted
// as its sender bounds the request (with a few bytes of framing an entry).
func Size(carrier map[string]string) int {
	n := 0
	for k, v := range carrier {
		n += len(k) + len(v) + 8
	}
	return n
}

// MaxCarried bounds Size(Inject(ctx)): traceparent (55 bytes), tracestate
// up to MaxTraceState, their names and framing.
const MaxCarried = 55 + MaxTraceState + len("traceparent") + len(traceStateHeader) + 2*8

// Extract returns ctx with the trace context of a forwarded request
// (Inject's), as the parent of the spans started in it. It takes the
// place of any span ctx holds: the stream's, which is not the request's.
func Extract(ctx context.Context, carrier map[string]string) context.Context {
	if len(carrier) == 0 {
		return trace.ContextWithSpan(ctx, nil)
	}
	return forwarded.Extract(trace.ContextWithSpan(ctx, nil), propagation.MapCarrier(carrier))
}

// traced says whether a node's gRPC method gets a server span: the
// ActorService's and the AdminService's. Not the PeerService's, whose
// streams live as long as their connections and carry other calls'
// requests (each of which gets a span of its own, PeerServer), nor
// health checks and reflection, which load balancers and tools send
// every few seconds.
func traced(info *stats.RPCTagInfo) bool {
	return strings.HasPrefix(info.FullMethodName, "/rivet.v1.ActorService/") || strings.HasPrefix(info.FullMethodName, "/rivet.v1.AdminService/")
}

// ServerHandler is the gRPC stats handler of a node with tracing on: a
// server span for each client call, a child of the caller's span when the
// call carries one (W3C traceparent metadata).
func ServerHandler(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()), otelgrpc.WithFilter(traced))
}

// ClientHandler is the gRPC stats handler of a client with tracing on: a
// client span for each call, whose context the call carries to the node.
func ClientHandler(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()))
}
