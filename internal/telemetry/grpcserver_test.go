package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// rpcLines is the part of the exposition about gRPC server calls.
func rpcLines(t *testing.T, tel *Telemetry) []string {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	var lines []string
	for l := range strings.SplitSeq(string(body), "\n") {
		if strings.Contains(l, "rpc_server") {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestTheServerHandlerWithoutTracingRecordsWhatOtelgrpcRecords(t *testing.T) {
	noEnv := func(string) string { return "" }
	otel, err := Setup(context.Background(), "test", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	own, err := Setup(context.Background(), "test", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	theirs, ours := otel.otelGRPCServerHandler(), own.GRPCServerHandler()
	if _, ok := ours.(*rpcMetricsHandler); !ok {
		t.Fatalf("without tracing the server handler is a %T", ours)
	}
	begin := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	calls := []struct {
		method string
		err    error
		took   time.Duration
	}{
		{"/messagehub.v1.MessageHub/Save", nil, 3 * time.Millisecond},
		{"/messagehub.v1.MessageHub/Save", nil, 30 * time.Millisecond},
		{"/messagehub.v1.MessageHub/Save", status.Error(codes.InvalidArgument, "no"), time.Millisecond},
		{"/messagehub.v1.MessageHub/Save", status.Error(codes.Unavailable, "down"), 2 * time.Second},
		{"/messagehub.v1.MessageHub/Peek", nil, 7 * time.Millisecond},
		{"/messagehub.v1.MessageHub/Peek", status.Error(codes.Internal, "internal error"), time.Millisecond},
		{"/messagehub.v1.MessageHub/Peek", status.Error(codes.DeadlineExceeded, "late"), 11 * time.Second},
		{"/messagehub.v1.MessageHub/Dequeue", status.Error(codes.Canceled, "gone"), time.Millisecond},
		{"/messagehub.v1.MessageHub/Dequeue", status.Error(codes.Code(20), "odd"), time.Millisecond},
		{"/messagehub.v1.MessageHub/Dequeue", errors.New("not a status"), time.Millisecond},
		{"/grpc.health.v1.Health/Check", status.Error(codes.NotFound, "unknown service"), time.Microsecond},
		{"/no.Such/Method", status.Error(codes.Unimplemented, "unknown method"), time.Microsecond},
		{"malformed", status.Error(codes.Unimplemented, "malformed method name"), time.Microsecond},
	}
	for _, h := range []stats.Handler{theirs, ours} {
		for _, c := range calls {
			ctx := h.TagRPC(context.Background(), &stats.RPCTagInfo{FullMethodName: c.method})
			h.HandleRPC(ctx, &stats.Begin{BeginTime: begin})
			h.HandleRPC(ctx, &stats.InHeader{FullMethod: c.method})
			h.HandleRPC(ctx, &stats.InPayload{})
			h.HandleRPC(ctx, &stats.OutHeader{})
			h.HandleRPC(ctx, &stats.OutPayload{})
			h.HandleRPC(ctx, &stats.OutTrailer{})
			h.HandleRPC(ctx, &stats.End{BeginTime: begin, EndTime: begin.Add(c.took), Error: c.err})
		}
	}
	want, got := rpcLines(t, otel), rpcLines(t, own)
	if len(want) < 10 {
		t.Fatalf("otelgrpc's handler recorded nothing recognisable:\n%s", strings.Join(want, "\n"))
	}
	if !slices.Equal(got, want) {
		t.Errorf("the exposition differs from otelgrpc's\ngot:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestOtelgrpcServesTheServerWithTracingOrOlderConventions(t *testing.T) {
	for _, env := range []map[string]string{
		{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
		{"OTEL_SEMCONV_STABILITY_OPT_IN": "http, rpc/dup"},
		{"OTEL_SEMCONV_STABILITY_OPT_IN": "rpc/old"},
	} {
		tel, err := Setup(context.Background(), "test", func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		if _, own := tel.GRPCServerHandler().(*rpcMetricsHandler); own {
			t.Errorf("with %v the server handler is not otelgrpc's", env)
		}
		_ = tel.Shutdown(context.Background())
	}
}

// A client's trace context and baggage reach the call's context as with
// otelgrpc, so that its measurements keep their exemplars.
func TestTheServerHandlerWithoutTracingExtractsWhatOtelgrpcExtracts(t *testing.T) {
	tel, err := Setup(context.Background(), "test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	theirs, ours := tel.otelGRPCServerHandler(), tel.GRPCServerHandler()
	for _, md := range []metadata.MD{
		nil,
		metadata.Pairs("user-agent", "grpc-go"),
		metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate", "k=v", "baggage", "tenant=a,x=1"),
		metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
		metadata.Pairs("traceparent", "not a trace parent", "baggage", "only=baggage"),
	} {
		in := context.Background()
		if md != nil {
			in = metadata.NewIncomingContext(in, md)
		}
		info := &stats.RPCTagInfo{FullMethodName: "/messagehub.v1.MessageHub/Save"}
		want, got := theirs.TagRPC(in, info), ours.TagRPC(in, info)
		// (Without a valid one, otelgrpc's is an empty one marked remote:
		// the same to everything that reads it.)
		w, g := trace.SpanContextFromContext(want), trace.SpanContextFromContext(got)
		if g.IsValid() != w.IsValid() || w.IsValid() && !g.Equal(w) {
			t.Errorf("%v: span context %v, otelgrpc's %v", md, g, w)
		}
		if w, g := members(baggage.FromContext(want)), members(baggage.FromContext(got)); !slices.Equal(g, w) {
			t.Errorf("%v: baggage %q, otelgrpc's %q", md, g, w)
		}
	}
}

// members is the baggage's members in order (its String's order varies).
func members(b baggage.Baggage) []string {
	var out []string
	for _, m := range b.Members() {
		out = append(out, m.String())
	}
	slices.Sort(out)
	return out
}

// The status code names are otelgrpc's (its canonicalString): the
// upper-case names of google.rpc.Code, and CODE(n) beyond them.
func TestStatusCodesAreNamedAsOtelgrpcNamesThem(t *testing.T) {
	want := []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
		"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
		"OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED", "CODE(17)"}
	for c, name := range want {
		if got := canonicalCode(codes.Code(c)); got != name {
			t.Errorf("canonicalCode(%d) = %q, want %q", c, got, name)
		}
	}
	if got := canonicalCode(codes.Code(1 << 31)); got != "CODE(2147483648)" {
		t.Errorf("canonicalCode(1<<31) = %q, want CODE(2147483648)", got)
	}
}

// otelGRPCServerHandler is otelgrpc's server handler with the telemetry's
// providers, which GRPCServerHandler returns when spans are exported.
func (t *Telemetry) otelGRPCServerHandler() stats.Handler {
	return otelgrpc.NewServerHandler(t.otelgrpcOptions()...)
}

// TestMethodsNotServedDoNotTakeTheServedMethodsPlaceInTheCache: gRPC tags a
// call with its method before it looks the method up, and answers one it
// does not serve UNIMPLEMENTED without ending the call at the handler. Any
// client can send such calls, under names of its choosing and before its
// token is checked; they must not use up the methods whose record options
// are kept, or a served method first called after them would have its
// attribute set built again at every call, which the handler is there to
// avoid.
func TestMethodsNotServedDoNotTakeTheServedMethodsPlaceInTheCache(t *testing.T) {
	const save = "/messagehub.v1.MessageHub/Save"
	begin := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	call := func(h stats.Handler, method string) {
		ctx := h.TagRPC(context.Background(), &stats.RPCTagInfo{FullMethodName: method})
		h.HandleRPC(ctx, &stats.End{BeginTime: begin, EndTime: begin.Add(time.Millisecond)})
	}
	allocs := func(bogus int) float64 {
		tel, err := Setup(context.Background(), "test", func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		h := tel.GRPCServerHandler()
		for i := range bogus {
			// Tagged, never ended: as gRPC handles a method it does not serve.
			h.TagRPC(context.Background(), &stats.RPCTagInfo{FullMethodName: fmt.Sprintf("/no.Such%d/Method", i)})
		}
		call(h, save) // the first call of a method may build its options
		return testing.AllocsPerRun(100, func() { call(h, save) })
	}
	if fresh, flooded := allocs(0), allocs(2*maxCachedMethods); flooded != fresh {
		t.Errorf("a Save costs %v allocations after %d calls of methods not served, %v without them", flooded, 2*maxCachedMethods, fresh)
	}
}
