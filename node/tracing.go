package node

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/rivet-go/rivet/internal/buildinfo"
	"github.com/rivet-go/rivet/internal/tracing"
)

// tracingFlushTimeout bounds the flush of the last spans as the node
// stops, and, unless OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT says otherwise,
// each export: an export in flight as the node stops, to a collector
// that does not answer, would otherwise go on after Stop for the
// exporter's default 10 s. A variable for tests.
var tracingFlushTimeout = 5 * time.Second

// serviceName is the service the node's spans are of, unless
// OTEL_SERVICE_NAME says otherwise.
const serviceName = "rivet-node"

// startTracing returns the TracerProvider of the node's spans (nil: tracing
// is off), with, if the node made it (Config.OTLPEndpoint), its shutdown,
// which flushes the spans it still holds. The exporter dials lazily: a
// collector that is down costs the spans it would have taken (the batch's
// queue is bounded, and drops), never the node's start or a call.
func startTracing(ctx context.Context, cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	if cfg.TracerProvider != nil {
		if cfg.OTLPEndpoint != "" {
			// Not refused: OTLPEndpoint may come from the environment
			// (ParseFlags), whose variables the program's own exporter
			// reads too.
			cfg.Logger.Warn("tracing: Config.TracerProvider set: the node's spans go to it, not to the OTLP endpoint", zap.String("otlp_endpoint", cfg.OTLPEndpoint))
		}
		return cfg.TracerProvider, nil, nil
	}
	if cfg.OTLPEndpoint == "" {
		return nil, nil, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(cfg.OTLPEndpoint)}
	if !strings.Contains(cfg.OTLPEndpoint, "://") {
		// host:port, as the node's other addresses are given: a
		// collector beside the node (a sidecar, an agent on the host)
		// is the usual setup, over plaintext.
		opts = []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.OTLPEndpoint), otlptracegrpc.WithInsecure()}
	}
	if os.Getenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TIMEOUT") == "" {
		opts = append(opts, otlptracegrpc.WithTimeout(tracingFlushTimeout))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("node: OTLP exporter (--otlp-endpoint %s): %w", cfg.OTLPEndpoint, err)
	}
	// The environment's (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES)
	// after the node's own: a later detector's attributes win.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(
			attribute.String("service.name", serviceName),
			attribute.String("service.instance.id", cfg.NodeID),
			attribute.String("service.version", buildinfo.String()),
			tracing.NodeID.String(cfg.NodeID),
		),
		resource.WithFromEnv(),
	)
	if err != nil {
		// A malformed OTEL_RESOURCE_ATTRIBUTES (a pair without "="):
		// the spans go with what parsed, rather than fail the node's
		// start for a label of its telemetry.
		cfg.Logger.Warn("tracing: the spans' resource is partial", zap.Error(err))
		if res == nil {
			res = resource.Default()
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
