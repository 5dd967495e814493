package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/grpc/stats"
)

// ServiceName is the default service.name of MessageHub's telemetry
// (OTEL_SERVICE_NAME overrides it).
const ServiceName = "messagehub"

// Telemetry holds the providers of one process: a meter provider read by the
// Prometheus exporter into its own registry, and a tracer provider that
// exports by OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set and is a no-op otherwise.
// Nothing is installed globally: the providers are passed to what uses them.
type Telemetry struct {
	Metrics *Metrics

	registry       *prometheus.Registry
	meterProvider  *sdkmetric.MeterProvider
	tracerProvider trace.TracerProvider
	propagator     propagation.TextMapPropagator
	shutdownTraces func(context.Context) error
	tracing        bool
	oldRPCSemconv  bool // OTEL_SEMCONV_STABILITY_OPT_IN asks otelgrpc for rpc/old or rpc/dup
}

// Setup creates the providers. getenv reads the standard OTEL_* variables
// that decide about tracing (the exporters and the SDK read the rest of them
// themselves); version becomes service.version.
func Setup(ctx context.Context, version string, getenv func(string) string) (*Telemetry, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", ServiceName),
			attribute.String("service.version", version),
		),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	exporter, err := promexporter.New(promexporter.WithRegisterer(reg), promexporter.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
	metrics, err := NewMetrics(mp)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("metrics: %w", err), mp.Shutdown(ctx))
	}

	t := &Telemetry{
		Metrics:        metrics,
		registry:       reg,
		meterProvider:  mp,
		tracerProvider: tracenoop.NewTracerProvider(),
		propagator:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		shutdownTraces: func(context.Context) error { return nil },
		oldRPCSemconv:  oldRPCSemconv(getenv),
	}
	if tracingWanted(getenv) {
		exp, err := newSpanExporter(ctx, getenv)
		if err != nil {
			return nil, errors.Join(err, mp.Shutdown(ctx))
		}
		// The SDK reads OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_* itself.
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.tracerProvider, t.shutdownTraces, t.tracing = tp, tp.Shutdown, true
	}
	return t, nil
}

// tracingWanted: an OTLP endpoint is configured and neither the SDK nor the
// traces exporter is switched off.
func tracingWanted(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// oldRPCSemconv: OTEL_SEMCONV_STABILITY_OPT_IN names rpc/old or rpc/dup,
// which otelgrpc reads (from the environment) to record the older RPC
// metrics instead of or besides the stable ones.
func oldRPCSemconv(getenv func(string) string) bool {
	for p := range strings.SplitSeq(getenv("OTEL_SEMCONV_STABILITY_OPT_IN"), ",") {
		if p = strings.TrimSpace(p); p == "rpc/old" || p == "rpc/dup" {
			return true
		}
	}
	return false
}

// newSpanExporter picks the OTLP transport from OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL:
// grpc, or http/protobuf (the specification's default).
func newSpanExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := checkOTLPHeaders(getenv(name)); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	protocol := cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("OTLP protocol %q is not supported (grpc or http/protobuf)", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	return exp, nil
}

// checkOTLPHeaders reads an OTLP headers variable as the exporters do
// (comma-separated key=value pairs, each value URL-encoded), which, of a
// pair they cannot read, log it whole, its value and all (an "Authorization:
// Bearer …" typed with HTTP's colon puts the token in the log), and export
// without it. The error names the pair by its place or key, never its value.
func checkOTLPHeaders(v string) error {
	if v == "" {
		return nil
	}
	for i, pair := range strings.Split(v, ",") {
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return fmt.Errorf("pair %d is not key=value (values are not shown)", i+1)
		}
		key = strings.TrimSpace(key)
		if !httpguts.ValidHeaderFieldName(key) {
			// Not quoted: "Authorization: Bearer <token ending in =>" is
			// such a name.
			return fmt.Errorf("pair %d: the name before its '=' is not a header name (values are not shown)", i+1)
		}
		if _, err := url.PathUnescape(value); err != nil {
			return fmt.Errorf("pair %d: the value of %q is not URL-encoded (a %% not followed by two hex digits)", i+1, key)
		}
	}
	return nil
}

// RegisterBuildInfo exposes messagehub_build_info{version,revision,go_version} = 1,
// so dashboards can tell which build each instance runs.
func (t *Telemetry) RegisterBuildInfo(version, revision, goVersion string) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "messagehub_build_info",
		Help: "The build of this instance (always 1).",
	}, []string{"version", "revision", "go_version"})
	g.WithLabelValues(version, revision, goVersion).Set(1)
	return t.registry.Register(g)
}

// Tracing reports whether spans are exported.
func (t *Telemetry) Tracing() bool { return t.tracing }

// MetricsHandler serves the Prometheus exposition of every metric.
func (t *Telemetry) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(t.registry, promhttp.HandlerOpts{Registry: t.registry})
}

// GRPCServerHandler is the stats handler for the gRPC server: otelgrpc's
// when spans are exported (or older RPC conventions are asked for), and
// otherwise one that records the same rpc.server.call.duration for less
// (see rpcMetricsHandler).
func (t *Telemetry) GRPCServerHandler() stats.Handler {
	if !t.tracing && !t.oldRPCSemconv {
		if h, err := newRPCMetricsHandler(t.meterProvider, t.propagator); err == nil {
			return h
		}
		// otelgrpc reports the same error through otel.Handle and goes on
		// without the instrument.
	}
	return otelgrpc.NewServerHandler(t.otelgrpcOptions()...)
}

// GRPCClientHandler is the otelgrpc stats handler for the gateway's
// connection to the gRPC server, which carries the trace context across.
func (t *Telemetry) GRPCClientHandler() stats.Handler {
	return otelgrpc.NewClientHandler(t.otelgrpcOptions()...)
}

func (t *Telemetry) otelgrpcOptions() []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithMeterProvider(t.meterProvider), otelgrpc.WithTracerProvider(t.tracerProvider), otelgrpc.WithPropagators(t.propagator),
	}
}

// HTTPHandler instruments the HTTP server listening on addr. Scrapes and
// health probes are left out: they are frequent and say nothing about the
// service's load. The server is named by addr, not by each request's Host
// header, which is the client's to choose: every host and port a client
// sent would be a series of the HTTP metrics of its own, without bound.
func (t *Telemetry) HTTPHandler(h http.Handler, addr string) http.Handler {
	return otelhttp.NewHandler(h, "http",
		otelhttp.WithServerName(addr),
		otelhttp.WithMeterProvider(t.meterProvider),
		otelhttp.WithTracerProvider(t.tracerProvider),
		otelhttp.WithPropagators(t.propagator),
		otelhttp.WithFilter(func(r *http.Request) bool {
			return r.URL.Path != "/metrics" && r.URL.Path != "/healthz"
		}),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return r.Method + " " + routeOf(r.URL.Path)
		}),
	)
}

// routeOf keeps span names few: a path with a bundle id in it is named by
// its route.
func routeOf(path string) string {
	if strings.HasPrefix(path, "/v1/dequeue/") {
		return "/v1/dequeue/{bundleId}"
	}
	return path
}

// Shutdown flushes pending spans and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	return errors.Join(t.shutdownTraces(ctx), t.meterProvider.Shutdown(ctx))
}
