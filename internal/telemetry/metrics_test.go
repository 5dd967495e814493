package telemetry

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Each operation's durations are counted under its own name, the first
// time and every time after (when its attributes are kept).
func TestStoreOperationsAreCountedByOperation(t *testing.T) {
	tel, err := Setup(context.Background(), "test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		tel.Metrics.RecordStoreOperation(ctx, "commit_saves", time.Millisecond, "")
	}
	tel.Metrics.RecordStoreOperation(ctx, "load_recipient", 2*time.Millisecond, "")
	tel.Metrics.RecordStoreOperation(ctx, "load_recipient", time.Millisecond, "conflict")
	rec := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`messagehub_store_operation_duration_seconds_count{operation="commit_saves"} 3`,
		`messagehub_store_operation_duration_seconds_sum{operation="commit_saves"} 0.003`,
		`messagehub_store_operation_duration_seconds_count{operation="load_recipient"} 2`,
		`messagehub_store_operation_errors_total{error="conflict",operation="load_recipient"} 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
