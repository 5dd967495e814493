package app_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/metadata"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/server"
)

// logLines is a JSON log the hub writes to while a test reads it.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// calls are the access log's lines of method.
func (l *logLines) calls(t *testing.T, method string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %s", line)
		}
		if m["msg"] == "call" && m["method"] == method {
			out = append(out, m)
		}
	}
	return out
}

// A call's access log line names its recipient and bundle, and its client:
// for a call through the HTTP gateway the HTTP client, which a header of the
// client's cannot change, and for a gRPC call the gRPC client, whatever
// metadata it sends.
func TestTheAccessLogNamesTheClientRecipientAndBundle(t *testing.T) {
	var logs logLines
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := start(t, cfg)
	recipient := uuid.NewString()
	if _, err := r.client.Save(callContext(t), &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(recipient)}}); err != nil {
		t.Fatal(err)
	}
	// Through the gateway, with a header that would name another client.
	req, err := http.NewRequestWithContext(callContext(t), http.MethodGet, "http://"+r.app.HTTPAddr()+"/v1/peek?recipient="+recipient, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Grpc-Metadata-"+server.ForwardedClientKey, "203.0.113.9:1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	bundleID := resp.Header.Get("MessageId")
	if resp.StatusCode != http.StatusOK || bundleID == "" {
		t.Fatalf("GET /v1/peek: %d, bundle %q", resp.StatusCode, bundleID)
	}
	// Over gRPC, naming another client in the metadata; a stream too.
	ctx := metadata.AppendToOutgoingContext(callContext(t), server.ForwardedClientKey, "203.0.113.9:2")
	stream, err := r.client.PeekContent(ctx, &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	if first, err := stream.Recv(); err != nil || first.GetBundle().GetId() != bundleID {
		t.Fatalf("PeekContent: %v %v; want the pending bundle", first.GetBundle(), err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}
	if _, err := r.client.Dequeue(ctx, &messagehubv1.DequeueRequest{Recipient: recipient, BundleId: bundleID}); err != nil {
		t.Fatal(err)
	}
	if err := r.closeWithin(t); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		method string
		bundle string
	}{
		{messagehubv1.MessageHub_Peek_FullMethodName, bundleID},
		{messagehubv1.MessageHub_PeekContent_FullMethodName, bundleID},
		{messagehubv1.MessageHub_Dequeue_FullMethodName, bundleID},
	} {
		lines := logs.calls(t, tc.method)
		if len(lines) != 1 {
			t.Fatalf("%d access log lines of %s; want 1", len(lines), tc.method)
		}
		line := lines[0]
		client, _ := line["client"].(string)
		if !strings.HasPrefix(client, "127.0.0.1:") {
			t.Errorf("%s logged with client %q; want the caller's loopback address", tc.method, client)
		}
		if line["recipient"] != recipient || line["bundle_id"] != tc.bundle {
			t.Errorf("%s logged with recipient %v and bundle %v; want %s and %s", tc.method, line["recipient"], line["bundle_id"], recipient, tc.bundle)
		}
	}
	save := logs.calls(t, messagehubv1.MessageHub_Save_FullMethodName)
	if len(save) != 1 || save[0]["notifications"] != float64(1) {
		t.Errorf("Save's line %v; want one, with its 1 notification", save)
	}
}
