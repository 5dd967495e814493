package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/apiconv"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/blobstore"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
	"github.com/energydatahub/messagehub/internal/gateway"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/test/azuritetest"
)

// contentStack is the gateway over a hub whose time series domain answers
// with answer.
func contentStack(t *testing.T, timeout time.Duration, answer func(*messagehubv1.Bundle, int) contenttest.Answer) *stack {
	t.Helper()
	docs := contenttest.Start(t, answer).Documents(t)
	return newStackWith(t, []server.Option{server.WithDocuments(docs, timeout)})
}

func (s *stack) saveOne(t *testing.T, recipient string, origin domain.Origin) {
	t.Helper()
	n := domain.Notification{ID: uuid.NewString(), Recipient: recipient, Origin: origin, ContentType: "c", DocumentType: "c", SupportsBundling: true, Weight: 1}
	if _, err := s.repo.Save(t.Context(), []domain.Notification{n}); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, url string) (answer, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(newRequest(t, http.MethodGet, url, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header}, body
}

func TestAContentPeekAnswersTheDocumentItself(t *testing.T) {
	document := bytes.Repeat([]byte("<doc/>"), 400_000) // 2.4 MB, several messages
	s := contentStack(t, time.Minute, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/xml; charset=utf-8", document, 100_000)
	})
	recipient := uuid.NewString()
	if resp, _ := get(t, s.url+"/v1/peek/content?recipient="+recipient); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("nothing to deliver: %d, want 204", resp.StatusCode)
	}
	s.saveOne(t, recipient, domain.OriginTimeSeries)
	resp, body := get(t, s.url+"/v1/peek/content?recipient="+recipient+"&group=PEEK_GROUP_TIME_SERIES")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/xml; charset=utf-8" || !bytes.Equal(body, document) {
		t.Fatalf("%d %q with %d bytes; want 200 with the provider's document", resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
	}
	id := resp.Header.Values("MessageId")
	bundle, err := s.repo.Peek(t.Context(), recipient, domain.GroupAll, "")
	if err != nil || len(id) != 1 || bundle == nil || id[0] != bundle.ID {
		t.Fatalf("MessageId %v; want the pending bundle's id", id)
	}
}

func TestAContentPeekWithoutProviderAnswersTheBundle(t *testing.T) {
	s := contentStack(t, time.Minute, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Answer{}
	})
	recipient := uuid.NewString()
	s.saveOne(t, recipient, domain.OriginCharges)
	resp, body := get(t, s.url+"/v1/peek/content?recipient="+recipient)
	var b struct {
		ID              string   `json:"id"`
		NotificationIDs []string `json:"notificationIds"`
	}
	if err := json.Unmarshal(body, &b); err != nil || resp.StatusCode != http.StatusOK ||
		resp.Header.Get("Content-Type") != gateway.BundleMediaType || len(b.NotificationIDs) != 1 || resp.Header.Get("MessageId") != b.ID {
		t.Fatalf("%d %q %s; want 200 with the bundle as %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, gateway.BundleMediaType)
	}
}

func TestASlowDomainIs503WithRetryAfter(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	s := contentStack(t, 50*time.Millisecond, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Answer{Hold: release}
	})
	recipient := uuid.NewString()
	s.saveOne(t, recipient, domain.OriginTimeSeries)
	resp, _ := get(t, s.url+"/v1/peek/content?recipient="+recipient)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp, _ := get(t, s.url+"/v1/peek/content?recipient="+recipient+"&group=PEEK_GROUP_WEATHER"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an unknown group: %d, want 400", resp.StatusCode)
	}
}

func TestADocumentCannotRunInABrowser(t *testing.T) {
	s := contentStack(t, time.Minute, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("text/html", []byte("<script>alert(1)</script>"), 1024)
	})
	recipient := uuid.NewString()
	s.saveOne(t, recipient, domain.OriginTimeSeries)
	resp, _ := get(t, s.url+"/v1/peek/content?recipient="+recipient)
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("an HTML document is served without nosniff and a sandbox: %v", resp.Header)
	}
}

// A document whose stream breaks half-way (here: its download from Azure
// Blob Storage, cut after 256 KiB and at every resumption) must reach the
// HTTP client as a broken answer. Ending the handler as if the document had
// been sent finishes the chunked answer cleanly: the client reads a 200
// whose body is a cut document, and takes it for the whole.
func TestADocumentCutShortIsABrokenAnswer(t *testing.T) {
	azurite := azuritetest.Start(t)
	container := azuritetest.UniqueContainer("cut")
	direct, err := blobstore.Open(t.Context(), blobstore.Config{ConnectionString: azurite.ConnectionString(), Container: container, Provision: true})
	if err != nil {
		t.Fatal(err)
	}
	cut, err := blobstore.Open(t.Context(), blobstore.Config{ConnectionString: azurite.CutAnswers(t, 256<<10), Container: container})
	if err != nil {
		t.Fatal(err)
	}
	docs := content.NewService(content.Options{Store: cut})
	t.Cleanup(docs.Close)
	s := newStackWith(t, []server.Option{server.WithDocuments(docs, time.Minute)})
	recipient, bundleID := uuid.NewString(), uuid.NewString()
	s.saveOne(t, recipient, domain.OriginTimeSeries)
	b, err := s.repo.Peek(t.Context(), recipient, domain.GroupAll, bundleID)
	if err != nil || b == nil {
		t.Fatalf("peek: %v %v", b, err)
	}
	data := bytes.Repeat([]byte("<doc/>"), 500_000) // 3 MB
	contenttest.Put(t, direct, content.Key{Recipient: recipient, BundleID: bundleID, Bundle: content.Identity(apiconv.Bundle(b))}, "application/xml", data)

	resp, err := http.DefaultClient.Do(newRequest(t, http.MethodGet, s.url+"/v1/peek/content?recipient="+recipient, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err == nil && !bytes.Equal(body, data) {
		t.Fatalf("%d with a clean body of %d bytes of the %d-byte document; want a broken body", resp.StatusCode, len(body), len(data))
	}
	if err == nil {
		t.Fatal("the whole document came through a proxy that cuts every answer after 256 KiB")
	}
}

// A header value gRPC metadata cannot carry (bytes beyond printable ASCII)
// in Authorization is a client's mistake, answered as on /v1/peek, never as
// the hub's fault (500).
func TestAContentPeekWithAnAuthorizationGRPCCannotCarryIsAnsweredAsAPeek(t *testing.T) {
	s := contentStack(t, time.Minute, func(*messagehubv1.Bundle, int) contenttest.Answer { return contenttest.Answer{} })
	recipient := uuid.NewString()
	for _, path := range []string{"/v1/peek", "/v1/peek/content"} {
		req := newRequest(t, http.MethodGet, s.url+path+"?recipient="+recipient, nil)
		req.Header.Set("Authorization", "Bearer \u00e9")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("%s with Authorization %q: %d %s; want 204, nothing to deliver", path, req.Header.Get("Authorization"), resp.StatusCode, body)
		}
	}
}
