package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/server"
	"github.com/energydatahub/messagehub/test/hubtest"
)

// brokenOnce serves every bundle the same document, except that the first
// read of it breaks off after more than one message's worth of data (a
// blob's download that fails half-way).
type brokenOnce struct {
	doc   []byte
	calls atomic.Int32
}

func (b *brokenOnce) Document(context.Context, *messagehubv1.Bundle) (*content.Document, error) {
	var body io.Reader = bytes.NewReader(b.doc)
	if b.calls.Add(1) == 1 {
		body = io.MultiReader(io.LimitReader(body, int64(len(b.doc)/2)), errReader{})
	}
	return &content.Document{MediaType: "application/xml", Body: io.NopCloser(body)}, nil
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("download broken off") }

// A PeekContent whose document breaks off after part of it was received
// peeks again and returns the whole document once, not the part received
// before and the whole after it.
func TestAPeekContentBrokenOffIsRetriedFromTheStart(t *testing.T) {
	docs := &brokenOnce{doc: bytes.Repeat([]byte("0123456789abcdef"), 3*content.MaxMessageBytes/16)}
	srv, _ := server.NewGRPCServer(hubtest.Open(t), slog.New(slog.DiscardHandler), server.WithDocuments(docs, time.Minute))
	c := newClient(t, hubtest.Serve(t, srv))
	got, err := c.PeekContent(within(t), saved(t, c), messagehubv1.PeekGroup_PEEK_GROUP_ALL, "")
	if err != nil || got == nil {
		t.Fatalf("PeekContent: %v, %v", got, err)
	}
	if docs.calls.Load() != 2 || got.MediaType != "application/xml" || !bytes.Equal(got.Document, docs.doc) {
		t.Fatalf("after %d reads of the document: %s, %d bytes; want the %d bytes of the document after 2",
			docs.calls.Load(), got.MediaType, len(got.Document), len(docs.doc))
	}
}
