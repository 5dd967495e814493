package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/content/contenttest"
	"github.com/energydatahub/messagehub/internal/domain"
)

// freshHub answers every Peek with a new bundle (a first content peek each
// time) or, with same, always the same one.
type freshHub struct {
	recordingHub
	n    atomic.Int64
	same bool
}

func (h *freshHub) Peek(context.Context, string, domain.PeekGroup, string) (*domain.Bundle, error) {
	n := int(h.n.Add(1))
	if h.same {
		n = 1
	}
	return &domain.Bundle{ID: uuidN(n), Recipient: recipient, Origin: domain.OriginTimeSeries, ContentType: "TimeSeries",
		DocumentTypes: []string{"TimeSeries"}, NotificationIDs: []string{uuidN(n)}, Weight: 1}, nil
}

// loopbackContent serves hub with documents from provider over a TCP
// loopback listener, as a client on another process would reach it.
func loopbackContent(b *testing.B, hub Hub, provider *contenttest.Provider) messagehubv1.MessageHubClient {
	b.Helper()
	srv, _ := NewGRPCServer(hub, slog.New(slog.DiscardHandler), WithDocuments(provider.Documents(b), time.Minute))
	return overLoopback(b, srv)
}

// overLoopback serves srv on a TCP loopback listener until the benchmark
// ends and returns a client of it.
func overLoopback(b *testing.B, srv *grpc.Server) messagehubv1.MessageHubClient {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return messagehubv1.NewMessageHubClient(conn)
}

func readContent(b *testing.B, client messagehubv1.MessageHubClient) int {
	stream, err := client.PeekContent(context.Background(), &messagehubv1.PeekRequest{Recipient: recipient})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			b.Fatal(err)
		}
		n += len(msg.GetData())
	}
}

// BenchmarkPeekContentStored50MiB streams a stored document of the largest
// allowed size to a client over loopback (MB/s is the figure).
func BenchmarkPeekContentStored50MiB(b *testing.B) {
	doc := bytes.Repeat([]byte("0123456789abcdef"), content.MaxDocumentBytes/16)
	provider := contenttest.Start(b, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/octet-stream", doc, 1<<20)
	})
	client := loopbackContent(b, &freshHub{same: true}, provider)
	if n := readContent(b, client); n != len(doc) { // the first peek builds and stores it
		b.Fatalf("read %d bytes, want %d", n, len(doc))
	}
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if n := readContent(b, client); n != len(doc) {
			b.Fatalf("read %d bytes, want %d", n, len(doc))
		}
	}
}

// BenchmarkFirstContentPeek1MiB is a first content peek of a 1 MiB document
// (ask the domain, store durably, stream) next to the domain's own answer
// read directly: the difference is the hub's overhead. It reports the p99 of
// both, and of the overhead.
func BenchmarkFirstContentPeek1MiB(b *testing.B) {
	doc := bytes.Repeat([]byte("0123456789abcdef"), (1<<20)/16)
	provider := contenttest.Start(b, func(*messagehubv1.Bundle, int) contenttest.Answer {
		return contenttest.Document("application/xml", doc, 256<<10)
	})
	direct := provider.Client(b)
	client := loopbackContent(b, &freshHub{}, provider)
	var hub, domainOnly []time.Duration
	for b.Loop() {
		start := time.Now()
		stream, err := direct.CreateBundleContent(context.Background(), &messagehubv1.CreateBundleContentRequest{Bundle: &messagehubv1.Bundle{Id: "direct"}})
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := stream.Recv(); err != nil {
				break
			}
		}
		domainOnly = append(domainOnly, time.Since(start))

		start = time.Now()
		if n := readContent(b, client); n != len(doc) {
			b.Fatalf("read %d bytes, want %d", n, len(doc))
		}
		hub = append(hub, time.Since(start))
	}
	p99 := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[min(len(s)-1, len(s)*99/100)]
	}
	b.ReportMetric(float64(p99(hub).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(p99(domainOnly).Microseconds())/1000, "domain-p99-ms")
	b.ReportMetric(float64((p99(hub)-p99(domainOnly)).Microseconds())/1000, "overhead-p99-ms")
}
