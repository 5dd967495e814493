package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
)

// TestTheSpanExportersFailuresAreLoggedAsJSON: OpenTelemetry reports a
// failed export of spans (every batch while the collector refuses them)
// through its own error handler, which writes plain text to stderr unless
// told otherwise. Every line of the hub's log is JSON, those included.
func TestTheSpanExportersFailuresAreLoggedAsJSON(t *testing.T) {
	exports := make(chan struct{}, 16)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exports <- struct{}{}
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "refused", http.StatusBadRequest) // not retried by the exporter
	}))
	defer collector.Close()
	// The hub's process inherits them.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	h := startHub(t)

	// The batch processor exports from one goroutine, handling each
	// export's error before the next: a second export means the first's
	// error was handled.
	for range 2 {
		save(t, h, notification(newID(), messagehubv1.Domain_DOMAIN_TIME_SERIES, "TimeSeries"))
		select {
		case <-exports:
		case <-time.After(callTimeout): // against a hang only
			t.Fatalf("no export reached the collector\n%s", h.log())
		}
	}
	if _, err := h.terminate(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, h.log())
	}
	exported := false
	for line := range strings.SplitSeq(strings.TrimSpace(h.log()), "\n") {
		var l struct {
			Component string `json:"component"`
			Error     string `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Errorf("a line that is not JSON: %s", line)
			continue
		}
		exported = exported || l.Component == "otel" && strings.Contains(l.Error, "400")
	}
	if !exported {
		t.Errorf("no line of component otel says the export was refused:\n%s", h.log())
	}
}
