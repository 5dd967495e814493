package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
	"github.com/energydatahub/messagehub/internal/content"
	"github.com/energydatahub/messagehub/internal/domain"
)

func TestTheProviderRendersABundleInEitherFormat(t *testing.T) {
	bundle := &messagehubv1.Bundle{
		Id: "0b9a8c7d-6e5f-4a3b-9c2d-1e0f9a8b7c6d", Recipient: "9f1c2b0e-3a4d-4e5f-8a6b-7c8d9e0f1a2b",
		Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES, ContentType: "TimeSeries", DocumentTypes: []string{"rsm-014"},
	}
	for i := range 5000 { // enough ids for several chunks
		bundle.NotificationIds = append(bundle.NotificationIds, fmt.Sprintf("00000000-0000-4000-8000-%012x", i))
	}
	for _, format := range []string{"json", "xml"} {
		t.Run(format, func(t *testing.T) {
			mediaType, data := readDocument(t, startProvider(t, format), bundle)
			var doc document
			var err error
			switch format {
			case "json":
				err = json.Unmarshal(data, &doc)
			case "xml":
				err = xml.Unmarshal(data, &doc)
			}
			if err != nil {
				t.Fatalf("%s document does not parse: %v", mediaType, err)
			}
			if mediaType == "" || doc.BundleID != bundle.Id || len(doc.Notifications) != len(bundle.NotificationIds) {
				t.Fatalf("media type %q, bundle %q with %d notifications", mediaType, doc.BundleID, len(doc.Notifications))
			}
		})
	}
}

// readDocument asks the provider for the bundle's document and reads it whole.
func readDocument(t *testing.T, client messagehubv1.BundleContentProviderClient, bundle *messagehubv1.Bundle) (mediaType string, data []byte) {
	t.Helper()
	stream, err := client.CreateBundleContent(context.Background(), &messagehubv1.CreateBundleContentRequest{Bundle: bundle})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return mediaType, data
		}
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			mediaType = chunk.GetMediaType()
		}
		data = append(data, chunk.GetData()...)
	}
}

func startProvider(t *testing.T, format string) messagehubv1.BundleContentProviderClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(format, slog.New(slog.DiscardHandler))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return messagehubv1.NewBundleContentProviderClient(conn)
}

// The hub sends the whole bundle in CreateBundleContent and BundleDequeued:
// at the largest bundle an operator can configure
// (domain.HighestMaxBundleWeight notifications, each with a document type
// of its own of the longest length) that is about 59 MB, far over the
// 4 MiB a gRPC server receives by default, and a provider that refuses it
// leaves the bundle's document never built and its domain never told.
func TestTheProviderTakesTheLargestBundleTheHubSends(t *testing.T) {
	bundle := largestBundle()
	size := proto.Size(&messagehubv1.CreateBundleContentRequest{Bundle: bundle})
	if size > maxRequestBytes {
		t.Fatalf("the largest bundle's request is %d bytes, over the %d the provider takes", size, maxRequestBytes)
	}
	client := startProvider(t, "json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.CreateBundleContent(ctx, &messagehubv1.CreateBundleContentRequest{Bundle: bundle})
	if err != nil {
		t.Fatal(err)
	}
	// The first chunk, with the media type, shows the request was taken;
	// the rest of the document is not read.
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("a request of %d bytes: %v", size, err)
	}
	if first.GetMediaType() == "" {
		t.Fatal("the first chunk has no media type")
	}
	cancel()
	if _, err := client.BundleDequeued(context.Background(), &messagehubv1.BundleDequeuedRequest{Bundle: bundle}); err != nil {
		t.Fatalf("BundleDequeued of %d bytes: %v", size, err)
	}
}

// largestBundle is the largest bundle an operator can configure the hub to
// cut: domain.HighestMaxBundleWeight notifications, each with a document
// type of its own of the longest length.
func largestBundle() *messagehubv1.Bundle {
	n := domain.HighestMaxBundleWeight
	bundle := &messagehubv1.Bundle{
		Id: "0b9a8c7d-6e5f-4a3b-9c2d-1e0f9a8b7c6d", Recipient: "9f1c2b0e-3a4d-4e5f-8a6b-7c8d9e0f1a2b",
		Origin: messagehubv1.Domain_DOMAIN_TIME_SERIES, ContentType: strings.Repeat("c", domain.MaxContentTypeLength),
		Weight: int64(n), NotificationIds: make([]string, n), DocumentTypes: make([]string, n),
	}
	pad := strings.Repeat("d", domain.MaxContentTypeLength-8)
	for i := range n {
		bundle.NotificationIds[i] = fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
		bundle.DocumentTypes[i] = fmt.Sprintf("%08x%s", i, pad)
	}
	return bundle
}

// The hub stores a document of at most content.MaxDocumentBytes and asks
// again, never serving the bundle's document, when a provider answers
// more: the document of the largest bundle must fit, in either format.
func TestTheLargestBundlesDocumentFitsTheHubsLimit(t *testing.T) {
	bundle := largestBundle()
	for _, format := range []string{"json", "xml"} {
		t.Run(format, func(t *testing.T) {
			_, data := readDocument(t, startProvider(t, format), bundle)
			if size := len(data); size > content.MaxDocumentBytes {
				t.Fatalf("the largest bundle's %s document is %d bytes, over the %d the hub stores", format, size, content.MaxDocumentBytes)
			}
		})
	}
}
