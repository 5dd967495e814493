package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/energydatahub/messagehub/internal/admin"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/gateway"
	"github.com/energydatahub/messagehub/internal/hub"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/internal/store"
	"github.com/energydatahub/messagehub/internal/store/pebble"
)

// serveAdmin serves the gateway over the gRPC server (MessageHub and Admin)
// of a hub on a pebble store in a temp dir.
func serveAdmin(t *testing.T, opts hub.Options) (*httptest.Server, *hub.Hub) {
	t.Helper()
	st, err := pebble.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return serveAdminOf(t, st, opts)
}

// serveAdminOf is serveAdmin of a hub on st.
func serveAdminOf(t *testing.T, st store.Store, opts hub.Options) (*httptest.Server, *hub.Hub) {
	t.Helper()
	h := hub.New(st, opts, nil)
	t.Cleanup(h.Close)
	srv, hs := server.NewGRPCServer(h, slog.New(slog.DiscardHandler))
	admin.Register(srv, h)
	server.SetServing(hs, true)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///in-process", append(gateway.InProcessDialOptions(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	handler, err := gateway.New(context.Background(), conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(handler)
	t.Cleanup(web.Close)
	return web, h
}

// The Admin routes are served under /admin/v1, with the path's recipient
// and the query's group, and answer JSON; they peek nothing.
func TestAdminRoutes(t *testing.T) {
	web, h := serveAdmin(t, hub.Options{})

	recipient, id := uuid.NewString(), uuid.NewString()
	if _, err := h.Save(context.Background(), []domain.Notification{{ID: id, Recipient: recipient, Origin: domain.OriginAggregations,
		ContentType: "rsm-014", DocumentType: "doc", SupportsBundling: true, Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	get := func(path string, into any) int {
		t.Helper()
		resp, err := http.Get(web.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, into); err != nil {
				t.Fatalf("GET %s: %v: %s", path, err, body)
			}
		}
		return resp.StatusCode
	}

	var backlog struct {
		Cabinets []struct {
			Domain      string `json:"domain"`
			ContentType string `json:"contentType"`
			Waiting     string `json:"waiting"` // int64 is a JSON string
		} `json:"cabinets"`
		PendingBundles []any `json:"pendingBundles"`
	}
	if code := get("/admin/v1/recipients/"+recipient+"/backlog", &backlog); code != http.StatusOK {
		t.Fatalf("backlog: %d", code)
	}
	if len(backlog.Cabinets) != 1 || backlog.Cabinets[0].Domain != "DOMAIN_AGGREGATIONS" || backlog.Cabinets[0].Waiting != "1" || len(backlog.PendingBundles) != 0 {
		t.Fatalf("backlog: %+v", backlog)
	}

	var preview struct {
		Bundle *struct {
			Pending         bool     `json:"pending"`
			NotificationIDs []string `json:"notificationIds"`
		} `json:"bundle"`
	}
	if code := get("/admin/v1/recipients/"+recipient+"/next-bundle?group=PEEK_GROUP_AGGREGATIONS", &preview); code != http.StatusOK {
		t.Fatalf("next-bundle: %d", code)
	}
	if preview.Bundle == nil || preview.Bundle.Pending || len(preview.Bundle.NotificationIDs) != 1 || preview.Bundle.NotificationIDs[0] != id {
		t.Fatalf("next-bundle: %+v", preview.Bundle)
	}

	var trace struct {
		State string `json:"state"`
	}
	if code := get("/admin/v1/recipients/"+recipient+"/notifications/"+id, &trace); code != http.StatusOK || trace.State != "NOTIFICATION_STATE_WAITING" {
		t.Fatalf("trace: %d, %+v", code, trace)
	}
	if code := get("/admin/v1/recipients/"+recipient+"/next-bundle?grop=x", &preview); code != http.StatusBadRequest {
		t.Fatalf("an unknown query parameter: %d", code)
	}
	if code := get("/admin/v1/recipients/not-a-uuid/backlog", &backlog); code != http.StatusBadRequest {
		t.Fatalf("a recipient that is no UUID: %d", code)
	}
	resp, err := http.Post(web.URL+"/admin/v1/recipients/"+recipient+"/backlog", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST to an admin route: %d", resp.StatusCode)
	}
	// Nothing was peeked.
	if b, err := h.Backlog(context.Background(), recipient); err != nil || len(b.Pending) != 0 {
		t.Fatalf("pending after the admin routes: %+v, %v", b.Pending, err)
	}
}
