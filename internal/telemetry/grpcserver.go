package telemetry

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/rpcconv"
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// rpcMetricsHandler is the gRPC server stats handler when no spans are
// exported: it records rpc.server.call.duration exactly as otelgrpc's server
// handler does (same scope, instrument, buckets and attributes: rpc.method,
// rpc.system.name, rpc.response.status_code, and error.type for the codes
// that are the server's fault), without otelgrpc's per-call work for spans
// nobody exports (a copy of the incoming metadata, a no-op span) and without
// building and hashing the attribute set of every call: the sets of each
// method and code are made once.
//
// A trace context (and baggage) a client propagates is still extracted into
// the call's context, as otelgrpc does, so that measurements keep their
// exemplars; the propagated fields are read one by one, not from a copy of
// all the metadata.
//
// It is only used with the default (stable) RPC semantic conventions: with
// OTEL_SEMCONV_STABILITY_OPT_IN asking for rpc/old or rpc/dup,
// GRPCServerHandler is otelgrpc's.
type rpcMetricsHandler struct {
	duration   metric.Float64Histogram
	propagator propagation.TextMapPropagator
	fields     []string // the keys propagator reads, in lower case

	methods sync.Map     // full method name → *rpcMethod
	known   atomic.Int32 // entries in methods
}

// maxCachedMethods bounds the methods whose attribute sets are kept. A
// method is kept only once a call of it ends at the handler: gRPC tags a
// call before it looks its method up and never ends one of a method it does
// not serve, so the names any client can send (before its token is checked)
// do not take the served methods' places.
const maxCachedMethods = 256

// rpcMethod holds the record options of one method, one per status code.
type rpcMethod struct {
	name   string
	attrs  []attribute.KeyValue // rpc.method (when the name is well formed), rpc.system.name
	byCode [numCodes]atomic.Pointer[metric.RecordOption]
}

// numCodes is the number of status codes gRPC defines (OK..Unauthenticated).
const numCodes = int(codes.Unauthenticated) + 1

type rpcMethodKey struct{}

// rpcMethodName tags a call of a method not kept (yet): HandleRPC looks it
// up, and keeps it, when the call ends.
type rpcMethodName string

func newRPCMetricsHandler(mp metric.MeterProvider, propagator propagation.TextMapPropagator) (*rpcMetricsHandler, error) {
	meter := mp.Meter(otelgrpc.ScopeName,
		metric.WithInstrumentationVersion(otelgrpc.Version),
		metric.WithSchemaURL(semconv.SchemaURL),
	)
	// The same boundaries otelgrpc passes.
	d, err := rpcconv.NewServerCallDuration(meter, metric.WithExplicitBucketBoundaries(
		0.005, 0.01, 0.025, 0.05, 0.075, 0.1,
		0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
	))
	if err != nil {
		return nil, err
	}
	h := &rpcMetricsHandler{duration: d.Inst(), propagator: propagator}
	for _, f := range propagator.Fields() {
		h.fields = append(h.fields, strings.ToLower(f))
	}
	return h, nil
}

func (h *rpcMetricsHandler) method(fullMethod string) *rpcMethod {
	if m, ok := h.methods.Load(fullMethod); ok {
		return m.(*rpcMethod)
	}
	// As otelgrpc's ParseFullMethod: rpc.method only for "/service/method".
	m := &rpcMethod{name: fullMethod}
	if name, ok := strings.CutPrefix(fullMethod, "/"); ok {
		m.attrs = append(m.attrs, semconv.RPCMethod(name))
	}
	m.attrs = append(m.attrs, semconv.RPCSystemNameGRPC)
	if h.known.Load() < maxCachedMethods {
		if prev, loaded := h.methods.LoadOrStore(fullMethod, m); loaded {
			return prev.(*rpcMethod)
		}
		h.known.Add(1)
	}
	return m
}

// option is the record option of a call of the method that ended with code.
func (m *rpcMethod) option(code codes.Code) metric.RecordOption {
	if int(code) < numCodes {
		if o := m.byCode[code].Load(); o != nil {
			return *o
		}
	}
	attrs := make([]attribute.KeyValue, 0, len(m.attrs)+2)
	attrs = append(attrs, m.attrs...)
	attrs = append(attrs, semconv.RPCResponseStatusCode(canonicalCode(code)))
	if serverFault(code) {
		attrs = append(attrs, semconv.ErrorTypeKey.String(canonicalCode(code)))
	}
	o := metric.RecordOption(metric.WithAttributeSet(attribute.NewSet(attrs...)))
	if int(code) < numCodes {
		m.byCode[code].Store(&o)
	}
	return o
}

// TagRPC extracts a propagated trace context and notes the call's method
// for HandleRPC: its kept options, or else its name.
func (h *rpcMetricsHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	for _, f := range h.fields {
		if metadata.ValueFromIncomingContext(ctx, f) != nil {
			// Only then: the carrier costs an allocation.
			ctx = h.propagator.Extract(ctx, incomingCarrier{ctx})
			break
		}
	}
	if m, ok := h.methods.Load(info.FullMethodName); ok {
		return context.WithValue(ctx, rpcMethodKey{}, m)
	}
	return context.WithValue(ctx, rpcMethodKey{}, rpcMethodName(info.FullMethodName))
}

// incomingCarrier reads the incoming metadata of a call for a propagator,
// one key at a time (as otelgrpc's carrier, the first value of a key, keys
// in lower case), without copying all of it.
type incomingCarrier struct{ ctx context.Context }

func (c incomingCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, strings.ToLower(key)); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (incomingCarrier) Set(string, string) {}

func (c incomingCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	return slices.Collect(maps.Keys(md))
}

// HandleRPC records the duration of a call when it ends.
func (h *rpcMetricsHandler) HandleRPC(ctx context.Context, rs stats.RPCStats) {
	end, ok := rs.(*stats.End)
	if !ok {
		return
	}
	var m *rpcMethod
	switch v := ctx.Value(rpcMethodKey{}).(type) {
	case *rpcMethod:
		m = v
	case rpcMethodName:
		m = h.method(string(v))
	default:
		return // not tagged by this handler
	}
	code := codes.OK
	if end.Error != nil {
		s, _ := status.FromError(end.Error)
		code = s.Code()
	}
	h.duration.Record(ctx, float64(end.EndTime.Sub(end.BeginTime))/float64(time.Second), m.option(code))
}

// TagConn and HandleConn: nothing is recorded per connection.
func (*rpcMetricsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (*rpcMetricsHandler) HandleConn(context.Context, stats.ConnStats) {}

// serverFault: the codes otelgrpc's server handler counts as errors of the
// server (and records error.type for).
func serverFault(c codes.Code) bool {
	switch c {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}

// canonicalCode is the name otelgrpc gives a status code: google.rpc.Code's
// name, or CODE(n) for a code it does not define.
func canonicalCode(c codes.Code) string {
	if c <= codes.Unauthenticated {
		return rpccode.Code_name[int32(c)]
	}
	return "CODE(" + strconv.FormatUint(uint64(c), 10) + ")"
}
