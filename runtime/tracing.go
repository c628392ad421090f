package runtime

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/rivet-go/rivet/internal/tracing"
)

// errDidNotReturn is the error of a span whose code did not return: it
// panicked through the span, or called runtime.Goexit. Its caller gets no
// answer, which is no success.
var errDidNotReturn = errors.New("the actor's code did not return: it panicked or called runtime.Goexit")

// startSpan starts the span of an actor's operation, named "op
// <actor>.<what>" after what's value, with the actor's name and key and
// what among its attributes; nil when tracing is off (ctx as it is).
func (h *Host) startSpan(ctx context.Context, op string, kind trace.SpanKind, name string, key []string, what attribute.KeyValue) (context.Context, trace.Span) {
	tr := h.tracer
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, op+" "+name+"."+what.Value.AsString(), trace.WithSpanKind(kind), trace.WithAttributes(
		tracing.ActorName.String(name), tracing.ActorKey.StringSlice(key), what))
}

// endSpan ends span with err, or, if the code it spans did not return
// (returned false on the way out of a panic or runtime.Goexit), with
// errDidNotReturn.
func endSpan(span trace.Span, returned bool, err error) {
	if !returned {
		err = errDidNotReturn
	}
	tracing.End(span, err)
}

// turnEvent marks, on the span of ctx (an action's, a message's enqueue),
// the moment its turn began, with how long it waited for it behind the
// turns ahead of it on the same actor (w0: when the wait began; zero for
// none). The span runs from the wait to the commit: without the mark, a
// slow one did not say whether the actor's code took the time or the
// callers queued ahead of it (a hot actor). Only an action's and a
// send's turn: the span in the context of any other (an operator's
// Destroy or workflow retry) is not the turn's own but its caller's, an
// RPC server span the event would be misread on.
func (h *Host) turnEvent(ctx context.Context, kind TurnKind, w0, t0 time.Time) {
	if h.tracer == nil || kind != TurnAction && kind != TurnSend {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	var wait time.Duration
	if !w0.IsZero() {
		wait = t0.Sub(w0)
	}
	span.AddEvent("rivet.turn", trace.WithTimestamp(t0), trace.WithAttributes(tracing.TurnWait.Float64(wait.Seconds())))
}
