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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

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

// lines are the lines of the log that keep holds for.
func (l *logLines) lines(t *testing.T, keep func(map[string]any) bool) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %s", line)
		}
		if keep(m) {
			out = append(out, m)
		}
	}
	return out
}

// calls are the access log's lines of method.
func (l *logLines) calls(t *testing.T, method string) []map[string]any {
	t.Helper()
	return l.lines(t, func(m map[string]any) bool { return m["msg"] == "call" && m["method"] == method })
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

// The access log names a call's recipient and bundle id as its request
// gives them, which may be anything up to the message limit: a line holds a
// bounded piece of each, so that one call cannot make the hub format and
// write a line of tens of MiB (six times its bytes once JSON-escaped).
func TestTheAccessLogHoldsABoundedPieceOfARequestsValues(t *testing.T) {
	var logs logLines
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := start(t, cfg)
	huge := strings.Repeat("\x01", 1<<20)
	if _, err := r.client.Peek(callContext(t), &messagehubv1.PeekRequest{Recipient: huge}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a peek of a 1 MiB recipient: %v", err)
	}
	if _, err := r.client.Dequeue(callContext(t), &messagehubv1.DequeueRequest{Recipient: uuid.NewString(), BundleId: huge}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a dequeue of a 1 MiB bundle id: %v", err)
	}
	if err := r.closeWithin(t); err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{messagehubv1.MessageHub_Peek_FullMethodName, messagehubv1.MessageHub_Dequeue_FullMethodName} {
		lines := logs.calls(t, method)
		if len(lines) != 1 {
			t.Fatalf("%d access log lines of %s; want 1", len(lines), method)
		}
		for _, key := range []string{"recipient", "bundle_id"} {
			if v, _ := lines[0][key].(string); len(v) > 100 {
				t.Errorf("%s logged with a %s of %d bytes, for a request's value of %d", method, key, len(v), len(huge))
			}
		}
	}
}
