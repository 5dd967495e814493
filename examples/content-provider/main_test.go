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
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	messagehubv1 "github.com/energydatahub/messagehub/gen/messagehub/v1"
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
			client := startProvider(t, format)
			stream, err := client.CreateBundleContent(context.Background(), &messagehubv1.CreateBundleContentRequest{Bundle: bundle})
			if err != nil {
				t.Fatal(err)
			}
			var mediaType string
			var data []byte
			for i := 0; ; i++ {
				chunk, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if i == 0 {
					mediaType = chunk.GetMediaType()
				}
				data = append(data, chunk.GetData()...)
			}
			var doc document
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

func startProvider(t *testing.T, format string) messagehubv1.BundleContentProviderClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	messagehubv1.RegisterBundleContentProviderServer(srv, &provider{format: format, log: slog.New(slog.DiscardHandler)})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return messagehubv1.NewBundleContentProviderClient(conn)
}
