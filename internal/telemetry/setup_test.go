package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/energydatahub/messagehub/internal/telemetry"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestTracingIsOnOnlyWithAnOTLPEndpoint(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"no endpoint: off", nil, false},
		{"an endpoint: on (http/protobuf)", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{"a traces endpoint over gRPC: on", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, true},
		{"the SDK disabled: off", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{"the traces exporter none: off", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tel, err := telemetry.Setup(context.Background(), "test", envOf(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			defer func() {
				if err := tel.Shutdown(ctx); err != nil {
					t.Errorf("Shutdown: %v", err)
				}
			}()
			if got := tel.Tracing(); got != tt.want {
				t.Errorf("Tracing() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAnUnknownOTLPProtocolIsAnError(t *testing.T) {
	_, err := telemetry.Setup(context.Background(), "test", envOf(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon",
	}))
	if err == nil || !strings.Contains(err.Error(), "carrier-pigeon") {
		t.Fatalf("Setup = %v, want an error naming the protocol", err)
	}
}

func TestTheMetricsHandlerExposesTheDomainMetrics(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "test", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	ctx := context.Background()
	tel.Metrics.RecordSave(ctx, 3, 1)
	tel.Metrics.RecordPeek(ctx, true)
	tel.Metrics.RecordBundleCreated(ctx, 3, 30)
	tel.Metrics.RecordBundleDequeued(ctx, 3)
	tel.Metrics.RecordStoreOperation(ctx, "read_drawer", time.Millisecond, "conflict")
	tel.Metrics.RecordRequest(ctx, "read_recipient", 2.5, 200)

	srv := httptest.NewServer(tel.MetricsHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"messagehub_notifications_saved_total 3",
		"messagehub_notifications_duplicates_total 1",
		`messagehub_peeks_total{outcome="bundle"} 1`,
		"messagehub_bundles_peeked_total 1",
		"messagehub_bundle_notifications_sum 3",
		"messagehub_bundle_weight_sum 30",
		"messagehub_notifications_dequeued_total 3",
		`messagehub_store_operation_errors_total{error="conflict",operation="read_drawer"} 1`,
		`messagehub_store_operation_duration_seconds_count{operation="read_drawer"} 1`,
		`messagehub_store_requests_total{operation="read_recipient",status_code="200"} 1`,
		`messagehub_store_request_charge_total{operation="read_recipient"} 2.5`,
		"go_goroutines",
		`target_info{`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// The OTLP exporters take OTEL_EXPORTER_OTLP_HEADERS (and _TRACES_HEADERS)
// from the environment and, of a pair they cannot read, log the pair whole,
// value and all, as plain text, then export without it: a mistyped
// "Authorization: Bearer …" (HTTP's colon for the variable's '=') put the
// token in the log and the spans were refused. The hub refuses such a
// variable at start, naming it and the pair's place, never its value.
func TestAnOTLPHeadersVariableItCannotReadStopsTheStartWithoutShowingItsValues(t *testing.T) {
	const secret = "s3cr3t-t0ken"
	for _, tc := range []struct{ name, value, want string }{
		{"OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Bearer " + secret, "pair 1"},
		{"OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=a,api-key=" + secret + "%zz", `"api-key"`},
		{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api key=" + secret, "pair 1"},
		{"OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Bearer " + secret + "==", "pair 1"},
		{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=" + secret + ",", "pair 2"},
	} {
		t.Run(tc.name+" "+tc.want, func(t *testing.T) {
			// The exporters read the process's environment themselves.
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
			t.Setenv(tc.name, tc.value)
			tel, err := telemetry.Setup(context.Background(), "test", os.Getenv)
			if err == nil {
				_ = tel.Shutdown(context.Background())
				t.Fatalf("Setup took %s=%q", tc.name, tc.value)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.name) || !strings.Contains(msg, tc.want) || strings.Contains(msg, secret) {
				t.Errorf("Setup = %q, want an error naming %s and %s, without the value", msg, tc.name, tc.want)
			}
		})
	}
	// What the exporters take is taken: pairs with URL-encoded values.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20"+secret+", x-tenant = a")
	tel, err := telemetry.Setup(context.Background(), "test", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	_ = tel.Shutdown(context.Background())
}
