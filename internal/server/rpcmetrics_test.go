package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/telemetry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestCallsOfMethodsNotServedAddNoMetricsSeries: any client can call
// methods by names of its choosing. gRPC answers a method it does not serve
// UNIMPLEMENTED without ending the call at the stats handlers, so no
// duration is recorded for it; were each recorded under its own rpc.method,
// a few thousand names would fill the instrument's 2,000 label sets and the
// series of a real method's first failure would have no labels.
func TestCallsOfMethodsNotServedAddNoMetricsSeries(t *testing.T) {
	for _, env := range []map[string]string{
		{}, // the server's own handler
		{"OTEL_SEMCONV_STABILITY_OPT_IN": "rpc/old"}, // otelgrpc's
	} {
		t.Run(fmt.Sprint(env), func(t *testing.T) {
			tel, err := telemetry.Setup(context.Background(), "test", func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			hub := &recordingHub{err: domain.ErrUnavailable}
			srv, _ := NewGRPCServer(hub, slog.New(slog.DiscardHandler), WithStatsHandler(tel.GRPCServerHandler()))
			conn := serveConn(t, srv)
			ctx := ctxT(t)
			const bogus = 2100 // more than the SDK's 2,000 label sets per instrument
			for i := range bogus {
				err := conn.Invoke(ctx, fmt.Sprintf("/no.Such%d/Method%d", i, i), &messagehubv1.DequeueRequest{}, &messagehubv1.DequeueResponse{})
				if status.Code(err) != codes.Unimplemented {
					t.Fatalf("bogus call %d: %v", i, err)
				}
			}
			_, err = messagehubv1.NewMessageHubClient(conn).Save(ctx, &messagehubv1.SaveRequest{Notifications: notifications(1)})
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("Save: %v", err)
			}

			// The server's stats handler ends a call after its answer is
			// sent, so the Save's series may come after the client has its
			// answer: scrape until it is there (or the bound is up).
			var counts []string
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				counts = durationCounts(tel.MetricsHandler())
				if slices.ContainsFunc(counts, func(l string) bool { return strings.Contains(l, "MessageHub/Save") }) || time.Now().After(deadline) {
					break
				}
			}
			if len(counts) != 1 || !strings.Contains(counts[0], `rpc_method="messagehub.v1.MessageHub/Save"`) || !strings.Contains(counts[0], `rpc_response_status_code="UNAVAILABLE"`) {
				t.Errorf("series of rpc_server_call_duration_seconds: %q, want only Save's UNAVAILABLE", counts)
			}
		})
	}
}

// durationCounts scrapes h and returns the count lines of
// rpc_server_call_duration_seconds, one per series.
func durationCounts(h http.Handler) []string {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	var counts []string
	for l := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(l, "rpc_server_call_duration_seconds_count") {
			counts = append(counts, l)
		}
	}
	return counts
}
