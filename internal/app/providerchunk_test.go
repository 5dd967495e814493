package app_test

import (
	"bytes"
	"cmp"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
)

// A provider may answer in chunks of up to 4 MiB of the document
// (provider.proto, content.MaxProviderChunkBytes): a chunk that holds the
// whole 4 MiB, the first one with the longest media type too (1,024
// bytes), is taken and the document served.
func TestAProviderChunkOfTheLargestSizeIsTaken(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 2*content.MaxProviderChunkBytes+10)
	mediaType := "application/xml; charset=utf-8; profile=" + strings.Repeat("p", 1024-len("application/xml; charset=utf-8; profile="))
	provider := contenttest.Start(t, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document(mediaType, data, content.MaxProviderChunkBytes)
	})
	cfg := testConfig(t)
	cfg.ContentTimeout = 20 * time.Second // the document comes at the first call, in well under a second
	cfg.Content.Providers = map[domain.Origin]string{domain.OriginTimeSeries: provider.Address}
	r := start(t, cfg)
	ctx := callContext(t)
	recipient := uuid.NewString()
	if _, err := r.client.Save(ctx, &messagehubv1.SaveRequest{Notifications: []*messagehubv1.DataAvailable{notification(recipient)}}); err != nil {
		t.Fatal(err)
	}
	stream, err := r.client.PeekContent(ctx, &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		t.Fatal(err)
	}
	var served []byte
	var servedType string
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("a content peek whose domain answers in chunks of 4 MiB: %v; want the document", err)
		}
		servedType = cmp.Or(servedType, msg.GetMediaType())
		served = append(served, msg.GetData()...)
	}
	if servedType != mediaType || !bytes.Equal(served, data) {
		t.Fatalf("the document served: media type of %d bytes, %d bytes; want the provider's (%d, %d)", len(servedType), len(served), len(mediaType), len(data))
	}
}
