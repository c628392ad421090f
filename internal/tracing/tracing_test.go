package tracing_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rivet-go/rivet/internal/tracing"
)

// A span that ends with an error keeps at most MaxErrorText bytes of its
// text, whole characters: an actor's error of megabytes is not kept until
// exported and sent to the collector whole.
func TestEndCutsTheErrorText(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	_, span := tp.Tracer("test").Start(context.Background(), "op")
	tracing.End(span, errors.New("boom: "+strings.Repeat("é", 1<<20)))
	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	st := ended[0].Status()
	if st.Code != codes.Error || len(st.Description) > tracing.MaxErrorText || !strings.HasPrefix(st.Description, "boom: é") || !utf8.ValidString(st.Description) {
		t.Errorf("status %v, %d bytes of text (valid UTF-8: %v), want Error, boom: ..., at most %d bytes",
			st.Code, len(st.Description), utf8.ValidString(st.Description), tracing.MaxErrorText)
	}
}
