package app_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
)

// --content-max-build-memory bounds the builds of documents running at
// once: with one actor's build waiting for its domain (a build counts at
// least a provider's 4 MiB chunk, so 1 MiB takes one), another actor's
// content peek is answered UNAVAILABLE at once, naming the limit, without
// asking the domain, and is logged; once the first build ends, its peek
// again is served.
func TestTheBuildMemoryRefusesABuildThatDoesNotFit(t *testing.T) {
	first, second := uuid.NewString(), uuid.NewString()
	hold := make(chan struct{})
	provider := contenttest.Start(t, func(b *messagehubv1.Bundle, _ int) contenttest.Answer {
		answer := contenttest.Document("text/plain", []byte("doc"), 1024)
		if b.GetRecipient() == first {
			answer.Hold = hold
		}
		return answer
	})
	cfg := testConfig(t, "--content-max-build-memory", "1MiB")
	cfg.ContentTimeout = 100 * time.Millisecond
	cfg.Content.Providers = map[domain.Origin]string{domain.OriginTimeSeries: provider.Address}
	var logs logLines
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := start(t, cfg)
	ctx := callContext(t)
	for _, actor := range []string{first, second} {
		if _, err := r.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(actor)}}); err != nil {
			t.Fatal(err)
		}
	}

	if _, _, err := peekContent(ctx, r.client, &messagehubv1.PeekRequest{Recipient: first}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a content peek whose domain holds its answer: %v; want UNAVAILABLE", err)
	}
	b, _, err := peekContent(ctx, r.client, &messagehubv1.PeekRequest{Recipient: second})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "as many documents as its memory for them allows (1.0MiB)") {
		t.Fatalf("a content peek beyond --content-max-build-memory: %v; want UNAVAILABLE naming the limit", err)
	}
	t.Logf("the second content peek: %v", err)
	peeked, err := r.client.Peek(ctx, &messagehubv1.PeekRequest{Recipient: second})
	if err != nil {
		t.Fatal(err)
	}
	if n := provider.Creates(peeked.GetBundle().GetId()); n != 0 || b != nil {
		t.Fatalf("the refused bundle's domain was asked %d times; want never", n)
	}
	warned := logs.lines(t, func(m map[string]any) bool {
		return m["level"] == "WARN" && strings.HasPrefix(m["msg"].(string), "document build refused")
	})
	if len(warned) != 1 || warned[0]["limit_bytes"] != float64(1<<20) {
		t.Errorf("warnings of the refused build: %v; want one naming the limit", warned)
	}

	close(hold) // the first build ends, and gives its memory back
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, doc, err := peekContent(ctx, r.client, &messagehubv1.PeekRequest{Recipient: second})
		if err == nil && doc == "doc" {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("the refused actor's peek once the first build ended: %q, %v; want its document", doc, err)
		}
	}
}
